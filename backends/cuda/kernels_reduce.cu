// CUDA sum reductions, f32/bf16/f16, accumulating in f32 and rounding once on the store:
//   ReduceSumTo (mpc)      sums a tensor down to a shape it broadcasts from (the gradient
//                          of broadcasting: bias gradients [N, C] -> [C], convolution
//                          bias gradients [N, C, H, W] -> [C, 1, 1]); mirrors
//                          backends/cpu/kernels_shape.cc
//   ReduceSum ReduceMean   axes from the `axes` input (resolved at creation) or attribute,
//                          keepdims, noop_with_empty_axes (ops::ReduceAxes); the mean is
//                          the f32 sum times 1/count, as on the CPU (kernels_reduce.cc)
// All three are planned the same way at creation. Extent-1 axes are dropped and adjacent
// axes of the same kind (kept or reduced) merged; the input then usually reads as
// [B, Ro, M, Ri] with B and M kept and Ro, Ri reduced, the output as [B, M]:
//   - reductions of at most 32 elements per output: one thread per output;
//   - Ri == 1 and M >= 8 (columns: bias gradients, ReduceSum over a middle axis): 32x8
//     thread tiles, 32 consecutive outputs wide, each thread summing every 8th row;
//   - otherwise (rows: conv bias gradients, reductions over the last axes, full sums):
//     a warp or a block of 256 threads per output, reading its elements in order.
// When that leaves too few threads to fill the device, the reduced extent is cut into
// chunks whose f32 partial sums go to a scratch buffer allocated at creation, and a
// second kernel adds them in chunk order. Layouts that do not fit [B, Ro, M, Ri]
// (reduced, kept, reduced, kept, ... in five or more groups) take a general, slower path:
// one thread per output walking its elements through up to kMaxRank reduced axes.
// Every sum runs in an order fixed by the plan (no atomics), so results are the same run
// to run; they differ from the CPU's only by the summation order.
#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/tensor_families.h"
#include "base/status_macros.h"
#include "graph/ops_norm.h"

namespace mpc::cuda {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

// About one full H100 of resident threads (132 SMs x 2048): below this, chunk the sums.
constexpr int64_t kTargetThreads = int64_t{1024} * kThreadsPerBlock;
constexpr int kColumnTile = 32;  // outputs per column tile (threadIdx.x)
constexpr int kColumnRows = 8;   // rows summed side by side (threadIdx.y)
constexpr int64_t kMaxGrid = int64_t{1} << 20;

std::string NodeLabel(const Node& node) { return absl::StrCat(node.op, " node '", node.name, "'"); }

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- device kernels ------------------------------------------------------------------
// Input element (b, ro, m, ri) of [B, Ro, M, Ri] is x[((b * Ro + ro) * M + m) * Ri + ri];
// output q = b * M + m. A kernel given `partial` writes its f32 chunk sums to
// partial[chunk * nq + q]; otherwise it stores y[q] = round(sum * scale).

template <typename T>
__device__ inline void StoreSum(T* y, float* partial, int64_t nq, int64_t chunk, int64_t q, float sum, float scale) {
  if (partial) {
    partial[chunk * nq + q] = sum;
  } else {
    y[q] = FromAcc<T>(sum * scale);
  }
}

template <typename T>
__global__ void ReducePerThreadKernel(const T* __restrict__ x, T* __restrict__ y, int64_t Ro, int64_t M, int64_t Ri,
                                      int64_t nq, float scale) {
  const int64_t row_stride = M * Ri;  // between consecutive ro
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < nq; q += int64_t{gridDim.x} * blockDim.x) {
    const int64_t b = q / M, m = q % M;
    const T* p = x + (b * Ro * M + m) * Ri;
    float acc = 0.0f;
    for (int64_t ro = 0; ro < Ro; ++ro) {
      const T* r = p + ro * row_stride;
      for (int64_t ri = 0; ri < Ri; ++ri) acc += ToAcc(r[ri]);
    }
    y[q] = FromAcc<T>(acc * scale);
  }
}

