// CUDA kernels for loss scaling and gradient clipping, mirroring the CPU backend
// (backends/cpu/kernels_loss_scaling.cc; the graph is built by passes/loss_scaling.cc):
//   UnscaleGradients(scale, g1..gN) -> (g1*inv .. gN*inv, found_nonfinite)
//     inv = 1/scale in f32; found_nonfinite = 1 when any INPUT element is inf or NaN, else 0.
//   FindNonFinite(g1..gN) -> found_nonfinite: the same check, reading the gradients only.
//   ClipByGlobalNorm(g1..gN) -> (g1*c .. gN*c, global_norm)          attr max_norm
//     norm = sqrt(sum of squares), accumulated in f64 as on the CPU; c = min(1, max_norm /
//     (norm + 1e-6)) (torch.nn.utils.clip_grad_norm_), so a NaN norm gives c = 1 and an
//     infinite norm c = 0, exactly like std::min on the CPU.
//   InjectNonFinite(g) -> g' (test hook): a copy, with element 0 set to inf/NaN at step `step`.
//   UpdateLossScale(scale, growth_tracker, found_nonfinite[, hold]): GradScaler.update, in place
//     (nothing when hold is nonzero: a micro-batch of gradient accumulation).
// Every scalar (scale, flag, tracker) stays in device memory and is read by the kernels:
// nothing here synchronises with the host.
//
// The N-gradient ops run as a few multi-tensor launches: each launch takes up to
// kTensorsPerLaunch tensors (pointers as a __grid_constant__ kernel parameter, filled in at
// Run) and gives every tensor its own contiguous range of blocks, planned at creation from
// the shapes. The global norm is deterministic: every block writes the f64 sum of its
// fixed share of elements to its own slot of a scratch buffer allocated at creation, and
// one single-block kernel adds the slots in a fixed order.
//
// Outputs never alias inputs (the memory plan's lifetimes are inclusive of the node that
// reads and writes them), so found_nonfinite can be cleared before the gradients are read.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

// ---- multi-tensor launches -----------------------------------------------------------

// 48 tensors keep the kernel parameter (~1.8 KB) well inside the 4 KB classic limit.
constexpr int kTensorsPerLaunch = 48;
// 512 blocks of 256 threads (float4 each per iteration) saturate an H100 for one tensor;
// more would only lengthen the norm's final sum.
constexpr int kMaxBlocksPerTensor = 512;

// One launch's tensors. Tensor t owns blocks [block_start[t], block_start[t+1]) of the
// launch (none when it is empty); its elements are covered by a grid-stride loop over
// those blocks, float4s for [0, 4*n4[t]) and scalars for the tail.
struct TensorBatch {
  const float* in[kTensorsPerLaunch];
  float* out[kTensorsPerLaunch];
  int64_t n[kTensorsPerLaunch];
  int64_t n4[kTensorsPerLaunch];  // n/4 when in and out are 16-byte aligned, else 0 (set at Run)
  int block_start[kTensorsPerLaunch + 1];
  int count;
  int first_partial;  // this launch's first block, numbered across all launches of the op
};

// A TensorBatch plus which of the op's tensors it holds (host side, for filling pointers).
struct BatchPlan {
  TensorBatch args{};
  std::vector<int> tensors;
  unsigned blocks = 0;  // block_start[count]
};

int BlocksForTensor(int64_t n) {
  if (n <= 0) return 0;
  const int64_t quads = (n + 3) / 4;
  const int64_t blocks = (quads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<int>(blocks > kMaxBlocksPerTensor ? kMaxBlocksPerTensor : blocks);
}

// Plans launches over tensors with `sizes` elements; sets *total_blocks to the blocks of
// all launches together. Launches with no blocks (all tensors empty) are dropped.
std::vector<BatchPlan> PlanBatches(const std::vector<int64_t>& sizes, int* total_blocks) {
  std::vector<BatchPlan> plans;
  int total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (plans.empty() || plans.back().args.count == kTensorsPerLaunch) {
      plans.emplace_back();
      plans.back().args.first_partial = total;
    }
    BatchPlan& p = plans.back();
    TensorBatch& a = p.args;
    const int blocks = BlocksForTensor(sizes[i]);
    a.n[a.count] = sizes[i];
    a.block_start[a.count + 1] = a.block_start[a.count] + blocks;
    ++a.count;
    p.tensors.push_back(static_cast<int>(i));
    p.blocks += blocks;
    total += blocks;
  }
  std::vector<BatchPlan> nonempty;
  for (BatchPlan& p : plans) {
    if (p.blocks > 0) nonempty.push_back(std::move(p));
  }
  *total_blocks = total;
  return nonempty;
}

