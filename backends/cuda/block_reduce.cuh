// Warp and block reductions (sum, max) for the CUDA kernel families, and the three ways
// a kernel can map independent rows (softmax rows, normalised slices, loss rows) onto
// threads: one thread, one warp or one block per row.
//
// Determinism: every reduction here combines values in an order fixed by the launch
// configuration alone (xor butterflies inside a warp, then the per-warp results in warp
// order), never by timing, so the same input gives the same bits on every run. Because
// float addition and fmaxf are commutative, the xor butterfly leaves the identical value
// in every lane, so a reduction's result can be used by all threads without a broadcast.
//
// Sums are meant for f32 (the numerics contract), f64 (loss totals, as the CPU sums them)
// and int64 (row counts); maxima for f32.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "backends/cuda/cuda_kernel_util.cuh"

namespace mpc::cuda {

constexpr int kWarpSize = 32;
constexpr unsigned kFullWarpMask = 0xffffffffu;
// The largest block these helpers are launched with; kernels that may run with it declare
// __launch_bounds__(kMaxBlockThreads) so the compiler keeps them within 64 registers.
constexpr int kMaxBlockThreads = 1024;

struct SumOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return a + b;
  }
};
// fmaxf like the CPU's std::max on a -inf start: a NaN operand is skipped (the NaN still
// reaches the result through the later exp/sum), and the choice between +0 and -0 does not
// depend on operand order, which keeps the butterfly's lanes identical.
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
  __device__ double operator()(double a, double b) const { return fmax(a, b); }
};

// Reduces v over the 32 lanes of the calling warp; every lane gets the result. All 32
// lanes must call it (full mask).
template <typename T, typename Op>
__device__ inline T WarpReduce(T v, Op op) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(kFullWarpMask, v, offset));
  return v;
}

template <typename T>
__device__ inline T WarpReduceSum(T v) {
  return WarpReduce(v, SumOp{});
}
__device__ inline float WarpReduceMax(float v) { return WarpReduce(v, MaxOp{}); }

// Reduces v over the whole block; every thread gets the result. Every thread of the block
// must call it (it synchronises), and the block size must be a multiple of 32 (at most
// 1024). `identity` is the value of an empty reduction (0 for sums, -inf for maxima).
// Safe to call back to back: the leading barrier keeps a call from overwriting the
// per-warp partials the previous call's threads may still be reading.
template <typename T, typename Op>
__device__ inline T BlockReduce(T v, Op op, T identity) {
  __shared__ T warp_partials[kWarpSize];
  const int tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const int lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int warps = blockDim.x * blockDim.y * blockDim.z / kWarpSize;
  v = WarpReduce(v, op);
  __syncthreads();
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  // Every warp folds the same partials in the same order, so all threads end up holding
  // the same value without another barrier.
  v = lane < warps ? warp_partials[lane] : identity;
  return WarpReduce(v, op);
}

template <typename T>
__device__ inline T BlockReduceSum(T v) {
  return BlockReduce(v, SumOp{}, T(0));
}
__device__ inline float BlockReduceMax(float v) { return BlockReduce(v, MaxOp{}, -INFINITY); }

// ---- rows onto threads ------------------------------------------------------------------
//
// A "row group" is the set of threads that together process one row: Lane() in
// [0, Size()) strides over the row's elements, Sum/Max reduce over the group, and the
// group walks rows FirstRow(), FirstRow() + RowStride(), ... All threads of a group take
// the same number of trips, as the reductions require.

// One thread per row (rows strided in memory, or many short rows): 1-D blocks.
struct ThreadPerRow {
  __device__ int Lane() const { return 0; }
  __device__ int Size() const { return 1; }
  __device__ int64_t FirstRow() const { return blockIdx.x * int64_t{blockDim.x} + threadIdx.x; }
  __device__ int64_t RowStride() const { return int64_t{gridDim.x} * blockDim.x; }
  template <typename T>
  __device__ T Sum(T v) const {
    return v;
  }
  __device__ float Max(float v) const { return v; }
};

// One warp per row: blocks of (32, warps per block); threadIdx.y picks the warp's row.
struct WarpPerRow {
  __device__ int Lane() const { return threadIdx.x; }
  __device__ int Size() const { return kWarpSize; }
  __device__ int64_t FirstRow() const { return blockIdx.x * int64_t{blockDim.y} + threadIdx.y; }
  __device__ int64_t RowStride() const { return int64_t{gridDim.x} * blockDim.y; }
  template <typename T>
  __device__ T Sum(T v) const {
    return WarpReduceSum(v);
  }
  __device__ float Max(float v) const { return WarpReduceMax(v); }
};

// One block per row: 1-D blocks of a multiple of 32 threads.
struct BlockPerRow {
  __device__ int Lane() const { return threadIdx.x; }
  __device__ int Size() const { return blockDim.x; }
  __device__ int64_t FirstRow() const { return blockIdx.x; }
  __device__ int64_t RowStride() const { return gridDim.x; }
  template <typename T>
  __device__ T Sum(T v) const {
    return BlockReduceSum(v);
  }
  __device__ float Max(float v) const { return BlockReduceMax(v); }
};

// How a row kernel is launched: which group, and the grid and block that go with it.
struct RowLaunch {
  enum class Group { kThread, kWarp, kBlock };
  Group group = Group::kWarp;
  dim3 grid, block;
};

constexpr int kWarpsPerRowBlock = 8;
constexpr int64_t kMaxRowBlocks = 65535 * 8;  // grid-stride beyond this

// `rows` rows of `row_length` elements. Contiguous rows (strided == false) go to a warp
// each up to 1024 elements (32 per lane), to a block each beyond that; strided rows
// (elements `inner` apart, adjacent rows adjacent in memory) to a thread each, so that
// neighbouring threads read neighbouring addresses.
inline RowLaunch PlanRows(int64_t rows, int64_t row_length, bool strided) {
  RowLaunch l;
  const auto capped = [](int64_t blocks) {
    return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kMaxRowBlocks ? kMaxRowBlocks : blocks));
  };
  if (strided) {
    l.group = RowLaunch::Group::kThread;
    l.block = dim3(kThreadsPerBlock);
    l.grid = dim3(capped((rows + kThreadsPerBlock - 1) / kThreadsPerBlock));
  } else if (row_length <= 1024) {
    l.group = RowLaunch::Group::kWarp;
    l.block = dim3(kWarpSize, kWarpsPerRowBlock);
    l.grid = dim3(capped((rows + kWarpsPerRowBlock - 1) / kWarpsPerRowBlock));
  } else {
    l.group = RowLaunch::Group::kBlock;
    l.block = dim3(row_length <= 4096 ? 256 : row_length <= 16384 ? 512 : 1024);
    l.grid = dim3(capped(rows));
  }
  return l;
}

// Calls launch(Group{}, grid, block) with the group type `l` names; `launch` is a generic
// host lambda that does the <<<...>>> launch of its kernel instantiated for that group.
template <typename F>
void DispatchRows(const RowLaunch& l, F&& launch) {
  switch (l.group) {
    case RowLaunch::Group::kThread:
      launch(ThreadPerRow{}, l.grid, l.block);
      break;
    case RowLaunch::Group::kWarp:
      launch(WarpPerRow{}, l.grid, l.block);
      break;
    case RowLaunch::Group::kBlock:
      launch(BlockPerRow{}, l.grid, l.block);
      break;
  }
}

}  // namespace mpc::cuda
