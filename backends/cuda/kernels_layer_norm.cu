// CUDA LayerNormalization and LayerNormGrad, mirroring backends/cpu/kernels_layer_norm.cc
// (f32, bf16, f16 I/O; statistics and every intermediate in f32, outputs rounded once).
//
// LayerNormalization(X, Scale, B?) -> (Y, Mean?, InvStdDev?), attrs axis (default -1),
// epsilon (default 1e-5): X is viewed as [rows, d] with d the product of X's dimensions
// from axis on. Per row: mean = sum(x) / d, var = sum((x - mean)^2) / d (biased, two-pass),
// inv = 1 / sqrt(var + epsilon), y = (x - mean) * inv * scale + b. Scale and B have X's
// dtype and broadcast to the normalised shape X.shape[axis:]. Mean and InvStdDev are f32,
// one value per row.
//
// LayerNormGrad(dY, X, Scale, Mean, InvStdDev) -> (dX, dScale, dB), attr axis:
//   g = dY * scale, xhat = (x - mean) * inv;
//   dX = inv * (g - mean_row(g) - xhat * mean_row(g * xhat));
//   dScale[j] = sum_rows(dY * xhat), dB[j] = sum_rows(dY), both of the normalised shape
//   (the gradient of a broadcast Scale / B is summed down by the graph, not here).
// Mean / InvStdDev may be any float dtype (normally f32, as LayerNormalization makes them).
//
// RmsNorm(X[, Scale]) -> (Y, InvRms?) and RmsNormGrad(dY, X, InvRms[, Scale]) -> (dX[, dScale])
// (graph/ops_rms_norm.cc, made by fuse-rms-norm) are the same rows without the centring
// and the bias: inv = 1 / sqrt(sum(x^2) / d + epsilon), y = x * inv * scale;
// dX = inv * (g - xhat * mean_row(g * xhat)), g = dY * scale, xhat = x * inv; dScale as
// LayerNormGrad's (its column kernels read a null Mean as 0 and skip a null dB).
//
// Rows go to a warp each (d <= 1024) or a block each (block_reduce.cuh). The column sums
// for dScale / dB are deterministic: blocks of 32 columns x a chunk of rows write partial
// sums to scratch allocated at creation, then one thread per column adds the chunks in
// order.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/softmax_norm_families.h"
#include "base/status_macros.h"
#include "graph/ops_norm.h"

namespace mpc::cuda {
namespace {

// For each position j of the normalised slice, the element of a broadcast affine operand
// (Scale or B) it reads: j itself when the operand has the slice's size, else j's
// coordinates in the slice dotted with the operand's strides (0 along broadcast axes).
struct AffineIndex {
  bool identity = true;
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxRank] = {};

  __device__ int64_t operator()(int64_t j) const {
    if (identity) return j;
    int64_t off = 0;
    for (int k = rank - 1; k >= 0; --k) {
      off += (j % dims[k]) * strides[k];
      j /= dims[k];
    }
    return off;
  }
};

absl::StatusOr<AffineIndex> MakeAffineIndex(const Node& node, const Value* operand, const Shape& norm) {
  AffineIndex ix;
  // An operand that broadcasts to `norm` with as many elements is `norm` itself (up to
  // leading 1s): read it directly.
  if (NumElements(operand->shape) == NumElements(norm)) return ix;
  if (operand->shape.size() > norm.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op, " node '", node.name, "': '", operand->name, "' ", ShapeToString(operand->shape),
                     " does not broadcast to the normalised shape ", ShapeToString(norm)));
  }
  if (norm.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(absl::StrCat(node.op, " node '", node.name, "' with a broadcast '", operand->name,
                                                 "' over ", norm.size(),
                                                 " normalised dimensions is not yet on CUDA (at most ", kMaxRank,
                                                 "); give it the full normalised shape ", ShapeToString(norm)));
  }
  ix.identity = false;
  ix.rank = static_cast<int>(norm.size());
  for (int k = 0; k < ix.rank; ++k) ix.dims[k] = norm[k];
  AlignedStrides(operand->shape, norm, ix.strides);
  return ix;
}

