// fuse-layer-norm-edges: the ops on either side of a LayerNormalization and its gradient
// that only move bytes, folded into them.
//
// Under autocast a transformer keeps its residual stream in f32 and runs the GEMMs in
// bf16, so every LayerNormalization writes an f32 Y that a Cast at once rounds to bf16,
// and every LayerNormGrad writes an f32 dX that an Add at once sums with the gradient the
// residual connection carries past the block. char_gpt does each 13 and 12 times a step,
// on [16, 256, 384]: two extra passes over 6 MiB each time. Here
//   Cast(LayerNormalization(X, ...).Y, to = bf16/f16)  -> LayerNormalization {mpc_output_dtype}
//     (f32 X; Y is rounded once either way, so the values are the unfused graph's)
//   Add(LayerNormGrad(dY, X, ...).dX, G)  -> LayerNormGrad(dY, X, ..., G)
//     (G of dX's dtype and shape; dX + G in Acc, rounded once: the same f32 values)
// where the Cast's input or the Add's operand has no other reader and is no graph output,
// and G does not itself depend on the gradient. Then the readers of each gradient's dX
// (the sum, once the Add is in it) that only reduce or narrow it join its epilogue:
//   ReduceSumTo(dX, normalised shape)  -> LayerNormGrad output 3 {mpc_dx_column_sum = 1}
//     (the bias gradient of the GEMM that wrote the residual stream; summed per thread
//     as the rows are written, so in another order than ReduceSumTo: within rounding)
//   Cast(dX, bf16/f16), f32 dX           -> LayerNormGrad output 4 {mpc_narrow_dx_dtype}
//     (the copy the low-precision backward GEMMs read: the same rounding, the same bits)
// char_gpt bf16 has 12 of each a step, each another pass over [16, 256, 384] f32.
//
// Only where the backend says it can (Capabilities::layer_norm_fused_edges: the CPU's
// kernels_layer_norm.cc). Runs on the final graph, after autodiff (the gradient has no rule
// for the output dtype) and simplify (which leaves the Casts and Adds where they are).
#pragma once

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class FuseLayerNormEdgesPass : public Pass {
 public:
  FuseLayerNormEdgesPass(const Capabilities& caps, FuseLayerNormEdgesResult* result)
      : enabled_(caps.layer_norm_fused_edges), result_(result) {}
  std::string_view name() const override { return "fuse-layer-norm-edges"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  bool enabled_;
  FuseLayerNormEdgesResult* result_;
};

}  // namespace mpc