// Ri == 1. Task t = ((b * mtiles) + mt) * chunks + c: outputs m in [mt * 32, mt * 32 + 32)
// of slab b, rows ro in chunk c. Block (32, 8).
template <typename T>
__global__ void ReduceColumnsKernel(const T* __restrict__ x, T* __restrict__ y, float* __restrict__ partial, int64_t B,
                                    int64_t Ro, int64_t M, int64_t mtiles, int64_t chunks, int64_t chunk_rows,
                                    float scale) {
  __shared__ float sums[kColumnRows][kColumnTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t nq = B * M, tasks = B * mtiles * chunks;
  for (int64_t t = blockIdx.x; t < tasks; t += gridDim.x) {
    const int64_t c = t % chunks;
    const int64_t rest = t / chunks;
    const int64_t mt = rest % mtiles, b = rest / mtiles;
    const int64_t m = mt * kColumnTile + tx;
    const int64_t r0 = c * chunk_rows, r1 = min(Ro, r0 + chunk_rows);
    float acc = 0.0f;
    if (m < M) {
      const T* p = x + b * Ro * M + m;
      for (int64_t ro = r0 + ty; ro < r1; ro += kColumnRows) acc += ToAcc(p[ro * M]);
    }
    sums[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && m < M) {
      float s = 0.0f;
      for (int k = 0; k < kColumnRows; ++k) s += sums[k][tx];  // fixed order
      StoreSum(y, partial, nq, c, b * M + m, s, scale);
    }
    __syncthreads();  // `sums` is rewritten by the next task
  }
}

__device__ inline float WarpSum(float v) {
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;  // complete in lane 0
}

// Groups of G threads (32: a warp, or 256: the block) per task t = q * chunks + c: the
// elements j in chunk c of output q's L = Ro * Ri elements, j = ro * Ri + ri.
template <typename T, int G>
__global__ void ReduceSegmentsKernel(const T* __restrict__ x, T* __restrict__ y, float* __restrict__ partial,
                                     int64_t Ro, int64_t M, int64_t Ri, int64_t nq, int64_t chunks, int64_t chunk_len,
                                     float scale) {
  static_assert(G == 32 || G == kThreadsPerBlock, "a group is a warp or the whole block");
  constexpr int kGroups = kThreadsPerBlock / G;
  __shared__ float warp_sums[kThreadsPerBlock / 32];
  const int lane = threadIdx.x % G, group = threadIdx.x / G;
  const int64_t L = Ro * Ri, row_stride = M * Ri;
  const int64_t d_ro = G / Ri, d_ri = G % Ri;  // (ro, ri) advance per step of G in j
  const int64_t tasks = nq * chunks;
  for (int64_t t0 = blockIdx.x * int64_t{kGroups}; t0 < tasks; t0 += int64_t{gridDim.x} * kGroups) {
    const int64_t t = t0 + group;
    const int64_t c = t % chunks, q = t / chunks;
    float acc = 0.0f;
    if (t < tasks) {
      const int64_t b = q / M, m = q % M;
      const T* p = x + (b * Ro * M + m) * Ri;
      const int64_t j1 = min(L, (c + 1) * chunk_len);
      int64_t j = c * chunk_len + lane;
      int64_t ro = j / Ri, ri = j % Ri;
      for (; j < j1; j += G) {
        acc += ToAcc(p[ro * row_stride + ri]);
        ri += d_ri;
        ro += d_ro;
        if (ri >= Ri) {
          ri -= Ri;
          ++ro;
        }
      }
    }
    acc = WarpSum(acc);
    if constexpr (G > 32) {
      if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = acc;
      __syncthreads();
      if (threadIdx.x == 0) {
        acc = 0.0f;
        for (int w = 0; w < G / 32; ++w) acc += warp_sums[w];  // fixed order
      }
      __syncthreads();  // warp_sums is rewritten by the next task
    }
    if (lane == 0 && t < tasks) StoreSum(y, partial, nq, c, q, acc, scale);
  }
}

template <typename T>
__global__ void FinishPartialsKernel(const float* __restrict__ partial, T* __restrict__ y, int64_t nq, int64_t chunks,
                                     float scale) {
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < nq; q += int64_t{gridDim.x} * blockDim.x) {
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) s += partial[c * nq + q];
    y[q] = FromAcc<T>(s * scale);
  }
}

