// CUDA Gather and GatherGrad (graph/ops_tensor.cc), mirroring backends/cpu/kernels_gather.cc.
// Data is viewed as [outer, dim, inner] around the gathered axis, indices flat [count]
// (int64 or int32; negative indices count from the end of the axis).
//
// Gather: out[o, k, :] = data[o, idx[k], :], rows moved as raw words (every dtype but
// f64), 16 bytes at a time when the row size and the pointers allow it. An index outside
// [-dim, dim) yields a zero row where the CPU kernel returns an OutOfRange error: the
// indices live on the device, and reporting one would need a host synchronisation.
// Indices that come from the data (token ids) are checked before anything runs, on every
// backend (engine/index_check.h); computed indices are the graph's to keep in range.
//
// GatherGrad(dY, indices) attrs axis, shape: zeros of `shape` with dY's rows added at the
// gathered positions, repeated indices summed. Deterministic, without atomics:
//   1. the indices become sort keys (negative ones resolved; out-of-range ones get the
//      key `dim`, which sorts last and is never read: they contribute nothing, where the
//      CPU reports an error) paired with their positions k;
//   2. a stable CUB radix sort over the key's significant bits groups equal indices with
//      their positions in increasing k;
//   3. each output row (o, r) finds its run of key r by binary search and sums dY[o, k, :]
//      over it in increasing k, in f32 in a register, and stores once, rounded to the
//      output dtype. Rows nobody gathered are written as zeros.
// The summation order is the CPU's (increasing k, in f32, rounded once), so results match
// the CPU kernel bit for bit in every dtype. The sort's scratch (keys, positions, CUB
// temporary storage) is allocated at creation. Cost: one sort of `count` keys per step
// plus one pass over dY and dX; a row gathered very many times (a padding token) is
// summed by the threads of that row alone.
#include <algorithm>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/tensor_families.h"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

constexpr int64_t kIndex32Limit = int64_t{1} << 30;

std::string NodeLabel(const Node& node) { return absl::StrCat(node.op, " node '", node.name, "'"); }

struct GatherGeometry {
  int axis = 0;
  int64_t outer = 1, dim = 1, inner = 1, count = 0;
};

absl::StatusOr<GatherGeometry> GeometryOf(const Node& node, const Shape& data, const Shape& indices) {
  const int rank = static_cast<int>(data.size());
  int64_t axis = node.attrs.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": axis ", node.attrs.GetInt("axis", 0),
                                                   " is out of range for data of shape ", ShapeToString(data)));
  }
  GatherGeometry g;
  g.axis = static_cast<int>(axis);
  for (int d = 0; d < g.axis; ++d) g.outer *= data[d];
  g.dim = data[g.axis];
  for (int d = g.axis + 1; d < rank; ++d) g.inner *= data[d];
  g.count = NumElements(indices);
  return g;
}

absl::Status CheckIndexDType(const Node& node) {
  const DType d = node.inputs[1]->dtype;
  if (d == DType::kI64 || d == DType::kI32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": indices '", node.inputs[1]->name, "' have dtype ",
                                                 DTypeName(d), "; they must be int64 or int32 (insert a Cast)"));
}

// ---- Gather --------------------------------------------------------------------------

// dst[t] for t = (o * count + k) * row_words + i: word i of data row (o, idx[k]).
template <typename Word, typename IdxT, typename Index>
__global__ void GatherRowsKernel(const Word* __restrict__ src, const IdxT* __restrict__ idx, Word* __restrict__ dst,
                                 Index dim, Index count, Index row_words, Index total) {
  const Index step = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index t = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       t < total; t += step) {
    const Index i = t % row_words;
    const Index row = t / row_words;
    const Index k = row % count;
    const Index o = row / count;
    int64_t v = static_cast<int64_t>(idx[k]);
    if (v < 0) v += dim;
    Word w{};  // zeros for an out-of-range index
    if (v >= 0 && v < static_cast<int64_t>(dim)) w = src[(o * dim + static_cast<Index>(v)) * row_words + i];
    dst[t] = w;
  }
}

template <typename Word, typename IdxT>
absl::Status LaunchGather(const GatherGeometry& g, int64_t row_words, const void* src, const void* idx, void* dst,
                          cudaStream_t stream) {
  const int64_t total = g.outer * g.count * row_words;
  const bool small = total <= kIndex32Limit && g.outer * g.dim * row_words <= kIndex32Limit;
  if (small) {
    GatherRowsKernel<Word, IdxT, int32_t><<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<const Word*>(src), static_cast<const IdxT*>(idx), static_cast<Word*>(dst),
        static_cast<int32_t>(g.dim), static_cast<int32_t>(g.count), static_cast<int32_t>(row_words),
        static_cast<int32_t>(total));
  } else {
    GatherRowsKernel<Word, IdxT, int64_t><<<BlocksFor(total), kThreadsPerBlock, 0, stream>>>(
        static_cast<const Word*>(src), static_cast<const IdxT*>(idx), static_cast<Word*>(dst), g.dim, g.count,
        row_words, total);
  }
  return LaunchStatus("Gather");
}

