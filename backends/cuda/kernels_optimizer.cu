// CUDA optimizer updates on f32 master weights, in place, with the CPU backend's
// torch.optim semantics (backends/cpu/kernels_optimizer.cc, optimizer_math.h).
//   SgdUpdate(param, grad, lr[, momentum_buf][, found_nonfinite]):
//     g += wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf; p -= lr*g
//   AdamWUpdate(param, grad, lr, m, v, step[, found_nonfinite]):
//     t = step + 1; p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//     p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps); step = t
// With attribute gated=1 the last input is the loss scaler's found_nonfinite flag: when it
// is nonzero the update leaves parameter, state and step counter untouched. With
// lowp_copy=1 the input before that flag (or the last) is the parameter's bf16/f16 copy,
// rewritten from the new weight in the same pass (passes/optimizer.cc).
// Also AccumulateGradient (gradient accumulation) and EmaUpdate (the weight average), the
// CPU backend's formulas with the same rounding.
//
// Everything the CPU reads from a scalar tensor (lr, the flag, the step counter) is
// device memory here and is read by the kernel, so a step never waits on the host. The
// element formulas (optimizer_math.cuh) keep the two backends bit-identical except for
// b^t (see AdamWCoefsAt).
//
// The AdamW step counter: every block reads it, so it may only change once every block
// has read it. Instead of a second launch per parameter, the last block to finish (a
// counter in scratch memory allocated at creation, the threadFenceReduction pattern)
// writes step + 1 and resets the counter for the next step. The grid is capped at
// kOptimizerMaxBlocks so that the counter sees at most that many atomics.
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/optimizer_math.cuh"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

// Grid-stride loops of 256-thread blocks over float4s: 1024 blocks fill an H100 (132 SMs)
// several times over, and bound the AdamW completion counter's atomics.
constexpr int kOptimizerMaxBlocks = 1024;

// The copy input of an update node with lowp_copy=1 (just before the gate flag).
LowpCopyPtr CopyOf(const KernelContext& ctx, bool has_copy, bool gated) {
  return LowpCopyAt(ctx, has_copy ? static_cast<int>(ctx.inputs.size()) - (gated ? 2 : 1) : -1);
}

unsigned OptimizerBlocks(int64_t n) {
  const int64_t quads = (n + 3) / 4;
  const int64_t blocks = (quads + kThreadsPerBlock - 1) / kThreadsPerBlock;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > kOptimizerMaxBlocks ? kOptimizerMaxBlocks : blocks));
}

// The float4 part of a grid-stride loop covers [0, 4*n4); the scalar tail [4*n4, n).
// n4 is n/4 when every array is 16-byte aligned, else 0 (all scalar).
int64_t Quads(int64_t n, bool aligned) { return aligned ? n / 4 : 0; }

// ---- SGD -----------------------------------------------------------------------------

// buf is null unless kMomentum; skip (the gate flag) may be null.
template <bool kMomentum>
__global__ void __launch_bounds__(kThreadsPerBlock)
    SgdUpdateKernel(int64_t n, int64_t n4, float* p, const float* g, float* buf, const float* lr_ptr, const float* skip,
                    LowpCopyPtr copy, SgdHyper h) {
  if (skip != nullptr && *skip != 0.0f) return;  // the same for every thread: a skipped step
  const float lr = *lr_ptr;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  for (int64_t i = first; i < n4; i += stride) {
    float4 pv = reinterpret_cast<const float4*>(p)[i];
    const float4 gv = reinterpret_cast<const float4*>(g)[i];
    float4 bv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kMomentum) bv = reinterpret_cast<const float4*>(buf)[i];
    SgdElement<kMomentum>(pv.x, gv.x, bv.x, lr, h);
    SgdElement<kMomentum>(pv.y, gv.y, bv.y, lr, h);
    SgdElement<kMomentum>(pv.z, gv.z, bv.z, lr, h);
    SgdElement<kMomentum>(pv.w, gv.w, bv.w, lr, h);
    reinterpret_cast<float4*>(p)[i] = pv;
    StoreCopy4(copy, i, pv);
    if constexpr (kMomentum) reinterpret_cast<float4*>(buf)[i] = bv;
  }
  for (int64_t i = 4 * n4 + first; i < n; i += stride) {
    float pv = p[i], bv = 0.0f;
    if constexpr (kMomentum) bv = buf[i];
    SgdElement<kMomentum>(pv, g[i], bv, lr, h);
    p[i] = pv;
    StoreCopy(copy, i, pv);
    if constexpr (kMomentum) buf[i] = bv;
  }
}

