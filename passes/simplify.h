// simplify: common-subexpression elimination (identical constants, then identical
// pure nodes), folding of Identity and no-op Casts/Reshapes, and dead-code elimination
// (nodes whose results reach neither a graph output nor a side effect).
#pragma once

#include "passes/pass.h"

namespace mpc {

class SimplifyPass : public Pass {
 public:
  std::string_view name() const override { return "simplify"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

// The pieces, each returning whether it changed the graph (exposed for tests).
absl::StatusOr<bool> EliminateCommonSubexpressions(Graph& graph);
absl::StatusOr<bool> FoldIdentities(Graph& graph);
absl::StatusOr<bool> EliminateDeadCode(Graph& graph);

}  // namespace mpc
