// CPU optimizer updates on f32 master weights, in place, with torch.optim semantics:
//   SGD:   g += wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf; p -= lr*g
//   AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// The per-parameter step counter t lives in state, like torch's state['step'].
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

absl::StatusOr<std::unique_ptr<Kernel>> CreateSgd(const Node& node, Backend&) {
  const float momentum = node.attrs.GetFloat("momentum", 0.0f);
  const float wd = node.attrs.GetFloat("weight_decay", 0.0f);
  const bool nesterov = node.attrs.GetInt("nesterov", 0) != 0;
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  return MakeKernel([=](KernelContext& ctx) {
    if (gated && ctx.inputs.back().as<float>()[0] != 0.0f) return absl::OkStatus();  // skipped step
    const size_t n_state = ctx.inputs.size() - (gated ? 1 : 0);
    float* p = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float lr = ctx.inputs[2].as<float>()[0];
    float* buf = n_state > 3 ? ctx.inputs[3].as<float>() : nullptr;
    const int64_t n = ctx.inputs[0].num_elements();
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      float d = g[i] + wd * p[i];
      if (buf) {
        buf[i] = momentum * buf[i] + d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAdamW(const Node& node, Backend&) {
  const float b1 = node.attrs.GetFloat("beta1", 0.9f), b2 = node.attrs.GetFloat("beta2", 0.999f);
  const float eps = node.attrs.GetFloat("eps", 1e-8f), wd = node.attrs.GetFloat("weight_decay", 0.0f);
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  return MakeKernel([=](KernelContext& ctx) {
    if (gated && ctx.inputs.back().as<float>()[0] != 0.0f) return absl::OkStatus();  // skipped step
    float* p = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const float lr = ctx.inputs[2].as<float>()[0];
    float* m = ctx.inputs[3].as<float>();
    float* v = ctx.inputs[4].as<float>();
    float* step = ctx.inputs[5].as<float>();
    const float t = step[0] + 1.0f;
    step[0] = t;
    const float bc1 = 1.0f - std::pow(b1, t), bc2 = 1.0f - std::pow(b2, t);
    const float step_size = lr / bc1, bc2_sqrt = std::sqrt(bc2), decay = 1.0f - lr * wd;
    const int64_t n = ctx.inputs[0].num_elements();
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      p[i] *= decay;
      m[i] = b1 * m[i] + (1.0f - b1) * g[i];
      v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
      p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuOptimizerKernels(KernelRegistry& r) {
  r.Register("SgdUpdate", "cpu", DType::kF32, CreateSgd);
  r.Register("AdamWUpdate", "cpu", DType::kF32, CreateAdamW);
}

}  // namespace mpc
