// loss-scaling: runs after autodiff. FP16 gradients underflow (a 1e-7 gradient is 0 in
// f16; scaled by 1024 it survives), so the backward seed becomes the loss scale
// instead of 1 (the reported loss stays unscaled); one fused UnscaleGradients op
// divides every gradient by the scale and raises found_nonfinite; global-norm clipping,
// when asked for, then sees unscaled gradients by construction; the optimizer pass
// gates every update on the flag; and (dynamic mode) UpdateLossScale backs off on
// overflow and grows after growth_interval clean steps. Scale and growth tracker are
// persistent state, so they live on the training device and go into checkpoints.
// Modes: AUTO (dynamic for fp16, off otherwise), OFF, STATIC, DYNAMIC.
#pragma once

#include "passes/pass.h"

namespace mpc {

class LossScalingPass : public Pass {
 public:
  std::string_view name() const override { return "loss-scaling"; }
  absl::StatusOr<bool> Run(Graph& graph, const PassContext& ctx) override;
};

// The mode after resolving AUTO against the compute dtype.
LossScalingSpec::Mode EffectiveLossScalingMode(const LossScalingSpec& spec, DType compute_dtype);

// "off" | "dynamic" | "static:S" -> fields of `spec`; error otherwise.
absl::Status ParseLossScalingFlag(const std::string& flag, LossScalingSpec* spec);

}  // namespace mpc
