// fp8: runs eligible GEMMs in FP8 with per-tensor delayed scaling (Transformer Engine's
// DelayedScaling recipe). It runs after autodiff in the training pipeline (and after
// pad-dims in the evaluation pipeline) when precision.compute is FP8.
//
// Which GEMMs: forward Gemm/MatMul nodes whose contraction (K) and output (N) dims are
// multiples of 16 after pad-dims, not matched by fp8.exclude, and not the first or last
// forward GEMM unless fp8.include_first_last. The batch rows (M) are not constrained:
// they are the user's batch size, which padding never touches (a CUDA lowering pads
// rows internally where the FP8 layout needs it). The backward GEMMs autodiff built
// for an FP8 forward GEMM (dX = dY·W, dW = dY·X: one operand is the incoming gradient,
// the other a forward operand) follow it.
//
// How: every FP8 operand goes through Fp8Quantize, which yields the exact values an FP8
// GEMM multiplies — the FP8 code of x·scale times scale_inv — in f32, and the GEMM then
// runs in f32 over them (products of FP8 values accumulated in f32) and its result is
// cast back to the dtype it had, so the rest of the graph is untouched. Quantized values
// are kept in f32 rather than the GEMM's bf16 because code·scale_inv is generally not
// a bf16 number (the scale is not a power of two): rounding it would not be FP8.
// Forward operands (input, weight) are E4M3; the incoming gradient (grad_output) is
// E5M2 in the HYBRID format and E4M3 in the E4M3 format. The backward GEMMs reuse the
// forward quantized input and weight, as Transformer Engine does. Converted GEMMs carry
// the attribute mpc_fp8=1, so a backend with FP8 tensor cores can lower
// quantize + f32 GEMM + cast into one FP8 GEMM.
//
// Meta state per quantized tensor `<gemm node>/{input,weight,grad_output}`: .fp8_scale
// and .fp8_scale_inv (f32, start at 1), .fp8_amax_history (f32 [amax_history_len],
// zeros), .fp8_last_amax (the amax the latest update used, for metrics). All of it is
// persistent, so checkpoints carry it and a resumed run continues bit-exactly; the
// evaluation program shares it by name and quantizes with the current scales without
// recording amaxes.
//
// Delayed scaling: a step quantizes with the scale computed at the end of the previous
// step. Quantizing folds max|x| into history slot 0. After every quantization of the
// step one Fp8UpdateScales node updates all tensors (see UpdateFp8Meta). Steps that loss
// scaling skips update the meta anyway, as Transformer Engine does: the forward amaxes
// are real, and a non-finite gradient amax keeps the old scale by construction.
//
// A backend that has neither FP8 nor Fp8Quantize kernels is a compile-time error unless
// fp8.fallback_to_bf16, in which case the GEMMs stay in BF16 and the report says why.
// The CPU backend emulates FP8 exactly.
#pragma once

#include <cstdint>

#include "passes/pass.h"

namespace mpc {

class Fp8Pass : public Pass {
 public:
  std::string_view name() const override { return "fp8"; }
  absl::StatusOr<bool> Run(Graph& graph, const PassContext& ctx) override;
};

// The recipe fields the scale update needs for one tensor.
struct Fp8ScaleRecipe {
  float fp8_max = 448.0f;    // largest finite value of the tensor's format
  int margin = 0;
  bool most_recent = false;  // MOST_RECENT (history[0]) instead of MAX over the window
  float amax_floor = 0.0f;
};

// One delayed-scaling update (the CPU kernel of Fp8UpdateScales; here so tests can use
// it on hand-made histories). `history[0]` holds this step's amax, history[1..len-1]
// the previous len-1 steps' (any order: only MAX and slot 0 are read).
//   amax = MAX: the largest entry (NaN if any is NaN); MOST_RECENT: history[0].
//   amax = max(amax, amax_floor) when finite.
//   if amax is finite and > 0: scale = (fp8_max / amax) / 2^margin, computed in f32 like
//   Transformer Engine (inf, from a tiny amax, becomes FLT_MAX; a result that is not
//   positive keeps the old scale); otherwise the old scale stays. scale_inv = 1 / scale.
// Then the history rolls like TE's roll(-1): slot i takes slot i+1, this step's amax
// moves to the last slot, slot 0 (the oldest entry, now dropped) is zeroed for the next
// step's amax. So MAX always covers exactly the last len steps. A non-finite amax of
// this step is zeroed before it rolls in: it kept the old scale once, and would
// otherwise freeze the scale for len steps. Returns the amax used.
float UpdateFp8Meta(float* history, int64_t len, float* scale, float* scale_inv, const Fp8ScaleRecipe& recipe);

}  // namespace mpc
