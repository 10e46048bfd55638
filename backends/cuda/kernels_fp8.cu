// CUDA kernels for FP8 with delayed scaling (passes/fp8.h), mirroring the CPU backend
// (backends/cpu/kernels_fp8.cc and UpdateFp8Meta in graph/float8_scaling.cc):
//   Fp8Quantize(x, scale, scale_inv[, amax_history]) -> q (f32)        attr format e4m3|e5m2
//     q = RoundToF8(f32(x) * scale) * scale_inv, with graph/float8.h's rounding and
//     saturation (float8_device.cuh is bit-identical). With amax_history, max|x| of this
//     call is folded into history[0] (the largest wins; a NaN in x makes it NaN, and a NaN
//     already there sticks), so the update sees a non-finite amax.
//   Fp8UpdateScales(scale_0, scale_inv_0, history_0, last_amax_0, ...)  attrs fp8_max (one
//     per tensor), margin, algo (max | most_recent), amax_floor
//     per tensor: amax = MAX over the history (NaN wins) or history[0]; raised to
//     amax_floor when finite; if finite and > 0, scale = (fp8_max / amax) / 2^margin (inf ->
//     FLT_MAX; a non-positive result keeps the old scale), else the old scale stays;
//     scale_inv = 1/scale; last_amax = amax; the history rolls left by one with this step's
//     amax (zeroed if non-finite) moving to the last slot and slot 0 cleared.
//   Fp8QuantizeDynamic(x) -> q (f32)   just-in-time scaling (the current, rowwise and block
//     recipes): one block per scale group (graph/float8_groups.h) takes the group's amax
//     (NaN wins), its scale by Fp8DynamicScale's rule (graph/float8_scaling.h) and writes
//     the group's dequantized FP8 values. The emulation on the GPU, as on the CPU.
//   Fp8CastDynamic(x) -> (codes, scale_inv)   the same quantization as FP8 codes (of x^T
//     when transposed) and the group scale_invs in the FP8 GEMM's layout: what fp8-lower
//     makes of Fp8QuantizeDynamic on Hopper (see the section below).
// Scales, histories and amaxes stay in device memory; nothing synchronises with the host.
//
// The amax: every element's |x| is compared as the int bits of a non-negative float, whose
// order is the numeric order with +inf above every finite value and NaNs above +inf; a
// block's maximum (a NaN replaced by the canonical quiet NaN) goes into history[0] with
// one atomicMax on those bits. Max is order-independent, so the result is deterministic.
// (history[0] is never negative: it is 0 after every update and only amaxes go in.)
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/float8_device.cuh"
#include "backends/cuda/fp8_amax.cuh"
#include "base/status_macros.h"
#include "graph/float8_groups.h"

namespace mpc::cuda {
namespace {

// ---- Fp8Quantize ---------------------------------------------------------------------

// Each block does one atomicMax on the history slot; 1024 blocks of 256 threads fill an
// H100 several times over with a grid-stride loop.
constexpr int kQuantizeMaxBlocks = 1024;

template <bool kE4M3>
__device__ __forceinline__ float QuantizeDequantize(float v, float scale, float scale_inv) {
  // The scaled value is formed in f32 and rounded once to FP8, as on the CPU.
  const float scaled = __fmul_rn(v, scale);
  return __fmul_rn(kE4M3 ? RoundToF8E4M3(scaled) : RoundToF8E5M2(scaled), scale_inv);
}

// [0, 4*n4) as Vec4 loads and float4 stores, [4*n4, n) scalar. amax_slot may be null
// (evaluation programs quantize without recording).
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreadsPerBlock)
    Fp8QuantizeKernel(int64_t n, int64_t n4, const T* x, const float* scale_ptr, const float* scale_inv_ptr, float* q,
                      float* amax_slot) {
  const float scale = *scale_ptr, scale_inv = *scale_inv_ptr;
  int amax_bits = 0;  // bits of the largest |x| seen by this thread (non-negative as an int)
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    const Vec4<T> xv = reinterpret_cast<const Vec4<T>*>(x)[i];
    float r[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float v = ToAcc<T>(xv.v[k]);
      amax_bits = max(amax_bits, AbsBits(v));
      r[k] = QuantizeDequantize<kE4M3>(v, scale, scale_inv);
    }
    reinterpret_cast<float4*>(q)[i] = make_float4(r[0], r[1], r[2], r[3]);
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) {
    const float v = ToAcc<T>(x[i]);
    amax_bits = max(amax_bits, AbsBits(v));
    q[i] = QuantizeDequantize<kE4M3>(v, scale, scale_inv);
  }
  if (amax_slot != nullptr) RecordAmax(amax_bits, amax_slot);  // uniform over the grid
}

