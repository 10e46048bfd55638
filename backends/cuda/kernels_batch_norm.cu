// CUDA BatchNormalization, BatchNormGrad and BatchNormStatsUpdate, mirroring
// backends/cpu/kernels_batch_norm.cc (X in f32, bf16, f16; per-channel parameters and
// statistics of any of those float dtypes, read and written at their own dtype; every
// statistic and intermediate in f32, outputs rounded once).
//
// X is viewed as [N, C, S] (S = product of the spatial dimensions); channel c's m = N * S
// values are X[i, c, k].
//
// BatchNormalization(X, scale, B, input_mean, input_var) -> (Y, running_mean_out?,
// running_var_out?, saved_mean?, saved_inv_std?), attrs epsilon (1e-5), momentum (0.9),
// mpc_training / training_mode (ops::BatchNormTraining):
//   training: mean = sum(x) / m, var = sum((x - mean)^2) / m (biased, two-pass: the
//     normalisation uses it); running_mean_out = momentum * input_mean + (1 - momentum) *
//     mean, running_var_out likewise from the *unbiased* var (sum / (m - 1)) when the
//     node has mpc_training = 1 (PyTorch), from the biased one otherwise (ONNX);
//     saved_mean / saved_inv_std = the batch's mean and 1 / sqrt(var + eps). Fewer than
//     two values per channel is an error at creation, as on the CPU.
//   evaluation: mean / var = input_mean / input_var; running_*_out = the inputs, saved_*
//     = input_mean and 1 / sqrt(input_var + eps).
//   Y = (x - mean) * (inv * scale) + B.
// BatchNormGrad(dY, X, scale, saved_mean, saved_inv_std) -> (dX, dscale, dB), attr
// training_mode: per channel sdy = sum(dY), sdyx = sum(dY * xhat), xhat = (x - mean) * inv;
//   dscale = sdyx, dB = sdy (at scale's dtype);
//   training: dX = scale * inv * (dY - sdy / m - xhat * sdyx / m); evaluation: scale * inv * dY.
// BatchNormStatsUpdate(running_mean, running_var, new_mean, new_var): copies the new
//   statistics into the running ones in place (the momentum was applied by
//   BatchNormalization), on the stream, when they are different buffers.
//
// Per-channel reductions are deterministic: grid (channel, chunk of the m values) writes
// partial sums to scratch allocated at creation, then one block per channel adds a
// channel's partials in a fixed order (block_reduce.cuh). Training makes three passes over
// X (sum, centred squares, normalise), as the CPU does.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/softmax_norm_families.h"
#include "base/status_macros.h"
#include "graph/ops_conv_util.h"
#include "graph/ops_norm.h"

namespace mpc::cuda {
namespace {

constexpr int64_t kMinChunkValues = 4096;  // 16 values per thread of a 256-thread block
constexpr int64_t kTargetChannelBlocks = 2048;
constexpr int kChannelThreads = 256;

// X as [N, C, S] and how each channel's m = N * S values are cut into chunks, one block
// per (channel, chunk).
struct ChannelLayout {
  int64_t n = 1, c = 1, s = 1, m = 1;
  int64_t chunks = 1, chunk_len = 1;

  // Offset in X of channel ch's e-th value, e in [0, m).
  __device__ int64_t Offset(int64_t ch, int64_t e) const {
    const int64_t i = e / s;
    return (i * c + ch) * s + (e - i * s);
  }
  __device__ int64_t ChunkBegin() const { return blockIdx.y * chunk_len; }
  __device__ int64_t ChunkEnd() const {
    const int64_t end = (blockIdx.y + int64_t{1}) * chunk_len;
    return end < m ? end : m;
  }
};

absl::StatusOr<ChannelLayout> MakeChannelLayout(const Node& node, const Shape& x) {
  if (x.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op, " node '", node.name, "': X is ", ShapeToString(x), "; it needs [N, C, ...]"));
  }
  if (::mpc::conv::ChannelsLast(node)) {
    // The channels-last pass runs only for backends whose capabilities ask for it.
    return absl::UnimplementedError(absl::StrCat(node.op, " node '", node.name,
                                                 "': the CUDA kernel reads channels-first X only (mpc_channels_last "
                                                 "is set); compile for this backend, whose capabilities leave it off"));
  }
  ChannelLayout l;
  l.n = x[0];
  l.c = x[1];
  l.s = 1;
  for (size_t i = 2; i < x.size(); ++i) l.s *= x[i];
  l.m = l.n * l.s;
  const int64_t max_chunks = std::max<int64_t>(1, kTargetChannelBlocks / std::max<int64_t>(1, l.c));
  l.chunks = std::max<int64_t>(1, std::min((l.m + kMinChunkValues - 1) / kMinChunkValues, max_chunks));
  l.chunk_len = (l.m + l.chunks - 1) / l.chunks;
  if (l.chunk_len > 0) l.chunks = (l.m + l.chunk_len - 1) / l.chunk_len;  // no empty chunk
  return l;
}

