// CublasLtGemm (see cublaslt_gemm.h) and the Gemm kernels (f32, bf16, f16) on it.
//
// Gemm (ONNX, with mpc's attributes; backends/cpu/kernels_matmul.cc is the reference):
//   Y = act(alpha * op(A) op(B) + beta * C), act = ReLU when mpc_activation = "Relu" (the
//   fuse-epilogues pass emits only that), Y in the operands' dtype or f32
//   (mpc_output_dtype), f32 accumulation, TF32 for f32 operands with mpc_tf32 = 1 on a
//   device that has it. C (absent, or ignored when beta = 0) takes one of three routes:
//   - a row [N] / [1,N] in Y's dtype with beta = 1: cuBLASLt's bias epilogue (free);
//   - a full [M,N] in Y's dtype: cuBLASLt's C matrix with beta;
//   - anything else the CPU accepts (scalar, [1], [1,1], a column [M,1], a row with
//     beta != 1, a C whose dtype differs from an f32 Y): C is first broadcast into Y,
//     converted to Y's dtype, by a second cuBLASLt product made for it at creation (a
//     batch of M 1x1-by-1xN products against a device vector of ones: exact, since each
//     output element is 1 * c), then the GEMM adds beta * Y in place. This mirrors the
//     CPU's sum post-op and keeps this file free of device code.
#include "backends/cuda/cublaslt_gemm.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_status.h"
#include "base/status_macros.h"
#include "graph/capabilities.h"
#include "graph/float_convert.h"

namespace mpc::cuda {
namespace {

absl::StatusOr<cudaDataType_t> CudaType(DType d) {
  switch (d) {
    case DType::kF32:
      return CUDA_R_32F;
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    case DType::kF8E4M3:
      return CUDA_R_8F_E4M3;
    case DType::kF8E5M2:
      return CUDA_R_8F_E5M2;
    default:
      return absl::UnimplementedError(absl::StrCat("cuBLASLt GEMM: dtype ", DTypeName(d), " is not supported"));
  }
}

template <typename T>
absl::Status SetDescAttr(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v, const char* what) {
  return CublasStatus(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)), what);
}

template <typename T>
absl::Status SetLayoutAttr(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v,
                           const char* what) {
  return CublasStatus(cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof(v)), what);
}

template <typename T>
absl::Status SetPrefAttr(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t attr, const T& v,
                         const char* what) {
  return CublasStatus(cublasLtMatmulPreferenceSetAttribute(p, attr, &v, sizeof(v)), what);
}

bool IsForward(LtEpilogue e) {
  return e == LtEpilogue::kNone || e == LtEpilogue::kRelu || e == LtEpilogue::kGelu || e == LtEpilogue::kReluAux ||
         e == LtEpilogue::kGeluAux;
}
bool HasAux(LtEpilogue e) {
  return e == LtEpilogue::kReluAux || e == LtEpilogue::kGeluAux || e == LtEpilogue::kDRelu || e == LtEpilogue::kDGelu ||
         e == LtEpilogue::kDReluBGrad || e == LtEpilogue::kDGeluBGrad;
}
bool ReluMaskAux(LtEpilogue e) {
  return e == LtEpilogue::kReluAux || e == LtEpilogue::kDRelu || e == LtEpilogue::kDReluBGrad;
}
bool WritesBiasGrad(LtEpilogue e) {
  return e == LtEpilogue::kDReluBGrad || e == LtEpilogue::kDGeluBGrad || e == LtEpilogue::kBGradA ||
         e == LtEpilogue::kBGradB;
}

