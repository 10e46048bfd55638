// The forward pass of a training graph: every node the loss depends on. What the backward
// reads from it is what recomputation (passes/recompute.h) and the per-rank memory
// breakdown (engine/memory_budget.h) look at.
#pragma once

#include "absl/container/flat_hash_set.h"
#include "graph/graph.h"

namespace mpc {

// Empty when `loss` is null or has no producer.
absl::flat_hash_set<const Node*> ForwardNodesOf(const Value* loss);

}  // namespace mpc