unsigned QuantizeBlocks(int64_t n) {
  const int64_t quads = (n + 3) / 4;
  const int64_t blocks = (quads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kQuantizeMaxBlocks ? kQuantizeMaxBlocks : blocks));
}

template <typename T>
struct Fp8QuantizeFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const std::string format = node.attrs.GetString("format", "e4m3");
    if (format != "e4m3" && format != "e5m2") {
      return absl::InvalidArgumentError(
          absl::StrCat("Fp8Quantize node '", node.name, "': format '", format, "' must be e4m3 or e5m2"));
    }
    const bool e4m3 = format == "e4m3";
    const int64_t n = NumElements(node.inputs[0]->shape);
    const unsigned blocks = QuantizeBlocks(n);
    return MakeCudaKernel(backend, [e4m3, n, blocks](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (n == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      const float* scale = ctx.inputs[1].as<float>();
      const float* scale_inv = ctx.inputs[2].as<float>();
      float* q = ctx.outputs[0].as<float>();
      float* amax_slot = ctx.inputs.size() > 3 && ctx.inputs[3].data ? ctx.inputs[3].as<float>() : nullptr;
      const bool aligned =
          reinterpret_cast<uintptr_t>(x) % sizeof(Vec4<T>) == 0 && reinterpret_cast<uintptr_t>(q) % sizeof(float4) == 0;
      const int64_t n4 = aligned ? n / 4 : 0;
      if (e4m3) {
        Fp8QuantizeKernel<T, true><<<blocks, kThreadsPerBlock, 0, stream>>>(n, n4, x, scale, scale_inv, q, amax_slot);
      } else {
        Fp8QuantizeKernel<T, false><<<blocks, kThreadsPerBlock, 0, stream>>>(n, n4, x, scale, scale_inv, q, amax_slot);
      }
      return LaunchStatus("Fp8QuantizeKernel");
    });
  }
};

// ---- Fp8UpdateScales -----------------------------------------------------------------

// 64 tensors' meta per launch keep the kernel parameter (~2.8 KB) inside the 4 KB limit.
constexpr int kMetasPerLaunch = 64;
constexpr int kUpdateThreads = 256;

struct Fp8MetaBatch {
  float* scale[kMetasPerLaunch];
  float* scale_inv[kMetasPerLaunch];
  float* history[kMetasPerLaunch];
  float* last_amax[kMetasPerLaunch];
  int64_t len[kMetasPerLaunch];
  float fp8_max[kMetasPerLaunch];
  int count;
};

struct Fp8Recipe {
  float margin_factor;  // 2^margin, std::ldexp(1.0f, margin) on the host as on the CPU
  float amax_floor;
  bool most_recent;
};

// The CPU's combine: NaN wins, else the larger (the first of equal values stays).
__device__ __forceinline__ float MaxNanWins(float a, float b) { return (isnan(b) || b > a) ? b : a; }