template <typename IdxT>
absl::Status RunGather(const GatherGeometry& g, size_t row_bytes, const void* src, const void* idx, void* dst,
                       cudaStream_t stream) {
  // The widest word that divides a row and to which both buffers are aligned.
  const auto sp = reinterpret_cast<uintptr_t>(src), dp = reinterpret_cast<uintptr_t>(dst);
  for (size_t w : {16, 8, 4, 2}) {
    if (row_bytes % w == 0 && sp % w == 0 && dp % w == 0) {
      const auto words = static_cast<int64_t>(row_bytes / w);
      switch (w) {
        case 16:
          return LaunchGather<uint4, IdxT>(g, words, src, idx, dst, stream);
        case 8:
          return LaunchGather<uint64_t, IdxT>(g, words, src, idx, dst, stream);
        case 4:
          return LaunchGather<uint32_t, IdxT>(g, words, src, idx, dst, stream);
        default:
          return LaunchGather<uint16_t, IdxT>(g, words, src, idx, dst, stream);
      }
    }
  }
  return LaunchGather<uint8_t, IdxT>(g, static_cast<int64_t>(row_bytes), src, idx, dst, stream);
}

KernelOr CreateGather(const Node& node, Backend& backend) {
  MPC_RETURN_IF_ERROR(CheckIndexDType(node));
  MPC_ASSIGN_OR_RETURN(GatherGeometry g, GeometryOf(node, node.inputs[0]->shape, node.inputs[1]->shape));
  const size_t row_bytes = static_cast<size_t>(g.inner) * DTypeSize(node.inputs[0]->dtype);
  const bool idx32 = node.inputs[1]->dtype == DType::kI32;
  return MakeCudaKernel(backend, [g, row_bytes, idx32](KernelContext& ctx, cudaStream_t stream) {
    if (row_bytes == 0 || g.outer * g.count == 0) return absl::OkStatus();
    const void* src = ctx.inputs[0].data;
    const void* idx = ctx.inputs[1].data;
    void* dst = ctx.outputs[0].data;
    return idx32 ? RunGather<int32_t>(g, row_bytes, src, idx, dst, stream)
                 : RunGather<int64_t>(g, row_bytes, src, idx, dst, stream);
  });
}

// ---- GatherGrad ----------------------------------------------------------------------

// keys[k]: index k resolved to [0, dim), or dim when out of range; pos[k] = k.
template <typename IdxT>
__global__ void PrepareSortKeysKernel(const IdxT* __restrict__ idx, uint32_t* __restrict__ keys,
                                      int32_t* __restrict__ pos, int64_t count, int64_t dim) {
  for (int64_t k = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; k < count; k += int64_t{gridDim.x} * blockDim.x) {
    int64_t v = static_cast<int64_t>(idx[k]);
    if (v < 0) v += dim;
    keys[k] = static_cast<uint32_t>(v >= 0 && v < dim ? v : dim);
    pos[k] = static_cast<int32_t>(k);
  }
}

