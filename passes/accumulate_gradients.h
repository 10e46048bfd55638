// accumulate-gradients: runs after autodiff (and FP8) when accumulate_steps K > 1. The
// program then runs once per micro-batch; an optimizer step is K runs. The pass
//   * scales the backward seed by 1/K, so the gradients summed over K micro-batches are
//     those of the mean loss over all K*batch examples (PyTorch's `(loss / K).backward()`);
//     loss scaling, after it, multiplies that seed by the scale;
//   * gives every trainable parameter an f32 accumulator (persistent state
//     `<param>.grad_accum`) and an AccumulateGradient node: the accumulator restarts from
//     the gradient on a step's first micro-batch (the `grad_accum/first` input is 1) and
//     adds to it on the others;
//   * adds the `grad_accum/hold` input, 1 on every micro-batch but a step's last: loss
//     scaling's scale update and the optimizer's updates do nothing while it is set, so the
//     unscale, the non-finite check, the skip and the update happen once per optimizer
//     step, on the summed gradients;
//   * holds the delayed FP8 scale update (Fp8UpdateScales) the same way: every
//     micro-batch's quantizations fold their amaxes into the history's current slot (the
//     largest stays), and the scales change and the history rolls once per optimizer step.
//     So every micro-batch of a step quantizes with the same scales (the weights, which do
//     not change within a step, to the same values), and the history advances as for one
//     batch K times larger, whose amax is the largest of its micro-batches'. (Transformer
//     Engine updates after every micro-batch's forward, so its weight scales move inside
//     a step.)
// The activations held are one micro-batch's; the accumulators add one f32 copy of the
// trainable weights.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class AccumulateGradientsPass : public Pass {
 public:
  AccumulateGradientsPass(int steps, const AutodiffResult* autodiff, GradAccumulationResult* result)
      : steps_(steps), autodiff_(autodiff), result_(result) {}
  std::string_view name() const override { return "accumulate-gradients"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  int steps_;
  const AutodiffResult* autodiff_;
  GradAccumulationResult* result_;
};

}  // namespace mpc