// Over the block; valid in thread 0. A block calling it again must pass a __syncthreads()
// first (warp_max is reused).
__device__ float BlockMaxNanWins(float v) {
  __shared__ float warp_max[32];
  for (int offset = 16; offset > 0; offset >>= 1) v = MaxNanWins(v, __shfl_down_sync(0xffffffffu, v, offset));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  if (warp == 0) {
    // Lanes past the warps repeat warp 0's value, which changes no maximum.
    v = warp_max[lane < warps ? lane : 0];
    for (int offset = 16; offset > 0; offset >>= 1) v = MaxNanWins(v, __shfl_down_sync(0xffffffffu, v, offset));
  }
  return v;
}

// One block per tensor of the batch: UpdateFp8Meta (graph/float8_scaling.cc) in parallel.
__global__ void __launch_bounds__(kUpdateThreads)
    Fp8UpdateScalesKernel(const __grid_constant__ Fp8MetaBatch b, Fp8Recipe r, const float* hold) {
  // Gradient accumulation: a micro-batch that does not end the step leaves the meta as it is
  // (every thread of the block reads the same flag, so the barriers below stay uniform).
  if (hold != nullptr && *hold != 0.0f) return;
  const int t = blockIdx.x;
  float* history = b.history[t];
  const int64_t len = b.len[t];
  const float h0 = history[0];  // this step's amax

  float amax = h0;
  if (!r.most_recent) {
    // Threads past len contribute h0, which changes no maximum.
    float local = h0;
    for (int64_t i = 1 + threadIdx.x; i < len; i += blockDim.x) local = MaxNanWins(local, history[i]);
    amax = BlockMaxNanWins(local);  // valid in thread 0, the only reader
  }

  if (threadIdx.x == 0) {
    if (isfinite(amax)) amax = amax < r.amax_floor ? r.amax_floor : amax;  // std::max(amax, amax_floor)
    float scale = *b.scale[t];
    if (isfinite(amax) && amax > 0.0f) {
      float s = __fdiv_rn(__fdiv_rn(b.fp8_max[t], amax), r.margin_factor);
      if (isinf(s)) s = FLT_MAX;
      if (s > 0.0f) scale = s;
    }
    *b.scale[t] = scale;
    *b.scale_inv[t] = __fdiv_rn(1.0f, scale);
    *b.last_amax[t] = amax;
  }

  // Roll left by one (std::rotate): slot i takes slot i+1, the last slot takes this step's
  // amax (0 if non-finite), then slot 0 is cleared. In chunks of blockDim.x: a chunk reads
  // [base+1, base+blockDim] and, after the barrier, writes [base, base+blockDim-1]; later
  // chunks read only above that, and every read of the max above precedes the first barrier.
  const float rolled_in = isfinite(h0) ? h0 : 0.0f;
  for (int64_t base = 0; base < len; base += blockDim.x) {
    const int64_t i = base + threadIdx.x;
    float next = 0.0f;
    if (i < len) next = i == len - 1 ? rolled_in : history[i + 1];
    __syncthreads();
    if (i < len) history[i] = i == 0 ? 0.0f : next;
  }
}

