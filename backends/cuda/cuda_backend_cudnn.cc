// CudaBackend's shared cuDNN state (cuda_device.h): the handle bound to the backend's
// stream and the convolution workspace that grows to the largest request.
#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cudnn_status.h"
#include "base/status_macros.h"

namespace mpc::cuda {

absl::StatusOr<cudnnHandle_t> CudaBackend::Cudnn() {
  if (cudnn_) return cudnn_;
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  cudnnHandle_t h = nullptr;
  MPC_CUDNN_RETURN_IF_ERROR(cudnnCreate(&h));
  if (absl::Status s = CudnnStatus(cudnnSetStream(h, stream_), "cudnnSetStream"); !s.ok()) {
    cudnnDestroy(h);
    return s;
  }
  cudnn_ = h;
  return cudnn_;
}

absl::Status CudaBackend::ReserveConvWorkspace(size_t bytes) {
  if (bytes <= conv_workspace_bytes_) return absl::OkStatus();
  void* p = nullptr;
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    return CudaStatus(e,
                      absl::StrCat("cudaMalloc(convolution workspace, ", bytes, " bytes) on ", caps_.device).c_str());
  }
  conv_workspaces_.push_back(p);
  conv_workspace_bytes_ = bytes;
  return absl::OkStatus();
}

}  // namespace mpc::cuda
