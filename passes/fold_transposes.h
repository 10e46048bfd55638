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
// Runs after simplify (the patterns are canonical) on GEMMs that FP8 left alone; Gemm
// with transA/transB already runs on every backend.
#pragma once

#include "passes/pass.h"

namespace mpc {

class FoldTransposesPass : public Pass {
 public:
  std::string_view name() const override { return "fold-transposes"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
