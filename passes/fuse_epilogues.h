// fuse-epilogues: folds a ReLU that is the only consumer of a Gemm into the Gemm as an
// epilogue (attribute mpc_activation=Relu), so the backend's GEMM applies it while the
// tile is still in registers (oneDNN post-op on the CPU, cuBLASLt epilogue on CUDA).
// The backward pass keeps working unchanged: ReluGrad reads the fused output, which
// holds the same values the Relu produced.
//
// Before that, a MatMul with a 2-D weight whose only reader adds a per-column bias of the
// same dtype (how transformer linear layers export: MatMul + Add) becomes a Gemm over the
// batch folded into rows with the bias as C, between two Reshape views: the GEMM adds
// the bias (oneDNN bias, cuBLASLt bias epilogue) and the bias-free product is never
// stored. The backward graph, built earlier, reads the Add's value, which the reshaped
// Gemm output replaces; the values are the same up to the GEMM's rounding of the sum.
// Under autocast a layer writing into an f32 residual stream (attention's output
// projection, the MLP's second layer) reads Add(Cast(MatMul(bf16), f32), bias f32): that
// becomes the same Gemm writing f32 (mpc_output_dtype; fold-output-casts would give the
// MatMul that anyway) with the f32 bias as C. char_gpt bf16: 13 Adds a step fewer, Add
// 190-237 -> 136-139 ms per 13 steps, the GEMMs' time unchanged.
#pragma once

#include "passes/pass.h"

namespace mpc {

class FuseEpiloguesPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-epilogues"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
