// loss-scaling: runs after autodiff. FP16 gradients underflow (a 1e-7 gradient is 0 in
// f16; scaled by 1024 it survives), so the backward seed becomes the loss scale
// instead of 1 (the reported loss stays unscaled); one fused UnscaleGradients op
// divides every gradient by the scale and raises found_nonfinite (without a scale,
// FindNonFinite raises it: every precision skips non-finite steps); global-norm clipping,
// when asked for, then sees unscaled gradients by construction; the optimizer pass
// gates every update on the flag; and (dynamic mode) UpdateLossScale backs off on
// overflow and grows after growth_interval clean steps. Scale and growth tracker are
// persistent state, so they live on the training device and go into checkpoints.
// Modes: AUTO (dynamic for fp16, off otherwise), OFF, STATIC, DYNAMIC. The gradients the
// optimizer applies land in LossScalingResult::param_grads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct LossScalingOptions {
  // AUTO: dynamic when autocast painted f16, off otherwise.
  enum class Mode { kAuto, kOff, kStatic, kDynamic };
  Mode mode = Mode::kAuto;
  float static_scale = 1024;
  float init_scale = 65536;  // the dynamic mode's first scale
  float growth_factor = 2;
  float backoff_factor = 0.5;
  int growth_interval = 2000;
  float min_scale = 0;       // 0: no minimum
  float max_scale = 0;       // 0: the largest finite f32
  float clip_grad_norm = 0;  // global-norm clipping of the unscaled gradients; 0: off
  // Without a scale, still check the gradients (FindNonFinite) so the optimizer skips a
  // step whose gradients are not finite, in every precision.
  bool check_nonfinite = true;
  // Test hook (spec debug.inject_nonfinite): a non-finite value ("inf" | "nan") in one
  // parameter's gradient at one (0-based) step.
  struct Fault {
    int64_t step = 0;
    std::string parameter;
    std::string value = "inf";
    int rank = -1;  // data-parallel: only the program of this rank injects it (-1: every rank's)
  };
  std::vector<Fault> inject_nonfinite;
  int rank = 0;  // this program's rank in a data-parallel job (which faults it injects)
};

class LossScalingPass : public Pass {
 public:
  // `accumulation` (optional): with gradient accumulation the summed gradients are checked
  // and applied, and the scale changes only on a step's last micro-batch.
  LossScalingPass(LossScalingOptions options, const AutocastResult* autocast, const AutodiffResult* autodiff,
                  LossScalingResult* result, const GradAccumulationResult* accumulation = nullptr,
                  const DataParallelResult* data_parallel = nullptr)
      : options_(std::move(options)),
        autocast_(autocast),
        autodiff_(autodiff),
        result_(result),
        accumulation_(accumulation),
        data_parallel_(data_parallel) {}
  std::string_view name() const override { return "loss-scaling"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  LossScalingOptions options_;
  const AutocastResult* autocast_;
  const AutodiffResult* autodiff_;
  LossScalingResult* result_;
  const GradAccumulationResult* accumulation_;
  const DataParallelResult* data_parallel_;
};

}  // namespace mpc
