// CudaBackend: device discovery and capabilities from cudaDeviceProp, one non-blocking
// stream for the steps and one for the uploads ahead (UploadAhead), cudaMalloc/cudaFree,
// stream-ordered copies (host reads synchronise), and the "cuda" kernel registry.
#include "backends/cuda/cuda_backend.h"

#include <cublasLt.h>  // CUBLAS_VERSION

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "base/status_macros.h"

namespace mpc {
namespace cuda {

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device) {
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  b->device_ = device;
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  cudaDeviceProp prop;
  MPC_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  b->cc_major_ = prop.major;
  b->cc_minor_ = prop.minor;
  MPC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&b->stream_, cudaStreamNonBlocking));

  Capabilities& caps = b->caps_;
  const int cc = b->compute_capability();
  caps.device = absl::StrCat("cuda:", device, " (", prop.name, ", sm_", prop.major, prop.minor, ")");
  caps.native_compute = {DType::kF32, DType::kBF16, DType::kF16};
  caps.tf32 = cc >= 80;
  caps.fp8 = cc >= 89;
  caps.fp8_group_scales = cc >= 90 && CUBLAS_VERSION >= 120900;  // cublaslt_fp8.cc's CheckScaleModes
  if (caps.fp8) {
    caps.native_compute.push_back(DType::kF8E4M3);
    caps.native_compute.push_back(DType::kF8E5M2);
  }
  caps.pad_multiple[DType::kF16] = 8;
  caps.pad_multiple[DType::kBF16] = 8;
  if (caps.fp8) {
    caps.pad_multiple[DType::kF8E4M3] = 16;
    caps.pad_multiple[DType::kF8E5M2] = 16;
  }
  if (caps.tf32) caps.pad_multiple[DType::kF32] = 4;
  // cuDNN's fused flash attention (kernels_attention.cc, bf16 / f16): Ampere or newer and
  // cuDNN 9 (the linked library's version, not the headers'). fuse-attention also asks
  // has_kernel for the dtype, so f32 attention stays the unfused chain.
  caps.fused_attention = cc >= 80 && cudnnGetVersion() >= 90000;
  // The registry lives for the process; capturing it rather than the backend keeps a copy
  // of these capabilities valid after the backend is gone (passes and tests keep copies).
  caps.has_kernel = [registry = &CudaKernelRegistry()](const std::string& op, DType dtype) {
    return registry->Has(op, "cuda", dtype);
  };
  return b;
}

CudaBackend::~CudaBackend() {
  // Teardown errors are ignored: there is no one left to report them to.
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (upload_stream_) cudaStreamSynchronize(upload_stream_);
  if (lt_) cublasLtDestroy(lt_);
  if (workspace_) cudaFree(workspace_);
  attention_plans_.reset();  // cuDNN plans refer to the handle: destroy them first
  if (cudnn_) cudnnDestroy(cudnn_);
  for (void* w : conv_workspaces_) cudaFree(w);
  if (uploaded_) cudaEventDestroy(uploaded_);
  if (staging_read_) cudaEventDestroy(staging_read_);
  if (upload_stream_) cudaStreamDestroy(upload_stream_);
  if (stream_) cudaStreamDestroy(stream_);
}

absl::StatusOr<void*> CudaBackend::Allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    return CudaStatus(e, absl::StrCat("cudaMalloc(", bytes, " bytes) on ", caps_.device).c_str());
  }
  return p;
}

void CudaBackend::Free(void* ptr) {
  if (!ptr) return;
  // Buffers may still be read by queued kernels; cudaFree synchronises the device.
  cudaFree(ptr);
}

absl::Status CudaBackend::CopyToDevice(void* dst, const void* src, size_t bytes) {
  // From pageable host memory the call returns once the source is staged, so the
  // caller may reuse `src` immediately; the copy itself stays ordered on the stream.
  // From a pinned buffer (PinHostBuffer) it returns at once and the DMA reads `src`
  // later: Backend::PinHostBuffer's contract keeps the caller off it until then.
  MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyToHost(void* dst, const void* src, size_t bytes) {
  MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  MPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

absl::StatusOr<bool> CudaBackend::PinHostBuffer(void* ptr, size_t bytes) {
  if (ptr == nullptr || bytes == 0) return false;
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const cudaError_t e = cudaHostRegister(ptr, bytes, cudaHostRegisterDefault);
  if (e != cudaSuccess) {
    return CudaStatus(e, absl::StrCat("cudaHostRegister(", bytes, " bytes) of a host batch buffer on ", caps_.device,
                                      "; the buffer stays pageable (copies from it are staged)")
                             .c_str());
  }
  return true;
}

void CudaBackend::UnpinHostBuffer(void* ptr) {
  // A copy from the buffer may still be queued; unregistering under it would fault.
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  if (upload_stream_) cudaStreamSynchronize(upload_stream_);
  // Nobody is left to report a failure to; clear it so the next launch check does not.
  if (cudaHostUnregister(ptr) != cudaSuccess) cudaGetLastError();
}

absl::StatusOr<bool> CudaBackend::UploadAhead(void* staging, const void* src, size_t bytes) {
  // Created on first use: a program fed only small batches never has them. Timing off:
  // the events only order the streams. The stream last, each only while missing: a call
  // that failed halfway leaves nothing half-made behind for the next one (CopyFromUpload
  // takes the stream as the sign that all three exist).
  if (!uploaded_) MPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
  if (!staging_read_) MPC_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&staging_read_, cudaEventDisableTiming));
  if (!upload_stream_) MPC_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&upload_stream_, cudaStreamNonBlocking));
  // The staging buffer may still be read by the last CopyFromUpload (a never-recorded
  // event is complete, so the first upload does not wait).
  MPC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(upload_stream_, staging_read_, 0));
  MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging, src, bytes, cudaMemcpyHostToDevice, upload_stream_));
  MPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(uploaded_, upload_stream_));
  return true;
}