// Sets the pointers of each planned tensor: tensor i reads in[i] and writes out[i].
void FillBatch(BatchPlan& p, const std::vector<const float*>& in, const std::vector<float*>& out) {
  TensorBatch& a = p.args;
  for (int t = 0; t < a.count; ++t) {
    const int i = p.tensors[t];
    a.in[t] = in[i];
    a.out[t] = out[i];
    a.n4[t] = Aligned16(in[i]) && Aligned16(out[i]) ? a.n[t] / 4 : 0;
  }
}

// This block's tensor and its place among that tensor's blocks.
struct BlockShare {
  int tensor;
  int64_t first;   // this thread's first work item
  int64_t stride;  // threads over all of the tensor's blocks
};

__device__ __forceinline__ BlockShare ShareOf(const TensorBatch& b) {
  const int block = static_cast<int>(blockIdx.x);
  int t = 0;
  while (block >= b.block_start[t + 1]) ++t;  // ends below count: block < block_start[count]
  const int local = block - b.block_start[t];
  const int blocks = b.block_start[t + 1] - b.block_start[t];
  return {t, int64_t{local} * blockDim.x + threadIdx.x, int64_t{blocks} * blockDim.x};
}

// Sum over the block in a fixed order (shuffles, then the warps' sums); the result is
// valid in thread 0. Call once per kernel (the shared slots are not re-synchronised).
__device__ double BlockSum(double v) {
  __shared__ double warp_sums[32];
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) / 32;
  v = threadIdx.x < warps ? warp_sums[threadIdx.x] : 0.0;
  if (warp == 0) {
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_down_sync(0xffffffffu, v, offset);
  }
  return v;
}

// ---- UnscaleGradients ----------------------------------------------------------------

__device__ __forceinline__ float UnscaleOne(float g, float inv, bool& bad) {
  bad = bad || !isfinite(g);
  return __fmul_rn(g, inv);
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    UnscaleKernel(const __grid_constant__ TensorBatch b, const float* scale, float* found_nonfinite) {
  const float inv = __fdiv_rn(1.0f, *scale);  // the CPU's 1.0f / scale
  const BlockShare s = ShareOf(b);
  const float* in = b.in[s.tensor];
  float* out = b.out[s.tensor];
  const int64_t n = b.n[s.tensor], n4 = b.n4[s.tensor];
  bool bad = false;
  for (int64_t i = s.first; i < n4; i += s.stride) {
    const float4 g = reinterpret_cast<const float4*>(in)[i];
    float4 r;
    r.x = UnscaleOne(g.x, inv, bad);
    r.y = UnscaleOne(g.y, inv, bad);
    r.z = UnscaleOne(g.z, inv, bad);
    r.w = UnscaleOne(g.w, inv, bad);
    reinterpret_cast<float4*>(out)[i] = r;
  }
  for (int64_t i = 4 * n4 + s.first; i < n; i += s.stride) out[i] = UnscaleOne(in[i], inv, bad);
  // Every thread reaches this barrier. Racing writers all store the same 1.0f.
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_nonfinite = 1.0f;
}

class CudaUnscaleGradients : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    if (node.inputs.size() < 2 || node.outputs.size() != node.inputs.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("UnscaleGradients node '", node.name, "' has ", node.inputs.size(), " inputs and ",
                       node.outputs.size(), " outputs; expected (scale, g1..gN) -> (g1..gN, found_nonfinite)"));
    }
    auto k = std::unique_ptr<CudaUnscaleGradients>(new CudaUnscaleGradients());
    k->stream_ = cuda->stream();
    std::vector<int64_t> sizes;
    for (size_t i = 1; i < node.inputs.size(); ++i) sizes.push_back(NumElements(node.inputs[i]->shape));
    int total_blocks = 0;
    k->plans_ = PlanBatches(sizes, &total_blocks);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    const size_t grads = ctx.inputs.size() - 1;
    std::vector<const float*> in(grads);
    std::vector<float*> out(grads);
    for (size_t i = 0; i < grads; ++i) {
      in[i] = ctx.inputs[i + 1].as<float>();
      out[i] = ctx.outputs[i].as<float>();
    }
    float* found = ctx.outputs.back().as<float>();
    MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(found, 0, sizeof(float), stream_));  // 0.0f
    const float* scale = ctx.inputs[0].as<float>();
    for (BatchPlan& p : plans_) {
      FillBatch(p, in, out);
      UnscaleKernel<<<p.blocks, kThreadsPerBlock, 0, stream_>>>(p.args, scale, found);
      MPC_RETURN_IF_ERROR(LaunchStatus("UnscaleKernel"));
    }
    return absl::OkStatus();
  }

 private:
  CudaUnscaleGradients() = default;
  cudaStream_t stream_ = nullptr;
  std::vector<BatchPlan> plans_;
};

