// ema: keeps an exponential moving average of the trainable weights (EmaSpec), the
// "model EMA" of timm and of many diffusion and detection recipes. Every parameter the
// optimizer updates gets f32 state `<param>.ema`, initialised to the initial weights, and an
// EmaUpdate node (ema = decay * ema + (1 - decay) * weight) that runs after the node that
// updates the weight, gated on the same flag as the update: a skipped step (non-finite
// gradients) or a micro-batch that does not end a step leaves the average as it was. Runs
// after fuse-updates, so the node it orders itself after is the one that will run. The
// averages are persistent state: they live on the device and go into checkpoints; the
// engine evaluates and exports them on request (EmaResult).
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct EmaOptions {
  bool enabled = false;
  float decay = 0.999f;
};

class EmaPass : public Pass {
 public:
  EmaPass(EmaOptions options, const OptimizerResult* optimizer, EmaResult* result)
      : options_(options), optimizer_(optimizer), result_(result) {}
  std::string_view name() const override { return "ema"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  EmaOptions options_;
  const OptimizerResult* optimizer_;
  EmaResult* result_;
};

}  // namespace mpc
