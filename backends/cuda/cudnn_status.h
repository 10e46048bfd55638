// cuDNN status -> absl::Status, naming the call that failed, as cuda_status.h does for
// CUDA and cuBLAS:
//   MPC_CUDNN_RETURN_IF_ERROR(cudnnCreate(&handle));
//   -> "cudnnCreate(&handle): CUDNN_STATUS_NOT_INITIALIZED (status 1001); cuDNN: <detail>"
// cuDNN 9 groups its codes in categories of 1000 (CUDNN_STATUS_CATEGORY); the absl code
// follows the category: bad parameters are InvalidArgument, unsupported configurations
// Unimplemented (callers may try another algorithm or report the case), allocation
// failures ResourceExhausted, a library that cannot start Unavailable, the rest Internal.
// The detail is cuDNN's own last error message for this thread (cudnnGetLastErrorString),
// which usually says which descriptor or dimension it rejected.
// Host-only (no device code); usable from .cc and .cu files.
#pragma once

#include <cudnn.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace mpc::cuda {

inline absl::StatusCode CudnnErrorCode(cudnnStatus_t s) {
  if (s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    return absl::StatusCode::kResourceExhausted;
  }
  switch (CUDNN_STATUS_CATEGORY(static_cast<int>(s))) {
    case 1000:
      return absl::StatusCode::kUnavailable;  // not initialised, sublibrary missing, ...
    case CUDNN_STATUS_BAD_PARAM:
      return absl::StatusCode::kInvalidArgument;
    case CUDNN_STATUS_NOT_SUPPORTED:
      return absl::StatusCode::kUnimplemented;
    default:
      return absl::StatusCode::kInternal;
  }
}

inline absl::Status CudnnStatus(cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  detail[sizeof(detail) - 1] = '\0';
  return absl::Status(CudnnErrorCode(s),
                      absl::StrCat(call, ": ", cudnnGetErrorString(s), " (status ", static_cast<int>(s), ")",
                                   detail[0] ? absl::StrCat("; cuDNN: ", detail) : ""));
}

}  // namespace mpc::cuda

#define MPC_CUDNN_RETURN_IF_ERROR(call)                                         \
  do {                                                                          \
    ::absl::Status _mpc_cudnn_status = ::mpc::cuda::CudnnStatus((call), #call); \
    if (!_mpc_cudnn_status.ok()) return _mpc_cudnn_status;                      \
  } while (0)