cublasLtEpilogue_t CublasEpilogue(LtEpilogue e, bool bias) {
  switch (e) {
    case LtEpilogue::kNone:
      return bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::kRelu:
      return bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    case LtEpilogue::kGelu:
      return bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    case LtEpilogue::kReluAux:
      return bias ? CUBLASLT_EPILOGUE_RELU_AUX_BIAS : CUBLASLT_EPILOGUE_RELU_AUX;
    case LtEpilogue::kGeluAux:
      return bias ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::kDRelu:
      return CUBLASLT_EPILOGUE_DRELU;
    case LtEpilogue::kDGelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case LtEpilogue::kDReluBGrad:
      return CUBLASLT_EPILOGUE_DRELU_BGRAD;
    case LtEpilogue::kDGeluBGrad:
      return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    // Swapped operands: our A is cuBLASLt's B (its bias gradient has D's column count,
    // our M), our B is cuBLASLt's A (D's row count, our N).
    case LtEpilogue::kBGradA:
      return CUBLASLT_EPILOGUE_BGRADB;
    case LtEpilogue::kBGradB:
      return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

int64_t RoundUp(int64_t v, int64_t multiple) { return (v + multiple - 1) / multiple * multiple; }

std::string Describe(const LtGemmSpec& s) {
  std::string d = absl::StrCat("M=", s.m, " N=", s.n, " K=", s.k, " tA=", s.ta, " tB=", s.tb);
  if (s.batch != 1) {
    absl::StrAppend(&d, ", batch ", s.batch, " (A stride ", s.a_batch_stride, ", B stride ", s.b_batch_stride, ")");
  }
  absl::StrAppend(&d, ", ", DTypeName(s.a_dtype()), " x ", DTypeName(s.b_dtype()), " operands, ", DTypeName(s.out),
                  " output");
  if (s.bias) absl::StrAppend(&d, ", ", DTypeName(LtBiasDType(s)), " bias");
  if (s.epilogue != LtEpilogue::kNone) absl::StrAppend(&d, ", epilogue ", LtEpilogueName(s.epilogue));
  if (s.alpha != 1.0f) absl::StrAppend(&d, ", alpha=", s.alpha);
  if (s.beta != 0.0f) absl::StrAppend(&d, ", beta=", s.beta);
  if (s.tf32) absl::StrAppend(&d, ", TF32");
  if (s.fast_accum) absl::StrAppend(&d, ", fast accumulation");
  if (s.amax_d) absl::StrAppend(&d, ", amax of D");
  return d;
}

// Destroys a preference however Create leaves.
struct PreferenceGuard {
  cublasLtMatmulPreference_t pref = nullptr;
  ~PreferenceGuard() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
  }
};

}  // namespace

const char* LtEpilogueName(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::kNone:
      return "none";
    case LtEpilogue::kRelu:
      return "ReLU";
    case LtEpilogue::kGelu:
      return "GELU";
    case LtEpilogue::kReluAux:
      return "ReLU+aux";
    case LtEpilogue::kGeluAux:
      return "GELU+aux";
    case LtEpilogue::kDRelu:
      return "dReLU";
    case LtEpilogue::kDGelu:
      return "dGELU";
    case LtEpilogue::kDReluBGrad:
      return "dReLU+bias-grad";
    case LtEpilogue::kDGeluBGrad:
      return "dGELU+bias-grad";
    case LtEpilogue::kBGradA:
      return "bias-grad-of-A";
    case LtEpilogue::kBGradB:
      return "bias-grad-of-B";
  }
  return "?";
}

int64_t LtAuxLd(const LtGemmSpec& s) {
  if (!HasAux(s.epilogue)) return 0;
  // The aux matrix has cuBLASLt's D shape (our N rows, M columns): the ReLU mask's ld
  // counts bits and must be a multiple of 128, the GELU input's counts elements and must
  // be a multiple of 8.
  return ReluMaskAux(s.epilogue) ? RoundUp(s.n, 128) : RoundUp(s.n, 8);
}

int64_t LtAuxBytes(const LtGemmSpec& s) {
  const int64_t ld = LtAuxLd(s);
  if (ld == 0) return 0;
  const int64_t per_batch = s.m * ld;  // bits (ReLU mask; ld % 128 == 0) or elements
  return ReluMaskAux(s.epilogue) ? s.batch * per_batch / 8
                                 : s.batch * per_batch * static_cast<int64_t>(DTypeSize(s.out));
}

CublasLtGemm::~CublasLtGemm() {
  if (lt_d_) cublasLtMatrixLayoutDestroy(lt_d_);
  if (lt_c_) cublasLtMatrixLayoutDestroy(lt_c_);
  if (lt_b_) cublasLtMatrixLayoutDestroy(lt_b_);
  if (lt_a_) cublasLtMatrixLayoutDestroy(lt_a_);
  if (desc_) cublasLtMatmulDescDestroy(desc_);
}