// ---- FindNonFinite -------------------------------------------------------------------

// UnscaleKernel's check alone: reads the gradients, writes nothing but the flag.
__global__ void __launch_bounds__(kThreadsPerBlock)
    FindNonFiniteKernel(const __grid_constant__ TensorBatch b, float* found_nonfinite) {
  const BlockShare s = ShareOf(b);
  const float* in = b.in[s.tensor];
  const int64_t n = b.n[s.tensor], n4 = b.n4[s.tensor];
  bool bad = false;
  for (int64_t i = s.first; i < n4; i += s.stride) {
    const float4 g = reinterpret_cast<const float4*>(in)[i];
    bad = bad || !isfinite(g.x) || !isfinite(g.y) || !isfinite(g.z) || !isfinite(g.w);
  }
  for (int64_t i = 4 * n4 + s.first; i < n; i += s.stride) bad = bad || !isfinite(in[i]);
  if (__syncthreads_or(bad) && threadIdx.x == 0) *found_nonfinite = 1.0f;
}

class CudaFindNonFinite : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    auto k = std::unique_ptr<CudaFindNonFinite>(new CudaFindNonFinite());
    k->stream_ = cuda->stream();
    std::vector<int64_t> sizes;
    for (const Value* in : node.inputs) sizes.push_back(NumElements(in->shape));
    int total_blocks = 0;
    k->plans_ = PlanBatches(sizes, &total_blocks);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    std::vector<const float*> in(ctx.inputs.size());
    for (size_t i = 0; i < in.size(); ++i) in[i] = ctx.inputs[i].as<float>();
    const std::vector<float*> no_outputs(in.size(), nullptr);
    float* found = ctx.outputs[0].as<float>();
    MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(found, 0, sizeof(float), stream_));  // 0.0f
    for (BatchPlan& p : plans_) {
      FillBatch(p, in, no_outputs);
      FindNonFiniteKernel<<<p.blocks, kThreadsPerBlock, 0, stream_>>>(p.args, found);
      MPC_RETURN_IF_ERROR(LaunchStatus("FindNonFiniteKernel"));
    }
    return absl::OkStatus();
  }

 private:
  CudaFindNonFinite() = default;
  cudaStream_t stream_ = nullptr;
  std::vector<BatchPlan> plans_;
};

// ---- ClipByGlobalNorm ----------------------------------------------------------------

// partials[first_partial + block] = f64 sum of the squares of this block's elements.
__global__ void __launch_bounds__(kThreadsPerBlock)
    SumSquaresKernel(const __grid_constant__ TensorBatch b, double* partials) {
  const BlockShare s = ShareOf(b);
  const float* in = b.in[s.tensor];
  const int64_t n = b.n[s.tensor], n4 = b.n4[s.tensor];
  double acc = 0.0;
  for (int64_t i = s.first; i < n4; i += s.stride) {
    const float4 g = reinterpret_cast<const float4*>(in)[i];
    // Squares of f32 values are exact in f64 (the CPU's double(p) * p).
    acc += static_cast<double>(g.x) * g.x;
    acc += static_cast<double>(g.y) * g.y;
    acc += static_cast<double>(g.z) * g.z;
    acc += static_cast<double>(g.w) * g.w;
  }
  for (int64_t i = 4 * n4 + s.first; i < n; i += s.stride) acc += static_cast<double>(in[i]) * in[i];
  const double block_sum = BlockSum(acc);
  if (threadIdx.x == 0) partials[b.first_partial + blockIdx.x] = block_sum;
}

constexpr int kFinalSumThreads = 1024;