dim3 ChunkGrid(const ChannelLayout& l) { return dim3(static_cast<unsigned>(l.c), static_cast<unsigned>(l.chunks)); }

// Channel blockIdx.x's partials, added in a fixed order by one block.
__device__ inline float SumChannelPartials(const float* __restrict__ partial, int64_t chunks) {
  const float* p = partial + blockIdx.x * chunks;
  float sum = 0.f;
  for (int64_t k = threadIdx.x; k < chunks; k += blockDim.x) sum += p[k];
  return BlockReduceSum(sum);
}

// ---- BatchNormalization ---------------------------------------------------------------------

// Block (channel, chunk): sum of the chunk's values.
template <typename T>
__global__ void ChannelSumKernel(const T* __restrict__ x, ChannelLayout l, float* __restrict__ partial) {
  const int64_t ch = blockIdx.x;
  float sum = 0.f;
  for (int64_t e = l.ChunkBegin() + threadIdx.x; e < l.ChunkEnd(); e += blockDim.x) sum += ToAcc(x[l.Offset(ch, e)]);
  sum = BlockReduceSum(sum);
  if (threadIdx.x == 0) partial[ch * l.chunks + blockIdx.y] = sum;
}

// Block per channel: mean = sum / m.
__global__ void ChannelMeanKernel(const float* __restrict__ partial, ChannelLayout l, float* __restrict__ mean) {
  const float sum = SumChannelPartials(partial, l.chunks);
  if (threadIdx.x == 0) mean[blockIdx.x] = sum / static_cast<float>(l.m);
}

// Block (channel, chunk): sum of the chunk's squared deviations from the channel mean.
template <typename T>
__global__ void ChannelSquaresKernel(const T* __restrict__ x, ChannelLayout l, const float* __restrict__ mean,
                                     float* __restrict__ partial) {
  const int64_t ch = blockIdx.x;
  const float mu = mean[ch];
  float sq = 0.f;
  for (int64_t e = l.ChunkBegin() + threadIdx.x; e < l.ChunkEnd(); e += blockDim.x) {
    const float dlt = ToAcc(x[l.Offset(ch, e)]) - mu;
    sq += dlt * dlt;
  }
  sq = BlockReduceSum(sq);
  if (threadIdx.x == 0) partial[ch * l.chunks + blockIdx.y] = sq;
}

// Where a BatchNormalization writes: per-channel scale (a = inv * scale) and mean for the
// normalisation (scratch), and the optional outputs (null when absent).
struct BnOutputs {
  float* mean = nullptr;  // scratch [C]
  float* a = nullptr;     // scratch [C]
  void* running_mean = nullptr;
  void* running_var = nullptr;
  FloatKind running_kind = FloatKind::kF32;
  float* saved_mean = nullptr;
  float* saved_inv = nullptr;
};

struct BnParams {
  const void* scale = nullptr;
  const void* bias = nullptr;
  FloatKind param_kind = FloatKind::kF32;  // scale and B
  const void* input_mean = nullptr;
  const void* input_var = nullptr;
  FloatKind stats_kind = FloatKind::kF32;  // input_mean and input_var
  float eps = 1e-5f;
  float momentum = 0.9f;
  bool unbiased_update = false;
};

