// One cuBLASLt matrix product built once per node from its static shapes: the matmul
// descriptor, the three layouts, the epilogue and the heuristic's algorithm are chosen
// at creation; Run only sets the bias pointer and enqueues cublasLtMatmul on the
// backend's stream (no allocation, no synchronisation). The handle and the 32 MiB
// workspace belong to the backend (CudaBackend::CublasLt) and are shared by every GEMM.
//
// Row-major Y[M,N] = alpha * op(A)[M,K] op(B)[K,N] (+ bias[N]) (ReLU) is computed as
// the column-major Y^T[N,M] = op(B)^T op(A)^T: cuBLASLt's "A" is our B and its "B" our A,
// with the transposes carried as descriptor attributes (no copies).
#pragma once

#include <memory>

#include <cublasLt.h>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_device.h"

namespace mpc::cuda {

struct LtGemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  float alpha = 1.0f;
  bool bias = false;        // a row bias [N] added after alpha (the BIAS epilogue)
  bool relu = false;        // ReLU epilogue
  bool tf32 = false;        // CUBLAS_COMPUTE_32F_FAST_TF32 (f32 operands only)
  DType operand = DType::kF32;  // A and B
  DType bias_dtype = DType::kF32;
  DType out = DType::kF32;  // Y
};

class CublasLtGemm {
 public:
  ~CublasLtGemm();
  // Errors name the shape and dtypes; Unimplemented when the heuristic offers nothing.
  static absl::StatusOr<std::unique_ptr<CublasLtGemm>> Create(CudaBackend& backend, const LtGemmSpec& spec);
  absl::Status Run(const void* a, const void* b, const void* bias, void* y);

 private:
  CublasLtGemm() = default;
  CudaBackend* backend_ = nullptr;
  cublasLtHandle_t lt_ = nullptr;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t lt_a_ = nullptr, lt_b_ = nullptr, lt_d_ = nullptr;  // cuBLASLt's A, B, D
  cublasLtMatmulAlgo_t algo_{};
  size_t workspace_bytes_ = 0;
  bool bias_ = false;
  float alpha_ = 1.0f, beta_ = 0.0f;
};

}  // namespace mpc::cuda
