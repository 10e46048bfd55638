// One cuBLASLt matrix product built once from static shapes: the matmul descriptor, the
// layouts (with strided batches), the epilogue, the FP8 attributes and the heuristic's
// algorithm are all chosen at creation; Run only sets the per-call device pointers
// (bias, aux, scales, amax) on the descriptor and enqueues cublasLtMatmul on the
// backend's stream (no allocation, no synchronisation, capturable). The handle and the
// 32 MiB workspace belong to the backend (CudaBackend::CublasLt) and are shared by every
// GEMM. Every GEMM of the CUDA backend goes through this class: Gemm and MatMul nodes
// (kernels_gemm.cc) and Fp8Gemm nodes (kernels_fp8_gemm.cu).
//
// Semantics, row-major, for each batch i:
//   Y[M,N] = epilogue(alpha * op(A)[M,K] op(B)[K,N] + beta * C[M,N] (+ bias[N]))
// accumulated in f32 (TF32 tensor cores for f32 operands when spec.tf32), rounded once
// to Y's dtype. It is computed as the column-major Y^T[N,M] = op(B)^T op(A)^T: cuBLASLt's
// "A" is our B and its "B" our A, with the transposes carried as descriptor attributes
// (no copies). Consequently cuBLASLt's per-row vectors (bias, bias gradient of its A)
// are per-column vectors [N] of our Y.
//
// FP8 (sm_89+, cublaslt_fp8.cc has the rules): A and B in E4M3/E5M2 (not both E5M2),
// each with a device f32 scale_inv the raw FP8 values are multiplied by, so the product
// is of the dequantized values; Y in f32, bf16, f16 or FP8 (then with a device scale
// applied before rounding, and optionally the amax of the unscaled result).
// cuBLASLt runs FP8 only in its "TN" layout, which in our row-major terms is transA = 0,
// transB = 1: A stored [M,K] and B stored [N,K], both K-contiguous (X · W^T of a Linear
// layer); M, N and K must be multiples of 16.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_device.h"

namespace mpc::cuda {

// What the epilogue does to alpha * AB + beta * C (+ bias). "Aux" is cuBLASLt's extra
// matrix of Y's shape: the ReLU bit-mask (1 bit per element) or the GELU input (Y's
// dtype); forward epilogues write it, backward ones read it. GELU is cuBLASLt's, the tanh
// approximation 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
enum class LtEpilogue {
  kNone,
  kRelu,        // Y = max(Z, 0)
  kGelu,        // Y = gelu(Z)
  kReluAux,     // Y = max(Z, 0), aux = bit-mask of Z > 0
  kGeluAux,     // Y = gelu(Z), aux = Z
  kDRelu,       // Y = Z * (aux bit set): the ReLU backward, Z being dY·W of the next layer
  kDGelu,       // Y = Z * gelu'(aux)
  kDReluBGrad,  // kDRelu, and bias_grad[N] = sum over the M rows of Y
  kDGeluBGrad,  // kDGelu, and bias_grad[N] = sum over the M rows of Y
  kBGradA,      // bias_grad[M] = sum over K of op(A) (e.g. db = sum_batch dY in dW = dY^T X)
  kBGradB,      // bias_grad[N] = sum over K of op(B)
};
const char* LtEpilogueName(LtEpilogue e);

// How an FP8 operand's scale_inv is laid out (graph/float8_groups.h's Fp8GemmScaleShape
// for the operand stored [P, K]); cuBLASLt 12.9+ on sm_90 for all but kScalar:
enum class LtScaleMode {
  kScalar,      // one f32 for the operand (delayed and current scaling)
  kOuterVec,    // [P]: one per row (CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F; rowwise)
  kVec128,      // [ceil(K/128), P]: one per row per 128 of K (VEC128_32F; 1x128 tiles)
  kBlk128x128,  // [ceil(P/128), roundup(ceil(K/128), 4)]: one per 128x128 block (BLK128x128_32F)
};
const char* LtScaleModeName(LtScaleMode m);

struct LtGemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;  // A stored [K,M] / B stored [N,K]
  // Strided batch: `batch` products; our A's i-th matrix starts a_batch_stride elements
  // after the (i-1)-th (0: every product reads the same A), likewise B; Y's (and C's,
  // aux's) are packed, M*N elements apart.
  int64_t batch = 1;
  int64_t a_batch_stride = 0, b_batch_stride = 0;
  float alpha = 1.0f;
  float beta = 0.0f;  // != 0: C [M,N] in Y's dtype (Run's c) is added; c may be y itself
  bool bias = false;  // row bias [N] added after alpha/beta, before the activation
  // The bias (gradient) vector's dtype. Default: Y's dtype; for FP8 operands with an f32
  // or FP8 Y, bf16 (what cuBLASLt's FP8 kernels take).
  std::optional<DType> bias_dtype;
  LtEpilogue epilogue = LtEpilogue::kNone;
  bool tf32 = false;               // CUBLAS_COMPUTE_32F_FAST_TF32 (f32 operands only)
  DType operand = DType::kF32;     // A, and B unless b_operand is set
  std::optional<DType> b_operand;  // B's dtype when it differs (FP8 HYBRID: E4M3 x E5M2)
  DType out = DType::kF32;         // Y: the operands' dtype or f32; for FP8 operands f32,
                                   // bf16, f16, E4M3 or E5M2 (E5M2 only with an E5M2 operand)
  bool fast_accum = false;         // FP8: CUBLASLT_MATMUL_DESC_FAST_ACCUM (no periodic f32
                                   // promotion of the tensor-core accumulator: faster, less exact)
  bool amax_d = false;             // FP8 Y only: Run writes max|result| (before the D scale)
  // FP8: our A's and B's scale layouts (cublaslt_fp8.cc has the pairs cuBLASLt takes).
  LtScaleMode a_scale_mode = LtScaleMode::kScalar;
  LtScaleMode b_scale_mode = LtScaleMode::kScalar;
  // Alignment in bytes (a power of two, >= 16 for FP8) that every matrix pointer given to
  // Run has; the heuristic only picks algorithms that work with it and Run checks it.
  uint32_t alignment = 16;

