// CPU softmax-family and loss kernels: Softmax/LogSoftmax on any axis and their
// gradients, the attention softmax MaskedSoftmax (scale and mask in the same pass) and its
// gradient, SoftmaxCrossEntropyLoss (+ fused gradient) and MeanSquaredError (+ gradient),
// in f32, f64, bf16 and f16. Every reduction and every
// intermediate is in Acc<T> (f32, or f64 for the f64 reference kernels), per docs/numerics.md;
// a bf16/f16 kernel rounds only its stored outputs. Loss values are summed in f64.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/exp_math.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using cpu::Acc;
using cpu::MakeKernel;

// Softmax-like ops see the tensor as [outer, axis, inner].
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};

AxisSplit SplitAt(const Shape& shape, int64_t axis_attr) {
  AxisSplit s;
  const int rank = static_cast<int>(shape.size());
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  for (int i = 0; i < rank; ++i) {
    if (i < axis)
      s.outer *= shape[i];
    else if (i == axis)
      s.dim = shape[i];
    else
      s.inner *= shape[i];
  }
  return s;
}

template <typename T, bool kLog>
struct SoftmaxKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const AxisSplit s = SplitAt(node.inputs[0]->shape, node.attrs.GetInt("axis", -1));
    return MakeKernel([s](KernelContext& ctx) {
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel for collapse(2) if (s.outer * s.inner > 64)
      for (int64_t o = 0; o < s.outer; ++o) {
        for (int64_t i = 0; i < s.inner; ++i) {
          const int64_t base = o * s.dim * s.inner + i;
          Acc<T> mx = -INFINITY;
          // A NaN is the maximum (std::max would drop it), so it spreads over the row as
          // IEEE arithmetic and PyTorch have it.
          for (int64_t d = 0; d < s.dim; ++d) {
            const Acc<T> v = Acc<T>(x[base + d * s.inner]);
            if (v > mx || v != v) mx = v;
          }
          Acc<T> sum = 0;
          for (int64_t d = 0; d < s.dim; ++d) sum += std::exp(Acc<T>(x[base + d * s.inner]) - mx);
          const Acc<T> log_sum = std::log(sum);
          for (int64_t d = 0; d < s.dim; ++d) {
            const Acc<T> z = Acc<T>(x[base + d * s.inner]) - mx;
            y[base + d * s.inner] = static_cast<T>(kLog ? z - log_sum : std::exp(z) / sum);
          }
        }
      }
      return absl::OkStatus();
    });
  }
};
template <typename T>
using SoftmaxFwd = SoftmaxKernel<T, false>;
template <typename T>
using LogSoftmaxFwd = SoftmaxKernel<T, true>;

// One 16-bit softmax row with unit stride (the usual last axis), in f32 lanes: the row
// widened into `w`, its maximum, e^(x - max) (exp_math.h) and their sum, the quotients
// rounded on store. A NaN makes the whole row NaN, and so does a +inf, as in the generic
// kernel: the maximum passes over a NaN, but its own x - max is NaN (for +inf, inf - inf),
// so is the sum, and every quotient. A -inf is an ordinary minimum (its e^ is 0).
//
// The maximum and the sum are kept in kSoftmaxLanes partial values written out by hand
// and folded by halves: GCC's `omp simd reduction` set its lanes up on the stack and
// folded them one by one, for each row, which cost more than the row's 256 exponentials
// (char_gpt bf16's attention softmax per 13 steps: oneDNN 204-212 ms, simd reductions
// 200, these 173). The same partials written as a generic helper taking lambdas did not
// vectorise (480 ms).
constexpr int64_t kSoftmaxLanes = 16;

