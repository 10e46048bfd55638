// fold-gradient-casts: a Cast widening a bf16/f16 gradient to f32 that only the fused
// optimizer update (MultiSgdUpdate, MultiAdamWUpdate) and the step's non-finite check
// (FindNonFinite) read is dropped: they read the 16-bit gradient and widen it as they
// load it. Widening is exact, so every update and every check is bit for bit what it was.
//
// Under autocast the convolution weight gradients are such values (a bf16 ConvGradWeight,
// then a Cast for the f32 optimizer; GEMM gradients already write f32, fold-output-casts):
// on ResNet-18 in bf16, 20 Casts a step, and the f32 copies of 11M gradients next to the
// bf16 ones. Folded, one pass over the gradients goes and the f32 copies never exist.
//
// FindNonFinite keeps an f32 gradient as its first input (kernels are looked up by it;
// the BatchNorm and bias gradients are f32); a check with no gradient left in f32 keeps
// its Casts. Only where the backend's kernels read 16-bit gradients
// (Capabilities::updates_read_16bit_gradients; the CPU's do, CUDA's read f32), and only
// when every reader is one of those ops: a gradient that is also clipped, unscaled,
// averaged across ranks or accumulated keeps its Cast. Runs after fuse-updates (the
// multi-tensor updates exist) and before defer-widening-casts and the memory plan.
#pragma once

#include "graph/capabilities.h"
#include "passes/pass.h"

namespace mpc {

class FoldGradientCastsPass : public Pass {
 public:
  explicit FoldGradientCastsPass(const Capabilities& caps) : enabled_(caps.updates_read_16bit_gradients) {}
  std::string_view name() const override { return "fold-gradient-casts"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  bool enabled_;
};

}  // namespace mpc