// X as [rows, d]: rows = product of the dimensions before axis, d = the rest.
struct RowSplit {
  int64_t rows = 1, d = 1;
  Shape norm;
};

RowSplit SplitRows(const Shape& x, int axis) {
  RowSplit s;
  for (int i = 0; i < static_cast<int>(x.size()); ++i) {
    if (i < axis) {
      s.rows *= x[i];
    } else {
      s.d *= x[i];
      s.norm.push_back(x[i]);
    }
  }
  return s;
}

// ---- LayerNormalization ---------------------------------------------------------------------

template <typename T, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    LayerNormRowsKernel(const T* __restrict__ x, const T* __restrict__ scale, const T* __restrict__ bias, int64_t rows,
                        int64_t d, float eps, AffineIndex scale_at, AffineIndex bias_at, T* __restrict__ y,
                        float* __restrict__ mean_out, float* __restrict__ inv_out) {
  G grp{};
  for (int64_t r = grp.FirstRow(); r < rows; r += grp.RowStride()) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    float sum = 0.f;
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) sum += ToAcc(xr[j]);
    sum = grp.Sum(sum);
    const float mean = d ? sum / static_cast<float>(d) : 0.f;
    float sq = 0.f;
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      const float c = ToAcc(xr[j]) - mean;
      sq += c * c;
    }
    sq = grp.Sum(sq);
    const float var = d ? sq / static_cast<float>(d) : 0.f;
    const float inv = 1.f / sqrtf(var + eps);
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      float v = (ToAcc(xr[j]) - mean) * inv * ToAcc(scale[scale_at(j)]);
      if (bias) v += ToAcc(bias[bias_at(j)]);
      yr[j] = FromAcc<T>(v);
    }
    if (grp.Lane() == 0) {
      if (mean_out) mean_out[r] = mean;
      if (inv_out) inv_out[r] = inv;
    }
  }
}

template <typename T>
struct LayerNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const int axis, ops::LayerNormAxis(node));
    const RowSplit s = SplitRows(node.inputs[0]->shape, axis);
    MPC_ASSIGN_OR_RETURN(const AffineIndex scale_at, MakeAffineIndex(node, node.inputs[1], s.norm));
    const bool has_bias = node.inputs.size() > 2 && node.inputs[2];
    AffineIndex bias_at;
    if (has_bias) {
      MPC_ASSIGN_OR_RETURN(bias_at, MakeAffineIndex(node, node.inputs[2], s.norm));
    }
    if (node.outputs[0]->dtype != node.inputs[0]->dtype) {
      // mpc_output_dtype: fuse-layer-norm-edges runs only where Capabilities says so (CPU).
      return absl::UnimplementedError(absl::StrCat(
          "LayerNormalization node '", node.name, "' writes ", DTypeName(node.outputs[0]->dtype), " Y from ",
          DTypeName(node.inputs[0]->dtype), " X (mpc_output_dtype), which CUDA does not run; cast Y instead"));
    }
    for (size_t i = 1; i < node.outputs.size() && i < 3; ++i) {
      if (node.outputs[i] && node.outputs[i]->dtype != DType::kF32) {
        return absl::UnimplementedError(
            absl::StrCat("LayerNormalization node '", node.name, "' with ", DTypeName(node.outputs[i]->dtype),
                         " output '", node.outputs[i]->name, "' is not yet on CUDA; its statistics are float32"));
      }
    }
    const float eps = node.attrs.GetFloat("epsilon", 1e-5f);
    const RowLaunch plan = PlanRows(s.rows, s.d, /*strided=*/false);
    const int64_t rows = s.rows, d = s.d;
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (rows == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      const T* scale = ctx.inputs[1].as<T>();
      const T* bias = has_bias ? ctx.inputs[2].as<T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      float* mean_out = static_cast<float*>(OptionalOutput(ctx, 1));
      float* inv_out = static_cast<float*>(OptionalOutput(ctx, 2));
      DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
        LayerNormRowsKernel<T, decltype(group)>
            <<<grid, block, 0, stream>>>(x, scale, bias, rows, d, eps, scale_at, bias_at, y, mean_out, inv_out);
      });
      return LaunchStatus("LayerNormalization");
    });
  }
};

