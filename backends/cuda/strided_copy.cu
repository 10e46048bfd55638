// StridedCopy, the copy between two strided layouts that Transpose, BroadcastTo, Expand,
// Slice, SliceGrad, SliceTo, PadTo, Concat and Split are all planned as.
//
// A copy is planned once, at kernel creation: extent-1 axes are dropped and axes that
// are contiguous on both sides merged (a Concat of [N, a, D] and [N, b, D] becomes two 2-D
// copies; a Transpose of [B, S, H, D] to [B, H, S, D] a 4-D one with a contiguous inner
// axis), and 32-bit index math is chosen when every offset fits. Three kernels run it:
//   - contiguous on both sides and rank <= 1: cudaMemcpyAsync (device to device);
//   - otherwise one thread per word, consecutive threads walking the destination's
//     innermost axis; when that axis is contiguous on both sides, words of up to 16 bytes
//     (several elements) are moved at once if the run's pointers are aligned for them;
//   - when the source's contiguous axis is another axis of the destination (a transpose
//     that moves the last axis) a 32x32 tile is staged in shared memory, read along the
//     source's contiguous axis and written along the destination's.
// Elements are moved as raw words, so one plan serves every dtype of the same size.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/tensor_families.h"

namespace mpc {
namespace cuda {
namespace {

// Offsets and counts at most this large use 32-bit index math (headroom left for the
// grid-stride increment).
constexpr int64_t kIndex32Limit = int64_t{1} << 30;

// Layout arguments in the kernel's index type, axes stored innermost first.
template <typename Index>
struct CopyArgs {
  int rank;
  Index dims[kMaxRank];
  Index src_strides[kMaxRank];
  Index dst_strides[kMaxRank];
  Index src_base, dst_base, count;
};

template <typename Index>
CopyArgs<Index> ArgsOf(const CopyLayout& l) {
  CopyArgs<Index> a{};
  a.rank = l.rank;
  for (int k = 0; k < l.rank; ++k) {
    const int d = l.rank - 1 - k;
    a.dims[k] = static_cast<Index>(l.dims[d]);
    a.src_strides[k] = static_cast<Index>(l.src_strides[d]);
    a.dst_strides[k] = static_cast<Index>(l.dst_strides[d]);
  }
  a.src_base = static_cast<Index>(l.src_base);
  a.dst_base = static_cast<Index>(l.dst_base);
  a.count = static_cast<Index>(l.count);
  return a;
}

template <typename Word, typename Index>
__global__ void StridedCopyKernel(CopyArgs<Index> a, const Word* __restrict__ src, Word* __restrict__ dst) {
  const Index step = static_cast<Index>(gridDim.x) * static_cast<Index>(blockDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < a.count; i += step) {
    Index rem = i, s = a.src_base, d = a.dst_base;
#pragma unroll
    for (int k = 0; k < kMaxRank; ++k) {
      if (k >= a.rank) break;
      const Index idx = rem % a.dims[k];
      rem /= a.dims[k];
      s += idx * a.src_strides[k];
      d += idx * a.dst_strides[k];
    }
    dst[d] = src[s];
  }
}

constexpr int kTile = 32;     // tile edge
constexpr int kTileRows = 8;  // threadIdx.y extent: each thread moves kTile / kTileRows words

// The tiled transpose: axis `rows` is contiguous in the source (stride 1), the last axis
// `cols` contiguous in the destination (stride 1); the other axes (batch) are walked by
// tile index.
template <typename Index>
struct TileArgs {
  Index rows, cols;      // extents of the two tiled axes
  Index src_col_stride;  // source stride of the cols axis
  Index dst_row_stride;  // destination stride of the rows axis
  int batch_rank;        // remaining axes, innermost first
  Index batch_dims[kMaxRank];
  Index batch_src[kMaxRank];
  Index batch_dst[kMaxRank];
  Index tiles_r, tiles_c, total_tiles;
  Index src_base, dst_base;
};

template <typename Word, typename Index>
__global__ void TiledTransposeKernel(TileArgs<Index> t, const Word* __restrict__ src, Word* __restrict__ dst) {
  __shared__ Word tile[kTile][kTile + 1];  // +1: column reads hit distinct banks
  const Index tx = static_cast<Index>(threadIdx.x);
  for (Index id = blockIdx.x; id < t.total_tiles; id += gridDim.x) {
    const Index tc = id % t.tiles_c;
    Index rest = id / t.tiles_c;
    const Index tr = rest % t.tiles_r;
    rest /= t.tiles_r;
    Index s = t.src_base, d = t.dst_base;
    for (int k = 0; k < t.batch_rank; ++k) {
      const Index idx = rest % t.batch_dims[k];
      rest /= t.batch_dims[k];
      s += idx * t.batch_src[k];
      d += idx * t.batch_dst[k];
    }
    const Index r0 = tr * kTile, c0 = tc * kTile;
    // Read: consecutive threads take consecutive rows (contiguous in the source).
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const Index r = r0 + tx, c = c0 + j;
      if (r < t.rows && c < t.cols) tile[j][threadIdx.x] = src[s + r + c * t.src_col_stride];
    }
    __syncthreads();
    // Write: consecutive threads take consecutive cols (contiguous in the destination).
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const Index r = r0 + j, c = c0 + tx;
      if (r < t.rows && c < t.cols) dst[d + r * t.dst_row_stride + c] = tile[threadIdx.x][j];
    }
    __syncthreads();  // the next tile overwrites `tile`
  }
}

// Calls f(Word{}) with the word type of `bytes` (1, 2, 4, 8 or 16).
template <typename F>
absl::Status WithWordOf(int bytes, F f) {
  switch (bytes) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    case 16:
      return f(uint4{});
    default:
      return absl::InternalError(absl::StrCat("StridedCopy: no word type of ", bytes, " bytes"));
  }
}

