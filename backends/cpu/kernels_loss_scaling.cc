// CPU kernels for loss scaling and gradient clipping: one fused unscale + all-finite
// check over every gradient (or the check alone, FindNonFinite), global-norm clipping, the dynamic scale update
// (PyTorch GradScaler's rule), and the test-only non-finite injector.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "distributed/communicator.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

// 1 where x is an infinity or a NaN (exponent all ones), on the bits: an or-reduction
// of these vectorises where `||` over std::isfinite does not.
inline uint32_t NonFiniteBit(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return (u & 0x7f800000u) == 0x7f800000u ? 1u : 0u;
}

// out = g * inv over a range; whether any g was non-finite. Both loops compiled for each
// vector ISA (cpu_isa.h).
MPC_ISA_CLONES bool UnscaleRange(const float* g, float* out, int64_t n, float inv) {
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) {
    out[i] = g[i] * inv;
    bad |= NonFiniteBit(g[i]);
  }
  return bad != 0;
}

MPC_ISA_CLONES bool AnyNonFiniteRange(const float* g, int64_t n) {
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= NonFiniteBit(g[i]);
  return bad != 0;
}

// The same over 16-bit words: an infinity or a NaN has every exponent bit set (bf16:
// 0x7f80, f16: 0x7c00). For gradients whose widening Cast was folded into the update
// (passes/fold_gradient_casts.h).
template <uint16_t kExponent>
MPC_ISA_CLONES bool AnyNonFinite16Range(const uint16_t* g, int64_t n) {
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (int64_t i = 0; i < n; ++i) bad |= (g[i] & kExponent) == kExponent ? 1u : 0u;
  return bad != 0;
}

bool AnyNonFiniteIn(const TensorView& t, int64_t begin, int64_t end) {
  switch (t.dtype) {
    case DType::kBF16:
      return AnyNonFinite16Range<0x7f80>(static_cast<const uint16_t*>(t.data) + begin, end - begin);
    case DType::kF16:
      return AnyNonFinite16Range<0x7c00>(static_cast<const uint16_t*>(t.data) + begin, end - begin);
    default:
      return AnyNonFiniteRange(t.as<float>() + begin, end - begin);
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateUnscale(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const float inv = 1.0f / ctx.inputs[0].as<float>()[0];
    std::atomic<bool> nonfinite{false};
    for (size_t t = 1; t < ctx.inputs.size(); ++t) {
      const float* g = ctx.inputs[t].as<float>();
      float* out = ctx.outputs[t - 1].as<float>();
      cpu::ParallelRanges(ctx.inputs[t].num_elements(), 32768, [&](int64_t begin, int64_t end) {
        if (UnscaleRange(g + begin, out + begin, end - begin, inv)) nonfinite.store(true, std::memory_order_relaxed);
      });
    }
    ctx.outputs.back().as<float>()[0] = nonfinite.load() ? 1.0f : 0.0f;
    return absl::OkStatus();
  });
}