// Any interleaving of kept and reduced axes; axes innermost first.
struct GeneralLayout {
  int kept_rank = 0, red_rank = 0;
  int64_t kept_dims[kMaxRank] = {}, kept_strides[kMaxRank] = {};
  int64_t red_dims[kMaxRank] = {}, red_strides[kMaxRank] = {};
  int64_t red_count = 1;
};

template <typename T>
__global__ void ReduceGeneralKernel(const T* __restrict__ x, T* __restrict__ y, GeneralLayout g, int64_t nq,
                                    float scale) {
  for (int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; q < nq; q += int64_t{gridDim.x} * blockDim.x) {
    int64_t rem = q, base = 0;
    for (int k = 0; k < g.kept_rank; ++k) {
      base += (rem % g.kept_dims[k]) * g.kept_strides[k];
      rem /= g.kept_dims[k];
    }
    float acc = 0.0f;
    for (int64_t r = 0; r < g.red_count; ++r) {
      int64_t rr = r, off = base;
      for (int k = 0; k < g.red_rank; ++k) {
        off += (rr % g.red_dims[k]) * g.red_strides[k];
        rr /= g.red_dims[k];
      }
      acc += ToAcc(x[off]);
    }
    y[q] = FromAcc<T>(acc * scale);
  }
}

// ---- planning ------------------------------------------------------------------------

enum class Strategy { kNothing, kZeroFill, kPerThread, kColumns, kSegments, kGeneral };

struct ReducePlan {
  Strategy strategy = Strategy::kNothing;
  int64_t B = 1, Ro = 1, M = 1, Ri = 1;
  int64_t nq = 0;         // outputs
  int64_t chunks = 1;     // > 1: two passes through `partial`
  int64_t chunk_len = 0;  // rows (columns) or elements (segments) per chunk
  int64_t mtiles = 0;     // columns: tiles of 32 outputs per slab
  int group = 32;         // segments: threads per task
  unsigned blocks = 1;
  float scale = 1.0f;
  size_t out_bytes = 0;
  GeneralLayout general;
};

