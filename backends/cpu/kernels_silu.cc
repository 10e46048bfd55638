// CPU Silu and SiluGrad (graph/ops_elementwise.cc, made by passes/fuse_silu.h). f32, bf16
// and f16 run vector loops with exp_math.h's polynomial exponential, compiled per ISA
// (cpu_isa.h): with libm's scalar expf the fused op was slower than the Sigmoid and Mul it
// replaces (EfficientNet-B0 f32 1.16x the unfused step, Silu and SiluGrad 5x Sigmoid's
// time per element, 2026-11-28/29). f64, the reference, keeps libm.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/exp_math.h"
#include "backends/cpu/gelu_math.h"

namespace mpc {
namespace cpu {
namespace {

// sigmoid(x) from e^-|x|, which never overflows: 1 / (1 + e) for x >= 0, e / (1 + e) below.
__attribute__((always_inline)) inline float Sigmoid(float x) {
  const float e = ExpOfNonPositive(x < 0.0f ? x : -x);
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

template <typename T>
MPC_ISA_CLONES void SiluRange(int64_t begin, int64_t end, const T* x, T* y) {
  MapWidened(
      begin, end, x, static_cast<const T*>(nullptr), y,
      [](float xi, float) __attribute__((always_inline)) { return xi * Sigmoid(xi); });
}

// d/dx x s(x) = s (1 + x (1 - s)), as PyTorch's silu_backward writes it.
template <typename T>
MPC_ISA_CLONES void SiluGradRange(int64_t begin, int64_t end, const T* dy, const T* x, T* dx) {
  MapWidened(
      begin, end, x, dy, dx, [](float xi, float dyi) __attribute__((always_inline)) {
        const float s = Sigmoid(xi);
        return dyi * s * (1.0f + xi * (1.0f - s));
      });
}

template <typename T>
struct SiluKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      if constexpr (std::is_same_v<T, double>) {
        return MapUnary<T>(ctx, [](double v) { return v / (1.0 + std::exp(-v)); });
      } else {
        ParallelRanges(ctx.outputs[0].num_elements(), 32768,
                       [&](int64_t begin, int64_t end) { SiluRange(begin, end, x, y); });
        return absl::OkStatus();
      }
    });
  }
};

// Inputs (dY, X): the gradient reads the forward input.
template <typename T>
struct SiluGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      if constexpr (std::is_same_v<T, double>) {
        return MapGrad<T>(ctx, [](double g, double v) {
          const double s = 1.0 / (1.0 + std::exp(-v));
          return g * s * (1.0 + v * (1.0 - s));
        });
      } else {
        ParallelRanges(ctx.outputs[0].num_elements(), 32768,
                       [&](int64_t begin, int64_t end) { SiluGradRange(begin, end, dy, x, dx); });
        return absl::OkStatus();
      }
    });
  }
};

}  // namespace
}  // namespace cpu

void RegisterCpuSiluKernels(KernelRegistry& r) {
  cpu::RegisterFloatKernels<cpu::SiluKernel>(r, "Silu");
  cpu::RegisterFloatKernels<cpu::SiluGradKernel>(r, "SiluGrad");
}

}  // namespace mpc
