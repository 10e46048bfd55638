// CPU LayerNormalization and LayerNormGrad (graph/ops_norm.cc), one row per normalised
// slice, in f32, f64, bf16 and f16. Statistics are kept in Acc<T> (f32 for the 16-bit
// formats) and stored in f32 for the gradient; outputs are rounded once. The row loops are
// compiled for each vector ISA (cpu_isa.h). The fusions of passes/fuse_layer_norm_edges.h
// are here too: an f32 normalisation writing bf16/f16 Y (mpc_output_dtype; the rounding
// the Cast after it did, so the same values), and a gradient adding its 6th input to dX.
// RmsNorm and RmsNormGrad (graph/ops_rms_norm.cc) share the row layout and affine
// indexing: the same normalisation without the centring and the bias.
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
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

// The affine operand laid out along the row: row[j] = operand[index[j]], in Acc<T>.
template <typename T>
std::vector<Acc<T>> AlongRow(const T* operand, const std::vector<int64_t>& index) {
  std::vector<Acc<T>> row(index.size());
  for (size_t j = 0; j < index.size(); ++j) row[j] = Acc<T>(operand[index[j]]);
  return row;
}

// One row of the forward, compiled for each vector ISA (cpu_isa.h); bias may be null. Y is
// X's type T, or a 16-bit format for an f32 X (Acc<Y> is then Acc<T>, f32).
template <typename T, typename Y>
MPC_ISA_CLONES void LayerNormRow(const T* x, const Acc<T>* scale, const Acc<T>* bias, Y* y, int64_t d, Acc<T> eps,
                                 Acc<T>* mean_out, Acc<T>* inv_out) {
  using A = Acc<T>;
  A sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < d; ++j) sum += A(x[j]);
  const A mean = d ? sum / static_cast<A>(d) : A(0);
  A sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < d; ++j) {
    const A c = A(x[j]) - mean;
    sq += c * c;
  }
  const A var = d ? sq / static_cast<A>(d) : A(0);
  const A inv = A(1) / std::sqrt(var + eps);
  if (bias) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) StoreRounded(y + j, (A(x[j]) - mean) * inv * scale[j] + bias[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) StoreRounded(y + j, (A(x[j]) - mean) * inv * scale[j]);
  }
  *mean_out = mean;
  *inv_out = inv;
}

template <typename T, typename Y>
struct LayerNormRowsKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node) {
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
      const std::vector<A> scale = AlongRow(ctx.inputs[1].as<T>(), si);
      const std::vector<A> bias = has_b ? AlongRow(ctx.inputs[2].as<T>(), bi) : std::vector<A>();
      Y* y = ctx.outputs[0].as<Y>();
      A* mean_out = ctx.outputs.size() > 1 ? ctx.outputs[1].as<A>() : nullptr;
      A* inv_out = ctx.outputs.size() > 2 ? ctx.outputs[2].as<A>() : nullptr;
      const int64_t d = s.d;
#pragma omp parallel for if (s.rows > 8 && s.rows * d > 16384)
      for (int64_t r = 0; r < s.rows; ++r) {
        A mean, inv;
        LayerNormRow(x + r * d, scale.data(), has_b ? bias.data() : nullptr, y + r * d, d, static_cast<A>(eps), &mean,
                     &inv);
        if (mean_out) mean_out[r] = mean;
        if (inv_out) inv_out[r] = inv;
      }
      return absl::OkStatus();
    });
  }
};

// Registered per X dtype; Y's dtype picks the row loop (graph/ops_norm.cc allows a narrower
// Y for f32 X only).
template <typename T>
struct LayerNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const DType y = node.outputs[0]->dtype;
    if (y == DTypeOf<T>::value) return LayerNormRowsKernel<T, T>::Create(node);
    if constexpr (std::is_same_v<T, float>) {
      if (y == DType::kBF16) return LayerNormRowsKernel<float, Bf16>::Create(node);
      if (y == DType::kF16) return LayerNormRowsKernel<float, Half>::Create(node);
    }
    return absl::UnimplementedError(absl::StrCat("LayerNormalization node '", node.name,
                                                 "': ", DTypeName(DTypeOf<T>::value), " X with ", DTypeName(y),
                                                 " Y has no CPU kernel; only float32 X may write a 16-bit Y"));
  }
};

