// CPU kernels for FP8 (the fp8 pass: passes/fp8.h): the exact emulation of FP8 quantization — scale in
// f32, round to E4M3/E5M2 with the OCP rounding and saturation of graph/float8.h,
// dequantize with scale_inv — with the amax recorded on the way, and the batched
// delayed-scaling update. An FP8 GEMM then runs as an f32 GEMM over these values.
#include <cmath>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/float8.h"
#include "graph/float8_scaling.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

template <typename T>
struct QuantizeKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool e4m3 = node.attrs.GetString("format", "e4m3") == "e4m3";
    return MakeKernel([e4m3](KernelContext& ctx) {
      const T* x = ctx.inputs[0].as<T>();
      const float scale = ctx.inputs[1].as<float>()[0];
      const float scale_inv = ctx.inputs[2].as<float>()[0];
      float* q = ctx.outputs[0].as<float>();
      const int64_t n = ctx.inputs[0].num_elements();
      float amax = 0;
      bool nan = false;
      // The scaled value is formed in f32, as the GPU cast kernels do, then rounded once.
      if (e4m3) {
#pragma omp parallel for simd reduction(max : amax) reduction(|| : nan) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(x[i]);
          amax = std::max(amax, std::fabs(v));
          nan = nan || v != v;
          q[i] = RoundToF8E4M3(v * scale) * scale_inv;
        }
      } else {
#pragma omp parallel for simd reduction(max : amax) reduction(|| : nan) if (n > 32768)
        for (int64_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(x[i]);
          amax = std::max(amax, std::fabs(v));
          nan = nan || v != v;
          q[i] = RoundToF8E5M2(v * scale) * scale_inv;
        }
      }
      if (ctx.inputs.size() > 3 && ctx.inputs[3].data) {
        // Slot 0 is this step's amax: several quantizations of one tensor keep the largest,
        // and a NaN sticks so that the update sees a non-finite amax.
        float& slot = ctx.inputs[3].as<float>()[0];
        if (nan) amax = NAN;
        if (std::isnan(amax) || amax > slot) slot = amax;
      }
      return absl::OkStatus();
    });
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateUpdateScales(const Node& node, Backend&) {
  const std::vector<float> fp8_max = node.attrs.GetFloats("fp8_max", {});
  Fp8ScaleRecipe base;
  base.margin = static_cast<int>(node.attrs.GetInt("margin", 0));
  base.most_recent = node.attrs.GetString("algo", "max") == "most_recent";
  base.amax_floor = node.attrs.GetFloat("amax_floor", 0.0f);
  return MakeKernel([fp8_max, base](KernelContext& ctx) {
    for (size_t t = 0; t < fp8_max.size(); ++t) {
      Fp8ScaleRecipe r = base;
      r.fp8_max = fp8_max[t];
      const TensorView& history = ctx.inputs[4 * t + 2];
      const float amax = UpdateFp8Meta(history.as<float>(), history.num_elements(), ctx.inputs[4 * t].as<float>(),
                                       ctx.inputs[4 * t + 1].as<float>(), r);
      ctx.inputs[4 * t + 3].as<float>()[0] = amax;
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuFp8Kernels(KernelRegistry& r) {
  r.Register("Fp8Quantize", "cpu", DType::kF32, QuantizeKernel<float>::Create);
  r.Register("Fp8Quantize", "cpu", DType::kBF16, QuantizeKernel<Bf16>::Create);
  r.Register("Fp8Quantize", "cpu", DType::kF16, QuantizeKernel<Half>::Create);
  r.Register("Fp8UpdateScales", "cpu", DType::kF32, CreateUpdateScales);
}

}  // namespace mpc
