// How a MatMul reads its operands and writes its result when its attributes say they are
// stored transposed: mpc_trans_a / mpc_trans_b (the last two axes swapped; fold-transposes)
// and mpc_perm_a / mpc_perm_b / mpc_perm_y (any axis order; fold-batch-transposes). The
// operand the product reads is Transpose(stored, perm) with its last two axes then swapped
// when the trans flag is set; the stored result is Transpose(product, perm_y). Kernels read
// and write the stored tensors through the strides this gives, so no transposed copy is
// made (attention's [B, T, H, D] <-> [B, H, T, D] head transposes).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc {

struct MatMulLayout {
  // The product's view: a [..., M, K], b [..., K, N], y [..., M, N], and each view's
  // element strides into its stored tensor (y: the node's output as stored).
  Shape a, b, y;
  std::vector<int64_t> a_strides, b_strides, y_strides;
  Shape y_stored;         // the output's shape: Transpose(y, perm_y)
  bool permuted = false;  // some mpc_perm_* attribute is set
};

// The layout of a MatMul node whose operands have at least two axes; with an mpc_perm_*
// attribute, the batch axes of a and b must be equal (no broadcasting) and every perm a
// permutation of its tensor's axes. Errors name the node and the attribute.
absl::StatusOr<MatMulLayout> MatMulLayoutOf(const Node& n);

}  // namespace mpc