class CudaSgdUpdate : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    auto k = std::unique_ptr<CudaSgdUpdate>(new CudaSgdUpdate());
    k->stream_ = cuda->stream();
    k->hyper_.momentum = node.attrs.GetFloat("momentum", 0.0f);
    k->hyper_.weight_decay = node.attrs.GetFloat("weight_decay", 0.0f);
    k->hyper_.nesterov = node.attrs.GetInt("nesterov", 0) != 0;
    k->gated_ = node.attrs.GetInt("gated", 0) != 0;
    k->copy_ = node.attrs.GetInt("lowp_copy", 0) != 0;
    const size_t inputs = node.inputs.size();
    // As on the CPU: the inputs before the copy and the gate flag are param, grad, lr[, momentum_buf].
    const size_t n_state = inputs - (k->gated_ ? 1 : 0) - (k->copy_ ? 1 : 0);
    if (inputs < 3 + (k->gated_ ? 1u : 0u) || n_state > 4) {
      return absl::InvalidArgumentError(absl::StrCat("SgdUpdate node '", node.name, "' has ", inputs,
                                                     " inputs; expected param, grad, lr[, momentum_buf]",
                                                     k->gated_ ? " and found_nonfinite (gated=1)" : ""));
    }
    k->momentum_ = n_state > 3 && node.inputs[3] != nullptr;
    k->n_ = NumElements(node.inputs[0]->shape);
    k->blocks_ = OptimizerBlocks(k->n_);
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    if (n_ == 0) return absl::OkStatus();
    float* p = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float* lr = ctx.inputs[2].as<float>();
    float* buf = momentum_ ? ctx.inputs[3].as<float>() : nullptr;
    const float* skip = gated_ ? ctx.inputs.back().as<float>() : nullptr;
    const LowpCopyPtr copy = CopyOf(ctx, copy_, gated_);
    const bool aligned = Aligned16(p) && Aligned16(g) && (!momentum_ || Aligned16(buf));
    const int64_t n4 = Quads(n_, aligned);
    if (momentum_) {
      SgdUpdateKernel<true><<<blocks_, kThreadsPerBlock, 0, stream_>>>(n_, n4, p, g, buf, lr, skip, copy, hyper_);
    } else {
      SgdUpdateKernel<false><<<blocks_, kThreadsPerBlock, 0, stream_>>>(n_, n4, p, g, nullptr, lr, skip, copy, hyper_);
    }
    return LaunchStatus("SgdUpdateKernel");
  }

 private:
  CudaSgdUpdate() = default;
  cudaStream_t stream_ = nullptr;
  SgdHyper hyper_{};
  bool gated_ = false;
  bool copy_ = false;
  bool momentum_ = false;
  int64_t n_ = 0;
  unsigned blocks_ = 1;
};

// ---- AdamW ---------------------------------------------------------------------------