// Block per channel (training): variance from the partial squares, then the
// normalisation's scale and every per-channel output, as the CPU computes them.
__global__ void TrainingStatsKernel(const float* __restrict__ partial, ChannelLayout l, BnParams p, BnOutputs out) {
  const float sq = SumChannelPartials(partial, l.chunks);
  if (threadIdx.x != 0) return;
  const int64_t ch = blockIdx.x;
  const float mean = out.mean[ch];
  const float var = sq / static_cast<float>(l.m);
  const float unbiased = p.unbiased_update ? sq / static_cast<float>(l.m - 1) : var;
  const float inv = 1.f / sqrtf(var + p.eps);
  out.a[ch] = inv * LoadFloat(p.scale, p.param_kind, ch);
  const float mom = p.momentum;
  const float rm = LoadFloat(p.input_mean, p.stats_kind, ch), rv = LoadFloat(p.input_var, p.stats_kind, ch);
  if (out.running_mean) StoreFloat(out.running_mean, out.running_kind, ch, mom * rm + (1.f - mom) * mean);
  if (out.running_var) StoreFloat(out.running_var, out.running_kind, ch, mom * rv + (1.f - mom) * unbiased);
  if (out.saved_mean) out.saved_mean[ch] = mean;
  if (out.saved_inv) out.saved_inv[ch] = inv;
}

// Thread per channel (evaluation): the running statistics are the statistics.
__global__ void EvalStatsKernel(ChannelLayout l, BnParams p, BnOutputs out) {
  for (int64_t ch = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; ch < l.c; ch += int64_t{gridDim.x} * blockDim.x) {
    const float rm = LoadFloat(p.input_mean, p.stats_kind, ch), rv = LoadFloat(p.input_var, p.stats_kind, ch);
    const float inv = 1.f / sqrtf(rv + p.eps);
    out.mean[ch] = rm;
    out.a[ch] = inv * LoadFloat(p.scale, p.param_kind, ch);
    if (out.running_mean) StoreFloat(out.running_mean, out.running_kind, ch, rm);
    if (out.running_var) StoreFloat(out.running_var, out.running_kind, ch, rv);
    if (out.saved_mean) out.saved_mean[ch] = rm;
    if (out.saved_inv) out.saved_inv[ch] = inv;
  }
}

// Y = (x - mean) * a + B, elementwise over X.
template <typename T>
__global__ void NormalizeKernel(const T* __restrict__ x, int64_t numel, ChannelLayout l, const float* __restrict__ mean,
                                const float* __restrict__ a, const void* __restrict__ bias, FloatKind bias_kind,
                                T* __restrict__ y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = (i / l.s) % l.c;
    y[i] = FromAcc<T>((ToAcc(x[i]) - mean[ch]) * a[ch] + LoadFloat(bias, bias_kind, ch));
  }
}

// The dtype kinds of a node's operands, with errors naming them.
absl::StatusOr<FloatKind> KindOf(const Node& node, const Value* v, const char* role) {
  return FloatKindOf(v->dtype, absl::StrCat(node.op, " node '", node.name, "' ", role, " '", v->name, "'"));
}