absl::StatusOr<std::unique_ptr<CublasLtGemm>> CublasLtGemm::Create(CudaBackend& backend, const LtGemmSpec& s) {
  std::unique_ptr<CublasLtGemm> g(new CublasLtGemm());
  g->backend_ = &backend;
  g->spec_ = s;
  g->what_ = Describe(s);
  const std::string& what = g->what_;
  auto invalid = [&what](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM (", what, "): ", why));
  };
  auto unimplemented = [&what](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt GEMM (", what, "): ", why));
  };

  // ---- the spec on its own -------------------------------------------------------------
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return invalid("M, N and K must be positive (callers skip empty products)");
  if (s.batch <= 0 || s.batch > std::numeric_limits<int32_t>::max()) {
    return invalid("the batch count must be in [1, 2^31)");
  }
  if (s.a_batch_stride < 0 || s.b_batch_stride < 0) return invalid("batch strides must be >= 0");
  if (s.alignment == 0 || (s.alignment & (s.alignment - 1)) != 0) return invalid("alignment must be a power of two");
  if (s.bias && !IsForward(s.epilogue)) {
    return invalid("a bias input goes with the forward epilogues (none, ReLU, GELU, and their aux forms) only");
  }
  if (s.batch > 1 && WritesBiasGrad(s.epilogue)) {
    return unimplemented("bias gradients of a batched GEMM are not supported (every batch would write one vector)");
  }
  if (s.amax_d && !IsFp8(s.out)) return invalid("amax_d needs an FP8 (E4M3/E5M2) output");
  g->fp8_ = IsFp8(s.a_dtype()) || IsFp8(s.b_dtype());
  MPC_RETURN_IF_ERROR(CheckFp8GemmSpec(backend, s));
  if (!g->fp8_) {
    if (s.a_dtype() != s.b_dtype()) return invalid("A and B must have one dtype");
    if (s.operand != DType::kF32 && s.operand != DType::kBF16 && s.operand != DType::kF16) {
      return unimplemented("operands must be f32, bf16, f16, or FP8");
    }
    if (s.out != s.operand && s.out != DType::kF32) {
      return unimplemented("the output must be in the operands' dtype or f32");
    }
    if (s.bias && LtBiasDType(s) != s.out) {
      return unimplemented("the bias epilogue reads a bias in the output's dtype; add a C of another dtype with beta");
    }
  } else if (IsFp8(s.out) && HasAux(s.epilogue)) {
    return unimplemented("aux epilogues with an FP8 output");
  }

  // ---- descriptor ----------------------------------------------------------------------
  MPC_ASSIGN_OR_RETURN(g->lt_, backend.CublasLt());
  void* placeholder = backend.cublaslt_workspace();  // non-null, 256-byte aligned; see below
  MPC_ASSIGN_OR_RETURN(cudaDataType_t a_type, CudaType(s.a_dtype()));
  MPC_ASSIGN_OR_RETURN(cudaDataType_t b_type, CudaType(s.b_dtype()));
  MPC_ASSIGN_OR_RETURN(cudaDataType_t d_type, CudaType(s.out));
  // f32 accumulation and f32 alpha/beta/scales for every dtype (FP8 requires exactly this).
  const cublasComputeType_t compute =
      s.tf32 && s.operand == DType::kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&g->desc_, compute, CUDA_R_32F));
  // Swapped operands: cuBLASLt's A is our B (op = tb), its B is our A (op = ta).
  const cublasOperation_t op_a = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  MPC_RETURN_IF_ERROR(
      SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_TRANSA, op_a, "cublasLtMatmulDescSetAttribute(TRANSA)"));
  MPC_RETURN_IF_ERROR(
      SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_TRANSB, op_b, "cublasLtMatmulDescSetAttribute(TRANSB)"));
  const cublasLtEpilogue_t epi = CublasEpilogue(s.epilogue, s.bias);
  MPC_RETURN_IF_ERROR(
      SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
  // The per-call pointers are set by Run. The heuristic does not dereference them, but it
  // does look at which are set (an amax or scale pointer selects different kernels) and
  // at their alignment, so it sees non-null, well-aligned placeholders here.
  if (s.bias || WritesBiasGrad(s.epilogue)) {
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  if (s.bias && g->fp8_) {
    // FP8 kernels take a bias type of their own (bf16 for an f32 or FP8 output); other
    // GEMMs read the output's dtype (checked above), the default.
    MPC_ASSIGN_OR_RETURN(cudaDataType_t bias_type, CudaType(LtBiasDType(s)));
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type,
                                    "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"));
  }
  if (HasAux(s.epilogue)) {
    const int64_t aux_ld = LtAuxLd(s);
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)"));
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld,
                                    "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)"));
    if (s.batch > 1) {
      const int64_t aux_stride = s.m * aux_ld;
      MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride,
                                      "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_BATCH_STRIDE)"));
    }
  }
  if (g->fp8_) {
    const int8_t fast_accum = s.fast_accum ? 1 : 0;
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum,
                                    "cublasLtMatmulDescSetAttribute(FAST_ACCUM)"));
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)"));
    MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)"));
    if (IsFp8(s.out)) {
      MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, placeholder,
                                      "cublasLtMatmulDescSetAttribute(D_SCALE_POINTER)"));
    }
    if (s.amax_d) {
      MPC_RETURN_IF_ERROR(SetDescAttr(g->desc_, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, placeholder,
                                      "cublasLtMatmulDescSetAttribute(AMAX_D_POINTER)"));
    }
  }

  // ---- layouts -------------------------------------------------------------------------
  // Stored matrices in column-major terms. Our row-major B: [K,N] (tb=0) is the
  // column-major N x K with ld N; [N,K] (tb=1) is K x N with ld K. Likewise A; Y [M,N]
  // is the column-major N x M with ld N.
  const uint64_t a_rows = s.tb ? s.k : s.n, a_cols = s.tb ? s.n : s.k;
  const uint64_t b_rows = s.ta ? s.m : s.k, b_cols = s.ta ? s.k : s.m;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_a_, b_type, a_rows, a_cols, a_rows));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_b_, a_type, b_rows, b_cols, b_rows));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_d_, d_type, s.n, s.m, s.n));
  if (IsFp8(s.out)) {
    // An FP8 D takes a C of the bias type (bf16/f16); beta is 0, so C is never read.
    MPC_ASSIGN_OR_RETURN(cudaDataType_t c_type, CudaType(LtBiasDType(s)));
    MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&g->lt_c_, c_type, s.n, s.m, s.n));
  }
  if (s.batch > 1) {
    const int32_t count = static_cast<int32_t>(s.batch);
    const int64_t y_stride = s.m * s.n;
    struct {
      cublasLtMatrixLayout_t layout;
      int64_t stride;
    } batched[] = {
        {g->lt_a_, s.b_batch_stride}, {g->lt_b_, s.a_batch_stride}, {g->lt_d_, y_stride}, {g->lt_c_, y_stride}};
    for (const auto& l : batched) {
      if (!l.layout) continue;
      MPC_RETURN_IF_ERROR(SetLayoutAttr(l.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count,
                                        "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"));
      MPC_RETURN_IF_ERROR(SetLayoutAttr(l.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, l.stride,
                                        "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"));
    }
  }

  // ---- the algorithm, chosen once --------------------------------------------------------
  PreferenceGuard pref;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref.pref));
  g->workspace_bytes_ = CudaBackend::kCublasLtWorkspaceBytes;
  const uint64_t workspace_bytes = g->workspace_bytes_;
  MPC_RETURN_IF_ERROR(SetPrefAttr(pref.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, workspace_bytes,
                                  "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)"));
  // The default assumes 256-byte aligned buffers; ours are only spec.alignment-aligned.
  const uint32_t alignment = s.alignment;
  for (cublasLtMatmulPreferenceAttributes_t attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
    MPC_RETURN_IF_ERROR(SetPrefAttr(pref.pref, attr, alignment, "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)"));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(
      g->lt_, g->desc_, g->lt_a_, g->lt_b_, g->lt_c_ ? g->lt_c_ : g->lt_d_, g->lt_d_, pref.pref, 1, &result, &returned);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return CublasStatus(st, absl::StrCat("cublasLtMatmulAlgoGetHeuristic(", what, ")").c_str());
  }
  if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt offers no algorithm for ", what,
                     g->fp8_ ? " (FP8: check the type/bias combination against cublaslt_fp8.cc's table)" : ""));
  }
  g->algo_ = result.algo;
  return g;
}