// blocks_done: a zeroed counter in scratch memory; the last block to finish resets it.
__global__ void __launch_bounds__(kThreadsPerBlock)
    AdamWUpdateKernel(int64_t n, int64_t n4, float* p, const float* g, float* m, float* v, const float* lr_ptr,
                      float* step, const float* skip, LowpCopyPtr copy, unsigned* blocks_done, AdamWHyper h) {
  __shared__ AdamWStepCoefs coefs;
  __shared__ float new_step;
  __shared__ int skipped;
  if (threadIdx.x == 0) {
    skipped = skip != nullptr && *skip != 0.0f;
    const float t = *step + 1.0f;
    coefs = AdamWCoefsAt(t, *lr_ptr, h);
    new_step = t;
  }
  __syncthreads();
  if (!skipped) {
    const AdamWStepCoefs c = coefs;
    const int64_t stride = int64_t{gridDim.x} * blockDim.x;
    const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    for (int64_t i = first; i < n4; i += stride) {
      float4 pv = reinterpret_cast<const float4*>(p)[i];
      const float4 gv = reinterpret_cast<const float4*>(g)[i];
      float4 mv = reinterpret_cast<const float4*>(m)[i];
      float4 vv = reinterpret_cast<const float4*>(v)[i];
      AdamWElement(pv.x, gv.x, mv.x, vv.x, h, c);
      AdamWElement(pv.y, gv.y, mv.y, vv.y, h, c);
      AdamWElement(pv.z, gv.z, mv.z, vv.z, h, c);
      AdamWElement(pv.w, gv.w, mv.w, vv.w, h, c);
      reinterpret_cast<float4*>(p)[i] = pv;
      StoreCopy4(copy, i, pv);
      reinterpret_cast<float4*>(m)[i] = mv;
      reinterpret_cast<float4*>(v)[i] = vv;
    }
    for (int64_t i = 4 * n4 + first; i < n; i += stride) {
      float pv = p[i], mv = m[i], vv = v[i];
      AdamWElement(pv, g[i], mv, vv, h, c);
      p[i] = pv;
      StoreCopy(copy, i, pv);
      m[i] = mv;
      v[i] = vv;
    }
  }
  // The step counter: thread 0 of every block read it above. The fence orders that read
  // before this block's arrival on the counter; the last block to arrive fences again
  // (acquire) so its write is ordered after every block's read, then writes t.
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned arrived = atomicAdd(blocks_done, 1u);
    if (arrived == gridDim.x - 1) {
      __threadfence();
      if (!skipped) *step = new_step;
      atomicExch(blocks_done, 0u);  // ready for the next step's launch (stream-ordered)
    }
  }
}

class CudaAdamWUpdate : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    const bool gated = node.attrs.GetInt("gated", 0) != 0;
    const bool copy = node.attrs.GetInt("lowp_copy", 0) != 0;
    const size_t expected = 6 + (copy ? 1 : 0) + (gated ? 1 : 0);
    if (node.inputs.size() != expected) {
      return absl::InvalidArgumentError(absl::StrCat("AdamWUpdate node '", node.name, "' has ", node.inputs.size(),
                                                     " inputs; expected ", expected, " (param, grad, lr, m, v, step",
                                                     copy ? ", lowp copy: lowp_copy=1" : "",
                                                     gated ? ", found_nonfinite: gated=1)" : ")"));
    }
    auto k = std::unique_ptr<CudaAdamWUpdate>(new CudaAdamWUpdate());
    k->copy_ = copy;
    k->backend_ = cuda;
    k->stream_ = cuda->stream();
    k->gated_ = gated;
    AdamWHyper& h = k->hyper_;
    h.b1 = node.attrs.GetFloat("beta1", 0.9f);
    h.b2 = node.attrs.GetFloat("beta2", 0.999f);
    h.one_minus_b1 = 1.0f - h.b1;
    h.one_minus_b2 = 1.0f - h.b2;
    h.eps = node.attrs.GetFloat("eps", 1e-8f);
    h.weight_decay = node.attrs.GetFloat("weight_decay", 0.0f);
    k->n_ = NumElements(node.inputs[0]->shape);
    // Even an empty parameter advances its step counter (as on the CPU): always launch.
    k->blocks_ = OptimizerBlocks(k->n_);
    MPC_ASSIGN_OR_RETURN(void* counter, backend.Allocate(sizeof(unsigned)));
    k->blocks_done_ = static_cast<unsigned*>(counter);
    // Ordered before the first Run on the same stream.
    MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(k->blocks_done_, 0, sizeof(unsigned), k->stream_));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  ~CudaAdamWUpdate() override {
    if (blocks_done_) backend_->Free(blocks_done_);
  }

  absl::Status Run(KernelContext& ctx) override {
    float* p = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float* lr = ctx.inputs[2].as<float>();
    float* m = ctx.inputs[3].as<float>();
    float* v = ctx.inputs[4].as<float>();
    float* step = ctx.inputs[5].as<float>();
    const float* skip = gated_ ? ctx.inputs.back().as<float>() : nullptr;
    const LowpCopyPtr copy = CopyOf(ctx, copy_, gated_);
    const bool aligned = Aligned16(p) && Aligned16(g) && Aligned16(m) && Aligned16(v);
    AdamWUpdateKernel<<<blocks_, kThreadsPerBlock, 0, stream_>>>(n_, Quads(n_, aligned), p, g, m, v, lr, step, skip,
                                                                 copy, blocks_done_, hyper_);
    return LaunchStatus("AdamWUpdateKernel");
  }

 private:
  CudaAdamWUpdate() = default;
  CudaBackend* backend_ = nullptr;
  cudaStream_t stream_ = nullptr;
  AdamWHyper hyper_{};
  bool gated_ = false;
  bool copy_ = false;
  int64_t n_ = 0;
  unsigned blocks_ = 1;
  unsigned* blocks_done_ = nullptr;
};

