// fold-output-casts: a bf16/fp16 Gemm or MatMul whose only reader is a Cast to f32 writes
// f32 itself (attribute mpc_output_dtype = 1), and the Cast goes.
//
// Under autocast every weight gradient is such a product: the GEMM accumulates in f32,
// rounds to bf16, and a Cast widens the result again for the f32 optimizer. Folded, the
// gradient is the f32 accumulation itself (no bf16 rounding of it, one pass over it less),
// and the bf16 copy no longer sits in the arena next to the f32 one: for a model whose
// gradients dominate the plan (the seed MLP), that copy is what made the bf16 arena
// larger than the f32 one.
//
// The Cast may also read the product through a Reshape that is the product's only reader
// (fold-transposes' Gemms over rows, reshaped back): the Reshape then carries f32. Under
// autocast the backward data GEMMs of the layers reading char_gpt's f32 residual stream are
// such: 13 Casts of [16, 256, 384] a step.
//
// FP8 GEMMs alike: a lowered Fp8Gemm read only by a Cast to f32 writes f32 itself (its
// `to`), and in the emulated program (fp8 without fp8-lower) a GEMM marked mpc_fp8 whose
// f32 product is narrowed to bf16/f16 only to be widened again loses both Casts, so the
// two programs still compute the same values; here too through a Reshape that is the
// product's only reader (the fp8 pass's Linear layers over rows, passes/fp8_batch_rows.h). With FP8 the weight gradients and the
// logits are such: on mlp_block_4096 three bf16 -> f32 Casts of them took 0.61 ms of a
// 7.6 ms step (H200).
//
// Runs on the final training graph, after fold-transposes has written the backward Gemms.
#pragma once

#include "passes/pass.h"

namespace mpc {

class FoldOutputCastsPass : public Pass {
 public:
  std::string_view name() const override { return "fold-output-casts"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