absl::Status CublasLtGemm::CheckArgs(const LtGemmArgs& args) const {
  const LtGemmSpec& s = spec_;
  auto invalid = [this](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM (", what_, ") run: ", why));
  };
  if (!args.a || !args.b || !args.y) return invalid("A, B and Y must all be given");
  if ((s.beta != 0.0f) != (args.c != nullptr)) return invalid("C must be given exactly when beta != 0");
  if (s.bias != (args.bias != nullptr)) return invalid("the bias must be given exactly when spec.bias");
  if (WritesBiasGrad(s.epilogue) != (args.bias_grad != nullptr)) {
    return invalid("bias_grad must be given exactly for the bias-gradient epilogues");
  }
  if (HasAux(s.epilogue) != (args.aux != nullptr)) return invalid("aux must be given exactly for the aux epilogues");
  if (fp8_ != (args.a_scale_inv != nullptr) || fp8_ != (args.b_scale_inv != nullptr)) {
    return invalid("a_scale_inv and b_scale_inv must be given exactly for FP8 operands");
  }
  if (IsFp8(s.out) != (args.d_scale != nullptr)) return invalid("d_scale must be given exactly for an FP8 output");
  if (s.amax_d != (args.amax_d != nullptr)) return invalid("amax_d must be given exactly when spec.amax_d");
  const std::pair<const char*, const void*> matrices[] = {{"A", args.a}, {"B", args.b}, {"C", args.c}, {"Y", args.y}};
  for (const auto& [name, p] : matrices) {
    if (p && reinterpret_cast<uintptr_t>(p) % s.alignment != 0) {
      return invalid(absl::StrCat(name, " at 0x", absl::Hex(reinterpret_cast<uintptr_t>(p)), " is not ", s.alignment,
                                  "-byte aligned"));
    }
  }
  return absl::OkStatus();
}

