// optimizer: appends one in-place update per trainable parameter (SgdUpdate or
// AdamWUpdate, torch.optim semantics) on the FP32 master weight, creates the optimizer
// state (momentum buffers, Adam moments and step counters) as persistent state values,
// and adds the scalar learning-rate input. Each update is ordered after every other
// reader of its parameter, so no forward or backward op sees a half-updated weight.
// When loss scaling checks the gradients (LossScalingResult::found_nonfinite), every
// update is gated on that flag and leaves all state untouched.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct OptimizerOptions {
  enum class Kind { kSgd, kAdamW };
  Kind kind = Kind::kSgd;
  // SGD (torch.optim.SGD)
  float momentum = 0;
  bool nesterov = false;
  // AdamW (torch.optim.AdamW)
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  // Both: SGD's L2 term, AdamW's decoupled decay. (The learning rate is fed every step.)
  float weight_decay = 0;
};

class OptimizerPass : public Pass {
 public:
  // Applies loss-scaling's gradients when it produced any, autodiff's otherwise.
  OptimizerPass(OptimizerOptions options, const AutodiffResult* autodiff, const LossScalingResult* loss_scaling,
                OptimizerResult* result)
      : options_(options), autodiff_(autodiff), loss_scaling_(loss_scaling), result_(result) {}
  std::string_view name() const override { return "optimizer"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  OptimizerOptions options_;
  const AutodiffResult* autodiff_;
  const LossScalingResult* loss_scaling_;
  OptimizerResult* result_;
};

}  // namespace mpc
