// CublasLtGemm (see cublaslt_gemm.h): descriptors, layouts and the algorithm chosen once
// per shape, then one cublasLtMatmul per Run. The node kernels built on it are in
// kernels_gemm.cc (Gemm, MatMul) and kernels_fp8_gemm.cu (Fp8Gemm).
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
  MPC_RETURN_IF_ERROR(CheckSpec(backend, s, g->what_));
  g->fp8_ = IsFp8(s.a_dtype()) || IsFp8(s.b_dtype());
  MPC_ASSIGN_OR_RETURN(g->lt_, backend.CublasLt());
  MPC_RETURN_IF_ERROR(g->CreateDescriptor());
  MPC_RETURN_IF_ERROR(g->CreateLayouts());
  MPC_RETURN_IF_ERROR(g->ChooseAlgorithm());
  return g;
}

// The spec on its own: shapes, strides, and which dtype / epilogue combinations exist.
absl::Status CublasLtGemm::CheckSpec(const CudaBackend& backend, const LtGemmSpec& s, const std::string& what) {
  auto invalid = [&what](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("cuBLASLt GEMM (", what, "): ", why));
  };
  auto unimplemented = [&what](const std::string& why) {
    return absl::UnimplementedError(absl::StrCat("cuBLASLt GEMM (", what, "): ", why));
  };
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
  const bool fp8 = IsFp8(s.a_dtype()) || IsFp8(s.b_dtype());
  MPC_RETURN_IF_ERROR(CheckFp8GemmSpec(backend, s));
  if (!fp8) {
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
  return absl::OkStatus();
}

// cuBLASLt's enum for an operand's scale layout (cublaslt_gemm.h's LtScaleMode).
static cublasLtMatmulMatrixScale_t CublasScaleMode(LtScaleMode m) {
  switch (m) {
    case LtScaleMode::kOuterVec:
      return CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    case LtScaleMode::kVec128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    case LtScaleMode::kBlk128x128:
      return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    default:
      return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  }
}

// The matmul descriptor: compute type, operations, epilogue, and the per-call pointers.
absl::Status CublasLtGemm::CreateDescriptor() {
  const LtGemmSpec& s = spec_;
  void* placeholder = backend_->cublaslt_workspace();  // non-null, 256-byte aligned; see below
  // f32 accumulation and f32 alpha/beta/scales for every dtype (FP8 requires exactly this).
  const cublasComputeType_t compute =
      s.tf32 && s.operand == DType::kF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
  // Swapped operands: cuBLASLt's A is our B (op = tb), its B is our A (op = ta).
  const cublasOperation_t op_a = s.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_b = s.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_TRANSA, op_a, "cublasLtMatmulDescSetAttribute(TRANSA)"));
  MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_TRANSB, op_b, "cublasLtMatmulDescSetAttribute(TRANSB)"));
  const cublasLtEpilogue_t epi = CublasEpilogue(s.epilogue, s.bias);
  MPC_RETURN_IF_ERROR(
      SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, epi, "cublasLtMatmulDescSetAttribute(EPILOGUE)"));
  // The per-call pointers are set by Run. The heuristic does not dereference them, but it
  // does look at which are set (an amax or scale pointer selects different kernels) and
  // at their alignment, so it sees non-null, well-aligned placeholders here.
  if (s.bias || WritesBiasGrad(s.epilogue)) {
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(BIAS_POINTER)"));
  }
  if (s.bias && fp8_) {
    // FP8 kernels take a bias type of their own (bf16 for an f32 or FP8 output); other
    // GEMMs read the output's dtype (checked above), the default.
    MPC_ASSIGN_OR_RETURN(cudaDataType_t bias_type, CudaType(LtBiasDType(s)));
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bias_type,
                                    "cublasLtMatmulDescSetAttribute(BIAS_DATA_TYPE)"));
  }
  if (HasAux(s.epilogue)) {
    const int64_t aux_ld = LtAuxLd(s);
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_POINTER)"));
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, aux_ld,
                                    "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_LD)"));
    if (s.batch > 1) {
      const int64_t aux_stride = s.m * aux_ld;
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, aux_stride,
                                      "cublasLtMatmulDescSetAttribute(EPILOGUE_AUX_BATCH_STRIDE)"));
    }
  }
  if (fp8_) {
    const int8_t fast_accum = s.fast_accum ? 1 : 0;
    MPC_RETURN_IF_ERROR(
        SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast_accum, "cublasLtMatmulDescSetAttribute(FAST_ACCUM)"));
    if (s.a_scale_mode != LtScaleMode::kScalar || s.b_scale_mode != LtScaleMode::kScalar) {
      // Swapped operands: cuBLASLt's A is our B.
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, CublasScaleMode(s.b_scale_mode),
                                      "cublasLtMatmulDescSetAttribute(A_SCALE_MODE)"));
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, CublasScaleMode(s.a_scale_mode),
                                      "cublasLtMatmulDescSetAttribute(B_SCALE_MODE)"));
    }
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)"));
    MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, placeholder,
                                    "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)"));
    if (IsFp8(s.out)) {
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, placeholder,
                                      "cublasLtMatmulDescSetAttribute(D_SCALE_POINTER)"));
    }
    if (s.amax_d) {
      MPC_RETURN_IF_ERROR(SetDescAttr(desc_, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, placeholder,
                                      "cublasLtMatmulDescSetAttribute(AMAX_D_POINTER)"));
    }
  }
  return absl::OkStatus();
}

