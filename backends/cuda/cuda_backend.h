// The CUDA backend's public entry point. Deliberately free of CUDA headers: backends/
// backend.cc (compiled without the toolkit's include path) includes it under
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

// Kernel families (backends/cuda/*.cc, *.cu) add themselves to the "cuda" registry.
void RegisterCudaGemmKernels(KernelRegistry& r);         // cublaslt_gemm.cc: Gemm, MatMul
void RegisterCudaElementwiseKernels(KernelRegistry& r);  // kernels_elementwise.cu and friends
void RegisterCudaTensorKernels(KernelRegistry& r);       // kernels_tensor.cu: shapes, slicing, gather, reductions
void RegisterCudaSoftmaxNormKernels(KernelRegistry& r);  // kernels_softmax_loss.cu, kernels_norm.cu
void RegisterCudaTrainingKernels(KernelRegistry& r);     // kernels_optimizer.cu, loss scaling, FP8 meta
void RegisterCudaConvKernels(KernelRegistry& r);         // kernels_conv.cc (cuDNN), kernels_pool.cu

}  // namespace mpc
