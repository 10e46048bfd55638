// fuse-rms-norm: the chain an ONNX export writes for an RMSNorm layer becomes one RmsNorm
// node (mpc domain, graph/ops_rms_norm.cc). Before opset 23 there is no ONNX op for it,
// and PyTorch's exporters (and opset 23 models mpc expands on import) spell Llama's,
// T5's or Mistral's norm as
//   Pow(x, 2) | Mul(x, x) -> ReduceMean(trailing axes, keepdims) -> Add(eps) -> Sqrt
//     -> Reciprocal | Div(1, .) -> Mul(x, .)   [or Div(x, Sqrt(...))]   [-> Mul(weight)]
// Seven ops that read or write x's size four or five times forward, and through autodiff
// about fifteen backward; fused, one pass each way (RmsNorm, RmsNormGrad) with the
// statistics in f32, as PyTorch's own rms_norm computes them.
//
// Runs on the forward graph before autocast (RmsNorm is on its deny list, as the chain's
// Pow, ReduceMean, Sqrt and Reciprocal are, so it runs in f32 as the chain did) and
// before autodiff. A match needs every intermediate read only by the chain, x the same
// value at both ends, a scalar constant eps and a trailing, keepdims reduction; the weight
// Mul is taken when its other operand broadcasts to the normalised shape and has x's
// dtype. Only where the backend has RmsNorm and RmsNormGrad kernels for x's dtype.
#pragma once

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class FuseRmsNormPass : public Pass {
 public:
  FuseRmsNormPass(const Capabilities& caps, FuseRmsNormResult* result) : caps_(caps), result_(result) {}
  std::string_view name() const override { return "fuse-rms-norm"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  const Capabilities& caps_;
  FuseRmsNormResult* result_;
};

}  // namespace mpc