// `reduced[d]`: whether axis d of `in` is summed over; the output is the kept axes in order.
absl::StatusOr<ReducePlan> PlanReduction(const Shape& in, const std::vector<bool>& reduced, float scale,
                                         size_t out_bytes, const std::string& what) {
  ReducePlan p;
  p.scale = scale;
  p.out_bytes = out_bytes;
  p.nq = 1;
  for (size_t d = 0; d < in.size(); ++d) {
    if (!reduced[d]) p.nq *= in[d];
  }
  if (p.nq == 0) return p;     // empty output
  if (NumElements(in) == 0) {  // sums over nothing
    p.strategy = Strategy::kZeroFill;
    return p;
  }
  struct Group {
    bool reduced;
    int64_t extent, stride;  // stride: that of the group's innermost axis
  };
  const std::vector<int64_t> strides = RowMajorStrides(in);
  std::vector<Group> groups;
  for (size_t d = 0; d < in.size(); ++d) {
    if (in[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[d]) {
      groups.back().extent *= in[d];
      groups.back().stride = strides[d];
    } else {
      groups.push_back({reduced[d], in[d], strides[d]});
    }
  }
  // Fit the groups into the slots [B kept, Ro reduced, M kept, Ri reduced].
  int64_t slot[4] = {1, 1, 1, 1};
  const bool slot_reduced[4] = {false, true, false, true};
  int s = 0;
  bool fits = true;
  for (const Group& g : groups) {
    while (s < 4 && slot_reduced[s] != g.reduced) ++s;
    if (s == 4) {
      fits = false;
      break;
    }
    slot[s++] = g.extent;
  }
  if (!fits) {
    GeneralLayout& gl = p.general;
    for (auto it = groups.rbegin(); it != groups.rend(); ++it) {
      int& rank = it->reduced ? gl.red_rank : gl.kept_rank;
      if (rank == kMaxRank) {
        return absl::UnimplementedError(absl::StrCat(what, " over ", ShapeToString(in),
                                                     " alternates kept and reduced "
                                                     "axes more than ",
                                                     2 * kMaxRank, " times; not yet on CUDA"));
      }
      (it->reduced ? gl.red_dims : gl.kept_dims)[rank] = it->extent;
      (it->reduced ? gl.red_strides : gl.kept_strides)[rank] = it->stride;
      ++rank;
      if (it->reduced) gl.red_count *= it->extent;
    }
    p.strategy = Strategy::kGeneral;
    p.blocks = BlocksFor(p.nq);
    return p;
  }
  p.B = slot[0];
  p.Ro = slot[1];
  p.M = slot[2];
  p.Ri = slot[3];
  if (p.M == 1) {  // [B, Ro, 1, Ri] is [B, Ro * Ri]: contiguous runs, one per output
    p.M = p.B;
    p.B = 1;
    p.Ri *= p.Ro;
    p.Ro = 1;
  }
  const int64_t L = p.Ro * p.Ri;
  if (L <= 32) {
    p.strategy = Strategy::kPerThread;
    p.blocks = BlocksFor(p.nq);
  } else if (p.Ri == 1 && p.M >= 8) {
    p.strategy = Strategy::kColumns;
    p.mtiles = CeilDiv(p.M, kColumnTile);
    const int64_t tiles = p.B * p.mtiles;
    const int64_t want = CeilDiv(kTargetThreads / kThreadsPerBlock, tiles);
    const int64_t most = std::max<int64_t>(1, p.Ro / 64);  // at least 8 rows per thread
    p.chunks = std::clamp<int64_t>(want, 1, most);
    p.chunk_len = CeilDiv(p.Ro, p.chunks);
    p.chunks = CeilDiv(p.Ro, p.chunk_len);
    p.blocks = static_cast<unsigned>(std::min(tiles * p.chunks, kMaxGrid));
  } else {
    p.strategy = Strategy::kSegments;
    p.group = L >= 16 * kThreadsPerBlock ? kThreadsPerBlock : 32;
    const int64_t want = CeilDiv(kTargetThreads, p.nq * p.group);
    const int64_t most = std::max<int64_t>(1, L / (8 * p.group));  // at least 8 elements per thread
    p.chunks = std::clamp<int64_t>(want, 1, most);
    p.chunk_len = CeilDiv(L, p.chunks);
    p.chunks = CeilDiv(L, p.chunk_len);
    const int64_t groups_per_block = kThreadsPerBlock / p.group;
    p.blocks = static_cast<unsigned>(std::min(CeilDiv(p.nq * p.chunks, groups_per_block), kMaxGrid));
  }
  return p;
}

template <typename T>
absl::Status RunReduction(const ReducePlan& p, float* partial, const T* x, T* y, cudaStream_t stream,
                          const std::string& what) {
  float* chunk_out = p.chunks > 1 ? partial : nullptr;
  switch (p.strategy) {
    case Strategy::kNothing:
      return absl::OkStatus();
    case Strategy::kZeroFill:
      return CudaStatus(cudaMemsetAsync(y, 0, p.out_bytes, stream), absl::StrCat(what, ": cudaMemsetAsync").c_str());
    case Strategy::kPerThread:
      ReducePerThreadKernel<T><<<p.blocks, kThreadsPerBlock, 0, stream>>>(x, y, p.Ro, p.M, p.Ri, p.nq, p.scale);
      return LaunchStatus("reduction (thread per output)");
    case Strategy::kGeneral:
      ReduceGeneralKernel<T><<<p.blocks, kThreadsPerBlock, 0, stream>>>(x, y, p.general, p.nq, p.scale);
      return LaunchStatus("reduction (general layout)");
    case Strategy::kColumns:
      ReduceColumnsKernel<T><<<p.blocks, dim3(kColumnTile, kColumnRows), 0, stream>>>(
          x, y, chunk_out, p.B, p.Ro, p.M, p.mtiles, p.chunks, p.chunk_len, p.scale);
      MPC_RETURN_IF_ERROR(LaunchStatus("reduction (columns)"));
      break;
    case Strategy::kSegments:
      if (p.group == 32) {
        ReduceSegmentsKernel<T, 32><<<p.blocks, kThreadsPerBlock, 0, stream>>>(x, y, chunk_out, p.Ro, p.M, p.Ri, p.nq,
                                                                               p.chunks, p.chunk_len, p.scale);
      } else {
        ReduceSegmentsKernel<T, kThreadsPerBlock><<<p.blocks, kThreadsPerBlock, 0, stream>>>(
            x, y, chunk_out, p.Ro, p.M, p.Ri, p.nq, p.chunks, p.chunk_len, p.scale);
      }
      MPC_RETURN_IF_ERROR(LaunchStatus("reduction (segments)"));
      break;
  }
  if (!chunk_out) return absl::OkStatus();
  FinishPartialsKernel<T><<<BlocksFor(p.nq), kThreadsPerBlock, 0, stream>>>(chunk_out, y, p.nq, p.chunks, p.scale);
  return LaunchStatus("reduction (chunk sums)");
}

template <typename T>
KernelOr MakeReduceKernel(const Node& node, Backend& backend, const std::vector<bool>& reduced, float scale) {
  const std::string what = NodeLabel(node);
  MPC_ASSIGN_OR_RETURN(ReducePlan plan,
                       PlanReduction(node.inputs[0]->shape, reduced, scale, node.outputs[0]->bytes(), what));
  if (plan.nq != NumElements(node.outputs[0]->shape)) {
    return absl::InternalError(absl::StrCat(what, ": the plan has ", plan.nq, " outputs for an output of shape ",
                                            ShapeToString(node.outputs[0]->shape)));
  }
  const bool two_pass =
      plan.chunks > 1 && (plan.strategy == Strategy::kColumns || plan.strategy == Strategy::kSegments);
  const size_t partial_bytes = two_pass ? static_cast<size_t>(plan.chunks * plan.nq) * sizeof(float) : 0;
  MPC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceScratch> partial, DeviceScratch::Allocate(backend, partial_bytes));
  return MakeCudaKernel(backend, [plan, partial, what](KernelContext& ctx, cudaStream_t stream) {
    return RunReduction<T>(plan, static_cast<float*>(partial->data()), ctx.inputs[0].as<const T>(),
                           ctx.outputs[0].as<T>(), stream, what);
  });
}