template <typename T>
struct BatchNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const bool training = ops::BatchNormTraining(node);
    MPC_ASSIGN_OR_RETURN(const ChannelLayout l, MakeChannelLayout(node, node.inputs[0]->shape));
    if (training && l.m < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BatchNormalization node '", node.name, "' in training mode sees ", l.m, " value per channel (X ",
          ShapeToString(node.inputs[0]->shape), "); batch statistics need more than one. Use a batch size above 1"));
    }
    for (int i = 1; i < 5; ++i) {
      if (i >= static_cast<int>(node.inputs.size()) || !node.inputs[i]) {
        return absl::InvalidArgumentError(absl::StrCat("BatchNormalization node '", node.name, "' lacks input ", i,
                                                       "; it needs X, scale, B, input_mean, input_var"));
      }
    }
    BnParams p;
    MPC_ASSIGN_OR_RETURN(p.param_kind, KindOf(node, node.inputs[1], "scale"));
    MPC_ASSIGN_OR_RETURN(const FloatKind bias_kind, KindOf(node, node.inputs[2], "B"));
    MPC_ASSIGN_OR_RETURN(p.stats_kind, KindOf(node, node.inputs[3], "input_mean"));
    MPC_ASSIGN_OR_RETURN(const FloatKind var_kind, KindOf(node, node.inputs[4], "input_var"));
    if (var_kind != p.stats_kind) {
      return absl::UnimplementedError(absl::StrCat("BatchNormalization node '", node.name,
                                                   "' with input_mean and input_var of different dtypes is not "
                                                   "yet on CUDA; give them one dtype"));
    }
    // running_*_out have input_mean's dtype; saved statistics are f32.
    FloatKind running_kind = p.stats_kind;
    if (node.outputs.size() > 1) {
      MPC_ASSIGN_OR_RETURN(running_kind, KindOf(node, node.outputs[1], "output running_mean"));
    }
    if (node.outputs.size() > 2) {
      MPC_ASSIGN_OR_RETURN(const FloatKind k, KindOf(node, node.outputs[2], "output running_var"));
      if (k != running_kind) {
        return absl::UnimplementedError(absl::StrCat("BatchNormalization node '", node.name,
                                                     "' with running_mean_out and running_var_out of different "
                                                     "dtypes is not yet on CUDA"));
      }
    }
    for (size_t i = 3; i < node.outputs.size() && i < 5; ++i) {
      if (node.outputs[i]->dtype != DType::kF32) {
        return absl::UnimplementedError(absl::StrCat("BatchNormalization node '", node.name, "' with ",
                                                     DTypeName(node.outputs[i]->dtype), " saved statistics '",
                                                     node.outputs[i]->name, "' is not yet on CUDA; they are float32"));
      }
    }
    p.eps = node.attrs.GetFloat("epsilon", 1e-5f);
    p.momentum = node.attrs.GetFloat("momentum", 0.9f);
    // As the CPU: mpc's training programs (mpc_training = 1) update running_var with the
    // unbiased batch variance, ONNX's training_mode alone with the biased one.
    p.unbiased_update = node.attrs.GetInt("mpc_training", 0) != 0;
    const int64_t numel = NumElements(node.inputs[0]->shape);

    const size_t partial_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(l.c * l.chunks));
    const size_t channel_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(l.c));
    MPC_ASSIGN_OR_RETURN(std::shared_ptr<Scratch> scratch,
                         Scratch::Create(backend, (training ? partial_bytes : 0) + 2 * channel_bytes,
                                         absl::StrCat("BatchNormalization '", node.name, "'")));
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (l.c == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      BnParams params = p;
      params.scale = ctx.inputs[1].data;
      params.bias = ctx.inputs[2].data;
      params.input_mean = ctx.inputs[3].data;
      params.input_var = ctx.inputs[4].data;
      BnOutputs out;
      out.mean = scratch->as<float>();
      out.a = scratch->as<float>(channel_bytes);
      out.running_mean = OptionalOutput(ctx, 1);
      out.running_var = OptionalOutput(ctx, 2);
      out.running_kind = running_kind;
      out.saved_mean = static_cast<float*>(OptionalOutput(ctx, 3));
      out.saved_inv = static_cast<float*>(OptionalOutput(ctx, 4));
      if (training) {
        float* partial = scratch->as<float>(2 * channel_bytes);
        ChannelSumKernel<T><<<ChunkGrid(l), kChannelThreads, 0, stream>>>(x, l, partial);
        MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormalization channel sums"));
        ChannelMeanKernel<<<static_cast<unsigned>(l.c), kChannelThreads, 0, stream>>>(partial, l, out.mean);
        MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormalization channel means"));
        ChannelSquaresKernel<T><<<ChunkGrid(l), kChannelThreads, 0, stream>>>(x, l, out.mean, partial);
        MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormalization channel squares"));
        TrainingStatsKernel<<<static_cast<unsigned>(l.c), kChannelThreads, 0, stream>>>(partial, l, params, out);
        MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormalization batch statistics"));
      } else {
        EvalStatsKernel<<<BlocksFor(l.c), kThreadsPerBlock, 0, stream>>>(l, params, out);
        MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormalization running statistics"));
      }
      if (numel == 0) return absl::OkStatus();
      NormalizeKernel<T><<<BlocksFor(numel), kThreadsPerBlock, 0, stream>>>(x, numel, l, out.mean, out.a, params.bias,
                                                                            bias_kind, ctx.outputs[0].as<T>());
      return LaunchStatus("BatchNormalization normalise");
    });
  }
};