// The softmax of the f32 row `w` (overwritten with e^(w - max)), rounded into y. Returns
// 1 / sum, NaN when a NaN or +inf made the row NaN.
template <typename T>
inline __attribute__((always_inline)) float SoftmaxOfF32Row(float* w, T* y, int64_t dim) {
  const int64_t full = dim / kSoftmaxLanes * kSoftmaxLanes;
  alignas(64) float part[kSoftmaxLanes];
  for (int64_t l = 0; l < kSoftmaxLanes; ++l) part[l] = -INFINITY;
  for (int64_t d = 0; d < full; d += kSoftmaxLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kSoftmaxLanes; ++l) part[l] = w[d + l] > part[l] ? w[d + l] : part[l];
  }
  for (int64_t d = full; d < dim; ++d) part[d - full] = w[d] > part[d - full] ? w[d] : part[d - full];
  for (int64_t half = kSoftmaxLanes / 2; half > 0; half /= 2) {
    for (int64_t l = 0; l < half; ++l) part[l] = part[l + half] > part[l] ? part[l + half] : part[l];
  }
  const float mx = part[0];

  for (int64_t l = 0; l < kSoftmaxLanes; ++l) part[l] = 0.0f;
  for (int64_t d = 0; d < full; d += kSoftmaxLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kSoftmaxLanes; ++l) {
      const float e = cpu::ExpOfNonPositive(w[d + l] - mx);
      w[d + l] = e;
      part[l] += e;
    }
  }
  for (int64_t d = full; d < dim; ++d) {
    w[d] = cpu::ExpOfNonPositive(w[d] - mx);
    part[d - full] += w[d];
  }
  for (int64_t half = kSoftmaxLanes / 2; half > 0; half /= 2) {
    for (int64_t l = 0; l < half; ++l) part[l] += part[l + half];
  }
  const float inv = 1.0f / part[0];
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) cpu::StoreRounded(y + d, w[d] * inv);
  return inv;
}

template <typename T>
MPC_ISA_CLONES void SoftmaxRowWidened(const T* x, T* y, int64_t dim, float* w) {
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) w[d] = float(x[d]);
  SoftmaxOfF32Row(w, y, dim);
}

// One MaskedSoftmax row: scale * x where `keep` is set (keep_stride 1: one flag per
// element; 0: one flag for the row; null keep: all kept), -inf elsewhere, then the row's
// softmax as above. A row with nothing kept is NaN (-inf - -inf), as Where + Softmax give.
template <typename T>
MPC_ISA_CLONES void MaskedSoftmaxRow(const T* x, const bool* keep, int64_t keep_stride, float scale, T* y, int64_t dim,
                                     float* w) {
  if (!keep || (keep_stride == 0 && keep[0])) {
#pragma omp simd
    for (int64_t d = 0; d < dim; ++d) w[d] = scale * float(x[d]);
  } else if (keep_stride == 0) {
    for (int64_t d = 0; d < dim; ++d) w[d] = -INFINITY;
  } else {
    const uint8_t* flags = reinterpret_cast<const uint8_t*>(keep);
    // A row whose last elements are all masked (a causal mask's rows: half of them on
    // average) has zeros there: the softmax runs on the kept prefix only. Its maximum and
    // sum are the whole row's (e^-inf adds exactly 0), so the values are the same.
    int64_t end = dim;
    uint64_t eight;
    while (end >= 8 && (std::memcpy(&eight, flags + end - 8, 8), eight == 0)) end -= 8;
    while (end > 0 && flags[end - 1] == 0) --end;
    if (end == 0) end = dim;  // nothing kept: all -inf, and the row is NaN
    // Whole 16-lane blocks: the scalar tail loop's exponentials cost more than the lanes'.
    end = std::min(dim, (end + kSoftmaxLanes - 1) / kSoftmaxLanes * kSoftmaxLanes);
    // x is read whether kept or not: a load under the condition kept GCC from vectorising.
#pragma omp simd
    for (int64_t d = 0; d < end; ++d) {
      const float v = scale * float(x[d]);
      w[d] = flags[d] != 0 ? v : -INFINITY;
    }
    // e^-inf * (1 / sum): 0, or NaN where the kept part made the row NaN, as unfused.
    const float masked = 0.0f * SoftmaxOfF32Row(w, y, end);
#pragma omp simd
    for (int64_t d = end; d < dim; ++d) cpu::StoreRounded(y + d, masked);
    return;
  }
  SoftmaxOfF32Row(w, y, dim);
}