  DType a_dtype() const { return operand; }
  DType b_dtype() const { return b_operand.value_or(operand); }
};

// Alignment in bytes Run requires of the FP8 scale and amax pointers (LtGemmArgs).
constexpr uintptr_t kFp8ScalarAlignment = 16;

// The operands of one Run: device pointers. Those the spec does not use must be null
// (Run checks both ways, and the alignment of A, B, C and Y).
struct LtGemmArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* c = nullptr;  // spec.beta != 0: C [M,N] (per batch) in Y's dtype; may be y
  void* y = nullptr;
  const void* bias = nullptr;  // spec.bias: [N]
  void* bias_grad = nullptr;   // kDReluBGrad, kDGeluBGrad, kBGradB: [N]; kBGradA: [M]
  void* aux = nullptr;         // k*Aux: written; kD*: read. LtAuxBytes(spec) bytes.
  // FP8 operands (required): device f32 factors the FP8 values of A / B are multiplied
  // by, i.e. the quantization's scale_inv (the fp8 pass's <tensor>.fp8_scale_inv state).
  const float* a_scale_inv = nullptr;
  const float* b_scale_inv = nullptr;
  const float* d_scale = nullptr;  // FP8 Y (required): Y = fp8(d_scale * result), device f32
  float* amax_d = nullptr;         // spec.amax_d: where max|result| is written (device f32)
};

// The aux matrix of an epilogue: leading dimension (elements for GELU, bits for the ReLU
// mask; >= N, padded as cuBLASLt requires) and the bytes of the whole buffer (all
// batches). Both 0 for epilogues without aux.
int64_t LtAuxLd(const LtGemmSpec& spec);
int64_t LtAuxBytes(const LtGemmSpec& spec);

bool IsFp8(DType d);

class CublasLtGemm {
 public:
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm&) = delete;
  CublasLtGemm& operator=(const CublasLtGemm&) = delete;

  // Errors name the shape, dtypes and options: InvalidArgument for an inconsistent spec,
  // FailedPrecondition for FP8 on a device older than sm_89, Unimplemented for a
  // combination cuBLASLt rejects or offers no algorithm for.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(CudaBackend& backend, const LtGemmSpec& spec);

  absl::Status Run(const LtGemmArgs& args);
  // Y = op(A) op(B) (+ bias), the common forward form.
  absl::Status Run(const void* a, const void* b, const void* bias, void* y);
  // FP8 forward form: scale_inv pointers as in LtGemmArgs; amax_d for an FP8 Y only.
  absl::Status Run(const void* a, const void* b, const void* bias, void* y, const float* a_scale_inv,
                   const float* b_scale_inv, float* amax_d = nullptr, const float* d_scale = nullptr);

  const LtGemmSpec& spec() const { return spec_; }
  // "M=.. N=.. K=.. tA=.. tB=.., bf16 operands, f32 output, ..." for messages.
  const std::string& description() const { return what_; }

 private:
  CublasLtGemm() = default;
  // Create's steps, in order.
  static absl::Status CheckSpec(const CudaBackend& backend, const LtGemmSpec& spec, const std::string& what);
  absl::Status CreateDescriptor();
  absl::Status CreateLayouts();
  absl::Status ChooseAlgorithm();
  absl::Status CheckArgs(const LtGemmArgs& args) const;

  CudaBackend* backend_ = nullptr;
  LtGemmSpec spec_;
  std::string what_;
  bool fp8_ = false;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  // cuBLASLt's A (our B), B (our A), D (our Y); C only when it differs from D (an FP8 Y,
  // whose C type is the bias type), otherwise C uses D's layout (required for C == D).
  cublasLtMatrixLayout_t lt_a_ = nullptr, lt_b_ = nullptr, lt_c_ = nullptr, lt_d_ = nullptr;
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
};

// Validates an FP8 spec against cuBLASLt's FP8 rules and the device (cublaslt_fp8.cc).
// OK for non-FP8 specs.
absl::Status CheckFp8GemmSpec(const CudaBackend& backend, const LtGemmSpec& spec);
// The bias vector dtype the spec resolves to (see LtGemmSpec::bias_dtype).
DType LtBiasDType(const LtGemmSpec& spec);

}  // namespace mpc::cuda