// dX for one row, g = dY * scale: inv * (g - mean(g) - xhat * mean(g * xhat)); and the
// row's contributions to dScale (dY * xhat) and dB (dY), added into the caller's
// accumulators. The fused edges (graph/ops_norm.cc), each a compile-time choice so the
// plain row keeps its loop: kAddend adds addend[j] before the one rounding, kColumnSum
// adds dX into dxsum_acc before its rounding (for f32 the value stored; for 16-bit dX the
// sum is then of the unrounded values, not of the stored ones a ReduceSumTo would read),
// and a non-void N writes dX again as N (f32 dX only, so the value stored is the value
// rounded). Compiled for each vector ISA (cpu_isa.h).
template <typename T, bool kAddend, bool kColumnSum, typename N>
MPC_ISA_CLONES void LayerNormGradRow(const T* dy, const T* x, const Acc<T>* scale, const T* addend, T* dx, N* narrow,
                                     int64_t d, Acc<T> mean, Acc<T> inv, Acc<T>* dscale_acc, Acc<T>* db_acc,
                                     Acc<T>* dxsum_acc) {
  using A = Acc<T>;
  A sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t j = 0; j < d; ++j) {
    const A g = A(dy[j]) * scale[j];
    const A xh = (A(x[j]) - mean) * inv;
    sg += g;
    sgx += g * xh;
  }
  const A mg = sg / static_cast<A>(d), mgx = sgx / static_cast<A>(d);
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    const A g = A(dy[j]) * scale[j];
    const A xh = (A(x[j]) - mean) * inv;
    A v = inv * (g - mg - xh * mgx);
    if constexpr (kAddend) v += A(addend[j]);
    StoreRounded(dx + j, v);
    if constexpr (kColumnSum) dxsum_acc[j] += v;
    if constexpr (!std::is_void_v<N>) StoreRounded(narrow + j, v);
    dscale_acc[j] += A(dy[j]) * xh;
    db_acc[j] += A(dy[j]);
  }
}

// dX = inv * (g - mean(g) - xhat * mean(g * xhat)), g = dY * scale;
// dScale = sum_rows(dY * xhat); dB = sum_rows(dY); and the fused edges (dX + Addend,
// dXSum = sum_rows(dX), dXNarrow). The column sums accumulate per thread over a contiguous
// range of rows (row-major, cache-friendly) and are added up in thread order at the end.
template <typename T, bool kAddend, bool kColumnSum, typename N>
struct LayerNormGradRowsKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node) {
    auto axis = ops::LayerNormAxis(node);
    if (!axis.ok()) return axis.status();
    const RowSplit s = SplitRows(node.inputs[1]->shape, *axis);
    const std::vector<int64_t> si = AffineIndex(node.inputs[2]->shape, s.norm);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* addend = kAddend ? ctx.inputs[5].as<T>() : nullptr;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      const std::vector<A> scale = AlongRow(ctx.inputs[2].as<T>(), si);
      const std::vector<A> mean = LoadAll<A>(ctx.inputs[3]);
      const std::vector<A> inv = LoadAll<A>(ctx.inputs[4]);
      T* dx = ctx.outputs[0].as<T>();
      T* dscale = ctx.outputs[1].as<T>();
      T* db = ctx.outputs[2].as<T>();
      T* dxsum = kColumnSum ? ctx.outputs[3].as<T>() : nullptr;
      N* narrow = nullptr;
      if constexpr (!std::is_void_v<N>) narrow = ctx.outputs[4].as<N>();
      const int64_t d = s.d, rows = s.rows;
      const bool parallel = rows > 8 && rows * d > 16384;
      const int threads = parallel ? omp_get_max_threads() : 1;
      // Per thread: dScale, dB and dXSum partial sums.
      constexpr int kSums = 3;
      std::vector<A> partial(static_cast<size_t>(threads) * kSums * d, A(0));
#pragma omp parallel num_threads(threads) if (parallel)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;
        A* ss = partial.data() + static_cast<size_t>(t) * kSums * d;
        for (int64_t r = begin; r < end; ++r) {
          LayerNormGradRow<T, kAddend, kColumnSum, N>(
              dy + r * d, x + r * d, scale.data(), kAddend ? addend + r * d : nullptr, dx + r * d,
              narrow ? narrow + r * d : nullptr, d, mean[r], inv[r], ss, ss + d, ss + 2 * d);
        }
      }
      for (int64_t j = 0; j < d; ++j) {
        A sums[kSums] = {};
        for (int t = 0; t < threads; ++t) {
          for (int k = 0; k < kSums; ++k) sums[k] += partial[(static_cast<size_t>(t) * kSums + k) * d + j];
        }
        StoreRounded(dscale + j, sums[0]);
        StoreRounded(db + j, sums[1]);
        if (kColumnSum) StoreRounded(dxsum + j, sums[2]);
      }
      return absl::OkStatus();
    });
  }
};

