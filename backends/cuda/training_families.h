// The CUDA training-state kernel family, one Register function per file. The family's
// single entry point, RegisterCudaTrainingKernels (cuda_backend.h, defined in
// kernels_optimizer.cu), calls all of them. Free of CUDA headers.
#pragma once

#include "backends/backend.h"

namespace mpc::cuda {

// kernels_optimizer.cu: SgdUpdate, AdamWUpdate (f32 master weights, in place).
void RegisterCudaOptimizerKernels(KernelRegistry& r);

// kernels_multi_tensor_update.cu: MultiSgdUpdate, MultiAdamWUpdate (f32, many parameters
// per launch).
void RegisterCudaMultiTensorUpdateKernels(KernelRegistry& r);

// kernels_loss_scaling.cu: UnscaleGradients, ClipByGlobalNorm, InjectNonFinite,
// UpdateLossScale (all f32).
void RegisterCudaLossScalingKernels(KernelRegistry& r);

// kernels_fp8.cu: Fp8Quantize (f32, bf16, f16 inputs), Fp8UpdateScales (f32).
void RegisterCudaFp8Kernels(KernelRegistry& r);

}  // namespace mpc::cuda