// ---- factories -----------------------------------------------------------------------

template <typename T>
struct ReduceSumToFactory {
  static KernelOr Create(const Node& node, Backend& backend) {
    const Shape& in = node.inputs[0]->shape;
    const Shape& out = node.outputs[0]->shape;
    if (out.size() > in.size()) {
      return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": the target ", ShapeToString(out),
                                                     " has more axes than the input ", ShapeToString(in)));
    }
    const size_t lead = in.size() - out.size();
    std::vector<bool> reduced(in.size());
    for (size_t d = 0; d < in.size(); ++d) {
      if (d < lead) {
        reduced[d] = true;
        continue;
      }
      const int64_t o = out[d - lead];
      if (o != in[d] && o != 1) {
        return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": the target ", ShapeToString(out),
                                                       " does not broadcast to the input ", ShapeToString(in)));
      }
      reduced[d] = o != in[d];
    }
    return MakeReduceKernel<T>(node, backend, reduced, 1.0f);
  }
};

template <typename T, bool kMean>
struct ReduceAxesFactory {
  static KernelOr Create(const Node& node, Backend& backend) {
    absl::StatusOr<std::vector<int>> axes = ops::ReduceAxes(node);
    if (!axes.ok()) {
      return absl::Status(axes.status().code(), absl::StrCat(NodeLabel(node), ": ", axes.status().message()));
    }
    const Shape& in = node.inputs[0]->shape;
    std::vector<bool> reduced(in.size(), false);
    int64_t count = 1;
    for (int a : *axes) {
      reduced[a] = true;
      count *= in[a];
    }
    const float scale = kMean && count > 0 ? 1.0f / static_cast<float>(count) : 1.0f;
    return MakeReduceKernel<T>(node, backend, reduced, scale);
  }
};

template <typename T>
using ReduceSumFactory = ReduceAxesFactory<T, false>;
template <typename T>
using ReduceMeanFactory = ReduceAxesFactory<T, true>;

}  // namespace

void RegisterCudaReduceKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<ReduceSumToFactory>(r, "ReduceSumTo");
  RegisterCudaFloatKernels<ReduceSumFactory>(r, "ReduceSum");
  RegisterCudaFloatKernels<ReduceMeanFactory>(r, "ReduceMean");
}

}  // namespace mpc::cuda