// ---- Gradient accumulation and the weight average -------------------------------------

// AccumulateGradient(acc, grad, first) -> sum: sum = (first ? 0 : acc) + grad; acc = sum.
// The flag is device memory, read by every thread (no host sync).
absl::StatusOr<std::unique_ptr<Kernel>> CreateAccumulateGradient(const Node&, Backend& backend) {
  return MakeCudaKernel(backend, [](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    float* acc = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float* first = ctx.inputs[2].as<float>();
    float* sum = ctx.outputs[0].as<float>();
    return LaunchElementwise(ctx.inputs[0].num_elements(), stream, "AccumulateGradient", [=] __device__(int64_t i) {
      const float s = *first != 0.0f ? g[i] : __fadd_rn(acc[i], g[i]);
      acc[i] = s;
      sum[i] = s;
    });
  });
}

// EmaUpdate(ema, param[, skip]): ema = decay * ema + (1 - decay) * param, rounded as the CPU
// rounds it (two products, one sum, no fused multiply-add).
absl::StatusOr<std::unique_ptr<Kernel>> CreateEmaUpdate(const Node& node, Backend& backend) {
  const float decay = node.attrs.GetFloat("decay", 0.999f);
  const float rest = 1.0f - decay;
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    float* ema = ctx.inputs[0].as<float>();
    const float* p = ctx.inputs[1].as<float>();
    const float* skip = gated ? ctx.inputs.back().as<float>() : nullptr;
    return LaunchElementwise(ctx.inputs[0].num_elements(), stream, "EmaUpdate", [=] __device__(int64_t i) {
      if (skip != nullptr && *skip != 0.0f) return;
      ema[i] = __fadd_rn(__fmul_rn(decay, ema[i]), __fmul_rn(rest, p[i]));
    });
  });
}

}  // namespace

void RegisterCudaOptimizerKernels(KernelRegistry& r) {
  r.Register("SgdUpdate", "cuda", DType::kF32, CudaSgdUpdate::Create);
  r.Register("AdamWUpdate", "cuda", DType::kF32, CudaAdamWUpdate::Create);
  r.Register("AccumulateGradient", "cuda", DType::kF32, CreateAccumulateGradient);
  r.Register("EmaUpdate", "cuda", DType::kF32, CreateEmaUpdate);
}

}  // namespace mpc::cuda
