// cuBLASLt's rules for FP8 GEMMs (cublasLtMatmul, "FP8" in the cuBLAS documentation),
// checked when a CublasLtGemm is created so that a bad combination fails with a message
// saying what to change instead of CUBLAS_STATUS_NOT_SUPPORTED at the first step:
//   - compute capability 8.9 (Ada) or newer;
//   - the "TN" layout: cuBLASLt's A transposed, its B not. With our operands swapped
//     (cuBLASLt's A is our B, see cublaslt_gemm.h) that is transA = 0, transB = 1: A
//     stored [M,K], B stored [N,K];
//   - A/B types: E4M3 x E4M3, E4M3 x E5M2, E5M2 x E4M3 (E5M2 x E5M2 has no kernel);
//   - 16-byte aligned pointers and leading dimensions: M, N, K multiples of 16;
//   - Y types and the bias type that goes with each:
//       Y bf16 -> bias bf16;  Y f16 -> bias f16;  Y f32 -> bias bf16;
//       Y E4M3 -> bias (= C type) bf16 or f16;  Y E5M2 likewise, only with an E5M2 operand;
//   - an FP8 Y takes no C (beta = 0); the amax of D is only computed for an FP8 Y;
//   - compute f32, scale type f32 (CublasLtGemm::Create always uses those);
//   - scale modes other than one scalar per operand (the just-in-time recipes): see
//     CheckScaleModes below.
#include "absl/strings/str_cat.h"
#include "backends/cuda/cublaslt_gemm.h"
#include "base/status_macros.h"

namespace mpc::cuda {

bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }

const char* LtScaleModeName(LtScaleMode m) {
  switch (m) {
    case LtScaleMode::kScalar:
      return "scalar";
    case LtScaleMode::kOuterVec:
      return "OUTER_VEC_32F (one scale per row)";
    case LtScaleMode::kVec128:
      return "VEC128_32F (1x128 tiles)";
    case LtScaleMode::kBlk128x128:
      return "BLK128x128_32F (128x128 blocks)";
  }
  return "?";
}

namespace {

bool IsBlockMode(LtScaleMode m) { return m == LtScaleMode::kVec128 || m == LtScaleMode::kBlk128x128; }

// The scale modes of the just-in-time recipes (cuBLAS's "Outer Vector Scaling" and
// "128-element 1D and 128x128 2D Block Scaling"): sm_90 and cuBLAS 12.9; both operands
// per row, or 1x128 tiles with tiles or blocks (never blocks x blocks); no FP8 output and
// no fast accumulation for the block modes.
absl::Status CheckScaleModes(const CudaBackend& backend, const LtGemmSpec& s) {
  const LtScaleMode a = s.a_scale_mode, b = s.b_scale_mode;
  if (a == LtScaleMode::kScalar && b == LtScaleMode::kScalar) return absl::OkStatus();
  const std::string modes = absl::StrCat(LtScaleModeName(a), " x ", LtScaleModeName(b));
  if (backend.compute_capability() < 90) {
    return absl::FailedPreconditionError(absl::StrCat("FP8 GEMM with scales ", modes, ": cuBLASLt's scale modes need "
                                                      "sm_90; this device is sm_", backend.compute_capability(),
                                                      "; use fp8.recipe delayed or current"));
  }
#if CUBLAS_VERSION < 120900
  return absl::UnimplementedError(absl::StrCat("FP8 GEMM with scales ", modes, ": needs cuBLAS 12.9 or newer, built "
                                               "against ", CUBLAS_VERSION));
#endif
  const bool outer = a == LtScaleMode::kOuterVec && b == LtScaleMode::kOuterVec;
  const bool block = IsBlockMode(a) && IsBlockMode(b) && !(a == LtScaleMode::kBlk128x128 && b == a);
  if (!outer && !block) {
    return absl::UnimplementedError(absl::StrCat("FP8 GEMM with scales ", modes, ": cuBLASLt pairs per-row scales "
                                                 "with per-row scales, and 1x128 tiles with tiles or 128x128 "
                                                 "blocks (not blocks x blocks)"));
  }
  if (IsFp8(s.out) || s.amax_d) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM with scales ", modes, ": the output must be f32, bf16 or f16 (no FP8 output or amax)"));
  }
  if (block && s.fast_accum) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM with scales ", modes, ": cuBLASLt's block scaling has no "
                                                   "fast accumulation; clear fast_accum"));
  }
  if (s.batch != 1) return absl::UnimplementedError(absl::StrCat("FP8 GEMM with scales ", modes, ": not batched"));
  return absl::OkStatus();
}

}  // namespace

