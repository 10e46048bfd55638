// fold-batch-transposes: Transposes that reorder the batch axes of batched MatMul operands
// and results, read and written in place by the MatMul instead (mpc_perm_a / mpc_perm_b /
// mpc_perm_y, graph/matmul_layout.h).
//
// Attention exports its heads as Reshape [B, T, H, D] then Transpose [0, 2, 1, 3] before
// Q·K^T and P·V, and the reverse after P·V; autodiff adds the same transposes to the
// gradients. With fold-transposes' last-two-axes flags, char_gpt still copies eight
// [16, 256, 6, 64] tensors a layer, each step. Here
//   MatMul(Transpose(X, p), B)  -> MatMul(X, B) {mpc_perm_a = p}     (likewise B)
//   Transpose(MatMul(A, B), p)  -> MatMul(A, B) {mpc_perm_y = p}
// composed with any perm or trans flag the MatMul already has (the flag becomes part of
// the perm). An operand Transpose is folded when it is no output and every reader is such
// a MatMul; a result Transpose when it is the MatMul's only reader. Each view must keep a
// unit-stride axis among its matrix axes, and the MatMul its batch axes unbroadcast.
// The values are the unfolded graph's: only where they are read from changes.
//
// Only where the backend says it can (Capabilities::matmul_permuted_operands: oneDNN
// takes any strides; cuBLASLt's strided batches cannot express a permuted batch). Runs
// after autodiff (MatMul has no gradient rule for the perms) and after every pass that
// rewrites GEMMs, on MatMuls without FP8 or an epilogue.
#pragma once

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class FoldBatchTransposesPass : public Pass {
 public:
  FoldBatchTransposesPass(const Capabilities& caps, FoldBatchTransposesResult* result)
      : enabled_(caps.matmul_permuted_operands), result_(result) {}
  std::string_view name() const override { return "fold-batch-transposes"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  bool enabled_;
  FoldBatchTransposesResult* result_;
};

}  // namespace mpc