class CudaFp8UpdateScales : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    const std::vector<float> fp8_max = node.attrs.GetFloats("fp8_max", {});
    const bool held = node.attrs.GetInt("held", 0) != 0;
    if (node.inputs.size() != 4 * fp8_max.size() + (held ? 1 : 0)) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8UpdateScales node '", node.name, "' has ", node.inputs.size(),
                                                     " inputs and ", fp8_max.size(),
                                                     " fp8_max values; expected 4 inputs (scale, scale_inv, "
                                                     "amax_history, last_amax) per value"));
    }
    const std::string algo = node.attrs.GetString("algo", "max");
    if (algo != "max" && algo != "most_recent") {
      return absl::UnimplementedError(absl::StrCat("Fp8UpdateScales node '", node.name, "': algo '", algo,
                                                   "' is not on CUDA; use max or most_recent"));
    }
    auto k = std::unique_ptr<CudaFp8UpdateScales>(new CudaFp8UpdateScales());
    k->stream_ = cuda->stream();
    k->held_ = held;
    k->recipe_.margin_factor = std::ldexp(1.0f, static_cast<int>(node.attrs.GetInt("margin", 0)));
    k->recipe_.amax_floor = node.attrs.GetFloat("amax_floor", 0.0f);
    k->recipe_.most_recent = algo == "most_recent";
    for (size_t t = 0; t < fp8_max.size(); ++t) {
      const int64_t len = NumElements(node.inputs[4 * t + 2]->shape);
      if (len < 1) {
        return absl::InvalidArgumentError(absl::StrCat("Fp8UpdateScales node '", node.name, "': amax history '",
                                                       node.inputs[4 * t + 2]->name,
                                                       "' is empty; fp8.amax_history_len must be at least 1"));
      }
      if (t % kMetasPerLaunch == 0) k->batches_.push_back(Fp8MetaBatch{});
      Fp8MetaBatch& b = k->batches_.back();
      b.len[b.count] = len;
      b.fp8_max[b.count] = fp8_max[t];
      ++b.count;
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    const float* hold = held_ ? ctx.inputs.back().as<float>() : nullptr;
    size_t t = 0;
    for (Fp8MetaBatch& b : batches_) {
      for (int j = 0; j < b.count; ++j, ++t) {
        b.scale[j] = ctx.inputs[4 * t].as<float>();
        b.scale_inv[j] = ctx.inputs[4 * t + 1].as<float>();
        b.history[j] = ctx.inputs[4 * t + 2].as<float>();
        b.last_amax[j] = ctx.inputs[4 * t + 3].as<float>();
      }
      Fp8UpdateScalesKernel<<<b.count, kUpdateThreads, 0, stream_>>>(b, recipe_, hold);
      MPC_RETURN_IF_ERROR(LaunchStatus("Fp8UpdateScalesKernel"));
    }
    return absl::OkStatus();
  }

 private:
  CudaFp8UpdateScales() = default;
  cudaStream_t stream_ = nullptr;
  bool held_ = false;
  Fp8Recipe recipe_{};
  std::vector<Fp8MetaBatch> batches_;
};

// ---- Fp8QuantizeDynamic ---------------------------------------------------------------

struct DynamicRecipe {
  float fp8_max;
  float margin_factor;  // 2^margin
  float amax_floor;
  bool power_of_two;
};

// Fp8DynamicScale (graph/float8_scaling.cc) on the device.
__device__ float DynamicScale(float amax, const DynamicRecipe& r) {
  if (!isfinite(amax)) return 1.0f;
  amax = amax < r.amax_floor ? r.amax_floor : amax;
  if (!(amax > 0.0f)) return 1.0f;
  float s = __fdiv_rn(__fdiv_rn(r.fp8_max, amax), r.margin_factor);
  if (isinf(s)) s = FLT_MAX;
  if (!(s > 0.0f)) return 1.0f;
  if (r.power_of_two) {
    int exponent = 0;
    frexpf(s, &exponent);
    s = ldexpf(1.0f, exponent - 1);
  }
  return s;
}

// The view [outer, p, q] cut into chunk_p x chunk_q groups (Fp8ScaleGroups).
struct GroupGeometry {
  int64_t outer, p, q, chunk_p, chunk_q, groups_p, groups_q;
};

GroupGeometry GeometryOf(const Fp8ScaleGroups& groups) {
  return GroupGeometry{groups.outer,   groups.p,          groups.q,         groups.chunk_p,
                       groups.chunk_q, groups.groups_p(), groups.groups_q()};
}

DynamicRecipe DeviceRecipeOf(const Fp8DynamicRecipe& recipe) {
  return DynamicRecipe{recipe.fp8_max, std::ldexp(1.0f, recipe.margin), recipe.amax_floor, recipe.power_of_two};
}

// Group k of the view: rows [i0, i0 + ni) x columns [j0, j0 + nj) of outer slice o.
struct GroupSpan {
  int64_t o, i0, j0, nj, size, p, q;
  __device__ int64_t at(int64_t e) const { return (o * p + i0 + e / nj) * q + j0 + e % nj; }
};

