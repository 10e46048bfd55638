// optimizer: appends one in-place update per trainable parameter (SgdUpdate or
// AdamWUpdate, torch.optim semantics) on the FP32 master weight, creates the optimizer
// state (momentum buffers, Adam moments and step counters) as persistent state values,
// and adds the scalar learning-rate input. Each update is ordered after every other
// reader of its parameter, so no forward or backward op sees a half-updated weight.
// When loss scaling checks the gradients (LossScalingResult::found_nonfinite), every
// update is gated on that flag and leaves all state untouched. Parameter groups give
// parameters their own weight decay and learning-rate multiplier (OptimizerResult::updates
// records which group set each).
#pragma once

#include <string>
#include <vector>

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
  // Parameter groups: the first whose pattern (a full-match regex over the parameter's
  // name) matches sets the parameter's weight decay (when given) and multiplies the fed
  // learning rate by lr_scale.
  struct Group {
    std::string pattern;
    bool has_weight_decay = false;
    float weight_decay = 0;
    float lr_scale = 1;
  };
  std::vector<Group> groups;
};

class OptimizerPass : public Pass {
 public:
  // Applies loss-scaling's gradients when it produced any, autodiff's otherwise.
  // With gradient accumulation (`accumulation`, optional) it applies the summed gradients
  // and every update is also held while accumulation's hold flag is set.
  OptimizerPass(OptimizerOptions options, const AutodiffResult* autodiff, const LossScalingResult* loss_scaling,
                OptimizerResult* result, const GradAccumulationResult* accumulation = nullptr,
                const DataParallelResult* data_parallel = nullptr)
      : options_(std::move(options)),
        autodiff_(autodiff),
        loss_scaling_(loss_scaling),
        result_(result),
        accumulation_(accumulation),
        data_parallel_(data_parallel) {}
  std::string_view name() const override { return "optimizer"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  OptimizerOptions options_;
  const AutodiffResult* autodiff_;
  const LossScalingResult* loss_scaling_;
  OptimizerResult* result_;
  const GradAccumulationResult* accumulation_;
  const DataParallelResult* data_parallel_;
};

}  // namespace mpc
