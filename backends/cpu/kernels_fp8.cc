// CPU kernels for FP8 (the fp8 pass: passes/fp8.h): the exact emulation of FP8 quantization — scale in
// f32, round to E4M3/E5M2 with the OCP rounding and saturation of graph/float8.h,
// dequantize with scale_inv — with the amax recorded on the way, and the batched
// delayed-scaling update; and the just-in-time quantization of the current, rowwise and
// block recipes (Fp8QuantizeDynamic: a scale per group from the group's own amax). An FP8
// GEMM then runs as an f32 GEMM over these values.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "base/status_macros.h"
#include "graph/float8.h"
#include "graph/float8_groups.h"
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

// max|x| over n contiguous values; NaN sticks (std::max would drop it).
template <typename T>
float AmaxOf(const T* x, int64_t n) {
  float amax = 0;
  bool nan = false;
#pragma omp simd reduction(max : amax) reduction(|| : nan)
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[i]);
    amax = std::max(amax, std::fabs(v));
    nan = nan || v != v;
  }
  return nan ? NAN : amax;
}

// The larger of two amaxes, NaN sticking.
inline float CombineAmax(float a, float b) { return a != a ? a : ((b > a || b != b) ? b : a); }

// q = dequantized FP8 of x * scale, n contiguous values with one scale.
template <bool kE4M3, typename T>
void QuantizeRun(const T* x, float* q, int64_t n, float scale, float scale_inv) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(x[i]) * scale;
    q[i] = (kE4M3 ? RoundToF8E4M3(v) : RoundToF8E5M2(v)) * scale_inv;
  }
}

// Two passes over x viewed as [outer, p, q] (graph/float8_groups.h): the amax of every
// group, then each element scaled by its group's scale, rounded once and multiplied by the
// inverse, as Fp8Quantize does with a per-tensor scale. Three layouts keep the inner loops
// contiguous: groups that are runs of memory (q == 1: a tensor, rows or tiles along the
// last axis), groups down columns (q > 1, chunk_q == 1: along an inner axis, a vector of
// groups per row), and blocks (runs of chunk_q within a row).
template <typename T>
struct QuantizeDynamicKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    MPC_ASSIGN_OR_RETURN(Fp8DynamicQuantization d, Fp8DynamicQuantizationOf(node));
    const Fp8ScaleGroups groups = d.groups;
    const Fp8DynamicRecipe recipe = d.recipe;
    if (d.e4m3) return MakeKernel([groups, recipe](KernelContext& ctx) { return Run<true>(ctx, groups, recipe); });
    return MakeKernel([groups, recipe](KernelContext& ctx) { return Run<false>(ctx, groups, recipe); });
  }

  template <bool kE4M3>
  static absl::Status Run(KernelContext& ctx, const Fp8ScaleGroups& g, const Fp8DynamicRecipe& recipe) {
    const T* x = ctx.inputs[0].as<T>();
    float* q = ctx.outputs[0].as<float>();
    const int64_t n = ctx.inputs[0].num_elements();
    if (n == 0) return absl::OkStatus();
    std::vector<float> scale(g.count()), scale_inv(g.count());
    auto set_scale = [&](int64_t group, float amax) {
      scale[group] = Fp8DynamicScale(amax, recipe);
      scale_inv[group] = 1.0f / scale[group];
    };
    const bool big = n > 32768;
    if (g.q == 1) {
      // Group k is the run [k * chunk_p, ...) of each outer slice.
      const int64_t gp = g.groups_p(), runs = g.outer * gp;
      auto run_of = [&](int64_t k, int64_t* begin, int64_t* len) {
        const int64_t o = k / gp, c = k % gp;
        *begin = o * g.p + c * g.chunk_p;
        *len = std::min(g.chunk_p, g.p - c * g.chunk_p);
      };
      if (runs == 1) {  // one group (a tensor): split the reduction and the rounding
        float amax = 0;
        bool nan = false;
#pragma omp parallel for simd reduction(max : amax) reduction(|| : nan) if (big)
        for (int64_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(x[i]);
          amax = std::max(amax, std::fabs(v));
          nan = nan || v != v;
        }
        set_scale(0, nan ? NAN : amax);
        const float s = scale[0], inv = scale_inv[0];
#pragma omp parallel for simd if (big)
        for (int64_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(x[i]) * s;
          q[i] = (kE4M3 ? RoundToF8E4M3(v) : RoundToF8E5M2(v)) * inv;
        }
        return absl::OkStatus();
      }
#pragma omp parallel for if (big)
      for (int64_t k = 0; k < runs; ++k) {
        int64_t begin, len;
        run_of(k, &begin, &len);
        set_scale(k, AmaxOf(x + begin, len));
        QuantizeRun<kE4M3>(x + begin, q + begin, len, scale[k], scale_inv[k]);
      }
      return absl::OkStatus();
    }
    const int64_t gp = g.groups_p(), gq = g.groups_q();
    if (g.chunk_q == 1) {
      // Groups down columns: row i of slice o updates the vector of groups (o, i / chunk_p, :).
      std::vector<float> amax(g.count(), 0.0f);
      const int64_t col_blocks = (g.q + 255) / 256, tasks = g.outer * gp * col_blocks;
#pragma omp parallel for if (big)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t cb = t % col_blocks, og = t / col_blocks, o = og / gp, c = og % gp;
        const int64_t j0 = cb * 256, j1 = std::min(g.q, j0 + 256);
        float* m = amax.data() + og * gq;
        for (int64_t i = c * g.chunk_p; i < std::min(g.p, (c + 1) * g.chunk_p); ++i) {
          const T* row = x + (o * g.p + i) * g.q;
#pragma omp simd
          for (int64_t j = j0; j < j1; ++j) {
            const float v = std::fabs(static_cast<float>(row[j]));
            m[j] = CombineAmax(m[j], v);
          }
        }
      }
      for (int64_t k = 0; k < g.count(); ++k) set_scale(k, amax[k]);
#pragma omp parallel for if (big)
      for (int64_t r = 0; r < g.outer * g.p; ++r) {
        const int64_t o = r / g.p, i = r % g.p;
        const float* s = scale.data() + (o * gp + i / g.chunk_p) * gq;
        const float* inv = scale_inv.data() + (o * gp + i / g.chunk_p) * gq;
        const T* xr = x + r * g.q;
        float* qr = q + r * g.q;
#pragma omp simd
        for (int64_t j = 0; j < g.q; ++j) {
          const float v = static_cast<float>(xr[j]) * s[j];
          qr[j] = (kE4M3 ? RoundToF8E4M3(v) : RoundToF8E5M2(v)) * inv[j];
        }
      }
      return absl::OkStatus();
    }
    // Blocks: runs of chunk_q within each row; the rows of one block row (o, c) together.