__device__ __forceinline__ GroupSpan SpanOf(const GroupGeometry& g, int64_t k) {
  const int64_t o = k / (g.groups_p * g.groups_q), gi = (k / g.groups_q) % g.groups_p, gj = k % g.groups_q;
  const int64_t i0 = gi * g.chunk_p, j0 = gj * g.chunk_q;
  const int64_t ni = min(g.chunk_p, g.p - i0), nj = min(g.chunk_q, g.q - j0);
  return GroupSpan{o, i0, j0, nj, ni * nj, g.p, g.q};
}

// The group's scale from its amax (NaN wins), for every thread of the block. The caller
// passes a __syncthreads() before calling it again (its shared memory is reused).
template <typename T>
__device__ float GroupScale(const T* x, const GroupSpan& span, const DynamicRecipe& r) {
  __shared__ float group_scale;
  float local = 0.0f;
  for (int64_t e = threadIdx.x; e < span.size; e += blockDim.x) local = MaxNanWins(local, fabsf(ToAcc<T>(x[span.at(e)])));
  const float amax = BlockMaxNanWins(local);
  if (threadIdx.x == 0) group_scale = DynamicScale(amax, r);
  __syncthreads();
  return group_scale;
}

// Block b takes groups b, b + gridDim.x, ...: the group's amax over its elements, then
// its elements rounded with the group's scale.
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kUpdateThreads)
    Fp8QuantizeDynamicKernel(const T* x, float* q, GroupGeometry g, DynamicRecipe r) {
  const int64_t count = g.outer * g.groups_p * g.groups_q;
  for (int64_t k = blockIdx.x; k < count; k += gridDim.x) {
    const GroupSpan span = SpanOf(g, k);
    const float scale = GroupScale(x, span, r), scale_inv = __fdiv_rn(1.0f, scale);
    for (int64_t e = threadIdx.x; e < span.size; e += blockDim.x) {
      const int64_t idx = span.at(e);
      q[idx] = QuantizeDequantize<kE4M3>(ToAcc<T>(x[idx]), scale, scale_inv);
    }
    __syncthreads();  // GroupScale's shared memory is reused by the next group
  }
}

template <typename T>
struct Fp8QuantizeDynamicFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(Fp8DynamicQuantization d, Fp8DynamicQuantizationOf(node));
    const bool e4m3 = d.e4m3;
    const Fp8ScaleGroups& groups = d.groups;
    const GroupGeometry g = GeometryOf(groups);
    const DynamicRecipe r = DeviceRecipeOf(d.recipe);
    const int64_t count = groups.count();
    const unsigned blocks = static_cast<unsigned>(count < 1 ? 1 : (count > 65535 ? 65535 : count));
    return MakeCudaKernel(backend, [e4m3, g, r, count, blocks](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (count == 0 || ctx.inputs[0].num_elements() == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      float* q = ctx.outputs[0].as<float>();
      if (e4m3) {
        Fp8QuantizeDynamicKernel<T, true><<<blocks, kUpdateThreads, 0, stream>>>(x, q, g, r);
      } else {
        Fp8QuantizeDynamicKernel<T, false><<<blocks, kUpdateThreads, 0, stream>>>(x, q, g, r);
      }
      return LaunchStatus("Fp8QuantizeDynamicKernel");
    });
  }
};

// ---- Fp8CastDynamic --------------------------------------------------------------------
// The lowered form of Fp8QuantizeDynamic (graph/ops_fp8_gemm.cc): the same groups, amaxes
// and scales, but FP8 codes (of x^T when transposed) and each group's scale_inv written
// where the FP8 GEMM reads it (graph/float8_groups.h's Fp8GemmScaleIndex, restated below
// for the device). Per tensor (current scaling) the whole grid works on the one group:
// an amax kernel (atomicMax on the bits, as Fp8Quantize records its amax) into the
// scale_inv slot, the cast reading it, then one thread turning it into 1/scale. Other
// groups: one block per group, as Fp8QuantizeDynamic.