// ---- LayerNormGrad ------------------------------------------------------------------------

template <typename T, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    LayerNormGradRowsKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                            const void* __restrict__ mean, FloatKind mean_kind, const void* __restrict__ inv,
                            FloatKind inv_kind, int64_t rows, int64_t d, AffineIndex scale_at, T* __restrict__ dx) {
  G grp{};
  for (int64_t r = grp.FirstRow(); r < rows; r += grp.RowStride()) {
    const int64_t o = r * d;
    const float m = LoadFloat(mean, mean_kind, r), iv = LoadFloat(inv, inv_kind, r);
    float sg = 0.f, sgx = 0.f;
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      const float g = ToAcc(dy[o + j]) * ToAcc(scale[scale_at(j)]);
      const float xh = (ToAcc(x[o + j]) - m) * iv;
      sg += g;
      sgx += g * xh;
    }
    sg = grp.Sum(sg);
    sgx = grp.Sum(sgx);
    const float mg = sg / static_cast<float>(d), mgx = sgx / static_cast<float>(d);
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      const float g = ToAcc(dy[o + j]) * ToAcc(scale[scale_at(j)]);
      const float xh = (ToAcc(x[o + j]) - m) * iv;
      dx[o + j] = FromAcc<T>(iv * (g - mg - xh * mgx));
    }
  }
}

constexpr int kColumnTile = 32;        // columns per block (one warp's lanes: coalesced)
constexpr int kColumnRowLanes = 8;     // rows a block reads at once (threadIdx.y)
constexpr int64_t kMinChunkRows = 64;  // fewer rows than this per chunk is not worth a block
constexpr int64_t kTargetColumnBlocks = 1024;

// Block (column tile, row chunk): per column, sum over the chunk's rows of dY * xhat and
// of dY, into partial[chunk * d + j]. Fixed order: each threadIdx.y strides the rows,
// then row lane 0 adds the lanes' sums in lane order.
template <typename T>
__global__ void LayerNormGradColumnPartialKernel(const T* __restrict__ dy, const T* __restrict__ x,
                                                 const void* __restrict__ mean, FloatKind mean_kind,
                                                 const void* __restrict__ inv, FloatKind inv_kind, int64_t rows,
                                                 int64_t d, int64_t rows_per_chunk, float* __restrict__ partial_scale,
                                                 float* __restrict__ partial_bias) {
  __shared__ float lane_scale[kColumnRowLanes][kColumnTile];
  __shared__ float lane_bias[kColumnRowLanes][kColumnTile];
  const int64_t j = blockIdx.x * int64_t{kColumnTile} + threadIdx.x;
  const int64_t chunk = blockIdx.y;
  const int64_t r0 = chunk * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  float ss = 0.f, sb = 0.f;
  if (j < d) {
    for (int64_t r = r0 + threadIdx.y; r < r1; r += kColumnRowLanes) {
      const float g = ToAcc(dy[r * d + j]);
      const float m = mean ? LoadFloat(mean, mean_kind, r) : 0.f;  // null: RmsNormGrad
      ss += g * (ToAcc(x[r * d + j]) - m) * LoadFloat(inv, inv_kind, r);
      sb += g;
    }
  }
  lane_scale[threadIdx.y][threadIdx.x] = ss;
  lane_bias[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && j < d) {
    float ts = 0.f, tb = 0.f;
    for (int k = 0; k < kColumnRowLanes; ++k) {
      ts += lane_scale[k][threadIdx.x];
      tb += lane_bias[k][threadIdx.x];
    }
    partial_scale[chunk * d + j] = ts;
    partial_bias[chunk * d + j] = tb;
  }
}

