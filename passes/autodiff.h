// autodiff: appends the backward graph. Starting from the loss (a seed of 1, whose uses
// loss-scaling later points at the loss scale), it visits the nodes between the trainable
// parameters and the loss in reverse topological order and calls each op's gradient
// builder; gradients of a value used several times are summed. The gradients and the
// seed land in AutodiffResult.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class AutodiffPass : public Pass {
 public:
  AutodiffPass(const LossResult* loss, AutodiffResult* result) : loss_(loss), result_(result) {}
  std::string_view name() const override { return "autodiff"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  const LossResult* loss_;
  AutodiffResult* result_;
};

// The differentiation itself, usable outside a pipeline (gradient-check tests):
// returns d(loss)/d(wrt[i]) for each value (nullptr where the loss does not depend on it).
// `seed_out`, when given, receives the value used as dL/dL (a constant 1).
absl::StatusOr<std::vector<Value*>> BuildGradients(Graph& graph, Value* loss, const std::vector<Value*>& wrt,
                                                   Value** seed_out = nullptr);

}  // namespace mpc