absl::Status CublasLtGemm::Run(const LtGemmArgs& args) {
  MPC_RETURN_IF_ERROR(CheckArgs(args));
  const LtGemmSpec& s = spec_;
  if (s.bias) {
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias,
                                    "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  } else if (WritesBiasGrad(s.epilogue)) {
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, args.bias_grad,
                                    "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  if (HasAux(s.epilogue)) {
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, args.aux,
                                    "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)"));
  }
  if (fp8_) {
    // Swapped: cuBLASLt's A is our B, so it takes B's scale_inv, and vice versa.
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, args.b_scale_inv,
                                    "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)"));
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, args.a_scale_inv,
                                    "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)"));
    if (IsFp8(s.out)) {
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, args.d_scale,
                                      "cublasLtMatmulDescSetAttribute(D_SCALE_POINTER)"));
    }
    if (s.amax_d) {
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, args.amax_d,
                                      "cublasLtMatmulDescSetAttribute(AMAX_D_POINTER)"));
    }
  }
  // Without beta, C is not read: it aliases Y (same layout), except for an FP8 Y, whose
  // C has a type of its own and is passed as null, as Transformer Engine does.
  const void* c = s.beta != 0.0f ? args.c : (lt_c_ ? nullptr : args.y);
  const float alpha = s.alpha, beta = s.beta;
  // Swapped: cuBLASLt's A is our B, its B our A.
  const cublasStatus_t st =
      cublasLtMatmul(lt_, desc_, &alpha, args.b, lt_a_, args.a, lt_b_, &beta, c, lt_c_ ? lt_c_ : lt_d_, args.y, lt_d_,
                     &algo_, backend_->cublaslt_workspace(), workspace_bytes_, backend_->stream());
  return CublasStatus(st, absl::StrCat("cublasLtMatmul(", what_, ")").c_str());
}

absl::Status CublasLtGemm::Run(const void* a, const void* b, const void* bias, void* y) {
  LtGemmArgs args;
  args.a = a;
  args.b = b;
  args.bias = bias;
  args.y = y;
  return Run(args);
}

