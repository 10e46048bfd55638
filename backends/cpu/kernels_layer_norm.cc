// CPU LayerNormalization and LayerNormGrad (graph/ops_norm.cc), one row per normalised
// slice, in f32, f64, bf16 and f16. Statistics are kept in Acc<T> (f32 for the 16-bit
// formats) and stored in f32 for the gradient; outputs are rounded once.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "graph/ops_norm.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// ---------------------------------------------------------------------------------
// LayerNormalization

// For each position j of the normalised slice, the element of a (broadcast) affine
// operand it reads.
std::vector<int64_t> AffineIndex(const Shape& operand, const Shape& norm) {
  const auto strides = cpu::BroadcastStrides(operand, norm);
  const int64_t d = NumElements(norm);
  std::vector<int64_t> idx(d);
  for (int64_t j = 0; j < d; ++j) {
    int64_t rem = j, off = 0;
    for (int k = static_cast<int>(norm.size()) - 1; k >= 0; --k) {
      off += (rem % norm[k]) * strides[k];
      rem /= norm[k];
    }
    idx[j] = off;
  }
  return idx;
}

struct RowSplit {
  int64_t rows = 1, d = 1;
  Shape norm;
};

RowSplit SplitRows(const Shape& x, int axis) {
  RowSplit s;
  for (int i = 0; i < static_cast<int>(x.size()); ++i) {
    if (i < axis)
      s.rows *= x[i];
    else {
      s.d *= x[i];
      s.norm.push_back(x[i]);
    }
  }
  return s;
}

template <typename T>
struct LayerNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto axis = ops::LayerNormAxis(node);
    if (!axis.ok()) return axis.status();
    const RowSplit s = SplitRows(node.inputs[0]->shape, *axis);
    const std::vector<int64_t> si = AffineIndex(node.inputs[1]->shape, s.norm);
    const bool has_b = node.inputs.size() > 2 && node.inputs[2];
    const std::vector<int64_t> bi = has_b ? AffineIndex(node.inputs[2]->shape, s.norm) : std::vector<int64_t>();
    const float eps = node.attrs.GetFloat("epsilon", 1e-5f);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* x = ctx.inputs[0].as<T>();
      const T* scale = ctx.inputs[1].as<T>();
      const T* bias = has_b ? ctx.inputs[2].as<T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      A* mean_out = ctx.outputs.size() > 1 ? ctx.outputs[1].as<A>() : nullptr;
      A* inv_out = ctx.outputs.size() > 2 ? ctx.outputs[2].as<A>() : nullptr;
      const int64_t d = s.d;
#pragma omp parallel for if (s.rows > 8 && s.rows * d > 16384)
      for (int64_t r = 0; r < s.rows; ++r) {
        const T* xr = x + r * d;
        T* yr = y + r * d;
        A sum = 0;
        for (int64_t j = 0; j < d; ++j) sum += A(xr[j]);
        const A mean = d ? sum / static_cast<A>(d) : A(0);
        A sq = 0;
        for (int64_t j = 0; j < d; ++j) {
          const A c = A(xr[j]) - mean;
          sq += c * c;
        }
        const A var = d ? sq / static_cast<A>(d) : A(0);
        const A inv = A(1) / std::sqrt(var + static_cast<A>(eps));
        for (int64_t j = 0; j < d; ++j) {
          A v = (A(xr[j]) - mean) * inv * A(scale[si[j]]);
          if (bias) v += A(bias[bi[j]]);
          yr[j] = static_cast<T>(v);
        }
        if (mean_out) mean_out[r] = mean;
        if (inv_out) inv_out[r] = inv;
      }
      return absl::OkStatus();
    });
  }
};

// dX = inv * (g - mean(g) - xhat * mean(g * xhat)), g = dY * scale;
// dScale = sum_rows(dY * xhat); dB = sum_rows(dY).
template <typename T>
struct LayerNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto axis = ops::LayerNormAxis(node);
    if (!axis.ok()) return axis.status();
    const RowSplit s = SplitRows(node.inputs[1]->shape, *axis);
    const std::vector<int64_t> si = AffineIndex(node.inputs[2]->shape, s.norm);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      const T* scale = ctx.inputs[2].as<T>();
      const std::vector<A> mean = LoadAll<A>(ctx.inputs[3]);
      const std::vector<A> inv = LoadAll<A>(ctx.inputs[4]);
      T* dx = ctx.outputs[0].as<T>();
      T* dscale = ctx.outputs[1].as<T>();
      T* db = ctx.outputs[2].as<T>();
      const int64_t d = s.d, rows = s.rows;
#pragma omp parallel for if (rows > 8 && rows * d > 16384)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t o = r * d;
        A sg = 0, sgx = 0;
        for (int64_t j = 0; j < d; ++j) {
          const A g = A(dy[o + j]) * A(scale[si[j]]);
          const A xh = (A(x[o + j]) - mean[r]) * inv[r];
          sg += g;
          sgx += g * xh;
        }
        const A mg = sg / static_cast<A>(d), mgx = sgx / static_cast<A>(d);
        for (int64_t j = 0; j < d; ++j) {
          const A g = A(dy[o + j]) * A(scale[si[j]]);
          const A xh = (A(x[o + j]) - mean[r]) * inv[r];
          dx[o + j] = static_cast<T>(inv[r] * (g - mg - xh * mgx));
        }
      }
#pragma omp parallel for if (d > 64 && rows * d > 16384)
      for (int64_t j = 0; j < d; ++j) {
        A ss = 0, sb = 0;
        for (int64_t r = 0; r < rows; ++r) {
          const A g = A(dy[r * d + j]);
          ss += g * (A(x[r * d + j]) - mean[r]) * inv[r];
          sb += g;
        }
        dscale[j] = static_cast<T>(ss);
        db[j] = static_cast<T>(sb);
      }
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuLayerNormKernels(KernelRegistry& r) {
  cpu::RegisterFloatKernels<LayerNormKernel>(r, "LayerNormalization");
  cpu::RegisterFloatKernels<LayerNormGradKernel>(r, "LayerNormGrad");
}

}  // namespace mpc
