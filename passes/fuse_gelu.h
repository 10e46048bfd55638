// fuse-gelu: recognises GELU spelled out in elementary ops and replaces it with one Gelu
// node. ONNX has Gelu only from opset 20, so PyTorch's opset 13-17 export writes
//   erf form:   0.5 * x * (1 + Erf(x / sqrt(2)))                      (nn.GELU())
//   tanh form:  0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))  (approximate="tanh")
// in any order of the commutative products and sums, with x^3 as Pow(x, 3) or x*x*x, and
// division by a constant for multiplication by its reciprocal. As separate ops the chain
// costs five forward and about a dozen backward passes over the activation in f32, with
// an f32 copy kept for each; fused, it is one pass each way (Gelu, GeluGrad) in the
// activation's own precision with f32 arithmetic inside.
//
// Runs on the forward graph before autocast, so the precision decision and the backward
// graph are made for the fused op. A match needs every intermediate result to be used
// only inside the chain, and every constant to be a scalar equal to the formula's
// coefficient to 1e-6 relative; anything else is left as it is.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class FuseGeluPass : public Pass {
 public:
  explicit FuseGeluPass(FuseGeluResult* result) : result_(result) {}
  std::string_view name() const override { return "fuse-gelu"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  FuseGeluResult* result_;
};

}  // namespace mpc