struct CastLayout {
  int64_t cols;       // x's row length (x viewed as [n / cols, cols])
  int64_t x_rows;     // n / cols
  bool transpose;     // codes = x^T
  int granularity;    // Fp8Granularity
  int64_t rows, depth, tile;  // the codes [rows, depth]
  int64_t scale_count;
};

// graph/float8_groups.h's Fp8GemmScaleIndex.
__device__ __forceinline__ int64_t GemmScaleIndex(const CastLayout& l, int64_t p, int64_t k) {
  switch (static_cast<Fp8Granularity>(l.granularity)) {
    case Fp8Granularity::kRows:
      return p;
    case Fp8Granularity::kTiles:
      return (k / l.tile) * l.rows + p;
    case Fp8Granularity::kBlocks:
      return (p / l.tile) * (((l.depth + l.tile - 1) / l.tile + 3) / 4 * 4) + k / l.tile;
    default:
      return 0;
  }
}

template <bool kE4M3>
__device__ __forceinline__ void EncodeAt(float v, float scale, int64_t e, const CastLayout& l, uint8_t* codes) {
  // As the CPU: scaled in f32, rounded once (a NaN passes unscaled, keeping its sign bit).
  const float scaled = isnan(v) ? v : __fmul_rn(v, scale);
  const int64_t r = e / l.cols, c = e % l.cols;
  codes[l.transpose ? c * l.x_rows + r : e] = kE4M3 ? FloatToF8E4M3Byte(scaled) : FloatToF8E5M2Byte(scaled);
}

template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock) TensorAmaxKernel(int64_t n, const T* x, float* amax_slot) {
  int amax_bits = 0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    amax_bits = max(amax_bits, AbsBits(ToAcc<T>(x[i])));
  }
  RecordAmax(amax_bits, amax_slot);
}

template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreadsPerBlock)
    TensorCastKernel(int64_t n, const T* x, const float* amax, DynamicRecipe r, CastLayout l, uint8_t* codes) {
  const float scale = DynamicScale(*amax, r);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    EncodeAt<kE4M3>(ToAcc<T>(x[i]), scale, i, l, codes);
  }
}

// The amax in *slot becomes 1/scale (after every TensorCastKernel block has read it).
__global__ void TensorScaleInvKernel(float* slot, DynamicRecipe r) { *slot = __fdiv_rn(1.0f, DynamicScale(*slot, r)); }

template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kUpdateThreads) Fp8CastDynamicGroupsKernel(const T* x, uint8_t* codes,
                                                                             float* scale_inv, GroupGeometry g,
                                                                             DynamicRecipe r, CastLayout l) {
  if (blockIdx.x == 0 && static_cast<Fp8Granularity>(l.granularity) == Fp8Granularity::kBlocks) {
    // The blocks layout's padding: K-block slots past the last real one hold 1.
    const int64_t k_blocks = (l.depth + l.tile - 1) / l.tile, padded = (k_blocks + 3) / 4 * 4;
    for (int64_t i = threadIdx.x; i < l.scale_count; i += blockDim.x) {
      if (i % padded >= k_blocks) scale_inv[i] = 1.0f;
    }
  }
  const int64_t count = g.outer * g.groups_p * g.groups_q;
  for (int64_t k = blockIdx.x; k < count; k += gridDim.x) {
    const GroupSpan span = SpanOf(g, k);
    const float scale = GroupScale(x, span, r);
    for (int64_t e = threadIdx.x; e < span.size; e += blockDim.x) {
      const int64_t idx = span.at(e);
      EncodeAt<kE4M3>(ToAcc<T>(x[idx]), scale, idx, l, codes);
    }
    if (threadIdx.x == 0 && span.size > 0) {
      const int64_t first = span.at(0), r0 = first / l.cols, c0 = first % l.cols;
      scale_inv[GemmScaleIndex(l, l.transpose ? c0 : r0, l.transpose ? r0 : c0)] = __fdiv_rn(1.0f, scale);
    }
    __syncthreads();  // GroupScale's shared memory is reused by the next group
  }
}

