// fuse-softmax: attention's score scaling, mask and softmax as one MaskedSoftmax node
// (graph/ops_nn.cc). PyTorch exports scaled-dot-product attention written out as
//   Softmax(Where(keep, Mul(scores, 1/sqrt(d)), -inf))        (masked_fill on ~keep:
//   Softmax(Where(Not(keep), -inf, Mul(scores, 1/sqrt(d)))))   either branch order)
// with Div by sqrt(d) for Mul by its reciprocal, and the Mul or the Where alone. Unfused,
// the scale and the mask are two more passes over the [B, H, T, T] scores forward and two
// backward (Mul, and Where with zeros), each the size of the softmax's own; fused, the
// forward is one pass and the gradient MaskedSoftmaxGrad (the scale folded in, the mask
// not needed: masked probabilities are 0).
//
// Runs on the forward graph before autocast, like fuse-gelu, so autocast paints the fused
// op (it is in the Softmax class: infer, with f32 row statistics) and autodiff builds its
// gradient. A match needs: a Softmax over the last axis; the Where's fill a -inf scalar
// constant, its other branch shaped like its result, its condition bool; the scale a
// scalar constant; every absorbed result read only by the next op of the chain. Only
// where the backend has MaskedSoftmax and MaskedSoftmaxGrad kernels for the scores'
// dtype (Capabilities::HasKernel; the CUDA backend has none yet, so nothing changes there).
#pragma once

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class FuseSoftmaxPass : public Pass {
 public:
  FuseSoftmaxPass(const Capabilities& caps, FuseSoftmaxResult* result) : caps_(caps), result_(result) {}
  std::string_view name() const override { return "fuse-softmax"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  const Capabilities& caps_;
  FuseSoftmaxResult* result_;
};

}  // namespace mpc
