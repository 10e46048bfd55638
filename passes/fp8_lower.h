// fp8-lower: turns the fp8 pass's emulated FP8 GEMMs into real ones, for a backend with
// FP8 tensor cores. It runs right after fp8 (training and evaluation pipelines) when the
// device's Capabilities has fp8 (a test forces it on the CPU with a capability set whose
// fp8 is true: the CPU has kernels for both new ops, so the lowered program runs there
// and can be checked against the emulated one).
//
// What the fp8 pass leaves (passes/fp8.h), per converted GEMM (attribute mpc_fp8 = 1):
//   q_a = Fp8Quantize(x_a, scale_a, scale_inv_a[, history_a])   (f32: code * scale_inv)
//   q_b = ... (an operand may instead be Transpose(q), a MatMul's backward operand)
//   p   = Gemm|MatMul(q_a, q_b[, Cast(bias -> f32)])             (f32)
//   y   = Cast(p -> bf16/f16)                                    (absent for an f32 y)
// becomes
//   c_a = Fp8Cast(x_a, scale_a[, history_a]; transpose = t_a)   (FP8 codes, 1 byte each)
//   c_b = Fp8Cast(x_b, scale_b[, history_b]; transpose = t_b)
//   y   = Fp8Gemm(c_a, c_b, scale_inv_a, scale_inv_b[, bias]; transA = 0, transB = 1, to = y's dtype)
// The Fp8Gemm takes over the GEMM's node name and y's value name, so reports, metrics
// and the rest of the graph are unchanged. Every Fp8Gemm is in the TN layout cuBLASLt's
// FP8 kernels need (A stored [M,K], B stored [N,K]); t_a / t_b say whether the quantized
// tensor has to be cast transposed to get there (the backward GEMMs' dY^T, X^T, W^T).
// One Fp8Cast per (quantization, layout), shared by every GEMM that needs it.
//
// The just-in-time recipes (current, rowwise, block) leave q = Fp8QuantizeDynamic(x) with
// group scales instead; it becomes
//   (c, scale_inv) = Fp8CastDynamic(x; granularity, axis, tile, ..., transpose = t)
// whose scale_inv is laid out as cuBLASLt's scale modes read it (graph/float8_groups.h's
// Fp8GemmScaleShape), and the Fp8Gemm says each operand's grouping (a_scaling, b_scaling:
// tensor -> the scalar mode, rows -> OUTER_VEC_32F, 1x128 tiles -> VEC128_32F, 128x128
// blocks -> BLK128x128_32F). A GEMM whose pair cuBLASLt lacks (blocks x blocks, a mix of
// delayed and just-in-time, rows or tiles not along its K) stays emulated.
//
// Amax: each Fp8Quantize recorded max|x| once per step. When all of its uses are
// lowered it is removed and the first Fp8Cast made from it takes the history (the
// others get none), so the amax is still recorded exactly once per quantization; when
// some use stays emulated the Fp8Quantize stays, keeps recording, and its Fp8Casts
// record nothing. The scales are state that the end-of-step Fp8UpdateScales rewrites, so
// every reader of an updated tensor (Fp8Cast: scale, history; Fp8Gemm: scale_inv) is
// made a control dependency of the update.
//
// Accumulation: a forward GEMM's Fp8Gemm gets fast_accum = 1 (no periodic promotion of the
// tensor-core accumulator to f32: faster, as Transformer Engine's forward GEMMs) unless
// fp8.fast_accumulation_forward is false; the backward GEMMs (dX, dW), whose sums of
// gradient products are the least exact, always promote, and so do block-scaled GEMMs
// (tiles, blocks: cuBLASLt has no fast accumulation there). Each decision says which and why.
//
// Left emulated (and listed with the reason in Fp8LowerResult): GEMMs whose operands do not
// come from Fp8Quantize or Fp8QuantizeDynamic (or a 2-D Transpose of one), batched (non-2-D) MatMuls, a Gemm
// with alpha != 1 or a C that is not a bias row added with beta = 1, dimensions M, N, K
// that are not multiples of 16 (cuBLASLt's FP8 rule; pad-dims pads K and N, but M of a
// backward GEMM is the batch), E5M2 x E5M2 operands, and everything when the backend has
// no Fp8Cast/Fp8Gemm kernel for the dtypes involved.
#pragma once

#include <string>
#include <vector>

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

using Fp8LowerDecision = Fp8LowerResult::Decision;

class Fp8LowerPass : public Pass {
 public:
  // `enabled`: the program is FP8 (precision.compute FP8). The pass lowers only where
  // `caps` has FP8 tensor cores; a GEMM whose Fp8Cast/Fp8Gemm kernel `caps` lacks stays
  // emulated.
  // `fast_accumulation_forward`: the forward GEMMs (by the fp8 pass's result, `fp8`)
  // accumulate fast (attribute fast_accum = 1); the backward ones never do.
  Fp8LowerPass(bool enabled, bool fast_accumulation_forward, const Capabilities& caps, const Fp8Result* fp8,
               Fp8LowerResult* result)
      : enabled_(enabled),
        fast_accumulation_forward_(fast_accumulation_forward),
        caps_(caps),
        fp8_(fp8),
        result_(result) {}
  std::string_view name() const override { return "fp8-lower"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  bool enabled_;
  bool fast_accumulation_forward_;
  const Capabilities& caps_;
  const Fp8Result* fp8_;
  Fp8LowerResult* result_;
};

}  // namespace mpc