// First s in [0, n) with keys[s] >= value (n when none).
__device__ inline int64_t LowerBound(const uint32_t* keys, int64_t n, int64_t value) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (static_cast<int64_t>(keys[mid]) < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// Output row (o, r) = sum over the sorted run of key r of dY[o, pos[s], :], in order of s.
// threads_per_row (a power of two dividing blockDim.x) threads share a row's columns.
template <typename T>
__global__ void GatherGradRowsKernel(const T* __restrict__ dy, const uint32_t* __restrict__ keys,
                                     const int32_t* __restrict__ pos, T* __restrict__ dx, int64_t outer, int64_t dim,
                                     int64_t count, int64_t inner, int threads_per_row) {
  const int rows_per_block = blockDim.x / threads_per_row;
  const int lane = threadIdx.x % threads_per_row;
  const int64_t rows = outer * dim;
  for (int64_t row = blockIdx.x * int64_t{rows_per_block} + threadIdx.x / threads_per_row; row < rows;
       row += int64_t{gridDim.x} * rows_per_block) {
    const int64_t o = row / dim, r = row % dim;
    const int64_t lo = LowerBound(keys, count, r), hi = LowerBound(keys, count, r + 1);
    const T* slab = dy + o * count * inner;
    T* out = dx + row * inner;
    for (int64_t i = lane; i < inner; i += threads_per_row) {
      float acc = 0.0f;
      for (int64_t s = lo; s < hi; ++s) acc += ToAcc(slab[static_cast<int64_t>(pos[s]) * inner + i]);
      out[i] = FromAcc<T>(acc);
    }
  }
}

size_t AlignUp(size_t n, size_t a) { return (n + a - 1) / a * a; }

template <typename T>
struct GatherGradFactory {
  static KernelOr Create(const Node& node, Backend& backend) {
    MPC_RETURN_IF_ERROR(CheckIndexDType(node));
    const Shape shape = node.attrs.GetInts("shape", {});
    MPC_ASSIGN_OR_RETURN(GatherGeometry g, GeometryOf(node, shape, node.inputs[1]->shape));
    const std::string what = NodeLabel(node);
    if (g.dim >= (int64_t{1} << 31) - 1 || g.count >= (int64_t{1} << 31)) {
      return absl::UnimplementedError(absl::StrCat(what, " with an axis of ", g.dim, " and ", g.count,
                                                   " indices is not yet on CUDA: the sort keys and positions are "
                                                   "32-bit; gather fewer than 2^31 rows"));
    }
    int end_bit = 1;  // bits of the largest key, dim (the out-of-range marker)
    while ((int64_t{1} << end_bit) <= g.dim) ++end_bit;
    const int n = static_cast<int>(g.count);
    // Scratch: keys in/out, positions in/out, then CUB's temporary storage.
    size_t temp_bytes = 0;
    if (n > 0) {
      MPC_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
          nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr), static_cast<uint32_t*>(nullptr),
          static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, end_bit));
    }
    const size_t array_bytes = AlignUp(static_cast<size_t>(n) * 4, 256);
    const size_t scratch_bytes = n > 0 ? 4 * array_bytes + temp_bytes : 0;
    MPC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceScratch> scratch, DeviceScratch::Allocate(backend, scratch_bytes));
    const bool idx32 = node.inputs[1]->dtype == DType::kI32;
    const size_t out_bytes = node.outputs[0]->bytes();
    int threads_per_row = 1;
    while (threads_per_row < kThreadsPerBlock && threads_per_row < g.inner) threads_per_row *= 2;
    const int64_t rows_per_block = kThreadsPerBlock / threads_per_row;
    const int64_t rows = g.outer * g.dim;
    // One block per rows_per_block rows (grid-stride beyond the grid limit).
    const unsigned blocks = BlocksFor((rows + rows_per_block - 1) / rows_per_block, 1);
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (out_bytes == 0) return absl::OkStatus();
      T* dx = ctx.outputs[0].as<T>();
      if (n == 0 || g.inner == 0) {  // nothing gathered: the gradient is zero
        return CudaStatus(cudaMemsetAsync(dx, 0, out_bytes, stream), absl::StrCat(what, ": cudaMemsetAsync").c_str());
      }
      char* base = static_cast<char*>(scratch->data());
      auto* keys_in = reinterpret_cast<uint32_t*>(base);
      auto* keys_out = reinterpret_cast<uint32_t*>(base + array_bytes);
      auto* pos_in = reinterpret_cast<int32_t*>(base + 2 * array_bytes);
      auto* pos_out = reinterpret_cast<int32_t*>(base + 3 * array_bytes);
      void* temp = base + 4 * array_bytes;
      if (idx32) {
        PrepareSortKeysKernel<int32_t><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(ctx.inputs[1].as<const int32_t>(),
                                                                                      keys_in, pos_in, g.count, g.dim);
      } else {
        PrepareSortKeysKernel<int64_t><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(ctx.inputs[1].as<const int64_t>(),
                                                                                      keys_in, pos_in, g.count, g.dim);
      }
      MPC_RETURN_IF_ERROR(LaunchStatus("GatherGrad sort keys"));
      size_t temp_size = temp_bytes;
      MPC_CUDA_RETURN_IF_ERROR(
          cub::DeviceRadixSort::SortPairs(temp, temp_size, keys_in, keys_out, pos_in, pos_out, n, 0, end_bit, stream));
      GatherGradRowsKernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(
          ctx.inputs[0].as<const T>(), keys_out, pos_out, dx, g.outer, g.dim, g.count, g.inner, threads_per_row);
      return LaunchStatus("GatherGrad rows");
    });
  }
};

}  // namespace

void RegisterCudaGatherKernels(KernelRegistry& r) {
  for (DType d : kCudaMoveDTypes) r.Register("Gather", "cuda", d, CreateGather);
  RegisterCudaFloatKernels<GatherGradFactory>(r, "GatherGrad");
}

}  // namespace mpc::cuda