// One block: the global norm from the partial sums, in a fixed order, and the clip
// coefficient exactly as the CPU computes it in double.
__global__ void __launch_bounds__(kFinalSumThreads)
    ClipCoefficientKernel(const double* partials, int count, double max_norm, float* norm_out, float* coef_out) {
  double acc = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  const double sum = BlockSum(acc);
  if (threadIdx.x == 0) {
    const double norm = sqrt(sum);
    const double ratio = max_norm / (norm + 1e-6);
    *norm_out = static_cast<float>(norm);
    *coef_out = static_cast<float>(ratio < 1.0 ? ratio : 1.0);  // std::min(1.0, ratio): NaN -> 1
  }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    ScaleKernel(const __grid_constant__ TensorBatch b, const float* coef_ptr) {
  const float coef = *coef_ptr;
  const BlockShare s = ShareOf(b);
  const float* in = b.in[s.tensor];
  float* out = b.out[s.tensor];
  const int64_t n = b.n[s.tensor], n4 = b.n4[s.tensor];
  for (int64_t i = s.first; i < n4; i += s.stride) {
    const float4 g = reinterpret_cast<const float4*>(in)[i];
    reinterpret_cast<float4*>(out)[i] =
        make_float4(__fmul_rn(g.x, coef), __fmul_rn(g.y, coef), __fmul_rn(g.z, coef), __fmul_rn(g.w, coef));
  }
  for (int64_t i = 4 * n4 + s.first; i < n; i += s.stride) out[i] = __fmul_rn(in[i], coef);
}

class CudaClipByGlobalNorm : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    if (node.inputs.empty() || node.outputs.size() != node.inputs.size() + 1) {
      return absl::InvalidArgumentError(absl::StrCat("ClipByGlobalNorm node '", node.name, "' has ", node.inputs.size(),
                                                     " inputs and ", node.outputs.size(),
                                                     " outputs; expected (g1..gN) -> (g1..gN, global_norm)"));
    }
    auto k = std::unique_ptr<CudaClipByGlobalNorm>(new CudaClipByGlobalNorm());
    k->backend_ = cuda;
    k->stream_ = cuda->stream();
    // The CPU widens the float attribute to double before dividing.
    k->max_norm_ = static_cast<double>(node.attrs.GetFloat("max_norm", 1.0f));
    // ZeRO-1: the inputs are this rank's gradient slices; the partial sums are added
    // across the ranks (NCCL) before the norm. The same plan on every rank (same shapes)
    // gives every rank the same number of partials.
    k->sharded_ = node.attrs.GetInt("sharded", 0) != 0;
    k->name_ = node.name;
    std::vector<int64_t> sizes;
    for (const Value* v : node.inputs) sizes.push_back(NumElements(v->shape));
    k->plans_ = PlanBatches(sizes, &k->partial_count_);
    // partial_count_ f64 partial sums, then the f32 coefficient in the last 8-byte slot.
    MPC_ASSIGN_OR_RETURN(void* scratch,
                         backend.Allocate((static_cast<size_t>(k->partial_count_) + 1) * sizeof(double)));
    k->partials_ = static_cast<double*>(scratch);
    k->coef_ = reinterpret_cast<float*>(k->partials_ + k->partial_count_);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  ~CudaClipByGlobalNorm() override {
    if (partials_) backend_->Free(partials_);
  }

  absl::Status Run(KernelContext& ctx) override {
    const size_t grads = ctx.inputs.size();
    std::vector<const float*> in(grads);
    std::vector<float*> out(grads);
    for (size_t i = 0; i < grads; ++i) {
      in[i] = ctx.inputs[i].as<float>();
      out[i] = ctx.outputs[i].as<float>();
    }
    for (BatchPlan& p : plans_) FillBatch(p, in, out);
    for (const BatchPlan& p : plans_) {
      SumSquaresKernel<<<p.blocks, kThreadsPerBlock, 0, stream_>>>(p.args, partials_);
      MPC_RETURN_IF_ERROR(LaunchStatus("SumSquaresKernel"));
    }
    if (sharded_) {
      MPC_RETURN_IF_ERROR(backend_->NcclSumInPlace(partials_, static_cast<size_t>(partial_count_),
                                                   absl::StrCat("'", name_, "' (ZeRO-1 gradient norm)")));
    }
    ClipCoefficientKernel<<<1, kFinalSumThreads, 0, stream_>>>(partials_, partial_count_, max_norm_,
                                                               ctx.outputs.back().as<float>(), coef_);
    MPC_RETURN_IF_ERROR(LaunchStatus("ClipCoefficientKernel"));
    for (const BatchPlan& p : plans_) {
      ScaleKernel<<<p.blocks, kThreadsPerBlock, 0, stream_>>>(p.args, coef_);
      MPC_RETURN_IF_ERROR(LaunchStatus("ScaleKernel (ClipByGlobalNorm)"));
    }
    return absl::OkStatus();
  }

 private:
  CudaClipByGlobalNorm() = default;
  CudaBackend* backend_ = nullptr;
  cudaStream_t stream_ = nullptr;
  double max_norm_ = 1.0;
  bool sharded_ = false;
  std::string name_;
  std::vector<BatchPlan> plans_;
  int partial_count_ = 0;
  double* partials_ = nullptr;
  float* coef_ = nullptr;
};