// FindNonFinite: UnscaleGradients' check alone, for programs without a scale.
absl::StatusOr<std::unique_ptr<Kernel>> CreateFindNonFinite(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    std::atomic<bool> nonfinite{false};
    for (const TensorView& t : ctx.inputs) {
      cpu::ParallelRanges(t.num_elements(), 32768, [&](int64_t begin, int64_t end) {
        if (AnyNonFiniteIn(t, begin, end)) nonfinite.store(true, std::memory_order_relaxed);
      });
    }
    ctx.outputs[0].as<float>()[0] = nonfinite.load() ? 1.0f : 0.0f;
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateClip(const Node& node, Backend& backend) {
  const double max_norm = node.attrs.GetFloat("max_norm", 1.0f);
  // ZeRO-1 (sharded=1): the inputs are this rank's slices of the gradients, so the
  // global norm needs every rank's sum of squares.
  Communicator* comm = nullptr;
  if (node.attrs.GetInt("sharded", 0) != 0) {
    comm = backend.communicator();
    if (!comm) {
      return absl::FailedPreconditionError(absl::StrCat("ClipByGlobalNorm '", node.name,
                                                        "' clips ZeRO-1 gradient shards but the process is not part "
                                                        "of a job; start it with mpirun -np N"));
    }
  }
  const std::string name = node.name;
  return MakeKernel([max_norm, comm, name](KernelContext& ctx) {
    double sum = 0;
    for (const TensorView& g : ctx.inputs) {
      const float* p = g.as<float>();
      const int64_t n = g.num_elements();
#pragma omp parallel for reduction(+ : sum) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(p[i]) * p[i];
    }
    if (comm) {
      float all = static_cast<float>(sum);
      absl::Status s = comm->AllReduce(&all, 1, ReduceOp::kSum, absl::StrCat("'", name, "' at step ", ctx.step + 1));
      if (!s.ok()) return s;
      sum = all;
    }
    const double norm = std::sqrt(sum);
    // torch.nn.utils.clip_grad_norm_: coefficient max_norm / (norm + 1e-6), at most 1.
    const float coef = static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
    for (size_t t = 0; t < ctx.inputs.size(); ++t) {
      const float* g = ctx.inputs[t].as<float>();
      float* out = ctx.outputs[t].as<float>();
      const int64_t n = ctx.inputs[t].num_elements();
#pragma omp parallel for simd if (n > 32768)
      for (int64_t i = 0; i < n; ++i) out[i] = g[i] * coef;
    }
    ctx.outputs.back().as<float>()[0] = static_cast<float>(norm);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateInject(const Node& node, Backend&) {
  const int64_t step = node.attrs.GetInt("step", -1);
  const float value = node.attrs.GetString("value", "inf") == "nan" ? std::numeric_limits<float>::quiet_NaN()
                                                                    : std::numeric_limits<float>::infinity();
  return MakeKernel([step, value](KernelContext& ctx) {
    const int64_t n = ctx.inputs[0].num_elements();
    std::memcpy(ctx.outputs[0].data, ctx.inputs[0].data, n * sizeof(float));
    if (ctx.step == step && n > 0) ctx.outputs[0].as<float>()[0] = value;
    return absl::OkStatus();
  });
}

// GradScaler.update: on overflow scale *= backoff and the growth tracker resets; else
// the tracker counts clean steps and at `interval` the scale grows (and the tracker
// resets). The scale stays within [min_scale, max_scale] and finite.
absl::StatusOr<std::unique_ptr<Kernel>> CreateUpdateScale(const Node& node, Backend&) {
  const float growth = node.attrs.GetFloat("growth_factor", 2.0f);
  const float backoff = node.attrs.GetFloat("backoff_factor", 0.5f);
  const float interval = static_cast<float>(node.attrs.GetInt("growth_interval", 2000));
  const float min_scale = node.attrs.GetFloat("min_scale", 0.0f);
  float max_scale = node.attrs.GetFloat("max_scale", 0.0f);
  if (max_scale <= 0) max_scale = std::numeric_limits<float>::max();
  return MakeKernel([=](KernelContext& ctx) {
    float& scale = ctx.inputs[0].as<float>()[0];
    float& tracker = ctx.inputs[1].as<float>()[0];
    const bool overflow = ctx.inputs[2].as<float>()[0] != 0.0f;
    // A micro-batch that does not apply the step (gradient accumulation) changes nothing.
    if (ctx.inputs.size() > 3 && ctx.inputs[3].as<float>()[0] != 0.0f) return absl::OkStatus();
    if (overflow) {
      scale = std::max(scale * backoff, min_scale);
      tracker = 0;
    } else if (tracker + 1 >= interval) {
      const float grown = scale * growth;
      scale = std::isfinite(grown) ? std::min(grown, max_scale) : scale;
      tracker = 0;
    } else {
      tracker += 1;
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuLossScalingKernels(KernelRegistry& r) {
  r.Register("UnscaleGradients", "cpu", DType::kF32, CreateUnscale);
  // Looked up by its first gradient's dtype, which fold-gradient-casts keeps f32; the
  // others may be bf16/f16.
  r.Register("FindNonFinite", "cpu", DType::kF32, CreateFindNonFinite);
  r.Register("ClipByGlobalNorm", "cpu", DType::kF32, CreateClip);
  r.Register("InjectNonFinite", "cpu", DType::kF32, CreateInject);
  r.Register("UpdateLossScale", "cpu", DType::kF32, CreateUpdateScale);
}

}  // namespace mpc
