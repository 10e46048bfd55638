// The CUDA kernels of the real FP8 ops the fp8-lower pass emits (passes/fp8_lower.h,
// graph/ops_fp8_gemm.cc), in backends/cuda/kernels_fp8_gemm.cu:
//   Fp8Cast  (f32, bf16, f16 inputs)  x -> FP8 codes of f32(x) * scale, plain or
//            transposed (Transformer Engine's cast_transpose), amax into history[0]
//   Fp8Gemm  (f8e4m3, f8e5m2 A)       cuBLASLt FP8 GEMM in the TN layout
// exactly the (op, dtype) pairs the CPU registers (backends/cpu/kernels_fp8_gemm.cc).
// Free of CUDA headers.
#pragma once

#include "backends/backend.h"

namespace mpc {

void RegisterCudaFp8GemmKernels(KernelRegistry& r);

}  // namespace mpc