// One thread per column: the chunks' partial sums in chunk order.
template <typename T>
__global__ void LayerNormGradColumnTotalKernel(const float* __restrict__ partial_scale,
                                               const float* __restrict__ partial_bias, int64_t chunks, int64_t d,
                                               T* __restrict__ dscale, T* __restrict__ dbias) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < d; j += int64_t{gridDim.x} * blockDim.x) {
    float ts = 0.f, tb = 0.f;
    for (int64_t k = 0; k < chunks; ++k) {
      ts += partial_scale[k * d + j];
      tb += partial_bias[k * d + j];
    }
    dscale[j] = FromAcc<T>(ts);
    if (dbias) dbias[j] = FromAcc<T>(tb);  // null: RmsNormGrad has no dB
  }
}

// Column partial sums: chunks of rows, as many as keep ~kTargetColumnBlocks blocks busy.
struct ColumnChunks {
  int64_t column_tiles = 0, chunks = 1, rows_per_chunk = 0;
};

ColumnChunks PlanColumnChunks(int64_t rows, int64_t d) {
  ColumnChunks c;
  c.column_tiles = (d + kColumnTile - 1) / kColumnTile;
  const int64_t max_chunks = std::max<int64_t>(1, kTargetColumnBlocks / std::max<int64_t>(1, c.column_tiles));
  c.chunks = std::max<int64_t>(1, std::min((rows + kMinChunkRows - 1) / kMinChunkRows, max_chunks));
  c.rows_per_chunk = (rows + c.chunks - 1) / c.chunks;
  if (c.rows_per_chunk > 0) c.chunks = (rows + c.rows_per_chunk - 1) / c.rows_per_chunk;  // no empty chunk
  return c;
}

template <typename T>
struct LayerNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const int axis, ops::LayerNormAxis(node));
    const RowSplit s = SplitRows(node.inputs[1]->shape, axis);
    MPC_ASSIGN_OR_RETURN(const AffineIndex scale_at, MakeAffineIndex(node, node.inputs[2], s.norm));
    const std::string where = absl::StrCat("LayerNormGrad node '", node.name, "'");
    if ((node.inputs.size() > 5 && node.inputs[5]) || node.outputs.size() > 3) {
      // The fused edges (an addend, dX's column sums or 16-bit copy): fuse-layer-norm-edges
      // runs only where Capabilities says so (the CPU).
      return absl::UnimplementedError(absl::StrCat(
          where,
          " has fused edges (an addend input or more than 3 outputs), which CUDA does not run; use an Add, "
          "a ReduceSumTo and a Cast"));
    }
    MPC_ASSIGN_OR_RETURN(
        const FloatKind mean_kind,
        FloatKindOf(node.inputs[3]->dtype, absl::StrCat(where, " input Mean '", node.inputs[3]->name, "'")));
    MPC_ASSIGN_OR_RETURN(
        const FloatKind inv_kind,
        FloatKindOf(node.inputs[4]->dtype, absl::StrCat(where, " input InvStdDev '", node.inputs[4]->name, "'")));
    const int64_t rows = s.rows, d = s.d;
    const ColumnChunks cc = PlanColumnChunks(rows, d);
    const int64_t column_tiles = cc.column_tiles, chunks = cc.chunks, rows_per_chunk = cc.rows_per_chunk;
    const size_t partial_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(chunks * d));
    MPC_ASSIGN_OR_RETURN(std::shared_ptr<Scratch> scratch, Scratch::Create(backend, 2 * partial_bytes, where));
    const RowLaunch plan = PlanRows(rows, d, /*strided=*/false);
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (d == 0) return absl::OkStatus();  // nothing to write
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      const T* scale = ctx.inputs[2].as<T>();
      const void* mean = ctx.inputs[3].data;
      const void* inv = ctx.inputs[4].data;
      T* dx = ctx.outputs[0].as<T>();
      if (rows > 0) {
        DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
          LayerNormGradRowsKernel<T, decltype(group)>
              <<<grid, block, 0, stream>>>(dy, x, scale, mean, mean_kind, inv, inv_kind, rows, d, scale_at, dx);
        });
        MPC_RETURN_IF_ERROR(LaunchStatus("LayerNormGrad dX"));
      }
      float* partial_scale = scratch->as<float>();
      float* partial_bias = scratch->as<float>(partial_bytes);
      LayerNormGradColumnPartialKernel<T><<<dim3(static_cast<unsigned>(column_tiles), static_cast<unsigned>(chunks)),
                                            dim3(kColumnTile, kColumnRowLanes), 0, stream>>>(
          dy, x, mean, mean_kind, inv, inv_kind, rows, d, rows_per_chunk, partial_scale, partial_bias);
      MPC_RETURN_IF_ERROR(LaunchStatus("LayerNormGrad dScale/dB partial sums"));
      LayerNormGradColumnTotalKernel<T><<<BlocksFor(d), kThreadsPerBlock, 0, stream>>>(
          partial_scale, partial_bias, chunks, d, ctx.outputs[1].as<T>(), ctx.outputs[2].as<T>());
      return LaunchStatus("LayerNormGrad dScale/dB");
    });
  }
};