// Largest |offset| a layout reaches from its base, on the source or destination side.
int64_t MaxOffset(const CopyLayout& l, bool src) {
  int64_t m = std::abs(src ? l.src_base : l.dst_base);
  for (int d = 0; d < l.rank; ++d) m += (l.dims[d] - 1) * std::abs(src ? l.src_strides[d] : l.dst_strides[d]);
  return m;
}

void SetIndexWidth(CopyLayout& l) {
  l.index32 = l.count <= kIndex32Limit && MaxOffset(l, true) <= kIndex32Limit && MaxOffset(l, false) <= kIndex32Limit;
}

// `l` with k consecutive elements of its innermost axis as one word, if the layout allows
// it (innermost axis contiguous on both sides, everything else a multiple of k).
bool Widen(const CopyLayout& l, int k, CopyLayout* out) {
  if (l.rank == 0) return false;
  const int last = l.rank - 1;
  if (l.src_strides[last] != 1 || l.dst_strides[last] != 1 || l.dims[last] % k != 0) return false;
  if (l.src_base % k != 0 || l.dst_base % k != 0) return false;
  for (int d = 0; d < last; ++d) {
    if (l.src_strides[d] % k != 0 || l.dst_strides[d] % k != 0) return false;
  }
  *out = l;
  out->word_bytes = l.word_bytes * k;
  out->dims[last] = l.dims[last] / k;
  for (int d = 0; d < last; ++d) {
    out->src_strides[d] /= k;
    out->dst_strides[d] /= k;
  }
  out->src_base /= k;
  out->dst_base /= k;
  out->count = l.count / k;
  SetIndexWidth(*out);
  return true;
}

template <typename Word, typename Index>
absl::Status LaunchGeneric(const CopyLayout& l, const void* src, void* dst, cudaStream_t stream, const char* what) {
  StridedCopyKernel<Word, Index><<<BlocksFor(l.count), kThreadsPerBlock, 0, stream>>>(
      ArgsOf<Index>(l), static_cast<const Word*>(src), static_cast<Word*>(dst));
  return LaunchStatus(what);
}

// The tile kernel's arguments for layout `l` whose axis `row_axis` is contiguous in the
// source and whose last axis is contiguous in the destination.
template <typename Index>
TileArgs<Index> TileArgsOf(const CopyLayout& l, int row_axis) {
  const int last = l.rank - 1;
  TileArgs<Index> t{};
  t.rows = static_cast<Index>(l.dims[row_axis]);
  t.cols = static_cast<Index>(l.dims[last]);
  t.src_col_stride = static_cast<Index>(l.src_strides[last]);
  t.dst_row_stride = static_cast<Index>(l.dst_strides[row_axis]);
  t.batch_rank = 0;
  int64_t batch = 1;
  for (int d = last - 1; d >= 0; --d) {
    if (d == row_axis) continue;
    t.batch_dims[t.batch_rank] = static_cast<Index>(l.dims[d]);
    t.batch_src[t.batch_rank] = static_cast<Index>(l.src_strides[d]);
    t.batch_dst[t.batch_rank] = static_cast<Index>(l.dst_strides[d]);
    ++t.batch_rank;
    batch *= l.dims[d];
  }
  const int64_t tiles_r = (l.dims[row_axis] + kTile - 1) / kTile, tiles_c = (l.dims[last] + kTile - 1) / kTile;
  t.tiles_r = static_cast<Index>(tiles_r);
  t.tiles_c = static_cast<Index>(tiles_c);
  t.total_tiles = static_cast<Index>(batch * tiles_r * tiles_c);
  t.src_base = static_cast<Index>(l.src_base);
  t.dst_base = static_cast<Index>(l.dst_base);
  return t;
}

template <typename Word, typename Index>
absl::Status LaunchTiled(const CopyLayout& l, int row_axis, const void* src, void* dst, cudaStream_t stream,
                         const char* what) {
  const TileArgs<Index> t = TileArgsOf<Index>(l, row_axis);
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(t.total_tiles, int64_t{1} << 20));
  TiledTransposeKernel<Word, Index>
      <<<blocks, dim3(kTile, kTileRows), 0, stream>>>(t, static_cast<const Word*>(src), static_cast<Word*>(dst));
  return LaunchStatus(what);
}

}  // namespace

