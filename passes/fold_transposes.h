// fold-transposes: backward GEMMs of a MatMul with a 2-D weight, rewritten as Gemms that
// read their operands transposed in place instead of materialising a Transpose.
//
// Autodiff differentiates Y[..., M, N] = MatMul(X[..., M, K], W[K, N]) (every transformer
// Linear exported as MatMul) as
//   dX = MatMul(dY, Transpose(W))                       a transposed copy of W per step
//   dW = ReduceSumTo(MatMul(Transpose(X), dY), [K, N])  a transposed copy of X, one small
//                                                       GEMM per batch entry into a
//                                                       [..., K, N] buffer, then a sum
// With the batch folded into the rows (a free Reshape of contiguous data) both are one
// GEMM with transposed storage:
//   dX = Reshape(Gemm(dY[R, N], W, transB=1), X's shape)
//   dW = Gemm(X[R, K], dY[R, N], transA=1)        the sum over R inside the GEMM, in f32
// R is the product of X's leading dimensions. The [..., K, N] partial products and both
// transposes disappear from the step and from the memory plan.
//
// Every other MatMul operand that is a Transpose swapping the last two axes (attention:
// K^T in Q·K^T, and autodiff's transposes of Q, K, V and the softmax in the backward
// GEMMs) is read in place too, when the Transpose feeds only MatMuls and is no output:
//   MatMul(A, Transpose(B, [..., r-1, r-2])) -> MatMul(A, B) {mpc_trans_b = 1}
// (likewise A and mpc_trans_a; an existing flag is toggled). The kernels read the stored
// operand through strides (oneDNN memory descriptors, cuBLASLt transposes); the values
// are those of the unfolded graph. Other permutations (the [0,2,1,3] head transposes)
// are fold-batch-transposes' work,
// where the backend's MatMuls take permuted views.
//
// Runs after simplify (the patterns are canonical) on GEMMs that FP8 left alone; Gemm
// with transA/transB and MatMul with mpc_trans_a/mpc_trans_b run on every backend.
#pragma once

#include "passes/pass.h"

namespace mpc {

class FoldTransposesPass : public Pass {
 public:
  std::string_view name() const override { return "fold-transposes"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