// ---- RmsNorm ------------------------------------------------------------------------------

template <typename T, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    RmsNormRowsKernel(const T* __restrict__ x, const T* __restrict__ scale, int64_t rows, int64_t d, float eps,
                      AffineIndex scale_at, T* __restrict__ y, float* __restrict__ inv_out) {
  G grp{};
  for (int64_t r = grp.FirstRow(); r < rows; r += grp.RowStride()) {
    const T* xr = x + r * d;
    T* yr = y + r * d;
    float sq = 0.f;
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) sq += ToAcc(xr[j]) * ToAcc(xr[j]);
    sq = grp.Sum(sq);
    const float inv = 1.f / sqrtf((d ? sq / static_cast<float>(d) : 0.f) + eps);
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      const float w = scale ? ToAcc(scale[scale_at(j)]) : 1.f;
      yr[j] = FromAcc<T>(ToAcc(xr[j]) * inv * w);
    }
    if (grp.Lane() == 0 && inv_out) inv_out[r] = inv;
  }
}

template <typename T>
struct RmsNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const int axis, ops::LayerNormAxis(node));
    const RowSplit s = SplitRows(node.inputs[0]->shape, axis);
    const bool scaled = node.inputs.size() > 1 && node.inputs[1];
    AffineIndex scale_at;
    if (scaled) {
      MPC_ASSIGN_OR_RETURN(scale_at, MakeAffineIndex(node, node.inputs[1], s.norm));
    }
    if (node.outputs.size() > 1 && node.outputs[1] && node.outputs[1]->dtype != DType::kF32) {
      return absl::UnimplementedError(absl::StrCat("RmsNorm node '", node.name, "' with ",
                                                   DTypeName(node.outputs[1]->dtype),
                                                   " InvRms is not on CUDA; its statistics are float32"));
    }
    const float eps = node.attrs.GetFloat("epsilon", 1e-5f);
    const RowLaunch plan = PlanRows(s.rows, s.d, /*strided=*/false);
    const int64_t rows = s.rows, d = s.d;
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (rows == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      const T* scale = scaled ? ctx.inputs[1].as<T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      float* inv_out = static_cast<float*>(OptionalOutput(ctx, 1));
      DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
        RmsNormRowsKernel<T, decltype(group)><<<grid, block, 0, stream>>>(x, scale, rows, d, eps, scale_at, y, inv_out);
      });
      return LaunchStatus("RmsNorm");
    });
  }
};