#pragma omp parallel for if (big)
    for (int64_t og = 0; og < g.outer * gp; ++og) {
      const int64_t o = og / gp, c = og % gp;
      const int64_t i0 = c * g.chunk_p, i1 = std::min(g.p, i0 + g.chunk_p);
      for (int64_t b = 0; b < gq; ++b) {
        const int64_t j0 = b * g.chunk_q, len = std::min(g.chunk_q, g.q - j0);
        float amax = 0;
        for (int64_t i = i0; i < i1; ++i) amax = CombineAmax(amax, AmaxOf(x + (o * g.p + i) * g.q + j0, len));
        set_scale(og * gq + b, amax);
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t at = (o * g.p + i) * g.q + j0;
          QuantizeRun<kE4M3>(x + at, q + at, len, scale[og * gq + b], scale_inv[og * gq + b]);
        }
      }
    }
    return absl::OkStatus();
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateUpdateScales(const Node& node, Backend&) {
  const std::vector<float> fp8_max = node.attrs.GetFloats("fp8_max", {});
  Fp8ScaleRecipe base;
  base.margin = static_cast<int>(node.attrs.GetInt("margin", 0));
  base.most_recent = node.attrs.GetString("algo", "max") == "most_recent";
  base.amax_floor = node.attrs.GetFloat("amax_floor", 0.0f);
  const bool held = node.attrs.GetInt("held", 0) != 0;
  return MakeKernel([fp8_max, base, held](KernelContext& ctx) {
    // A micro-batch that does not end the optimizer step: the amaxes keep gathering.
    if (held && ctx.inputs.back().as<float>()[0] != 0.0f) return absl::OkStatus();
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
  r.Register("Fp8QuantizeDynamic", "cpu", DType::kF32, QuantizeDynamicKernel<float>::Create);
  r.Register("Fp8QuantizeDynamic", "cpu", DType::kBF16, QuantizeDynamicKernel<Bf16>::Create);
  r.Register("Fp8QuantizeDynamic", "cpu", DType::kF16, QuantizeDynamicKernel<Half>::Create);
}

}  // namespace mpc
