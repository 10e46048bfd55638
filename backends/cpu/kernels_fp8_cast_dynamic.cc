// CPU kernel of Fp8CastDynamic (graph/ops_fp8_gemm.cc), the lowered form of the
// just-in-time FP8 recipes' Fp8QuantizeDynamic: per scale group (graph/float8_groups.h)
// the amax, the scale by Fp8DynamicScale, the FP8 codes of f32(x) * scale (of x^T when
// transposed) and scale_inv = 1 / scale written where the GEMM reads it
// (Fp8GemmScaleIndex). The scale and its inverse are formed exactly as the CPU's
// Fp8QuantizeDynamic forms them (kernels_fp8.cc), so f32(code) * scale_inv is bit for bit
// the emulation's value. The CPU never lowers on its own (it has no FP8 tensor cores):
// this kernel is the reference the CUDA one is checked against, and runs where a test
// claims FP8 tensor cores for the CPU.
#include <algorithm>
#include <cmath>
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

// The geometry of one node: x's groups, and how an element of x lands in the codes and
// their scale layout.
struct CastGeometry {
  Fp8ScaleGroups groups;
  Fp8Granularity granularity = Fp8Granularity::kTensor;
  int64_t cols = 1;            // x's row length (x viewed as [n / cols, cols])
  bool transpose = false;      // codes = x^T
  int64_t rows = 1, depth = 1;  // the codes [rows, depth]
  int64_t tile = 128;
  int64_t scale_count = 1;
};

template <typename T, bool kE4M3>
absl::Status RunCast(KernelContext& ctx, const CastGeometry& geo, const Fp8DynamicRecipe& recipe) {
  const T* x = ctx.inputs[0].as<T>();
  uint8_t* codes = ctx.outputs[0].as<uint8_t>();
  float* scale_inv_out = ctx.outputs[1].as<float>();
  // The blocks layout pads each row of K-blocks with scales nothing reads: 1.
  std::fill(scale_inv_out, scale_inv_out + geo.scale_count, 1.0f);
  const Fp8ScaleGroups& g = geo.groups;
  const int64_t gp = g.groups_p(), gq = g.groups_q(), count = g.count();
  if (ctx.inputs[0].num_elements() == 0) return absl::OkStatus();
  // Group k's elements: rows [i0, i0 + ni) x columns [j0, j0 + nj) of outer slice o.
  auto for_each = [&](int64_t k, auto&& fn) {
    const int64_t o = k / (gp * gq), gi = (k / gq) % gp, gj = k % gq;
    const int64_t i0 = gi * g.chunk_p, j0 = gj * g.chunk_q;
    const int64_t i1 = std::min(g.p, i0 + g.chunk_p), j1 = std::min(g.q, j0 + g.chunk_q);
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = j0; j < j1; ++j) fn((o * g.p + i) * g.q + j);
    }
  };
#pragma omp parallel for if (count > 1 && ctx.inputs[0].num_elements() > 32768)
  for (int64_t k = 0; k < count; ++k) {
    float amax = 0;
    bool nan = false;
    for_each(k, [&](int64_t e) {
      const float v = static_cast<float>(x[e]);
      amax = std::max(amax, std::fabs(v));
      nan = nan || v != v;
    });
    const float scale = Fp8DynamicScale(nan ? NAN : amax, recipe);
    const float scale_inv = 1.0f / scale;
    int64_t first = -1;
    for_each(k, [&](int64_t e) {
      const int64_t r = e / geo.cols, c = e % geo.cols;
      const int64_t p = geo.transpose ? c : r, kk = geo.transpose ? r : c;
      const int64_t at = geo.transpose ? c * (ctx.inputs[0].num_elements() / geo.cols) + r : e;
      const float v = static_cast<float>(x[e]) * scale;  // in f32, rounded once
      codes[at] = kE4M3 ? FloatToF8E4M3(v) : FloatToF8E5M2(v);
      if (first < 0) first = Fp8GemmScaleIndex(geo.granularity, p, kk, geo.rows, geo.depth, geo.tile);
    });
    if (first >= 0) scale_inv_out[first] = scale_inv;
  }
  return absl::OkStatus();
}

template <typename T>
struct Fp8CastDynamicKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    MPC_ASSIGN_OR_RETURN(Fp8DynamicQuantization d, Fp8DynamicQuantizationOf(node));
    MPC_ASSIGN_OR_RETURN(Fp8Granularity granularity, ParseFp8Granularity(node.attrs.GetString("granularity", "tensor")));
    CastGeometry geo;
    geo.groups = d.groups;
    geo.granularity = granularity;
    geo.transpose = node.attrs.GetInt("transpose", 0) != 0;
    geo.tile = node.attrs.GetInt("tile", 128);
    const Shape& s = node.inputs[0]->shape;
    geo.cols = s.size() == 2 ? s[1] : std::max<int64_t>(NumElements(s), 1);
    const Shape& codes = node.outputs[0]->shape;
    geo.rows = codes.size() == 2 ? codes[0] : 1;
    geo.depth = codes.size() == 2 ? codes[1] : NumElements(codes);
    geo.scale_count = NumElements(node.outputs[1]->shape);
    const Fp8DynamicRecipe recipe = d.recipe;
    if (d.e4m3) return MakeKernel([geo, recipe](KernelContext& ctx) { return RunCast<T, true>(ctx, geo, recipe); });
    return MakeKernel([geo, recipe](KernelContext& ctx) { return RunCast<T, false>(ctx, geo, recipe); });
  }
};

}  // namespace

void RegisterCpuFp8CastDynamicKernels(KernelRegistry& r) {
  r.Register("Fp8CastDynamic", "cpu", DType::kF32, Fp8CastDynamicKernel<float>::Create);
  r.Register("Fp8CastDynamic", "cpu", DType::kBF16, Fp8CastDynamicKernel<Bf16>::Create);
  r.Register("Fp8CastDynamic", "cpu", DType::kF16, Fp8CastDynamicKernel<Half>::Create);
}

}  // namespace mpc
