// The CUDA backend's public entry point. Deliberately free of CUDA headers: engine/
// device.cc (compiled without the toolkit's include path) includes it under
// MPC_WITH_CUDA. The class itself and what kernels need from it are in cuda_device.h.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace mpc {

// The backend on CUDA device `device`. Unavailable ("no CUDA device: <reason>; use
// --device cpu") when the runtime reports any error or no such device: on a machine
// without a driver cudaGetDeviceCount fails rather than returning 0.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

// The "cuda" kernel registry. Needs no device: tests check its coverage everywhere.
const KernelRegistry& CudaKernelRegistry();

namespace cuda {

// The kernel families, one file each (backends/cuda/kernels_<family>.{cu,cc}), with the
// same names as the CPU backend's (backends/cpu/kernels_<family>.cc); each registers its
// ops in the "cuda" registry. Besides them: cublaslt_gemm.cc (the cuBLASLt wrapper the
// GEMM families use), cublaslt_fp8.cc (its FP8 rules), strided_copy.cu (the copy the
// data-movement families are planned as), cuda_backend*.cc (device, memory, cuDNN),
// attention_bias.cu (the broadcast bias copy kernels_attention.cc needs).
void RegisterCudaGemmKernels(KernelRegistry& r);
void RegisterCudaElementwiseKernels(KernelRegistry& r);
void RegisterCudaCollectiveKernels(KernelRegistry& r);  // AllReduce on NCCL
void RegisterCudaMathKernels(KernelRegistry& r);
void RegisterCudaCompareKernels(KernelRegistry& r);
void RegisterCudaCastKernels(KernelRegistry& r);
void RegisterCudaDropoutKernels(KernelRegistry& r);
void RegisterCudaSoftmaxLossKernels(KernelRegistry& r);
void RegisterCudaLayerNormKernels(KernelRegistry& r);
void RegisterCudaBatchNormKernels(KernelRegistry& r);
void RegisterCudaShapeKernels(KernelRegistry& r);
void RegisterCudaSliceKernels(KernelRegistry& r);
void RegisterCudaGatherKernels(KernelRegistry& r);
void RegisterCudaReduceKernels(KernelRegistry& r);
void RegisterCudaConvKernels(KernelRegistry& r);
void RegisterCudaAttentionKernels(KernelRegistry& r);  // FusedAttention(Grad) on cuDNN's flash attention
void RegisterCudaPoolKernels(KernelRegistry& r);
void RegisterCudaOptimizerKernels(KernelRegistry& r);
void RegisterCudaMultiTensorUpdateKernels(KernelRegistry& r);
void RegisterCudaLossScalingKernels(KernelRegistry& r);
void RegisterCudaFp8Kernels(KernelRegistry& r);
void RegisterCudaFp8GemmKernels(KernelRegistry& r);

}  // namespace cuda
}  // namespace mpc