// ---- BatchNormGrad ----------------------------------------------------------------------

struct BnSaved {
  const void* scale = nullptr;
  FloatKind scale_kind = FloatKind::kF32;
  const void* mean = nullptr;
  FloatKind mean_kind = FloatKind::kF32;
  const void* inv = nullptr;
  FloatKind inv_kind = FloatKind::kF32;
};

// Block (channel, chunk): sums of dY and of dY * xhat over the chunk.
template <typename T>
__global__ void GradPartialKernel(const T* __restrict__ dy, const T* __restrict__ x, ChannelLayout l, BnSaved sv,
                                  float* __restrict__ partial_dy, float* __restrict__ partial_dyx) {
  const int64_t ch = blockIdx.x;
  const float mean = LoadFloat(sv.mean, sv.mean_kind, ch), inv = LoadFloat(sv.inv, sv.inv_kind, ch);
  float sdy = 0.f, sdyx = 0.f;
  for (int64_t e = l.ChunkBegin() + threadIdx.x; e < l.ChunkEnd(); e += blockDim.x) {
    const int64_t o = l.Offset(ch, e);
    const float g = ToAcc(dy[o]);
    sdy += g;
    sdyx += g * (ToAcc(x[o]) - mean) * inv;
  }
  sdy = BlockReduceSum(sdy);
  sdyx = BlockReduceSum(sdyx);
  if (threadIdx.x == 0) {
    partial_dy[ch * l.chunks + blockIdx.y] = sdy;
    partial_dyx[ch * l.chunks + blockIdx.y] = sdyx;
  }
}

// Block per channel: dscale, dB, and the means dX needs (scratch).
__global__ void GradChannelKernel(const float* __restrict__ partial_dy, const float* __restrict__ partial_dyx,
                                  ChannelLayout l, void* __restrict__ dscale, void* __restrict__ dbias,
                                  FloatKind out_kind, float* __restrict__ mean_dy, float* __restrict__ mean_dyx) {
  const float sdy = SumChannelPartials(partial_dy, l.chunks);
  const float sdyx = SumChannelPartials(partial_dyx, l.chunks);
  if (threadIdx.x != 0) return;
  const int64_t ch = blockIdx.x;
  StoreFloat(dscale, out_kind, ch, sdyx);
  StoreFloat(dbias, out_kind, ch, sdy);
  mean_dy[ch] = sdy / static_cast<float>(l.m);
  mean_dyx[ch] = sdyx / static_cast<float>(l.m);
}

template <typename T>
__global__ void GradInputKernel(const T* __restrict__ dy, const T* __restrict__ x, int64_t numel, ChannelLayout l,
                                BnSaved sv, const float* __restrict__ mean_dy, const float* __restrict__ mean_dyx,
                                bool training, T* __restrict__ dx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < numel; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t ch = (i / l.s) % l.c;
    const float inv = LoadFloat(sv.inv, sv.inv_kind, ch);
    const float a = LoadFloat(sv.scale, sv.scale_kind, ch) * inv;
    const float g = ToAcc(dy[i]);
    if (training) {
      const float mean = LoadFloat(sv.mean, sv.mean_kind, ch);
      dx[i] = FromAcc<T>(a * (g - mean_dy[ch] - (ToAcc(x[i]) - mean) * inv * mean_dyx[ch]));
    } else {
      dx[i] = FromAcc<T>(a * g);
    }
  }
}

