// fp8: runs eligible GEMMs in FP8 under one of four scaling recipes (fp8.recipe). It runs
// after autodiff in the training pipeline (and after pad-dims in the evaluation pipeline)
// when precision.compute is FP8.
//
// Recipes (how an operand's scale is chosen):
//   delayed  one scale per tensor from the amax history of earlier steps (Transformer
//            Engine's DelayedScaling; the default). Described below.
//   current  one scale per tensor from this tensor's own amax, computed just before it is
//            quantized (TE's Float8CurrentScaling, torchao's dynamic tensorwise scaling).
//   rowwise  one scale per row along each GEMM's contraction axis (torchao's rowwise):
//            X [M,K] per row, W [K,N] per column, so a scale factors out of every dot
//            product. The backward GEMMs contract other axes, so they quantize their own
//            operands again from the high-precision values (dY per row for dX, dY and X per
//            column for dW); fp8.power_of_two_scales rounds every scale down to a power of 2.
//   block    DeepSeek-V3's and TE's Float8BlockScaling: activations and gradients in 1x128
//            tiles along the contraction axis, weights (a GEMM's second operand when it is a
//            matrix) in 128x128 blocks, E4M3 everywhere unless fp8.format says otherwise. A
//            weight's blocks are the blocks of its transpose, so dX reuses the forward's.
// The just-in-time recipes quantize with Fp8QuantizeDynamic (graph/ops_fp8.cc): no state, no
// update node, nothing to checkpoint; the evaluation program quantizes the same way. Their
// emulation accumulates every GEMM in f32 (what a GPU does when it promotes partial sums to
// f32 after every product); a GPU's split accumulation is a lowering matter. fp8-lower
// lowers them to Fp8CastDynamic + Fp8Gemm with group scales on a device with FP8 tensor
// cores (cuBLASLt's scale modes, passes/fp8_lower.h); elsewhere they run emulated on every
// backend that has the Fp8QuantizeDynamic kernel (CPU, CUDA).
//
// Which GEMMs: forward Gemm/MatMul nodes that are not a batched product of two
// activations (attention's Q·K^T and P·V, whose second operand is batched and neither
// operand comes from a parameter, stay in the compute dtype, as in Transformer Engine and
// torchao, which take the Linear layers), whose contraction (K) and
// output (N) dims are multiples of 16 after pad-dims, not matched by fp8.exclude, and not
// the first or last forward GEMM unless fp8.include_first_last. The batch rows (M) are not
// constrained: they are the user's batch size, which padding never touches (a CUDA
// lowering pads rows internally where the FP8 layout needs it). The backward GEMMs
// autodiff built for an FP8 forward GEMM (dX = dY·W, dW = dY·X: one operand is the
// incoming gradient, the other a forward operand) follow it. A Linear layer over a batched
// input (X [..., M, K], every transformer's) is first rewritten over rows, X [R, K], with
// its weight gradient one GEMM summing over all R rows (passes/fp8_batch_rows.h): 2-D
// GEMMs, which fp8-lower lowers, and scale groups that run over rows as a Linear layer's do.
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
// step one Fp8UpdateScales node updates all tensors (graph/float8_scaling.h). Steps that loss
// scaling skips update the meta anyway, as Transformer Engine does: the forward amaxes
// are real, and a non-finite gradient amax keeps the old scale by construction.
//
// A backend that has neither FP8 nor Fp8Quantize kernels is a compile-time error unless
// fp8.fallback_to_bf16, in which case the GEMMs stay in BF16 and the report says why.
// The CPU backend emulates FP8 exactly.
#pragma once

#include <string>
#include <vector>

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

enum class Fp8Recipe { kDelayed, kCurrent, kRowwise, kBlock };
const char* Fp8RecipeName(Fp8Recipe recipe);  // "delayed", "current", "rowwise", "block"

struct Fp8Options {
  bool enabled = false;  // precision.compute is FP8
  Fp8Recipe recipe = Fp8Recipe::kDelayed;
  bool power_of_two_scales = false;  // just-in-time recipes: scales rounded down to powers of 2
  bool e4m3_gradients = false;  // format E4M3 (E4M3 everywhere) instead of HYBRID (E5M2 dY)
  int margin = 0;               // scale = (fp8_max / amax) / 2^margin
  int amax_history_len = 1024;  // delayed only
  bool most_recent = false;  // amax_compute_algo MOST_RECENT instead of MAX
  float amax_floor = 0;
  std::vector<std::string> exclude;  // node-name regexes (whole match) kept out of FP8
  bool include_first_last = false;
  bool fallback_to_bf16 = false;
  bool fast_accumulation_forward = true;  // fp8-lower: forward Fp8Gemms with FAST_ACCUM
};

class Fp8Pass : public Pass {
 public:
  // `autodiff` is null in an evaluation program (no backward GEMMs, no amax recording).
  Fp8Pass(Fp8Options options, const Capabilities& caps, const AutocastResult* autocast, const AutodiffResult* autodiff,
          Fp8Result* result)
      : options_(std::move(options)), caps_(caps), autocast_(autocast), autodiff_(autodiff), result_(result) {}
  std::string_view name() const override { return "fp8"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  Fp8Options options_;
  const Capabilities& caps_;
  const AutocastResult* autocast_;
  const AutodiffResult* autodiff_;
  Fp8Result* result_;
};

}  // namespace mpc
