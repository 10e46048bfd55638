// fuse-silu: x * Sigmoid(x) becomes one Silu node (mpc domain). ONNX has no SiLU before
// opset 24's Swish, so PyTorch writes nn.SiLU (EfficientNet, Llama's SwiGLU, UNets) as a
// Sigmoid and a Mul. As two ops the forward pass reads x twice and keeps the sigmoid for
// the backward pass, which then takes a Mul gradient (two products), SigmoidGrad and an
// Add of the two paths; fused, it is one pass each way (Silu, SiluGrad) with the sigmoid
// recomputed in registers, f32 inside, rounded once as PyTorch's silu is.
//
// Runs on the forward graph before autocast and autodiff, like fuse-gelu. A match needs
// the Sigmoid's output read only by the Mul, whose other operand is the Sigmoid's input
// (either order); a gate of another tensor (squeeze-excitation's x * sigmoid(s)) stays.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class FuseSiluPass : public Pass {
 public:
  explicit FuseSiluPass(FuseSiluResult* result) : result_(result) {}
  std::string_view name() const override { return "fuse-silu"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  FuseSiluResult* result_;
};

}  // namespace mpc