// Inputs (dY, X, scale, saved_mean, saved_inv_std); dscale and dB have scale's dtype.
template <typename T>
struct BatchNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const bool training = node.attrs.GetInt("training_mode", 0) != 0;
    MPC_ASSIGN_OR_RETURN(const ChannelLayout l, MakeChannelLayout(node, node.inputs[1]->shape));
    BnSaved sv;
    MPC_ASSIGN_OR_RETURN(sv.scale_kind, KindOf(node, node.inputs[2], "scale"));
    MPC_ASSIGN_OR_RETURN(sv.mean_kind, KindOf(node, node.inputs[3], "saved_mean"));
    MPC_ASSIGN_OR_RETURN(sv.inv_kind, KindOf(node, node.inputs[4], "saved_inv_std"));
    MPC_ASSIGN_OR_RETURN(const FloatKind out_kind, KindOf(node, node.outputs[1], "output dscale"));
    MPC_ASSIGN_OR_RETURN(const FloatKind bias_out_kind, KindOf(node, node.outputs[2], "output dB"));
    if (bias_out_kind != out_kind) {
      return absl::UnimplementedError(absl::StrCat("BatchNormGrad node '", node.name,
                                                   "' with dscale and dB of different dtypes is not yet on CUDA"));
    }
    const int64_t numel = NumElements(node.inputs[1]->shape);
    const size_t partial_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(l.c * l.chunks));
    const size_t channel_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(l.c));
    MPC_ASSIGN_OR_RETURN(std::shared_ptr<Scratch> scratch,
                         Scratch::Create(backend, 2 * partial_bytes + 2 * channel_bytes,
                                         absl::StrCat("BatchNormGrad '", node.name, "'")));
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (l.c == 0) return absl::OkStatus();
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      BnSaved saved = sv;
      saved.scale = ctx.inputs[2].data;
      saved.mean = ctx.inputs[3].data;
      saved.inv = ctx.inputs[4].data;
      float* partial_dy = scratch->as<float>();
      float* partial_dyx = scratch->as<float>(partial_bytes);
      float* mean_dy = scratch->as<float>(2 * partial_bytes);
      float* mean_dyx = scratch->as<float>(2 * partial_bytes + channel_bytes);
      GradPartialKernel<T><<<ChunkGrid(l), kChannelThreads, 0, stream>>>(dy, x, l, saved, partial_dy, partial_dyx);
      MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormGrad channel sums"));
      GradChannelKernel<<<static_cast<unsigned>(l.c), kChannelThreads, 0, stream>>>(
          partial_dy, partial_dyx, l, ctx.outputs[1].data, ctx.outputs[2].data, out_kind, mean_dy, mean_dyx);
      MPC_RETURN_IF_ERROR(LaunchStatus("BatchNormGrad dscale/dB"));
      if (numel == 0) return absl::OkStatus();
      GradInputKernel<T><<<BlocksFor(numel), kThreadsPerBlock, 0, stream>>>(dy, x, numel, l, saved, mean_dy, mean_dyx,
                                                                            training, ctx.outputs[0].as<T>());
      return LaunchStatus("BatchNormGrad dX");
    });
  }
};

// ---- BatchNormStatsUpdate ---------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Kernel>> CreateStatsUpdate(const Node& node, Backend& backend) {
  size_t bytes[2];
  for (int i : {0, 1}) {
    const Value* dst = node.inputs[i];
    const Value* src = node.inputs[i + 2];
    if (dst->dtype != src->dtype || NumElements(dst->shape) != NumElements(src->shape)) {
      return absl::InvalidArgumentError(absl::StrCat("BatchNormStatsUpdate node '", node.name, "': '", src->name, "' (",
                                                     DTypeName(src->dtype), ShapeToString(src->shape),
                                                     ") cannot update '", dst->name, "' (", DTypeName(dst->dtype),
                                                     ShapeToString(dst->shape), ")"));
    }
    bytes[i] = dst->bytes();
  }
  return MakeCudaKernel(
      backend, [bytes0 = bytes[0], bytes1 = bytes[1]](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
        const size_t sizes[2] = {bytes0, bytes1};
        for (int i : {0, 1}) {
          void* dst = ctx.inputs[i].data;
          const void* src = ctx.inputs[i + 2].data;
          if (dst == src || sizes[i] == 0) continue;
          MPC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, sizes[i], cudaMemcpyDeviceToDevice, stream));
        }
        return absl::OkStatus();
      });
}

}  // namespace

void RegisterCudaBatchNormKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<BatchNormKernel>(r, "BatchNormalization");
  RegisterCudaFloatKernels<BatchNormGradKernel>(r, "BatchNormGrad");
  // Looked up by the running statistics' dtype (its first input).
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16})
    r.Register("BatchNormStatsUpdate", "cuda", d, CreateStatsUpdate);
}

}  // namespace mpc::cuda
