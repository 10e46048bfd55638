// CPU Dropout and DropoutGrad (graph/ops_nn.cc) in f32, f64, bf16 and f16. The mask comes
// from a counter-based generator keyed by (seed, node, step, element), so it does not
// depend on threads and a resumed run draws what the uninterrupted run drew.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// Counter-based uniform draw in [0, 1): a SplitMix64 hash of (seed, node, step,
// element), so every element's draw is independent of thread scheduling and a resumed
// run draws exactly what the uninterrupted run drew.
inline double UniformAt(uint64_t seed, uint64_t node_id, int64_t step, int64_t i) {
  uint64_t z = seed ^ (node_id * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(step) * 0xD1B54A32D192ED03ull) ^
               (static_cast<uint64_t>(i) * 0x94D049BB133111EBull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

// Dropout in training: keep with probability 1 - ratio, scale kept values by
// 1/(1 - ratio). In evaluation (or ratio 0) the output is the input and the mask all
// true. `mpc_training` (set by the compiler) overrides ONNX's training_mode input.
template <typename T>
struct DropoutKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto ratio = ops::ConstantScalar(node, 1, 0.5);
    auto mode = ops::ConstantScalar(node, 2, 0.0);
    if (!ratio.ok()) return ratio.status();
    if (!mode.ok()) return mode.status();
    const bool training = node.attrs.GetInt("mpc_training", *mode != 0.0 ? 1 : 0) != 0;
    const double r = *ratio;
    const uint64_t node_id = static_cast<uint64_t>(node.id);
    return MakeKernel([=](KernelContext& ctx) {
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      uint8_t* mask = ctx.outputs.size() > 1 ? ctx.outputs[1].as<uint8_t>() : nullptr;
      const int64_t n = ctx.inputs[0].num_elements();
      // The scale stays in Acc<T>: a bf16 scale would be off by up to 2^-9 relative.
      const Acc<T> scale = static_cast<Acc<T>>(1.0 / (1.0 - r));
      const bool active = training && r > 0;
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = !active || UniformAt(ctx.seed, node_id, ctx.step, i) >= r;
        y[i] = keep ? (active ? static_cast<T>(Acc<T>(x[i]) * scale) : x[i]) : T(0);
        if (mask) mask[i] = keep;
      }
      return absl::OkStatus();
    });
  }
};

template <typename T>
struct DropoutGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const Acc<T> scale = static_cast<Acc<T>>(1.0 / (1.0 - node.attrs.GetFloat("ratio", 0.5f)));
    return MakeKernel([scale](KernelContext& ctx) {
      const T* dy = ctx.inputs[0].as<T>();
      const uint8_t* mask = ctx.inputs[1].as<uint8_t>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t n = ctx.outputs[0].num_elements();
      for (int64_t i = 0; i < n; ++i) dx[i] = mask[i] ? static_cast<T>(Acc<T>(dy[i]) * scale) : T(0);
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuDropoutKernels(KernelRegistry& r) {
  cpu::RegisterFloatKernels<DropoutKernel>(r, "Dropout");
  cpu::RegisterFloatKernels<DropoutGradKernel>(r, "DropoutGrad");
}

}  // namespace mpc