// Softmax in bf16 and f16 over a unit-stride axis, row by row through one f32 row per
// thread; other axes take the generic kernel. oneDNN's bf16 softmax needed a pass of its
// own afterwards to spread NaNs over rows; char_gpt bf16's attention softmax
// ([16, 6, 256, 256], six a step) took 2.6 ms a call that way.
template <typename T>
struct SoftmaxWidenedKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const AxisSplit s = SplitAt(node.inputs[0]->shape, node.attrs.GetInt("axis", -1));
    if (s.inner != 1) return SoftmaxFwd<T>::Create(node, backend);
    return MakeKernel([s](KernelContext& ctx) {
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel if (s.outer > 1 && s.outer * s.dim > 32768)
      {
        thread_local std::vector<float> row;
        if (row.size() < static_cast<size_t>(s.dim)) row.resize(s.dim);
#pragma omp for
        for (int64_t o = 0; o < s.outer; ++o) SoftmaxRowWidened(x + o * s.dim, y + o * s.dim, s.dim, row.data());
      }
      return absl::OkStatus();
    });
  }
};

// Where row `row` of x (its index over every axis but the last) finds its mask: the
// mask's element offset, with broadcast axes stepping by 0 (cpu_kernel_util.h).
struct MaskRows {
  Shape row_shape;                   // x's shape without its last axis
  std::vector<int64_t> row_strides;  // the mask's strides along those axes
  int64_t stride_along_row = 0;      // 1, or 0 when the mask broadcasts along the row

  MaskRows(const Shape& mask, const Shape& x) {
    std::vector<int64_t> strides = cpu::BroadcastStrides(mask, x);
    stride_along_row = strides.back();
    row_shape.assign(x.begin(), x.end() - 1);
    row_strides.assign(strides.begin(), strides.end() - 1);
  }
  int64_t Offset(int64_t row) const {
    int64_t offset = 0;
    for (int64_t a = static_cast<int64_t>(row_shape.size()) - 1; a >= 0; --a) {
      offset += row % row_shape[a] * row_strides[a];
      row /= row_shape[a];
    }
    return offset;
  }
};

// What a MaskedSoftmax node asks for: its last-axis rows, scale and mask.
struct MaskedSoftmaxNode {
  int64_t dim, rows;
  float scale;
  bool masked;
  MaskRows mask;

  explicit MaskedSoftmaxNode(const Node& node)
      : dim(node.inputs[0]->shape.back()),
        rows(NumElements(node.inputs[0]->shape) / std::max<int64_t>(dim, 1)),
        scale(node.attrs.GetFloat("scale", 1.0f)),
        masked(node.inputs.size() > 1 && node.inputs[1]),
        mask(masked ? MaskRows(node.inputs[1]->shape, node.inputs[0]->shape) : MaskRows({}, {1})) {}
};

// MaskedSoftmax (graph/ops_nn.cc): the attention scores' scale, causal mask and softmax
// in one pass over each last-axis row, in f32 lanes for f32, bf16 and f16 (one f32 row
// per thread); replaces a Mul and a Where over the whole score tensor, each way.
template <typename T>
struct MaskedSoftmaxKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const MaskedSoftmaxNode n(node);
    return MakeKernel([n](KernelContext& ctx) {
      const auto& [dim, rows, scale, masked, mask] = n;
      const T* x = ctx.inputs[0].as<T>();
      const bool* keep = masked ? reinterpret_cast<const bool*>(ctx.inputs[1].as<uint8_t>()) : nullptr;
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel if (rows > 1 && rows * dim > 32768)
      {
        thread_local std::vector<float> row;
        if (row.size() < static_cast<size_t>(dim)) row.resize(dim);
#pragma omp for
        for (int64_t o = 0; o < rows; ++o) {
          MaskedSoftmaxRow(x + o * dim, keep ? keep + mask.Offset(o) : nullptr, mask.stride_along_row, scale,
                           y + o * dim, dim, row.data());
        }
      }
      return absl::OkStatus();
    });
  }
};

