// CudaBackend: one device, one stream, plain cudaMalloc buffers, the "cuda" kernel
// registry, and the library state every kernel shares: the cuBLASLt handle and workspace,
// the cuDNN handle, the convolution workspace and the fused-attention plans. Kernels
// receive a Backend& and reach the stream and the libraries through AsCuda().
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace mpc::cuda {

class CudaBackend : public Backend {
 public:
  // Call only after the device is known to exist (CreateCudaBackend checks).
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(int device);
  ~CudaBackend() override;

  std::string name() const override { return "cuda"; }
  const Capabilities& capabilities() const override { return caps_; }
  absl::StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override;
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override;
  absl::Status Synchronize() override;
  absl::StatusOr<bool> PinHostBuffer(void* ptr, size_t bytes) override;  // cudaHostRegister
  void UnpinHostBuffer(void* ptr) override;
  // On upload_stream_, ordered by two events: uploaded_ (the step's stream waits for it)
  // and staging_read_ (the upload stream waits for it), both made on the first upload.
  absl::StatusOr<bool> UploadAhead(void* staging, const void* src, size_t bytes) override;
  absl::Status CopyFromUpload(void* dst, const void* staging, size_t bytes) override;
  // Stream capture into a CUDA graph (cudaStreamBeginCapture .. cudaGraphInstantiate).
  absl::StatusOr<std::unique_ptr<CapturedStep>> Capture(const std::function<absl::Status()>& enqueue) override;
  const KernelRegistry& kernels() const override;

  int device() const { return device_; }
  int compute_capability() const { return cc_major_ * 10 + cc_minor_; }
  cudaStream_t stream() const { return stream_; }

  // The cuBLASLt handle and its workspace, created on first use (so a program without
  // GEMMs never touches cuBLASLt) and shared by every GEMM kernel of this backend.
  static constexpr size_t kCublasLtWorkspaceBytes = size_t{32} << 20;
  absl::StatusOr<cublasLtHandle_t> CublasLt();
  void* cublaslt_workspace() const { return workspace_; }

  // The cuDNN handle, bound to the stream, created on first use and shared by every
  // convolution kernel (one handle per kernel would cost a cudnnCreate each and device
  // memory per handle). Defined in cuda_backend_cudnn.cc.
  absl::StatusOr<cudnnHandle_t> Cudnn();
  // One convolution scratch buffer for all convolution kernels (cuDNN's workspace and
  // their temporary padded / channels-last copies): they run one after another on the
  // stream, so the largest request is all that is needed. A kernel reserves its size
  // when it is created and reads conv_workspace() when it runs. A buffer replaced
  // by a larger one stays allocated until the backend goes: a captured CUDA graph may
  // point into it, and every kernel recorded there asked for no more than it holds.
  absl::Status ReserveConvWorkspace(size_t bytes);
  void* conv_workspace() const { return conv_workspaces_.empty() ? nullptr : conv_workspaces_.back(); }
  size_t conv_workspace_bytes() const { return conv_workspace_bytes_; }

  // The fused-attention execution plans built so far (cuDNN SDPA graphs,
  // kernels_attention.cc), keyed by everything a plan depends on (shapes, dtype, scale,
  // masking, bias layout), so the layers of a model share one plan per distinct attention
  // and a program loaded again builds none. Opaque here so this header needs no
  // cudnn-frontend; released before the cuDNN handle the plans were built on.
  std::shared_ptr<void>& attention_plans() { return attention_plans_; }

  // The NCCL communicator of this job's ranks (the data-parallel AllReduce), created on
  // first use from the backend's Communicator, over which rank 0's NCCL unique id travels.
  // An ncclComm_t, opaque here so that this header needs no nccl.h; defined and destroyed
  // in kernels_collective.cc.
  absl::StatusOr<void*> Nccl();
  // Sums `count` doubles in place across the job's ranks on the backend's stream (ZeRO-1's
  // clipping norm: every rank's partial sums of squares).
  absl::Status NcclSumInPlace(double* data, size_t count, const std::string& what);

 private:
  CudaBackend() = default;
  int device_ = 0;
  int cc_major_ = 0, cc_minor_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaStream_t upload_stream_ = nullptr;
  cudaEvent_t uploaded_ = nullptr;      // recorded on upload_stream_ after each upload
  cudaEvent_t staging_read_ = nullptr;  // recorded on stream_ after each CopyFromUpload
  cublasLtHandle_t lt_ = nullptr;
  void* workspace_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  std::vector<void*> conv_workspaces_;     // the last is the current one
  std::shared_ptr<void> nccl_;             // ncclComm_t, with ncclCommDestroy as its deleter
  std::shared_ptr<void> attention_plans_;  // kernels_attention.cc's plan cache
  size_t conv_workspace_bytes_ = 0;
  Capabilities caps_;
};

// The CudaBackend behind a kernel's Backend& (an error if it is another backend).
absl::StatusOr<CudaBackend*> AsCuda(Backend& backend);

}  // namespace mpc::cuda
