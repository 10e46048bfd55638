// autodiff: appends the backward graph. Starting from the loss (a seed of 1, whose uses
// loss-scaling later points at the loss scale), it visits the nodes between the trainable
// parameters and the loss in reverse topological order and calls each op's gradient
// builder; gradients of a value used several times are summed. The gradients and the
// seed land in AutodiffResult.
#pragma once

#include <string>
#include <vector>

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class AutodiffPass : public Pass {
 public:
  // `freeze`: full-match regexes over parameter names. A frozen parameter is not
  // differentiated: what only its gradient needed is never built (or is dead code that
  // simplify removes), and it gets no update (AutodiffResult::frozen lists it).
  AutodiffPass(const LossResult* loss, AutodiffResult* result, std::vector<std::string> freeze = {})
      : loss_(loss), result_(result), freeze_(std::move(freeze)) {}
  std::string_view name() const override { return "autodiff"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  const LossResult* loss_;
  AutodiffResult* result_;
  std::vector<std::string> freeze_;
};

// The differentiation itself, usable outside a pipeline (gradient-check tests):
// returns d(loss)/d(wrt[i]) for each value (nullptr where the loss does not depend on it).
// `seed_out`, when given, receives the value used as dL/dL (a constant 1).
absl::StatusOr<std::vector<Value*>> BuildGradients(Graph& graph, Value* loss, const std::vector<Value*>& wrt,
                                                   Value** seed_out = nullptr);

}  // namespace mpc