// The f64 reference form: the same rows in double.
struct MaskedSoftmaxF64Kernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const MaskedSoftmaxNode n(node);
    return MakeKernel([n](KernelContext& ctx) {
      const auto& [dim, rows, scale, masked, mask] = n;
      const double* x = ctx.inputs[0].as<double>();
      const uint8_t* keep = masked ? ctx.inputs[1].as<uint8_t>() : nullptr;
      double* y = ctx.outputs[0].as<double>();
#pragma omp parallel if (rows > 64)
      {
        std::vector<double> w(dim);  // one row per thread, per run
#pragma omp for
        for (int64_t o = 0; o < rows; ++o) {
          double mx = -INFINITY;
          for (int64_t d = 0; d < dim; ++d) {
            w[d] = !keep || keep[mask.Offset(o) + d * mask.stride_along_row] ? scale * x[o * dim + d] : -INFINITY;
            if (w[d] > mx || w[d] != w[d]) mx = w[d];
          }
          double sum = 0;
          for (int64_t d = 0; d < dim; ++d) sum += (w[d] = std::exp(w[d] - mx));
          for (int64_t d = 0; d < dim; ++d) y[o * dim + d] = w[d] / sum;
        }
      }
      return absl::OkStatus();
    });
  }
};

// One softmax row with unit stride (the usual last axis): dx = y * (dy - sum(dy * y)),
// compiled for each vector ISA (cpu_isa.h).
// MaskedSoftmaxGrad's rows multiply by its scale too (1 for SoftmaxGrad: exact).
template <typename T>
MPC_ISA_CLONES void SoftmaxGradRow(const T* dy, const T* y, T* dx, int64_t dim, Acc<T> scale) {
  using A = Acc<T>;
  A dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t d = 0; d < dim; ++d) dot += A(dy[d]) * A(y[d]);
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) cpu::StoreRounded(dx + d, scale * (A(y[d]) * (A(dy[d]) - dot)));
}

// Softmax: dx = y * (dy - sum(dy * y));  LogSoftmax: dx = dy - exp(y) * sum(dy).
template <typename T, bool kLog>
struct SoftmaxGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const AxisSplit s = SplitAt(node.inputs[0]->shape, node.attrs.GetInt("axis", -1));
    return MakeKernel([s](KernelContext& ctx) {
      const T* dy = ctx.inputs[0].as<T>();
      const T* y = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      if (!kLog && s.inner == 1) {
#pragma omp parallel for if (s.outer > 64)
        for (int64_t o = 0; o < s.outer; ++o)
          SoftmaxGradRow(dy + o * s.dim, y + o * s.dim, dx + o * s.dim, s.dim, Acc<T>(1));
        return absl::OkStatus();
      }
#pragma omp parallel for collapse(2) if (s.outer * s.inner > 64)
      for (int64_t o = 0; o < s.outer; ++o) {
        for (int64_t i = 0; i < s.inner; ++i) {
          const int64_t base = o * s.dim * s.inner + i;
          Acc<T> dot = 0;
          for (int64_t d = 0; d < s.dim; ++d) {
            const int64_t k = base + d * s.inner;
            dot += kLog ? Acc<T>(dy[k]) : Acc<T>(dy[k]) * Acc<T>(y[k]);
          }
          for (int64_t d = 0; d < s.dim; ++d) {
            const int64_t k = base + d * s.inner;
            dx[k] = static_cast<T>(kLog ? Acc<T>(dy[k]) - std::exp(Acc<T>(y[k])) * dot
                                        : Acc<T>(y[k]) * (Acc<T>(dy[k]) - dot));
          }
        }
      }
      return absl::OkStatus();
    });
  }
};
template <typename T>
using SoftmaxBwd = SoftmaxGradKernel<T, false>;
template <typename T>
using LogSoftmaxBwd = SoftmaxGradKernel<T, true>;