template <typename T>
struct Fp8CastDynamicFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(Fp8DynamicQuantization d, Fp8DynamicQuantizationOf(node));
    MPC_ASSIGN_OR_RETURN(Fp8Granularity granularity, ParseFp8Granularity(node.attrs.GetString("granularity", "tensor")));
    const bool e4m3 = d.e4m3;
    const Fp8ScaleGroups& groups = d.groups;
    const GroupGeometry g = GeometryOf(groups);
    const DynamicRecipe r = DeviceRecipeOf(d.recipe);
    const Shape& s = node.inputs[0]->shape;
    const Shape& codes = node.outputs[0]->shape;
    const int64_t n = NumElements(s);
    CastLayout l;
    l.cols = s.size() == 2 ? s[1] : (n > 0 ? n : 1);
    l.x_rows = n / l.cols;
    l.transpose = node.attrs.GetInt("transpose", 0) != 0;
    l.granularity = static_cast<int>(granularity);
    l.rows = codes.size() == 2 ? codes[0] : 1;
    l.depth = codes.size() == 2 ? codes[1] : n;
    l.tile = node.attrs.GetInt("tile", 128);
    l.scale_count = NumElements(node.outputs[1]->shape);
    if (granularity == Fp8Granularity::kTensor) {
      const unsigned blocks = BlocksFor(n);
      return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
        const T* x = ctx.inputs[0].as<T>();
        uint8_t* out = ctx.outputs[0].as<uint8_t>();
        float* slot = ctx.outputs[1].as<float>();
        const cudaError_t cleared = cudaMemsetAsync(slot, 0, sizeof(float), stream);
        if (cleared != cudaSuccess) {
          return absl::InternalError(absl::StrCat("Fp8CastDynamic: cudaMemsetAsync: ", cudaGetErrorString(cleared)));
        }
        if (n > 0) {
          TensorAmaxKernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(n, x, slot);
          MPC_RETURN_IF_ERROR(LaunchStatus("TensorAmaxKernel"));
          if (e4m3) {
            TensorCastKernel<T, true><<<blocks, kThreadsPerBlock, 0, stream>>>(n, x, slot, r, l, out);
          } else {
            TensorCastKernel<T, false><<<blocks, kThreadsPerBlock, 0, stream>>>(n, x, slot, r, l, out);
          }
          MPC_RETURN_IF_ERROR(LaunchStatus("TensorCastKernel"));
        }
        TensorScaleInvKernel<<<1, 1, 0, stream>>>(slot, r);
        return LaunchStatus("TensorScaleInvKernel");
      });
    }
    const int64_t count = groups.count();
    const unsigned blocks = static_cast<unsigned>(count < 1 ? 1 : (count > 65535 ? 65535 : count));
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (n == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      uint8_t* out = ctx.outputs[0].as<uint8_t>();
      float* scale_inv = ctx.outputs[1].as<float>();
      if (e4m3) {
        Fp8CastDynamicGroupsKernel<T, true><<<blocks, kUpdateThreads, 0, stream>>>(x, out, scale_inv, g, r, l);
      } else {
        Fp8CastDynamicGroupsKernel<T, false><<<blocks, kUpdateThreads, 0, stream>>>(x, out, scale_inv, g, r, l);
      }
      return LaunchStatus("Fp8CastDynamicGroupsKernel");
    });
  }
};

}  // namespace

void RegisterCudaFp8Kernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<Fp8QuantizeFactory>(r, "Fp8Quantize");
  RegisterCudaFloatKernels<Fp8QuantizeDynamicFactory>(r, "Fp8QuantizeDynamic");
  RegisterCudaFloatKernels<Fp8CastDynamicFactory>(r, "Fp8CastDynamic");
  r.Register("Fp8UpdateScales", "cuda", DType::kF32, CudaFp8UpdateScales::Create);
}

}  // namespace mpc::cuda
