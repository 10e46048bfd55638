// The fp8 pass's batched Linear layers with the batch folded into the rows, before they
// are converted (passes/fp8.h). Every transformer's projections are exported as
//   Y[..., M, N] = MatMul(X[..., M, K], W[K, N])
// and autodiff differentiates them as
//   dX = MatMul(dY, Transpose(W))                        batched, [..., M, K]
//   dW = ReduceSumTo(MatMul(Transpose(X), dY), [K, N])   one product per batch entry, each
//                                                        rounded to the compute dtype,
//                                                        then summed
// FP8 GEMM kernels (cuBLASLt's) take matrices, and the weight gradient wants one sum in
// f32, so the family is rewritten over R = prod(X's leading dims) rows (free Reshapes of
// contiguous data):
//   Y  = Reshape(MatMul(X[R, K], W), Y's shape)
//   dX = Reshape(MatMul(dY[R, N], Transpose(W)), X's shape)
//   dW = MatMul(Transpose(X[R, K]), dY[R, N])           the sum over R inside the GEMM
// A bias of the product's dtype added to it (Add(Y, b); passes/column_bias.h) becomes the
// forward Gemm's C, as fuse-epilogues does for bf16 GEMMs: the FP8 GEMM adds it in f32
// before its one rounding (cuBLASLt's bias epilogue once lowered). A layer summed into an
// f32 residual stream (Add(Cast(Y -> f32), b f32)) keeps its f32 Add, which then reads the
// f32 product (fold-output-casts): cuBLASLt's FP8 GEMMs with an f32 output take only a
// bf16 bias.
// The fp8 pass then converts 2-D GEMMs (which fp8-lower lowers), and every recipe's groups
// run over the R rows as Transformer Engine's and torchao's do for a Linear layer: a
// weight gradient's 1x128 tiles and per-column scales span batch entries. This is the form
// fold-transposes gives the same GEMMs in bf16. The forward node keeps its name (FP8 state
// names and reports are unchanged); the backward GEMMs keep theirs.
#pragma once

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc {

// A backward GEMM of an FP8 family and where its operands come from.
struct Fp8BackwardGemm {
  Node* node;
  int grad_index;   // the operand that is the incoming gradient dY
  int other_index;  // the operand that is a forward operand (or its transpose)
  int role;         // 0: the forward GEMM's input, 1: its weight
  Node* transpose;  // non-null: the operand is Transpose(forward operand)
};

// [R, last] views of values, shared by the families that read the same value (the Q, K and
// V projections read one X; dX and dW read one dY), so each is quantized once.
using RowViews = absl::flat_hash_map<const Value*, Value*>;

// Rewrites forward GEMM `forward` and its backward GEMMs over rows when the forward GEMM is
// a MatMul of a batched X and a matrix W and every backward GEMM has autodiff's form above;
// returns the forward GEMM to convert (the new one, or `forward` unchanged) and updates
// `backward` to the new backward GEMMs. The replaced nodes are removed.
absl::StatusOr<Node*> FoldBatchIntoRows(Graph& g, Node* forward, std::vector<Fp8BackwardGemm>& backward,
                                        RowViews& rows);

}  // namespace mpc