// MaskedSoftmaxGrad: dx = scale * y * (dy - sum(dy * y)) over the last axis.
template <typename T>
struct MaskedSoftmaxGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const int64_t dim = node.inputs[0]->shape.empty() ? 1 : node.inputs[0]->shape.back();
    const int64_t rows = NumElements(node.inputs[0]->shape) / std::max<int64_t>(dim, 1);
    const Acc<T> scale = node.attrs.GetFloat("scale", 1.0f);
    return MakeKernel([=](KernelContext& ctx) {
      const T* dy = ctx.inputs[0].as<T>();
      const T* y = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
#pragma omp parallel for if (rows > 64)
      for (int64_t o = 0; o < rows; ++o) SoftmaxGradRow(dy + o * dim, y + o * dim, dx + o * dim, dim, scale);
      return absl::OkStatus();
    });
  }
};

int64_t LabelAt(const TensorView& labels, int64_t i) {
  return labels.dtype == DType::kI32 ? labels.as<int32_t>()[i] : labels.as<int64_t>()[i];
}

// loss = reduce_i(-log_softmax(scores_i)[label_i]); rows with label == ignore_index
// are skipped and not counted in the mean. A label outside [0, C) is an error.
template <typename T>
struct SoftmaxCrossEntropyKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool mean = node.attrs.GetString("reduction", "mean") == "mean";
    const bool has_ignore = node.attrs.Has("ignore_index");
    const int64_t ignore = node.attrs.GetInt("ignore_index", -1);
    return MakeKernel([=](KernelContext& ctx) -> absl::Status {
      const TensorView& scores = ctx.inputs[0];
      const int64_t n = scores.shape[0], c = scores.shape[1];
      const T* x = scores.as<T>();
      T* log_prob = ctx.outputs.size() > 1 ? ctx.outputs[1].as<T>() : nullptr;
      double total = 0;
      int64_t counted = 0;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t label = LabelAt(ctx.inputs[1], i);
        const T* row = x + i * c;
        Acc<T> mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c; ++j) mx = std::max<Acc<T>>(mx, row[j]);
        for (int64_t j = 0; j < c; ++j) sum += std::exp(Acc<T>(row[j]) - mx);
        const Acc<T> lse = mx + std::log(sum);
        if (log_prob) {
          for (int64_t j = 0; j < c; ++j) log_prob[i * c + j] = static_cast<T>(Acc<T>(row[j]) - lse);
        }
        if (has_ignore && label == ignore) continue;
        if (label < 0 || label >= c) {
          return absl::InvalidArgumentError(
              absl::StrCat("label ", label, " at batch row ", i, " is outside [0, ", c, "); check the labels data"));
        }
        total += static_cast<double>(lse - Acc<T>(row[label]));
        ++counted;
      }
      const double loss = mean ? (counted ? total / counted : 0.0) : total;
      ctx.outputs[0].as<T>()[0] = static_cast<T>(loss);
      return absl::OkStatus();
    });
  }
};