std::vector<int64_t> DenseStrides(const Shape& shape) { return RowMajorStrides(shape); }

absl::StatusOr<StridedCopy> StridedCopy::Make(const Shape& dims, const std::vector<int64_t>& src_strides,
                                              int64_t src_base, const std::vector<int64_t>& dst_strides,
                                              int64_t dst_base, size_t elem_bytes, const std::string& what) {
  if (src_strides.size() != dims.size() || dst_strides.size() != dims.size()) {
    return absl::InternalError(absl::StrCat(what, ": copy plan with ", dims.size(), " axes but ", src_strides.size(),
                                            " source and ", dst_strides.size(), " destination strides"));
  }
  if (elem_bytes != 1 && elem_bytes != 2 && elem_bytes != 4 && elem_bytes != 8) {
    return absl::InternalError(absl::StrCat(what, ": unexpected element size ", elem_bytes));
  }
  StridedCopy c;
  c.what_ = what;
  CopyLayout& l = c.element_;
  l.word_bytes = static_cast<int>(elem_bytes);
  l.src_base = src_base;
  l.dst_base = dst_base;
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  l.count = count;
  if (count == 0) return c;  // nothing to move; Launch does nothing
  // Simplify: drop extent-1 axes, merge an axis into the previous one when the pair is
  // contiguous on both sides (prev stride == this stride * this extent).
  std::vector<int64_t> D, S, T;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (!D.empty() && S.back() == src_strides[d] * dims[d] && T.back() == dst_strides[d] * dims[d]) {
      D.back() *= dims[d];
      S.back() = src_strides[d];
      T.back() = dst_strides[d];
      continue;
    }
    D.push_back(dims[d]);
    S.push_back(src_strides[d]);
    T.push_back(dst_strides[d]);
  }
  if (D.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(absl::StrCat(what, " on CUDA moves data through at most ", kMaxRank,
                                                 " non-mergeable axes; this copy over ", ShapeToString(dims), " has ",
                                                 D.size(), ". Reshape to fewer axes first"));
  }
  l.rank = static_cast<int>(D.size());
  for (int d = 0; d < l.rank; ++d) {
    l.dims[d] = D[d];
    l.src_strides[d] = S[d];
    l.dst_strides[d] = T[d];
  }
  SetIndexWidth(l);
  for (int bytes : {16, 8, 4, 2}) {
    if (bytes <= l.word_bytes) break;
    CopyLayout w;
    if (Widen(l, bytes / l.word_bytes, &w)) c.widened_.push_back(w);
  }
  // Tiled when the destination's innermost axis is contiguous there but not in the
  // source, and another axis is the source's contiguous one; both big enough for tiles
  // to pay.
  if (l.rank >= 2) {
    const int last = l.rank - 1;
    if (l.dst_strides[last] == 1 && l.src_strides[last] != 1 && l.dims[last] >= 16) {
      for (int d = 0; d < last; ++d) {
        if (l.src_strides[d] == 1 && l.dims[d] >= 16) {
          c.tiled_ = true;
          c.tile_axis_ = d;
          break;
        }
      }
    }
  }
  return c;
}

absl::Status StridedCopy::Launch(const void* src, void* dst, cudaStream_t stream) const {
  if (element_.count == 0) return absl::OkStatus();
  const auto sp = reinterpret_cast<uintptr_t>(src), dp = reinterpret_cast<uintptr_t>(dst);
  const CopyLayout* l = &element_;
  for (const CopyLayout& w : widened_) {
    if (sp % w.word_bytes == 0 && dp % w.word_bytes == 0) {
      l = &w;
      break;
    }
  }
  const char* what = what_.c_str();
  if (l->rank <= 1 && (l->rank == 0 || (l->src_strides[0] == 1 && l->dst_strides[0] == 1))) {
    const size_t bytes = static_cast<size_t>(l->count) * l->word_bytes;
    const char* s = static_cast<const char*>(src) + l->src_base * l->word_bytes;
    char* d = static_cast<char*>(dst) + l->dst_base * l->word_bytes;
    const cudaError_t e = cudaMemcpyAsync(d, s, bytes, cudaMemcpyDeviceToDevice, stream);
    if (e != cudaSuccess) return CudaStatus(e, absl::StrCat(what_, ": cudaMemcpyAsync of ", bytes, " bytes").c_str());
    return absl::OkStatus();
  }
  return WithWordOf(l->word_bytes, [&](auto word) -> absl::Status {
    using Word = decltype(word);
    if (tiled_ && l == &element_) {
      if constexpr (sizeof(Word) <= 8) {
        return l->index32 ? LaunchTiled<Word, int32_t>(*l, tile_axis_, src, dst, stream, what)
                          : LaunchTiled<Word, int64_t>(*l, tile_axis_, src, dst, stream, what);
      }
    }
    return l->index32 ? LaunchGeneric<Word, int32_t>(*l, src, dst, stream, what)
                      : LaunchGeneric<Word, int64_t>(*l, src, dst, stream, what);
  });
}

}  // namespace cuda

}  // namespace mpc