DType LtBiasDType(const LtGemmSpec& s) {
  if (s.bias_dtype) return *s.bias_dtype;
  const bool fp8_operands = IsFp8(s.a_dtype()) || IsFp8(s.b_dtype());
  if (fp8_operands && (s.out == DType::kF32 || IsFp8(s.out))) return DType::kBF16;
  return s.out;
}

absl::Status CheckFp8GemmSpec(const CudaBackend& backend, const LtGemmSpec& s) {
  const DType a = s.a_dtype(), b = s.b_dtype();
  const bool fp8_a = IsFp8(a), fp8_b = IsFp8(b);
  if (!fp8_a && !fp8_b) {
    if (IsFp8(s.out)) {
      return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM: an ", DTypeName(s.out),
                                                     " output needs FP8 operands, got ", DTypeName(a), " x ",
                                                     DTypeName(b)));
    }
    return absl::OkStatus();
  }
  const int cc = backend.compute_capability();
  if (cc < 89) {
    return absl::FailedPreconditionError(
        absl::StrCat("FP8 GEMMs need sm_89 or newer; this device is sm_", cc, " (", backend.capabilities().device,
                     "); use --precision bf16, or set fp8.fallback_to_bf16 in the spec to keep those GEMMs in bf16"));
  }
  if (!fp8_a || !fp8_b) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM with a non-FP8 operand (", DTypeName(a), " x ",
                                                   DTypeName(b), "): quantize both operands to E4M3/E5M2"));
  }
  if (a == DType::kF8E5M2 && b == DType::kF8E5M2) {
    return absl::UnimplementedError(
        "FP8 GEMM with both operands in E5M2: cuBLASLt has no E5M2 x E5M2 kernel; quantize one of them (the "
        "forward operand) to E4M3, as the HYBRID format does");
  }
  if (s.ta || !s.tb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FP8 GEMM with transA=", s.ta, " transB=", s.tb,
        ": cuBLASLt's FP8 kernels need the TN layout, i.e. A stored [M,K] and B stored [N,K] (transA=0, transB=1), "
        "both K-contiguous; transpose the other operand when quantizing it"));
  }
  if (s.m % 16 != 0 || s.n % 16 != 0 || s.k % 16 != 0) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM with M=", s.m, " N=", s.n, " K=", s.k,
                                                   ": cuBLASLt needs M, N and K multiples of 16; pad them (pad-dims "
                                                   "pads K and N; pad the batch rows M)"));
  }
  if (s.alignment < 16) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM with ", s.alignment, "-byte aligned buffers: cuBLASLt needs 16-byte alignment"));
  }
  if (s.tf32) return absl::InvalidArgumentError("FP8 GEMM with tf32: TF32 applies to f32 operands only");
  MPC_RETURN_IF_ERROR(CheckScaleModes(backend, s));
  const DType bias = LtBiasDType(s);
  switch (s.out) {
    case DType::kBF16:
    case DType::kF16:
      if (s.bias && bias != s.out) {
        return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM with a ", DTypeName(s.out), " output takes a ",
                                                       DTypeName(s.out), " bias, not ", DTypeName(bias)));
      }
      break;
    case DType::kF32:
      if (s.bias && bias != DType::kBF16) {
        return absl::InvalidArgumentError(
            absl::StrCat("FP8 GEMM with an f32 output takes a bf16 bias (cuBLASLt's rule), not ", DTypeName(bias)));
      }
      break;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      if (s.out == DType::kF8E5M2 && a != DType::kF8E5M2 && b != DType::kF8E5M2) {
        return absl::InvalidArgumentError("FP8 GEMM with an E5M2 output needs an E5M2 operand; use an E4M3 output");
      }
      if (bias != DType::kBF16 && bias != DType::kF16) {
        return absl::InvalidArgumentError(absl::StrCat("FP8 GEMM with an ", DTypeName(s.out),
                                                       " output takes a bf16 or f16 bias, not ", DTypeName(bias)));
      }
      if (s.beta != 0.0f) {
        return absl::InvalidArgumentError("FP8 GEMM with an FP8 output cannot add C (beta must be 0)");
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("FP8 GEMM with a ", DTypeName(s.out), " output: use f32, bf16, f16, E4M3 or E5M2"));
  }
  if (s.amax_d && !IsFp8(s.out)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FP8 GEMM with amax_d and a ", DTypeName(s.out),
                     " output: cuBLASLt computes the amax of D only for an FP8 output; compute it separately"));
  }
  return absl::OkStatus();
}

}  // namespace mpc::cuda