absl::Status CublasLtGemm::Run(const void* a, const void* b, const void* bias, void* y, const float* a_scale_inv,
                               const float* b_scale_inv, float* amax_d, const float* d_scale) {
  LtGemmArgs args;
  args.a = a;
  args.b = b;
  args.bias = bias;
  args.y = y;
  args.a_scale_inv = a_scale_inv;
  args.b_scale_inv = b_scale_inv;
  args.amax_d = amax_d;
  args.d_scale = d_scale;
  return Run(args);
}

namespace {

// ---- the Gemm node kernel --------------------------------------------------------------

class CudaGemmKernel : public Kernel {
 public:
  enum class CRoute { kNone, kBiasEpilogue, kFullC, kBroadcastC };

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend);

  ~CudaGemmKernel() override {
    if (ones_) backend_->Free(ones_);
  }

  absl::Status Run(KernelContext& ctx) override {
    if (!gemm_) return absl::OkStatus();  // an empty [M,N]
    LtGemmArgs args;
    args.a = ctx.inputs[0].data;
    args.b = ctx.inputs[1].data;
    args.y = ctx.outputs[0].data;
    const void* c = route_ == CRoute::kNone ? nullptr : ctx.inputs[2].data;
    switch (route_) {
      case CRoute::kNone:
        break;
      case CRoute::kBiasEpilogue:
        args.bias = c;
        break;
      case CRoute::kFullC:
        args.c = c;
        break;
      case CRoute::kBroadcastC: {
        // Y <- C broadcast and converted; the GEMM then adds into it with beta.
        LtGemmArgs bc;
        bc.a = c_is_left_factor_ ? c : ones_;
        bc.b = c_is_left_factor_ ? ones_ : c;
        bc.y = args.y;
        MPC_RETURN_IF_ERROR(broadcast_->Run(bc));
        args.c = args.y;
        break;
      }
    }
    return gemm_->Run(args);
  }

 private:
  CudaBackend* backend_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  CRoute route_ = CRoute::kNone;
  std::unique_ptr<CublasLtGemm> broadcast_;  // kBroadcastC: Y <- C
  bool c_is_left_factor_ = false;            // kBroadcastC: C is the 1x1 factor (C has one column)
  void* ones_ = nullptr;                     // kBroadcastC: N ones in C's dtype
};

// A device vector of n ones in `dtype` (f32, bf16 or f16), filled once at creation.
absl::StatusOr<void*> DeviceOnes(CudaBackend& backend, DType dtype, int64_t n) {
  const size_t es = DTypeSize(dtype);
  std::vector<unsigned char> host(static_cast<size_t>(n) * es);
  const float one_f32 = 1.0f;
  const uint16_t one_bf16 = FloatToBf16(1.0f), one_f16 = FloatToHalf(1.0f);
  const void* one = dtype == DType::kF32    ? static_cast<const void*>(&one_f32)
                    : dtype == DType::kBF16 ? static_cast<const void*>(&one_bf16)
                                            : static_cast<const void*>(&one_f16);
  for (int64_t i = 0; i < n; ++i) std::memcpy(host.data() + i * es, one, es);
  MPC_ASSIGN_OR_RETURN(void* ones, backend.Allocate(host.size()));
  if (absl::Status st = backend.CopyToDevice(ones, host.data(), host.size()); !st.ok()) {
    backend.Free(ones);
    return st;
  }
  return ones;
}

