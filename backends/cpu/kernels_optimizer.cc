// CPU optimizer updates on f32 master weights, in place, with torch.optim semantics:
//   SGD:   g += wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf; p -= lr*g
//   AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// The per-parameter step counter t lives in state, like torch's state['step'].
// With lowp_copy=1 the update also rounds the new weight into the parameter's bf16/f16
// copy (the input before the gated flag) in the same loop, instead of a Cast pass over
// the weights every step. The loops are instantiated per copy type so the plain f32
// update stays a branch-free vector loop.
// MultiSgdUpdate / MultiAdamWUpdate (graph/multi_tensor_update.h) run the same loops
// parameter after parameter, so fusing the updates changes no value.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "base/status_macros.h"
#include "graph/half_types.h"
#include "graph/multi_tensor_update.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

struct NoCopy {};

// Calls loop(copy_pointer_or_NoCopy) with the element type of the copy at input
// copy_index (-1: none); store a weight with StoreCopy(copy, i, w).
template <typename Loop>
void WithCopyAt(const KernelContext& ctx, int copy_index, Loop loop) {
  if (copy_index < 0) return loop(static_cast<NoCopy*>(nullptr));
  const TensorView& v = ctx.inputs[copy_index];
  if (v.dtype == DType::kBF16) return loop(v.as<Bf16>());
  loop(v.as<Half>());
}

// The single updates' copy is the input before the gate flag, or the last.
template <typename Loop>
void WithCopy(const KernelContext& ctx, bool has_copy, bool gated, Loop loop) {
  WithCopyAt(ctx, has_copy ? static_cast<int>(ctx.inputs.size()) - (gated ? 2 : 1) : -1, loop);
}

inline void StoreCopy(NoCopy*, int64_t, float) {}
template <typename T>
inline void StoreCopy(T* copy, int64_t i, float w) {
  copy[i] = T(w);
}

// The update loops take everything as plain arguments (no closure captures), so each
// instantiation is the same vector loop; with NoCopy, StoreCopy vanishes.
template <typename C>
void SgdLoop(int64_t n, float* p, const float* g, float* buf, float lr, float momentum, float wd, bool nesterov,
             C* copy) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    float d = g[i] + wd * p[i];
    if (buf) {
      buf[i] = momentum * buf[i] + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
    StoreCopy(copy, i, p[i]);
  }
}

struct AdamWCoefs {
  float b1, b2, eps, step_size, bc2_sqrt, decay;
};

// Advances a step counter and returns this step's coefficients (torch.optim.AdamW's).
AdamWCoefs NextAdamWStep(float* step, float lr, float b1, float b2, float eps, float wd) {
  const float t = step[0] + 1.0f;
  step[0] = t;
  const float bc1 = 1.0f - std::pow(b1, t), bc2 = 1.0f - std::pow(b2, t);
  return AdamWCoefs{b1, b2, eps, lr / bc1, std::sqrt(bc2), 1.0f - lr * wd};
}

