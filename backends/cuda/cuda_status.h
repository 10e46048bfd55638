// CUDA / cuBLAS(Lt) status -> absl::Status, naming the call that failed:
//   MPC_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, 1024));
//   -> "cudaMalloc(&p, 1024): out of memory (cudaErrorMemoryAllocation)"
// Host-only (no device code); usable from .cc and .cu files.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mpc::cuda {

inline absl::StatusCode CudaErrorCode(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation:
      return absl::StatusCode::kResourceExhausted;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
      return absl::StatusCode::kUnavailable;
    case cudaErrorInvalidValue:
      return absl::StatusCode::kInvalidArgument;
    case cudaErrorNotSupported:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

inline absl::Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return absl::OkStatus();
  // The error goes to the caller in the Status; take it out of the runtime's last-error
  // slot too, or the next launch check (cudaGetLastError) reports it again as its own. On
  // the H100 a refused 1 PiB cudaMalloc, handled by its caller, surfaced as "launching
  // AddChannelBias: out of memory" in the next test. Sticky errors (a faulted context)
  // stay: they cannot be cleared.
  (void)cudaGetLastError();
  return absl::Status(CudaErrorCode(e),
                      absl::StrCat(call, ": ", cudaGetErrorString(e), " (", cudaGetErrorName(e), ")"));
}

inline const char* CublasStatusName(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
    default:
      return "CUBLAS_STATUS_UNKNOWN";
  }
}

inline absl::Status CublasStatus(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  const absl::StatusCode code = s == CUBLAS_STATUS_NOT_SUPPORTED     ? absl::StatusCode::kUnimplemented
                                : s == CUBLAS_STATUS_ALLOC_FAILED    ? absl::StatusCode::kResourceExhausted
                                : s == CUBLAS_STATUS_INVALID_VALUE   ? absl::StatusCode::kInvalidArgument
                                : s == CUBLAS_STATUS_NOT_INITIALIZED ? absl::StatusCode::kUnavailable
                                                                     : absl::StatusCode::kInternal;
  return absl::Status(code, absl::StrCat(call, ": ", CublasStatusName(s), " (status ", static_cast<int>(s), ")"));
}

}  // namespace mpc::cuda

#define MPC_CUDA_RETURN_IF_ERROR(call)                                        \
  do {                                                                        \
    ::absl::Status _mpc_cuda_status = ::mpc::cuda::CudaStatus((call), #call); \
    if (!_mpc_cuda_status.ok()) return _mpc_cuda_status;                      \
  } while (0)

#define MPC_CUBLAS_RETURN_IF_ERROR(call)                                          \
  do {                                                                            \
    ::absl::Status _mpc_cublas_status = ::mpc::cuda::CublasStatus((call), #call); \
    if (!_mpc_cublas_status.ok()) return _mpc_cublas_status;                      \
  } while (0)
