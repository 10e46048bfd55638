// CPU softmax-family and loss kernels: Softmax/LogSoftmax on any axis and their
// gradients, SoftmaxCrossEntropyLoss (+ fused gradient) and MeanSquaredError (+ gradient),
// in f32, f64, bf16 and f16. Every reduction and every
// intermediate is in Acc<T> (f32, or f64 for the f64 reference kernels), per docs/numerics.md;
// a bf16/f16 kernel rounds only its stored outputs. Loss values are summed in f64.
#include <cmath>
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

template <typename T>
MPC_ISA_CLONES void SoftmaxRowWidened(const T* x, T* y, int64_t dim, float* w) {
  const int64_t full = dim / kSoftmaxLanes * kSoftmaxLanes;
  alignas(64) float part[kSoftmaxLanes];
  for (int64_t l = 0; l < kSoftmaxLanes; ++l) part[l] = -INFINITY;
  for (int64_t d = 0; d < full; d += kSoftmaxLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kSoftmaxLanes; ++l) {
      const float v = float(x[d + l]);
      w[d + l] = v;
      part[l] = v > part[l] ? v : part[l];
    }
  }
  for (int64_t d = full; d < dim; ++d) {
    w[d] = float(x[d]);
    part[d - full] = w[d] > part[d - full] ? w[d] : part[d - full];
  }
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

// One softmax row with unit stride (the usual last axis): dx = y * (dy - sum(dy * y)),
// compiled for each vector ISA (cpu_isa.h).
template <typename T>
MPC_ISA_CLONES void SoftmaxGradRow(const T* dy, const T* y, T* dx, int64_t dim) {
  using A = Acc<T>;
  A dot = 0;
#pragma omp simd reduction(+ : dot)
  for (int64_t d = 0; d < dim; ++d) dot += A(dy[d]) * A(y[d]);
#pragma omp simd
  for (int64_t d = 0; d < dim; ++d) cpu::StoreRounded(dx + d, A(y[d]) * (A(dy[d]) - dot));
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
        for (int64_t o = 0; o < s.outer; ++o) SoftmaxGradRow(dy + o * s.dim, y + o * s.dim, dx + o * s.dim, s.dim);
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
  RegisterFloatKernels<SoftmaxBwd>(r, "SoftmaxGrad");
  RegisterFloatKernels<LogSoftmaxBwd>(r, "LogSoftmaxGrad");
  RegisterFloatKernels<SoftmaxCrossEntropyKernel>(r, "SoftmaxCrossEntropyLoss");
  RegisterFloatKernels<SoftmaxCrossEntropyGradKernel>(r, "SoftmaxCrossEntropyGrad");
  RegisterFloatKernels<MseKernel>(r, "MeanSquaredError");
  RegisterFloatKernels<MseGradKernel>(r, "MeanSquaredErrorGrad");
}

}  // namespace mpc
