// The graph verifier, run by the pass pipeline after every pass that changed the
// graph: use-def links are consistent, every op is registered with a valid arity,
// recorded dtypes and shapes equal what inference says, the graph is acyclic, and
// graph outputs exist.
#pragma once

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mpc {

absl::Status VerifyGraph(const Graph& graph);

}  // namespace mpc