template <typename C>
void AdamWLoop(int64_t n, float* p, const float* g, float* m, float* v, const AdamWCoefs c, C* copy) {
  const float b1 = c.b1, b2 = c.b2, eps = c.eps, step_size = c.step_size, bc2_sqrt = c.bc2_sqrt, decay = c.decay;
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) {
    p[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    StoreCopy(copy, i, p[i]);
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSgd(const Node& node, Backend&) {
  const float momentum = node.attrs.GetFloat("momentum", 0.0f);
  const float wd = node.attrs.GetFloat("weight_decay", 0.0f);
  const bool nesterov = node.attrs.GetInt("nesterov", 0) != 0;
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  const bool has_copy = node.attrs.GetInt("lowp_copy", 0) != 0;
  return MakeKernel([=](KernelContext& ctx) {
    if (gated && ctx.inputs.back().as<float>()[0] != 0.0f) return absl::OkStatus();  // skipped step
    const size_t n_state = ctx.inputs.size() - (gated ? 1 : 0) - (has_copy ? 1 : 0);
    float* p = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float lr = ctx.inputs[2].as<float>()[0];
    float* buf = n_state > 3 ? ctx.inputs[3].as<float>() : nullptr;
    const int64_t n = ctx.inputs[0].num_elements();
    WithCopy(ctx, has_copy, gated, [&](auto* copy) { SgdLoop(n, p, g, buf, lr, momentum, wd, nesterov, copy); });
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamW(const Node& node, Backend&) {
  const float b1 = node.attrs.GetFloat("beta1", 0.9f), b2 = node.attrs.GetFloat("beta2", 0.999f);
  const float eps = node.attrs.GetFloat("eps", 1e-8f), wd = node.attrs.GetFloat("weight_decay", 0.0f);
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  const bool has_copy = node.attrs.GetInt("lowp_copy", 0) != 0;
  return MakeKernel([=](KernelContext& ctx) {
    if (gated && ctx.inputs.back().as<float>()[0] != 0.0f) return absl::OkStatus();  // skipped step
    float* p = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float lr = ctx.inputs[2].as<float>()[0];
    float* m = ctx.inputs[3].as<float>();
    float* v = ctx.inputs[4].as<float>();
    const AdamWCoefs c = NextAdamWStep(ctx.inputs[5].as<float>(), lr, b1, b2, eps, wd);
    const int64_t n = ctx.inputs[0].num_elements();
    WithCopy(ctx, has_copy, gated, [&](auto* copy) { AdamWLoop(n, p, g, m, v, c, copy); });
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMultiSgd(const Node& node, Backend&) {
  MPC_ASSIGN_OR_RETURN(const MultiUpdateLayout layout, MultiUpdateLayoutOf(node));
  const float momentum = node.attrs.GetFloat("momentum", 0.0f);
  const float wd = node.attrs.GetFloat("weight_decay", 0.0f);
  const bool nesterov = node.attrs.GetInt("nesterov", 0) != 0;
  return MakeKernel([=](KernelContext& ctx) {
    if (layout.found_nonfinite >= 0 && ctx.inputs[layout.found_nonfinite].as<float>()[0] != 0.0f) {
      return absl::OkStatus();  // skipped step
    }
    const float lr = ctx.inputs[layout.lr].as<float>()[0];
    for (const UpdateTensorInputs& in : layout.tensors) {
      float* p = ctx.inputs[in.param].as<float>();
      const float* g = ctx.inputs[in.grad].as<float>();
      float* buf = in.momentum_buf >= 0 ? ctx.inputs[in.momentum_buf].as<float>() : nullptr;
      const int64_t n = ctx.inputs[in.param].num_elements();
      WithCopyAt(ctx, in.lowp_copy, [&](auto* copy) { SgdLoop(n, p, g, buf, lr, momentum, wd, nesterov, copy); });
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateMultiAdamW(const Node& node, Backend&) {
  MPC_ASSIGN_OR_RETURN(const MultiUpdateLayout layout, MultiUpdateLayoutOf(node));
  const float b1 = node.attrs.GetFloat("beta1", 0.9f), b2 = node.attrs.GetFloat("beta2", 0.999f);
  const float eps = node.attrs.GetFloat("eps", 1e-8f), wd = node.attrs.GetFloat("weight_decay", 0.0f);
  return MakeKernel([=](KernelContext& ctx) {
    if (layout.found_nonfinite >= 0 && ctx.inputs[layout.found_nonfinite].as<float>()[0] != 0.0f) {
      return absl::OkStatus();  // skipped step
    }
    const float lr = ctx.inputs[layout.lr].as<float>()[0];
    for (const UpdateTensorInputs& in : layout.tensors) {
      const AdamWCoefs c = NextAdamWStep(ctx.inputs[in.step].as<float>(), lr, b1, b2, eps, wd);
      float* p = ctx.inputs[in.param].as<float>();
      const float* g = ctx.inputs[in.grad].as<float>();
      float* m = ctx.inputs[in.m].as<float>();
      float* v = ctx.inputs[in.v].as<float>();
      const int64_t n = ctx.inputs[in.param].num_elements();
      WithCopyAt(ctx, in.lowp_copy, [&](auto* copy) { AdamWLoop(n, p, g, m, v, c, copy); });
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuOptimizerKernels(KernelRegistry& r) {
  r.Register("SgdUpdate", "cpu", DType::kF32, CreateSgd);
  r.Register("AdamWUpdate", "cpu", DType::kF32, CreateAdamW);
  r.Register("MultiSgdUpdate", "cpu", DType::kF32, CreateMultiSgd);
  r.Register("MultiAdamWUpdate", "cpu", DType::kF32, CreateMultiAdamW);
}

}  // namespace mpc