// ---- InjectNonFinite -----------------------------------------------------------------

absl::StatusOr<std::unique_ptr<Kernel>> CreateInjectNonFinite(const Node& node, Backend& backend) {
  const int64_t step = node.attrs.GetInt("step", -1);
  // Anything but "nan" is inf, as on the CPU (the pass only emits "inf" or "nan").
  const float value = node.attrs.GetString("value", "inf") == "nan" ? std::numeric_limits<float>::quiet_NaN()
                                                                    : std::numeric_limits<float>::infinity();
  const int64_t n = NumElements(node.inputs[0]->shape);
  return MakeCudaKernel(backend, [step, value, n](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    const float* in = ctx.inputs[0].as<float>();
    float* out = ctx.outputs[0].as<float>();
    // The step is read on the device ({seed, step}, rewritten by the executor before
    // every step): a captured step (CUDA graph) would freeze the host's ctx.step.
    const int64_t* seed_step = ctx.device_seed_step;
    const bool host_inject = ctx.step == step;
    return LaunchElementwise(n, stream, "InjectNonFinite", [=] __device__(int64_t i) {
      const bool inject = seed_step ? seed_step[1] == step : host_inject;
      out[i] = inject && i == 0 ? value : in[i];
    });
  });
}

// ---- UpdateLossScale -----------------------------------------------------------------

struct LossScaleRule {
  float growth, backoff, interval, min_scale, max_scale;
};

// One thread: PyTorch GradScaler.update as the CPU does it, std::min/std::max spelled
// out so that NaN behaves the same ((b < a) ? b : a and (a < b) ? b : a).
__global__ void UpdateLossScaleKernel(float* scale_ptr, float* tracker_ptr, const float* found_nonfinite,
                                      const float* hold, LossScaleRule r) {
  if (hold != nullptr && *hold != 0.0f) return;  // a micro-batch that does not apply the step
  float scale = *scale_ptr, tracker = *tracker_ptr;
  if (*found_nonfinite != 0.0f) {
    const float backed_off = __fmul_rn(scale, r.backoff);
    scale = backed_off < r.min_scale ? r.min_scale : backed_off;  // std::max(backed_off, min_scale)
    tracker = 0.0f;
  } else if (__fadd_rn(tracker, 1.0f) >= r.interval) {
    const float grown = __fmul_rn(scale, r.growth);
    scale = isfinite(grown) ? (r.max_scale < grown ? r.max_scale : grown) : scale;  // std::min(grown, max_scale)
    tracker = 0.0f;
  } else {
    tracker = __fadd_rn(tracker, 1.0f);
  }
  *scale_ptr = scale;
  *tracker_ptr = tracker;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateUpdateLossScale(const Node& node, Backend& backend) {
  if (node.inputs.size() != 3 && node.inputs.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("UpdateLossScale node '", node.name, "' has ", node.inputs.size(),
                     " inputs; expected (scale, growth_tracker, found_nonfinite[, hold])"));
  }
  LossScaleRule r;
  r.growth = node.attrs.GetFloat("growth_factor", 2.0f);
  r.backoff = node.attrs.GetFloat("backoff_factor", 0.5f);
  r.interval = static_cast<float>(node.attrs.GetInt("growth_interval", 2000));
  r.min_scale = node.attrs.GetFloat("min_scale", 0.0f);
  r.max_scale = node.attrs.GetFloat("max_scale", 0.0f);
  if (r.max_scale <= 0) r.max_scale = std::numeric_limits<float>::max();
  return MakeCudaKernel(backend, [r](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    const float* hold = ctx.inputs.size() > 3 ? ctx.inputs[3].as<float>() : nullptr;
    UpdateLossScaleKernel<<<1, 1, 0, stream>>>(ctx.inputs[0].as<float>(), ctx.inputs[1].as<float>(),
                                               ctx.inputs[2].as<float>(), hold, r);
    return LaunchStatus("UpdateLossScaleKernel");
  });
}

}  // namespace

void RegisterCudaLossScalingKernels(KernelRegistry& r) {
  r.Register("UnscaleGradients", "cuda", DType::kF32, CudaUnscaleGradients::Create);
  r.Register("FindNonFinite", "cuda", DType::kF32, CudaFindNonFinite::Create);
  r.Register("ClipByGlobalNorm", "cuda", DType::kF32, CudaClipByGlobalNorm::Create);
  r.Register("InjectNonFinite", "cuda", DType::kF32, CreateInjectNonFinite);
  r.Register("UpdateLossScale", "cuda", DType::kF32, CreateUpdateLossScale);
}

}  // namespace mpc::cuda