// dScores = dLoss * (softmax(scores) - onehot(label)) / count.
template <typename T>
struct SoftmaxCrossEntropyGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool mean = node.attrs.GetString("reduction", "mean") == "mean";
    const bool has_ignore = node.attrs.Has("ignore_index");
    const int64_t ignore = node.attrs.GetInt("ignore_index", -1);
    return MakeKernel([=](KernelContext& ctx) -> absl::Status {
      const Acc<T> dloss = ctx.inputs[0].as<T>()[0];
      const TensorView& scores = ctx.inputs[1];
      const int64_t n = scores.shape[0], c = scores.shape[1];
      int64_t counted = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (!(has_ignore && LabelAt(ctx.inputs[2], i) == ignore)) ++counted;
      }
      const Acc<T> scale = mean ? (counted ? dloss / counted : 0) : dloss;
      const T* x = scores.as<T>();
      T* dx = ctx.outputs[0].as<T>();
#pragma omp parallel for if (n * c > 32768)
      for (int64_t i = 0; i < n; ++i) {
        const int64_t label = LabelAt(ctx.inputs[2], i);
        T* drow = dx + i * c;
        if (has_ignore && label == ignore) {
          for (int64_t j = 0; j < c; ++j) drow[j] = 0;
          continue;
        }
        const T* row = x + i * c;
        Acc<T> mx = -INFINITY, sum = 0;
        for (int64_t j = 0; j < c; ++j) mx = std::max<Acc<T>>(mx, row[j]);
        for (int64_t j = 0; j < c; ++j) sum += std::exp(Acc<T>(row[j]) - mx);
        for (int64_t j = 0; j < c; ++j) {
          const Acc<T> p = std::exp(Acc<T>(row[j]) - mx) / sum;
          drow[j] = static_cast<T>(scale * (p - (j == label ? Acc<T>(1) : Acc<T>(0))));
        }
      }
      return absl::OkStatus();
    });
  }
};

template <typename T>
struct MseKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      const T* p = ctx.inputs[0].as<T>();
      const T* t = ctx.inputs[1].as<T>();
      const int64_t n = ctx.inputs[0].num_elements();
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(p[i]) - static_cast<double>(t[i]);
        sum += d * d;
      }
      ctx.outputs[0].as<T>()[0] = static_cast<T>(n ? sum / n : 0.0);
      return absl::OkStatus();
    });
  }
};

template <typename T>
struct MseGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      const Acc<T> dloss = ctx.inputs[0].as<T>()[0];
      const T* p = ctx.inputs[1].as<T>();
      const T* t = ctx.inputs[2].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t n = ctx.inputs[1].num_elements();
      const Acc<T> scale = n ? Acc<T>(2) * dloss / n : 0;
      for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>(scale * (Acc<T>(p[i]) - Acc<T>(t[i])));
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuSoftmaxLossKernels(KernelRegistry& r) {
  using cpu::RegisterFloatKernels;
  RegisterFloatKernels<SoftmaxFwd>(r, "Softmax");
  r.Register("Softmax", "cpu", DType::kBF16, SoftmaxWidenedKernel<Bf16>::Create);
  r.Register("Softmax", "cpu", DType::kF16, SoftmaxWidenedKernel<Half>::Create);
  RegisterFloatKernels<LogSoftmaxFwd>(r, "LogSoftmax");
  r.Register("MaskedSoftmax", "cpu", DType::kF32, MaskedSoftmaxKernel<float>::Create);
  r.Register("MaskedSoftmax", "cpu", DType::kF64, MaskedSoftmaxF64Kernel::Create);
  r.Register("MaskedSoftmax", "cpu", DType::kBF16, MaskedSoftmaxKernel<Bf16>::Create);
  r.Register("MaskedSoftmax", "cpu", DType::kF16, MaskedSoftmaxKernel<Half>::Create);
  RegisterFloatKernels<SoftmaxBwd>(r, "SoftmaxGrad");
  RegisterFloatKernels<MaskedSoftmaxGradKernel>(r, "MaskedSoftmaxGrad");
  RegisterFloatKernels<LogSoftmaxBwd>(r, "LogSoftmaxGrad");
  RegisterFloatKernels<SoftmaxCrossEntropyKernel>(r, "SoftmaxCrossEntropyLoss");
  RegisterFloatKernels<SoftmaxCrossEntropyGradKernel>(r, "SoftmaxCrossEntropyGrad");
  RegisterFloatKernels<MseKernel>(r, "MeanSquaredError");
  RegisterFloatKernels<MseGradKernel>(r, "MeanSquaredErrorGrad");
}

}  // namespace mpc
