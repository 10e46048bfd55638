// Recording a tensor's amax into an FP8 amax-history slot from inside a kernel, shared by
// Fp8Quantize (kernels_fp8.cu) and Fp8Cast (kernels_fp8_gemm.cu).
//
// Each thread keeps the largest |x| it saw as the int bits of the float: for non-negative
// floats the bit patterns order like the values, and every NaN's bits exceed +inf's, so a
// NaN wins like it does on the CPU. Each block then does one atomicMax on the slot. Max
// is order-independent, so the result is deterministic whatever the scheduling.
#pragma once

#include "backends/cuda/block_reduce.cuh"

namespace mpc::cuda {

constexpr int kCanonicalNanBits = 0x7fc00000;
constexpr int kInfBits = 0x7f800000;

// Four elements loaded as one aligned access (vectorised FP8 kernels).
template <typename T>
struct alignas(4 * sizeof(T)) Vec4 {
  T v[4];
};

// |v| as int bits that order like the magnitudes.
__device__ __forceinline__ int AbsBits(float v) { return __float_as_int(fabsf(v)); }

struct IntMaxOp {
  __device__ int operator()(int a, int b) const { return max(a, b); }
};

// The block's largest AbsBits into *amax_slot (a NaN as the canonical quiet NaN). Every
// thread of the block must call it (BlockReduce synchronises), so amax_slot must be
// uniform over the grid.
__device__ __forceinline__ void RecordAmax(int amax_bits, float* amax_slot) {
  const int block_max = BlockReduce(amax_bits, IntMaxOp{}, 0);
  const bool first = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  if (first) atomicMax(reinterpret_cast<int*>(amax_slot), block_max > kInfBits ? kCanonicalNanBits : block_max);
}

}  // namespace mpc::cuda
