// The CPU backend: host memory, oneDNN primitives where oneDNN has them (matmul,
// eltwise, softmax) and OpenMP loops elsewhere. It is the numerics reference other
// backends are checked against, so every kernel also exists in f64.
#pragma once

#include <memory>

#include "backends/backend.h"

namespace dnnl {
struct engine;
struct stream;
}  // namespace dnnl

namespace mpc {

std::unique_ptr<Backend> CreateCpuBackend();

// The process-wide oneDNN CPU engine and stream used by CPU kernels.
dnnl::engine& CpuDnnlEngine();
dnnl::stream& CpuDnnlStream();

// Kernel families (backends/cpu/kernels_*.cc) add themselves to the CPU registry.
void RegisterCpuMatmulKernels(KernelRegistry& r);
void RegisterCpuElementwiseKernels(KernelRegistry& r);
void RegisterCpuSoftmaxLossKernels(KernelRegistry& r);
void RegisterCpuShapeKernels(KernelRegistry& r);
void RegisterCpuOptimizerKernels(KernelRegistry& r);
void RegisterCpuLossScalingKernels(KernelRegistry& r);
void RegisterCpuPadKernels(KernelRegistry& r);
void RegisterCpuFp8Kernels(KernelRegistry& r);
void RegisterCpuFp8GemmKernels(KernelRegistry& r);  // kernels_fp8_gemm.cc, from RegisterCpuFp8Kernels
void RegisterCpuConvKernels(KernelRegistry& r);     // kernels_conv*.cc, kernels_pool.cc
void RegisterCpuNormKernels(KernelRegistry& r);     // kernels_norm*.cc, kernels_math.cc
void RegisterCpuTensorKernels(KernelRegistry& r);   // kernels_tensor*.cc
// Registered last: oneDNN's f32 eltwise/softmax replace the f32 loop kernels.
void RegisterCpuDnnlEltwiseKernels(KernelRegistry& r);

}  // namespace mpc