absl::StatusOr<std::unique_ptr<Kernel>> CudaGemmKernel::Create(const Node& node, Backend& backend) {
  MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
  const Shape& a = node.inputs[0]->shape;
  const Shape& b = node.inputs[1]->shape;
  const Shape& y = node.outputs[0]->shape;
  if (a.size() != 2 || b.size() != 2 || y.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm needs 2-D A, B and Y, got ", ShapeToString(a), ", ",
                                                   ShapeToString(b), " -> ", ShapeToString(y)));
  }
  LtGemmSpec s;
  s.ta = node.attrs.GetInt("transA", 0) != 0;
  s.tb = node.attrs.GetInt("transB", 0) != 0;
  s.m = y[0];
  s.n = y[1];
  s.k = s.ta ? a[0] : a[1];
  s.alpha = node.attrs.GetFloat("alpha", 1.0f);
  const float beta = node.attrs.GetFloat("beta", 1.0f);
  const std::string act = node.attrs.GetString("mpc_activation", "");
  if (!act.empty() && act != "Relu") {
    return absl::UnimplementedError(absl::StrCat("Gemm with mpc_activation=", act, " is not yet on CUDA (only Relu)"));
  }
  if (act == "Relu") s.epilogue = LtEpilogue::kRelu;
  s.tf32 = node.attrs.GetInt("mpc_tf32", 0) != 0 && cuda->capabilities().tf32;
  s.operand = node.inputs[0]->dtype;
  s.out = node.outputs[0]->dtype;
  // Every buffer is a cudaMalloc allocation or an arena offset, aligned to this.
  s.alignment = static_cast<uint32_t>(kArenaAlignment);
  if (node.inputs[1]->dtype != s.operand) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm operands differ in dtype: ", DTypeName(s.operand), " and ",
                                                   DTypeName(node.inputs[1]->dtype)));
  }
  if (s.out != s.operand && s.out != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("Gemm with ", DTypeName(s.operand), " operands and ", DTypeName(s.out),
                                                 " output is not yet on CUDA"));
  }

  std::unique_ptr<CudaGemmKernel> kernel(new CudaGemmKernel());
  kernel->backend_ = cuda;
  if (s.m == 0 || s.n == 0) return std::unique_ptr<Kernel>(std::move(kernel));
  if (s.k == 0) return absl::UnimplementedError("Gemm with K=0 (an empty contraction) is not yet on CUDA");

  const Value* c = node.inputs.size() > 2 ? node.inputs[2] : nullptr;
  if (c && beta != 0.0f) {
    const Shape& cs = c->shape;
    if (cs.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat("Gemm C ", ShapeToString(cs), " has rank > 2"));
    }
    const bool row = cs == Shape{s.n} || cs == Shape{1, s.n};
    if (row && beta == 1.0f && c->dtype == s.out) {
      kernel->route_ = CRoute::kBiasEpilogue;
      s.bias = true;
      s.bias_dtype = c->dtype;
    } else if (cs == Shape{s.m, s.n} && c->dtype == s.out) {
      kernel->route_ = CRoute::kFullC;
      s.beta = beta;
    } else {
      kernel->route_ = CRoute::kBroadcastC;
      s.beta = beta;
      // Element (i, j) of the broadcast C is c[i * row_stride + j * col_stride].
      const int64_t c_cols = cs.empty() ? 1 : cs.back();
      const int64_t c_rows = cs.size() == 2 ? cs[0] : 1;
      const int64_t col_stride = c_cols == 1 ? 0 : 1;
      const int64_t row_stride = c_rows == 1 ? 0 : c_cols;
      // Row i of Y is one 1x1-by-1xN product: [1] * C's row i when C has N columns,
      // else C[i] (or the scalar) * ones[1,N].
      LtGemmSpec bs;
      bs.m = 1;
      bs.k = 1;
      bs.n = s.n;
      bs.batch = s.m;
      bs.operand = c->dtype;
      bs.out = s.out;
      bs.alignment = s.alignment;
      kernel->c_is_left_factor_ = col_stride == 0;
      bs.a_batch_stride = kernel->c_is_left_factor_ ? row_stride : 0;
      bs.b_batch_stride = kernel->c_is_left_factor_ ? 0 : row_stride;
      MPC_ASSIGN_OR_RETURN(kernel->broadcast_, CublasLtGemm::Create(*cuda, bs));
      MPC_ASSIGN_OR_RETURN(kernel->ones_, DeviceOnes(*cuda, c->dtype, s.n));
    }
  }
  MPC_ASSIGN_OR_RETURN(kernel->gemm_, CublasLtGemm::Create(*cuda, s));
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace
}  // namespace mpc::cuda

namespace mpc {

void RegisterCudaGemmKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    r.Register("Gemm", "cuda", d, cuda::CudaGemmKernel::Create);
  }
  cuda::RegisterCudaMatMulKernels(r);
}

}  // namespace mpc
