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

// The kernel families, one file each (backends/cpu/kernels_<family>.cc), with the same
// names as the CUDA backend's (backends/cuda/kernels_<family>.{cu,cc}); each registers its
// ops in the CPU registry.
void RegisterCpuGemmKernels(KernelRegistry& r);  // + kernels_gemm_lowp.cc (bf16/f16/f8 operands)
void RegisterCpuElementwiseKernels(KernelRegistry& r);
void RegisterCpuCollectiveKernels(KernelRegistry& r);  // AllReduce over the backend's Communicator
void RegisterCpuMathKernels(KernelRegistry& r);
void RegisterCpuCompareKernels(KernelRegistry& r);
void RegisterCpuCastKernels(KernelRegistry& r);
void RegisterCpuDropoutKernels(KernelRegistry& r);
void RegisterCpuSoftmaxLossKernels(KernelRegistry& r);
void RegisterCpuLayerNormKernels(KernelRegistry& r);
void RegisterCpuSiluKernels(KernelRegistry& r);       // kernels_silu.cc: vector loops
void RegisterCpuAttentionKernels(KernelRegistry& r);  // FusedAttention (fuse-attention's op)
void RegisterCpuBatchNormKernels(KernelRegistry& r);
void RegisterCpuShapeKernels(KernelRegistry& r);
void RegisterCpuSliceKernels(KernelRegistry& r);
void RegisterCpuGatherKernels(KernelRegistry& r);
void RegisterCpuReduceKernels(KernelRegistry& r);
void RegisterCpuConvKernels(KernelRegistry& r);
void RegisterCpuPoolKernels(KernelRegistry& r);
void RegisterCpuOptimizerKernels(KernelRegistry& r);
void RegisterCpuMultiTensorUpdateKernels(KernelRegistry& r);
void RegisterCpuLossScalingKernels(KernelRegistry& r);
void RegisterCpuFp8Kernels(KernelRegistry& r);
void RegisterCpuFp8GemmKernels(KernelRegistry& r);
void RegisterCpuFp8CastDynamicKernels(KernelRegistry& r);
// Registered last: oneDNN's f32 eltwise/softmax replace the f32 loop kernels
// (kernels_dnnl_eltwise.cc, a CPU-only fast path, not a family).
void RegisterCpuDnnlEltwiseKernels(KernelRegistry& r);

}  // namespace mpc