// Registered per dtype; the fused edges the node has pick the row loop.
template <typename T>
struct LayerNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool addend = node.inputs.size() > 5 && node.inputs[5];
    const bool column_sum = node.outputs.size() > 3 && node.outputs[3];
    const bool narrow = node.outputs.size() > 4 && node.outputs[4];
    if (narrow) {
      if constexpr (std::is_same_v<T, float>) {
        const DType n = node.outputs[4]->dtype;
        if (n == DType::kBF16) {
          return addend ? LayerNormGradRowsKernel<float, true, true, Bf16>::Create(node)
                        : LayerNormGradRowsKernel<float, false, true, Bf16>::Create(node);
        }
        if (n == DType::kF16) {
          return addend ? LayerNormGradRowsKernel<float, true, true, Half>::Create(node)
                        : LayerNormGradRowsKernel<float, false, true, Half>::Create(node);
        }
      }
      return absl::UnimplementedError(
          absl::StrCat("LayerNormGrad node '", node.name, "': a ", DTypeName(node.outputs[4]->dtype), " copy of ",
                       DTypeName(DTypeOf<T>::value), " dX has no CPU kernel; only float32 dX is copied to bf16/f16"));
    }
    if (addend) {
      return column_sum ? LayerNormGradRowsKernel<T, true, true, void>::Create(node)
                        : LayerNormGradRowsKernel<T, true, false, void>::Create(node);
    }
    return column_sum ? LayerNormGradRowsKernel<T, false, true, void>::Create(node)
                      : LayerNormGradRowsKernel<T, false, false, void>::Create(node);
  }
};

// ---------------------------------------------------------------------------------
// RmsNorm

// One row: InvRms = 1 / sqrt(mean(x^2) + eps), y = x * InvRms * scale (scale null: 1).
// sqrt then the division, each rounded, as the exported Sqrt -> Reciprocal chain does.
template <typename T>
MPC_ISA_CLONES void RmsNormRow(const T* x, const Acc<T>* scale, T* y, int64_t d, Acc<T> eps, Acc<T>* inv_out) {
  using A = Acc<T>;
  A sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < d; ++j) sq += A(x[j]) * A(x[j]);
  const A inv = A(1) / std::sqrt((d ? sq / static_cast<A>(d) : A(0)) + eps);
  if (scale) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) StoreRounded(y + j, A(x[j]) * inv * scale[j]);
  } else {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) StoreRounded(y + j, A(x[j]) * inv);
  }
  *inv_out = inv;
}

template <typename T>
struct RmsNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto axis = ops::LayerNormAxis(node);
    if (!axis.ok()) return axis.status();
    const RowSplit s = SplitRows(node.inputs[0]->shape, *axis);
    const bool scaled = node.inputs.size() > 1 && node.inputs[1];
    const std::vector<int64_t> si = scaled ? AffineIndex(node.inputs[1]->shape, s.norm) : std::vector<int64_t>();
    const float eps = node.attrs.GetFloat("epsilon", 1e-5f);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* x = ctx.inputs[0].as<T>();
      const std::vector<A> scale = scaled ? AlongRow(ctx.inputs[1].as<T>(), si) : std::vector<A>();
      T* y = ctx.outputs[0].as<T>();
      A* inv_out = ctx.outputs.size() > 1 ? ctx.outputs[1].as<A>() : nullptr;
      const int64_t d = s.d;