// The matrix layouts, batched where the spec is.
absl::Status CublasLtGemm::CreateLayouts() {
  const LtGemmSpec& s = spec_;
  MPC_ASSIGN_OR_RETURN(cudaDataType_t a_type, CudaType(s.a_dtype()));
  MPC_ASSIGN_OR_RETURN(cudaDataType_t b_type, CudaType(s.b_dtype()));
  MPC_ASSIGN_OR_RETURN(cudaDataType_t d_type, CudaType(s.out));
  // Stored matrices in column-major terms. Our row-major B: [K,N] (tb=0) is the
  // column-major N x K with ld N; [N,K] (tb=1) is K x N with ld K. Likewise A; Y [M,N]
  // is the column-major N x M with ld N.
  const uint64_t a_rows = s.tb ? s.k : s.n, a_cols = s.tb ? s.n : s.k;
  const uint64_t b_rows = s.ta ? s.m : s.k, b_cols = s.ta ? s.k : s.m;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_a_, b_type, a_rows, a_cols, a_rows));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_b_, a_type, b_rows, b_cols, b_rows));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_d_, d_type, s.n, s.m, s.n));
  if (IsFp8(s.out)) {
    // An FP8 D takes a C of the bias type (bf16/f16); beta is 0, so C is never read.
    MPC_ASSIGN_OR_RETURN(cudaDataType_t c_type, CudaType(LtBiasDType(s)));
    MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&lt_c_, c_type, s.n, s.m, s.n));
  }
  if (s.batch > 1) {
    const int32_t count = static_cast<int32_t>(s.batch);
    const int64_t y_stride = s.m * s.n;
    struct {
      cublasLtMatrixLayout_t layout;
      int64_t stride;
    } batched[] = {{lt_a_, s.b_batch_stride}, {lt_b_, s.a_batch_stride}, {lt_d_, y_stride}, {lt_c_, y_stride}};
    for (const auto& l : batched) {
      if (!l.layout) continue;
      MPC_RETURN_IF_ERROR(SetLayoutAttr(l.layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count,
                                        "cublasLtMatrixLayoutSetAttribute(BATCH_COUNT)"));
      MPC_RETURN_IF_ERROR(SetLayoutAttr(l.layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, l.stride,
                                        "cublasLtMatrixLayoutSetAttribute(STRIDED_BATCH_OFFSET)"));
    }
  }
  return absl::OkStatus();
}

// The algorithm, chosen once by cuBLASLt's heuristic for our workspace and alignment.
absl::Status CublasLtGemm::ChooseAlgorithm() {
  const LtGemmSpec& s = spec_;
  PreferenceGuard pref;
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref.pref));
  workspace_bytes_ = CudaBackend::kCublasLtWorkspaceBytes;
  const uint64_t workspace_bytes = workspace_bytes_;
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
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt_, desc_, lt_a_, lt_b_, lt_c_ ? lt_c_ : lt_d_, lt_d_,
                                                           pref.pref, 1, &result, &returned);
  if (st != CUBLAS_STATUS_SUCCESS) {
    return CublasStatus(st, absl::StrCat("cublasLtMatmulAlgoGetHeuristic(", what_, ")").c_str());
  }
  if (returned == 0 || result.state != CUBLAS_STATUS_SUCCESS) {
    return absl::UnimplementedError(
        absl::StrCat("cuBLASLt offers no algorithm for ", what_,
                     fp8_ ? " (FP8: check the type/bias combination against cublaslt_fp8.cc's table)" : ""));
  }
  algo_ = result.algo;
  return absl::OkStatus();
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
  // Every pointer against its alignment: the matrices against the spec's, the FP8 scalars
  // against kFp8ScalarAlignment. cuBLASLt 13.1 (CUDA 13.0) on an H100 answered
  // CUBLAS_STATUS_NOT_SUPPORTED at run time for FP8 scale pointers 4 bytes into one buffer
  // (tests/gpu/cuda_fp8_gemm_test.cc sweeps the offsets); the executor's scales are arena
  // values or allocations of their own.
  constexpr const char* kScalarHint = ": cuBLASLt refuses such FP8 scale/amax pointers; give each its own aligned slot";
  const struct {
    const char* name;
    const void* p;
    uintptr_t alignment;
    const char* hint;
  } pointers[] = {{"a_scale_inv", args.a_scale_inv, kFp8ScalarAlignment, kScalarHint},
                  {"b_scale_inv", args.b_scale_inv, kFp8ScalarAlignment, kScalarHint},
                  {"d_scale", args.d_scale, kFp8ScalarAlignment, kScalarHint},
                  {"amax_d", args.amax_d, kFp8ScalarAlignment, kScalarHint},
                  {"A", args.a, s.alignment, ""},
                  {"B", args.b, s.alignment, ""},
                  {"C", args.c, s.alignment, ""},
                  {"Y", args.y, s.alignment, ""}};
  for (const auto& ptr : pointers) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr.p);
    if (ptr.p && address % ptr.alignment != 0) {
      return invalid(absl::StrCat(ptr.name, " at 0x", absl::Hex(address), " is not ", ptr.alignment, "-byte aligned",
                                  ptr.hint));
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

}  // namespace mpc::cuda
