// CPU optimizer updates on f32 master weights, in place, with torch.optim semantics
// (optimizer_math.h). The per-parameter step counter t lives in state, like torch's
// state['step'].
// With lowp_copy=1 the update also rounds the new weight into the parameter's bf16/f16
// copy (the input before the gated flag) in the same loop, instead of a Cast pass over
// the weights every step. The loops are instantiated per copy type so the plain f32
// update stays a branch-free vector loop.
// Also the other in-place writers of f32 training state: gradient accumulators
// (AccumulateGradient) and the weight average (EmaUpdate).
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/optimizer_math.h"
#include "base/status_macros.h"
#include "graph/half_types.h"

namespace mpc {
namespace {

using cpu::AdamWCoefs;
using cpu::AdamWLoop;
using cpu::MakeKernel;
using cpu::NextAdamWStep;
using cpu::SgdLoop;
using cpu::WithCopy;

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

// Gradient accumulation: sum = (first ? 0 : acc) + grad, written to both the output and
// the accumulator.
MPC_ISA_CLONES void AccumulateRange(int64_t begin, int64_t end, float* acc, const float* g, float* sum, bool first) {
  if (first) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) acc[i] = sum[i] = g[i];
  } else {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) acc[i] = sum[i] = acc[i] + g[i];
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAccumulateGradient(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    float* acc = ctx.inputs[0].as<float>();
    const float* g = ctx.inputs[1].as<float>();
    const bool first = ctx.inputs[2].as<float>()[0] != 0.0f;
    float* sum = ctx.outputs[0].as<float>();
    cpu::ParallelRanges(ctx.inputs[0].num_elements(), 32768,
                        [&](int64_t begin, int64_t end) { AccumulateRange(begin, end, acc, g, sum, first); });
    return absl::OkStatus();
  });
}

// The weight average: ema = decay * ema + (1 - decay) * param (the CUDA kernel rounds the
// same two products and one sum, so both backends agree bit for bit).
MPC_ISA_CLONES void EmaRange(int64_t begin, int64_t end, float* ema, const float* p, float decay) {
  const float rest = 1.0f - decay;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) ema[i] = decay * ema[i] + rest * p[i];
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateEmaUpdate(const Node& node, Backend&) {
  const float decay = node.attrs.GetFloat("decay", 0.999f);
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  return MakeKernel([=](KernelContext& ctx) {
    if (gated && ctx.inputs.back().as<float>()[0] != 0.0f) return absl::OkStatus();  // skipped step
    float* ema = ctx.inputs[0].as<float>();
    const float* p = ctx.inputs[1].as<float>();
    cpu::ParallelRanges(ctx.inputs[0].num_elements(), 32768,
                        [&](int64_t begin, int64_t end) { EmaRange(begin, end, ema, p, decay); });
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuOptimizerKernels(KernelRegistry& r) {
  r.Register("SgdUpdate", "cpu", DType::kF32, CreateSgd);
  r.Register("AdamWUpdate", "cpu", DType::kF32, CreateAdamW);
  r.Register("AccumulateGradient", "cpu", DType::kF32, CreateAccumulateGradient);
  r.Register("EmaUpdate", "cpu", DType::kF32, CreateEmaUpdate);
}

}  // namespace mpc