#pragma omp parallel for if (s.rows > 8 && s.rows * d > 16384)
      for (int64_t r = 0; r < s.rows; ++r) {
        A inv;
        RmsNormRow(x + r * d, scaled ? scale.data() : nullptr, y + r * d, d, static_cast<A>(eps), &inv);
        if (inv_out) inv_out[r] = inv;
      }
      return absl::OkStatus();
    });
  }
};

// dX for one row, g = dY * scale: inv * (g - xhat * mean(g * xhat)); and the row's
// dScale contribution (dY * xhat) added into the caller's accumulator (null: no scale).
template <typename T>
MPC_ISA_CLONES void RmsNormGradRow(const T* dy, const T* x, const Acc<T>* scale, T* dx, int64_t d, Acc<T> inv,
                                   Acc<T>* dscale_acc) {
  using A = Acc<T>;
  A sgx = 0;
#pragma omp simd reduction(+ : sgx)
  for (int64_t j = 0; j < d; ++j) sgx += A(dy[j]) * (scale ? scale[j] : A(1)) * (A(x[j]) * inv);
  const A mgx = sgx / static_cast<A>(d);
#pragma omp simd
  for (int64_t j = 0; j < d; ++j) {
    const A xh = A(x[j]) * inv;
    StoreRounded(dx + j, inv * (A(dy[j]) * (scale ? scale[j] : A(1)) - xh * mgx));
  }
  if (dscale_acc) {
#pragma omp simd
    for (int64_t j = 0; j < d; ++j) dscale_acc[j] += A(dy[j]) * (A(x[j]) * inv);
  }
}

// dScale accumulates per thread over a contiguous range of rows and is added up in
// thread order, as LayerNormGrad's column sums are.
template <typename T>
struct RmsNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto axis = ops::LayerNormAxis(node);
    if (!axis.ok()) return axis.status();
    const RowSplit s = SplitRows(node.inputs[1]->shape, *axis);
    const bool scaled = node.inputs.size() > 3 && node.inputs[3];
    const std::vector<int64_t> si = scaled ? AffineIndex(node.inputs[3]->shape, s.norm) : std::vector<int64_t>();
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      const std::vector<A> inv = LoadAll<A>(ctx.inputs[2]);
      const std::vector<A> scale = scaled ? AlongRow(ctx.inputs[3].as<T>(), si) : std::vector<A>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t d = s.d, rows = s.rows;
      const bool parallel = rows > 8 && rows * d > 16384;
      const int threads = parallel ? omp_get_max_threads() : 1;
      std::vector<A> partial(scaled ? static_cast<size_t>(threads) * d : 0, A(0));
#pragma omp parallel num_threads(threads) if (parallel)
      {
        const int t = omp_get_thread_num(), nt = omp_get_num_threads();
        const int64_t begin = rows * t / nt, end = rows * (t + 1) / nt;
        A* acc = scaled ? partial.data() + static_cast<size_t>(t) * d : nullptr;
        for (int64_t r = begin; r < end; ++r) {
          RmsNormGradRow<T>(dy + r * d, x + r * d, scaled ? scale.data() : nullptr, dx + r * d, d, inv[r], acc);
        }
      }
      if (scaled) {
        T* dscale = ctx.outputs[1].as<T>();
        for (int64_t j = 0; j < d; ++j) {
          A sum = 0;
          for (int t = 0; t < threads; ++t) sum += partial[static_cast<size_t>(t) * d + j];
          StoreRounded(dscale + j, sum);
        }
      }
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuLayerNormKernels(KernelRegistry& r) {
  cpu::RegisterFloatKernels<LayerNormKernel>(r, "LayerNormalization");
  cpu::RegisterFloatKernels<LayerNormGradKernel>(r, "LayerNormGrad");
  cpu::RegisterFloatKernels<RmsNormKernel>(r, "RmsNorm");
  cpu::RegisterFloatKernels<RmsNormGradKernel>(r, "RmsNormGrad");
}

}  // namespace mpc
