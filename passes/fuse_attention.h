// fuse-attention: scaled dot-product attention as exporters write it, one FusedAttention
// node (graph/ops_attention.cc) where the backend runs attention as one fused kernel
// (Capabilities::fused_attention: cuDNN's flash attention on CUDA). PyTorch 2.x writes
// F.scaled_dot_product_attention and the hand-written attention of transformers, timm and
// nn.MultiheadAttention as
//   MatMul(Mul(Q, c1), Mul(K^T, c2))  or  Mul/Div(MatMul(Q, K^T), c)     the scale
//   -> Add(·, mask) or Where(keep, ·, -inf)                               optional mask
//   -> Softmax(axis -1)
//   -> Where(IsNaN(P), 0, P) or Where(P == P, P, 0)                    optional (dynamo, Attention-23)
//   -> MatMul(·, V)
// with K^T a Transpose of K's last two axes, or a Reshape / 3-D Transpose / Reshape of it.
// Unfused on a GPU that is five kernels over the [B, H, Sq, Sk] scores forward and more
// backward, with the scores and probabilities kept for the gradient; fused it is one
// kernel that keeps only Y and one log-sum-exp per row (FusedAttentionGrad rebuilds the
// probabilities), the memory and speed of flash attention.
//
// A constant mask that is 0 on and below the diagonal and -inf (or below -1e30, as
// finfo.min masks are) above it becomes causal = 1 with no bias; an all-zero one (a
// padding mask with nothing padded) goes; any other mask no parameter reaches is kept as
// Bias (a boolean one as 0 / -inf). The NaN guard is absorbed: the fused op gives 0 for a
// row with nothing kept, as the guard does. Left alone, each listed with its reason in the
// result: a mask a parameter reaches (a learned position bias needs its gradient, which
// the fused op does not give), dropout on the probabilities, operands that are not
// [B, H, S, D] with equal leading dims, and head dims that are not a multiple of 8 up to
// 256 (what cuDNN's fused attention takes).
//
// Runs on the forward graph before autocast and before fuse-softmax, so autocast paints
// the fused op (allow list: it runs in the compute dtype, with f32 softmax statistics
// inside) and fuse-softmax takes the attention left unfused. Only where the backend has
// FusedAttention and FusedAttentionGrad kernels for the dtype attention will run in.
#pragma once

#include "graph/capabilities.h"
#include "graph/dtype.h"
#include "passes/autocast.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

// The dtype autocast runs attention in under `precision` (its GEMMs' compute dtype).
DType AttentionComputeDType(Precision precision);

class FuseAttentionPass : public Pass {
 public:
  FuseAttentionPass(const Capabilities& caps, DType compute, FuseAttentionResult* result)
      : caps_(caps), compute_(compute), result_(result) {}
  std::string_view name() const override { return "fuse-attention"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  const Capabilities& caps_;
  DType compute_;
  FuseAttentionResult* result_;
};

}  // namespace mpc