template <typename T, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    RmsNormGradRowsKernel(const T* __restrict__ dy, const T* __restrict__ x, const T* __restrict__ scale,
                          const void* __restrict__ inv, FloatKind inv_kind, int64_t rows, int64_t d,
                          AffineIndex scale_at, T* __restrict__ dx) {
  G grp{};
  for (int64_t r = grp.FirstRow(); r < rows; r += grp.RowStride()) {
    const int64_t o = r * d;
    const float iv = LoadFloat(inv, inv_kind, r);
    float sgx = 0.f;
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      const float w = scale ? ToAcc(scale[scale_at(j)]) : 1.f;
      sgx += ToAcc(dy[o + j]) * w * (ToAcc(x[o + j]) * iv);
    }
    sgx = grp.Sum(sgx);
    const float mgx = sgx / static_cast<float>(d);
    for (int64_t j = grp.Lane(); j < d; j += grp.Size()) {
      const float w = scale ? ToAcc(scale[scale_at(j)]) : 1.f;
      dx[o + j] = FromAcc<T>(iv * (ToAcc(dy[o + j]) * w - ToAcc(x[o + j]) * iv * mgx));
    }
  }
}

template <typename T>
struct RmsNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const int axis, ops::LayerNormAxis(node));
    const RowSplit s = SplitRows(node.inputs[1]->shape, axis);
    const bool scaled = node.inputs.size() > 3 && node.inputs[3];
    AffineIndex scale_at;
    if (scaled) {
      MPC_ASSIGN_OR_RETURN(scale_at, MakeAffineIndex(node, node.inputs[3], s.norm));
    }
    const std::string where = absl::StrCat("RmsNormGrad node '", node.name, "'");
    MPC_ASSIGN_OR_RETURN(
        const FloatKind inv_kind,
        FloatKindOf(node.inputs[2]->dtype, absl::StrCat(where, " input InvRms '", node.inputs[2]->name, "'")));
    const int64_t rows = s.rows, d = s.d;
    const ColumnChunks cc = PlanColumnChunks(rows, d);
    const size_t partial_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(cc.chunks * d));
    std::shared_ptr<Scratch> scratch;
    if (scaled) {
      MPC_ASSIGN_OR_RETURN(scratch, Scratch::Create(backend, 2 * partial_bytes, where));
    }
    const RowLaunch plan = PlanRows(rows, d, /*strided=*/false);
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (d == 0) return absl::OkStatus();
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      const void* inv = ctx.inputs[2].data;
      const T* scale = scaled ? ctx.inputs[3].as<T>() : nullptr;
      T* dx = ctx.outputs[0].as<T>();
      if (rows > 0) {
        DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
          RmsNormGradRowsKernel<T, decltype(group)>
              <<<grid, block, 0, stream>>>(dy, x, scale, inv, inv_kind, rows, d, scale_at, dx);
        });
        MPC_RETURN_IF_ERROR(LaunchStatus("RmsNormGrad dX"));
      }
      if (!scaled) return absl::OkStatus();
      float* partial_scale = scratch->as<float>();
      float* partial_unused = scratch->as<float>(partial_bytes);
      LayerNormGradColumnPartialKernel<T>
          <<<dim3(static_cast<unsigned>(cc.column_tiles), static_cast<unsigned>(cc.chunks)),
             dim3(kColumnTile, kColumnRowLanes), 0, stream>>>(dy, x, /*mean=*/nullptr, inv_kind, inv, inv_kind, rows,
                                                              d, cc.rows_per_chunk, partial_scale, partial_unused);
      MPC_RETURN_IF_ERROR(LaunchStatus("RmsNormGrad dScale partial sums"));
      LayerNormGradColumnTotalKernel<T><<<BlocksFor(d), kThreadsPerBlock, 0, stream>>>(
          partial_scale, partial_unused, cc.chunks, d, ctx.outputs[1].as<T>(), /*dbias=*/static_cast<T*>(nullptr));
      return LaunchStatus("RmsNormGrad dScale");
    });
  }
};

}  // namespace

void RegisterCudaLayerNormKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<LayerNormKernel>(r, "LayerNormalization");
  RegisterCudaFloatKernels<LayerNormGradKernel>(r, "LayerNormGrad");
  RegisterCudaFloatKernels<RmsNormKernel>(r, "RmsNorm");
  RegisterCudaFloatKernels<RmsNormGradKernel>(r, "RmsNormGrad");
}

}  // namespace mpc::cuda
