// A GEMM product's bias add, as Linear layers are exported (MatMul, then Add of the bias)
// and as autocast leaves them. fuse-epilogues (bf16/f32 GEMMs) and the fp8 pass's row form
// (FP8 GEMMs, passes/fp8_batch_rows.h) both fold it into the GEMM as a Gemm's C, which the
// backends add in the GEMM's epilogue (oneDNN's bias, cuBLASLt's bias epilogue), so the
// bias-free product is never stored.
#pragma once

#include <optional>

#include "graph/graph.h"

namespace mpc {

struct ColumnBiasAdd {
  Node* add = nullptr;    // its output is the layer's result
  Value* bias = nullptr;  // [N] or [1, ..., 1, N]
  // The Add reads Cast(product -> f32) with an f32 bias: a 16-bit product summed into an
  // f32 residual stream (attention's output projection, the MLP's second layer).
  bool widened = false;
};

// The bias add of `product` [..., N] when it is the product's only reader (directly, or
// through a widening Cast that is the only reader) and adds a per-column vector of its
// own dtype and nothing else; nullopt otherwise.
std::optional<ColumnBiasAdd> FindColumnBiasAdd(const Graph& g, const Value* product);

}  // namespace mpc