absl::Status CudaBackend::CopyFromUpload(void* dst, const void* staging, size_t bytes) {
  if (!upload_stream_) {
    return absl::FailedPreconditionError(
        "CopyFromUpload: nothing was uploaded ahead on this CUDA backend; call UploadAhead first");
  }
  MPC_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(stream_, uploaded_, 0));
  MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, staging, bytes, cudaMemcpyDeviceToDevice, stream_));
  MPC_CUDA_RETURN_IF_ERROR(cudaEventRecord(staging_read_, stream_));
  return absl::OkStatus();
}

absl::Status CudaBackend::Synchronize() {
  MPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  if (upload_stream_) MPC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(upload_stream_));
  // Surfaces asynchronous kernel faults that the stream sync alone may not report.
  MPC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

namespace {

// One instantiated CUDA graph, replayed on the stream it was captured from.
class CudaGraphStep : public CapturedStep {
 public:
  CudaGraphStep(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream)
      : graph_(graph), exec_(exec), stream_(stream) {}
  ~CudaGraphStep() override {
    cudaGraphExecDestroy(exec_);
    cudaGraphDestroy(graph_);
  }
  absl::Status Replay() override {
    MPC_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream_));
    return absl::OkStatus();
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<CapturedStep>> CudaBackend::Capture(const std::function<absl::Status()>& enqueue) {
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  // Thread-local mode: other host threads may keep using the runtime meanwhile.
  MPC_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const absl::Status enqueued = enqueue();
  cudaGraph_t graph = nullptr;
  // Capture must be ended whatever happened, or the stream stays unusable.
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  if (!enqueued.ok()) {
    if (graph) cudaGraphDestroy(graph);
    return absl::Status(enqueued.code(), absl::StrCat("while capturing the step: ", enqueued.message()));
  }
  MPC_RETURN_IF_ERROR(CudaStatus(ended,
                                 "cudaStreamEndCapture (a kernel did something a CUDA graph cannot record, "
                                 "e.g. a synchronisation or a host copy)"));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  if (inst != cudaSuccess) {
    cudaGraphDestroy(graph);
    return CudaStatus(inst, "cudaGraphInstantiate");
  }
  return std::unique_ptr<CapturedStep>(new CudaGraphStep(graph, exec, stream_));
}

const KernelRegistry& CudaBackend::kernels() const { return CudaKernelRegistry(); }

absl::StatusOr<cublasLtHandle_t> CudaBackend::CublasLt() {
  if (lt_) return lt_;
  MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  MPC_CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&lt_));
  const cudaError_t e = cudaMalloc(&workspace_, kCublasLtWorkspaceBytes);
  if (e != cudaSuccess) {
    workspace_ = nullptr;
    return CudaStatus(e, "cudaMalloc(cuBLASLt workspace, 32 MiB)");
  }
  return lt_;
}

absl::StatusOr<CudaBackend*> AsCuda(Backend& backend) {
  auto* c = dynamic_cast<CudaBackend*>(&backend);
  if (!c) return absl::InternalError(absl::StrCat("a CUDA kernel was given the '", backend.name(), "' backend"));
  return c;
}

}  // namespace cuda

const KernelRegistry& CudaKernelRegistry() {
  static const KernelRegistry* registry = [] {
    auto* r = new KernelRegistry();
    using namespace cuda;  // NOLINT: the family list below
    for (auto family : {RegisterCudaGemmKernels,
                        RegisterCudaElementwiseKernels,
                        RegisterCudaMathKernels,
                        RegisterCudaCompareKernels,
                        RegisterCudaCastKernels,
                        RegisterCudaDropoutKernels,
                        RegisterCudaSoftmaxLossKernels,
                        RegisterCudaLayerNormKernels,
                        RegisterCudaBatchNormKernels,
                        RegisterCudaShapeKernels,
                        RegisterCudaSliceKernels,
                        RegisterCudaGatherKernels,
                        RegisterCudaReduceKernels,
                        RegisterCudaConvKernels,
                        RegisterCudaAttentionKernels,
                        RegisterCudaPoolKernels,
                        RegisterCudaOptimizerKernels,
                        RegisterCudaMultiTensorUpdateKernels,
                        RegisterCudaLossScalingKernels,
                        RegisterCudaFp8Kernels,
                        RegisterCudaFp8GemmKernels,
                        RegisterCudaCollectiveKernels}) {
      family(*r);
    }
    return r;
  }();
  return *registry;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later runtime calls start clean
    return absl::UnavailableError(absl::StrCat("no CUDA device: cudaGetDeviceCount: ", cudaGetErrorString(e), " (",
                                               cudaGetErrorName(e), "); use --device cpu"));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device: the runtime reports 0 devices; use --device cpu");
  if (device < 0 || device >= count) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: cuda:", device, " requested but ", count,
                                               " device(s) present; use --device cpu"));
  }
  auto b = cuda::CudaBackend::Create(device);
  if (!b.ok()) {
    return absl::UnavailableError(absl::StrCat("no CUDA device: cuda:", device,
                                               " failed to initialise: ", b.status().message(), "; use --device cpu"));
  }
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace mpc
