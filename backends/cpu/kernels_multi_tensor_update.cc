// CPU MultiSgdUpdate / MultiAdamWUpdate (graph/multi_tensor_update.h): the single
// updates' loops (optimizer_math.h) parameter after parameter, so fusing the updates
// changes no value. A gradient may arrive in bf16 or f16 (passes/fold_gradient_casts.h):
// the loops widen it as they read it.
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/optimizer_math.h"
#include "base/status_macros.h"
#include "graph/multi_tensor_update.h"

namespace mpc {
namespace {

using cpu::AdamWCoefs;
using cpu::AdamWLoop;
using cpu::MakeKernel;
using cpu::NextAdamWStep;
using cpu::SgdLoop;
using cpu::WithCopyAt;

// Calls loop(gradient pointer) with the element type of the gradient at input `index`.
template <typename Loop>
void WithGradientAt(const KernelContext& ctx, int index, Loop loop) {
  const TensorView& g = ctx.inputs[index];
  if (g.dtype == DType::kBF16) return loop(g.as<Bf16>());
  if (g.dtype == DType::kF16) return loop(g.as<Half>());
  loop(g.as<float>());
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
      float* buf = in.momentum_buf >= 0 ? ctx.inputs[in.momentum_buf].as<float>() : nullptr;
      const int64_t n = ctx.inputs[in.param].num_elements();
      WithGradientAt(ctx, in.grad, [&](const auto* g) {
        WithCopyAt(ctx, in.lowp_copy, [&](auto* copy) { SgdLoop(n, p, g, buf, lr, momentum, wd, nesterov, copy); });
      });
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
      float* m = ctx.inputs[in.m].as<float>();
      float* v = ctx.inputs[in.v].as<float>();
      const int64_t n = ctx.inputs[in.param].num_elements();
      WithGradientAt(ctx, in.grad, [&](const auto* g) {
        WithCopyAt(ctx, in.lowp_copy, [&](auto* copy) { AdamWLoop(n, p, g, m, v, c, copy); });
      });
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuMultiTensorUpdateKernels(KernelRegistry& r) {
  r.Register("MultiSgdUpdate", "cpu", DType::kF32, CreateMultiSgd);
  r.Register("MultiAdamWUpdate", "cpu", DType::kF32, CreateMultiAdamW);
}

}  // namespace mpc
