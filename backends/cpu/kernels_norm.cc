// CPU kernels: normalisation, elementwise math and reduction ops (graph/ops_norm.cc), in
// f32, f64, bf16 and f16. Every kernel loads its operands into Acc<T> (f32 for the
// 16-bit formats, f64 for the f64 reference kernels), keeps every intermediate and
// every statistic there, and rounds once on the store.
//   Erf Sqrt SqrtGrad Exp Log Reciprocal Gelu GeluGrad   flat loops
//   Pow                                          broadcasting; exponent of any float/int dtype
//   ReduceSum ReduceMean                         [outer, reduced, inner] when the reduced
//                                                axes are adjacent, a general loop otherwise
//   LayerNormalization LayerNormGrad             one row per normalised slice
//   BatchNormalization BatchNormGrad             one channel at a time over [N, C, spatial]
//   BatchNormStatsUpdate                         copies new running statistics in place
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/ops_norm.h"

namespace mpc {
namespace {

using cpu::Acc;
using cpu::MakeKernel;
using cpu::MapUnary;

// Element access through double for operands whose dtype is not the kernel's T
// (statistics, per-channel parameters, exponents). Exact for every float format.
double LoadAt(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return t.as<float>()[i];
    case DType::kF64:
      return t.as<double>()[i];
    case DType::kBF16:
      return static_cast<float>(t.as<Bf16>()[i]);
    case DType::kF16:
      return static_cast<float>(t.as<Half>()[i]);
    case DType::kI64:
      return static_cast<double>(t.as<int64_t>()[i]);
    case DType::kI32:
      return t.as<int32_t>()[i];
    default:
      return 0;
  }
}

// Stores `v` (an Acc value: f32 precision unless the tensor is f64) rounding once.
template <typename A>
void StoreAt(const TensorView& t, int64_t i, A v) {
  switch (t.dtype) {
    case DType::kF32:
      t.as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      t.as<double>()[i] = static_cast<double>(v);
      break;
    case DType::kBF16:
      t.as<Bf16>()[i] = Bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      t.as<Half>()[i] = Half(static_cast<float>(v));
      break;
    default:
      break;
  }
}

template <typename A>
std::vector<A> LoadAll(const TensorView& t) {
  std::vector<A> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = static_cast<A>(LoadAt(t, i));
  return out;
}

// ---------------------------------------------------------------------------------
// Elementwise

MPC_UNARY_FACTORY(ErfKernel, std::erf(x))
MPC_UNARY_FACTORY(SqrtKernel, std::sqrt(x))
MPC_UNARY_FACTORY(ExpKernel, std::exp(x))
MPC_UNARY_FACTORY(LogKernel, std::log(x))
MPC_UNARY_FACTORY(ReciprocalKernel, A(1) / x)

template <typename T>
struct SqrtGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* y = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t n = ctx.outputs[0].num_elements();
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) {
        const A g = A(dy[i]);
        dx[i] = static_cast<T>(g == A(0) ? A(0) : A(0.5) * g / A(y[i]));
      }
      return absl::OkStatus();
    });
  }
};

template <typename A>
A GeluValue(A x, bool tanh_approx) {
  if (tanh_approx) {
    const A k = static_cast<A>(0.7978845608028654);  // sqrt(2/pi)
    const A u = k * (x + A(0.044715) * x * x * x);
    return A(0.5) * x * (A(1) + std::tanh(u));
  }
  return A(0.5) * x * (A(1) + std::erf(x * static_cast<A>(0.7071067811865476)));
}

template <typename A>
A GeluDerivative(A x, bool tanh_approx) {
  if (tanh_approx) {
    const A k = static_cast<A>(0.7978845608028654);
    const A u = k * (x + A(0.044715) * x * x * x);
    const A t = std::tanh(u);
    return A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3 * 0.044715) * x * x);
  }
  const A cdf = A(0.5) * (A(1) + std::erf(x * static_cast<A>(0.7071067811865476)));
  const A pdf = std::exp(A(-0.5) * x * x) * static_cast<A>(0.3989422804014327);  // 1/sqrt(2 pi)
  return cdf + x * pdf;
}

template <typename T>
struct GeluKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool approx = node.attrs.GetString("approximate", "none") == "tanh";
    return MakeKernel(
        [approx](KernelContext& ctx) { return MapUnary<T>(ctx, [approx](Acc<T> x) { return GeluValue(x, approx); }); });
  }
};

template <typename T>
struct GeluGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool approx = node.attrs.GetString("approximate", "none") == "tanh";
    return MakeKernel([approx](KernelContext& ctx) {
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t n = ctx.outputs[0].num_elements();
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) dx[i] = static_cast<T>(Acc<T>(dy[i]) * GeluDerivative(Acc<T>(x[i]), approx));
      return absl::OkStatus();
    });
  }
};

// Pow(X, E): X of the kernel's dtype T, E of any float or integer dtype (read as Acc).
template <typename T, typename E>
absl::Status RunPow(KernelContext& ctx) {
  using A = Acc<T>;
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  const TensorView& y = ctx.outputs[0];
  const T* pa = a.as<T>();
  const E* pb = b.as<E>();
  T* py = y.as<T>();
  auto f = [](A base, A e) -> A { return std::pow(base, e); };
  const int64_t n = y.num_elements();
  if (a.shape == y.shape && b.shape == y.shape) {
#pragma omp parallel for if (n > 32768)
    for (int64_t i = 0; i < n; ++i) py[i] = static_cast<T>(f(A(pa[i]), static_cast<A>(pb[i])));
    return absl::OkStatus();
  }
  const auto as = cpu::BroadcastStrides(a.shape, y.shape);
  const auto bs = cpu::BroadcastStrides(b.shape, y.shape);
  const int64_t inner = y.shape.empty() ? 1 : y.shape.back();
  const int64_t sa = as.empty() ? 0 : as.back(), sb = bs.empty() ? 0 : bs.back();
  cpu::ForEachBroadcastRow(y.shape, as, bs, [&](int64_t yo, int64_t ao, int64_t bo) {
    for (int64_t i = 0; i < inner; ++i)
      py[yo + i] = static_cast<T>(f(A(pa[ao + i * sa]), static_cast<A>(pb[bo + i * sb])));
  });
  return absl::OkStatus();
}

template <typename T>
struct PowKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    switch (node.inputs[1]->dtype) {
      case DType::kF32:
        return MakeKernel([](KernelContext& ctx) { return RunPow<T, float>(ctx); });
      case DType::kF64:
        return MakeKernel([](KernelContext& ctx) { return RunPow<T, double>(ctx); });
      case DType::kBF16:
        return MakeKernel([](KernelContext& ctx) { return RunPow<T, Bf16>(ctx); });
      case DType::kF16:
        return MakeKernel([](KernelContext& ctx) { return RunPow<T, Half>(ctx); });
      case DType::kI64:
        return MakeKernel([](KernelContext& ctx) { return RunPow<T, int64_t>(ctx); });
      case DType::kI32:
        return MakeKernel([](KernelContext& ctx) { return RunPow<T, int32_t>(ctx); });
      default:
        return absl::UnimplementedError(absl::StrCat("Pow node '", node.name, "': exponent dtype ",
                                                     DTypeName(node.inputs[1]->dtype),
                                                     " is not supported on cpu; use float, int32 or int64"));
    }
  }
};

// ---------------------------------------------------------------------------------
// Reductions

template <typename T, bool kMean>
struct ReduceKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto axes_or = ops::ReduceAxes(node);
    if (!axes_or.ok()) return axes_or.status();
    const std::vector<int> axes = *axes_or;
    const Shape in = node.inputs[0]->shape;
    const int rank = static_cast<int>(in.size());
    int64_t count = 1;
    for (int a : axes) count *= in[a];
    const bool adjacent = axes.empty() || axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
    int64_t outer = 1, red = 1, inner = 1;
    if (adjacent) {
      const int lo = axes.empty() ? rank : axes.front(), hi = axes.empty() ? rank : axes.back() + 1;
      for (int i = 0; i < rank; ++i) (i < lo ? outer : i < hi ? red : inner) *= in[i];
    }
    // General case: the output offset of each input index (0 stride on reduced axes).
    Shape kept = in;
    for (int a : axes) kept[a] = 1;
    const std::vector<int64_t> out_strides = cpu::BroadcastStrides(kept, in);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const A scale = kMean && count > 0 ? A(1) / static_cast<A>(count) : A(1);
      if (adjacent) {
#pragma omp parallel for collapse(2) if (outer * inner > 64 && outer * red * inner > 32768)
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < inner; ++i) {
            const T* p = x + o * red * inner + i;
            A sum = 0;
            for (int64_t r = 0; r < red; ++r) sum += A(p[r * inner]);
            y[o * inner + i] = static_cast<T>(kMean ? sum * scale : sum);
          }
        }
        return absl::OkStatus();
      }
      const int64_t n_out = ctx.outputs[0].num_elements();
      std::vector<A> acc(n_out, A(0));
      const int64_t n = ctx.inputs[0].num_elements();
      for (int64_t k = 0; k < n; ++k) {
        int64_t rem = k, off = 0;
        for (int d = rank - 1; d >= 0; --d) {
          off += (rem % in[d]) * out_strides[d];
          rem /= in[d];
        }
        acc[off] += A(x[k]);
      }
      for (int64_t k = 0; k < n_out; ++k) y[k] = static_cast<T>(kMean ? acc[k] * scale : acc[k]);
      return absl::OkStatus();
    });
  }
};
template <typename T>
using ReduceSumKernel = ReduceKernel<T, false>;
template <typename T>
using ReduceMeanKernel = ReduceKernel<T, true>;

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

// ---------------------------------------------------------------------------------
// BatchNormalization: X viewed as [N, C, S].

struct ChannelSplit {
  int64_t n = 1, c = 1, s = 1;
};

ChannelSplit SplitChannels(const Shape& x) {
  ChannelSplit cs;
  cs.n = x[0];
  cs.c = x[1];
  for (size_t i = 2; i < x.size(); ++i) cs.s *= x[i];
  return cs;
}

template <typename T>
struct BatchNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool training = ops::BatchNormTraining(node);
    // mpc's training programs (mpc_training = 1) update running_var with the unbiased
    // batch variance, as PyTorch does; ONNX's training_mode alone with the biased one.
    const bool unbiased_update = node.attrs.GetInt("mpc_training", 0) != 0;
    const ChannelSplit cs = SplitChannels(node.inputs[0]->shape);
    const int64_t m = cs.n * cs.s;
    if (training && m < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BatchNormalization node '", node.name, "' in training mode sees ", m, " value per channel (X ",
          ShapeToString(node.inputs[0]->shape), "); batch statistics need more than one. Use a batch size above 1"));
    }
    const float eps = node.attrs.GetFloat("epsilon", 1e-5f);
    const float momentum = node.attrs.GetFloat("momentum", 0.9f);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const std::vector<A> scale = LoadAll<A>(ctx.inputs[1]);
      const std::vector<A> bias = LoadAll<A>(ctx.inputs[2]);
      const TensorView& in_mean = ctx.inputs[3];
      const TensorView& in_var = ctx.inputs[4];
      const int nout = static_cast<int>(ctx.outputs.size());
      const A mom = static_cast<A>(momentum);
#pragma omp parallel for if (cs.c > 1 && cs.n * cs.c * cs.s > 16384)
      for (int64_t c = 0; c < cs.c; ++c) {
        A mean, var, unbiased = 0;
        if (training) {
          // The per-channel sums run over N x S values: simd reductions (partial sums
          // per vector lane) instead of one serial chain of dependent adds.
          A sum = 0;
          for (int64_t i = 0; i < cs.n; ++i) {
            const T* p = x + (i * cs.c + c) * cs.s;
#pragma omp simd reduction(+ : sum)
            for (int64_t k = 0; k < cs.s; ++k) sum += A(p[k]);
          }
          mean = sum / static_cast<A>(m);
          A sq = 0;
          for (int64_t i = 0; i < cs.n; ++i) {
            const T* p = x + (i * cs.c + c) * cs.s;
#pragma omp simd reduction(+ : sq)
            for (int64_t k = 0; k < cs.s; ++k) {
              const A dlt = A(p[k]) - mean;
              sq += dlt * dlt;
            }
          }
          var = sq / static_cast<A>(m);
          unbiased = unbiased_update ? sq / static_cast<A>(m - 1) : var;
        } else {
          mean = static_cast<A>(LoadAt(in_mean, c));
          var = static_cast<A>(LoadAt(in_var, c));
        }
        const A inv = A(1) / std::sqrt(var + static_cast<A>(eps));
        const A a = inv * scale[c];
        for (int64_t i = 0; i < cs.n; ++i) {
          const T* p = x + (i * cs.c + c) * cs.s;
          T* q = y + (i * cs.c + c) * cs.s;
          for (int64_t k = 0; k < cs.s; ++k) q[k] = static_cast<T>((A(p[k]) - mean) * a + bias[c]);
        }
        const A rm = static_cast<A>(LoadAt(in_mean, c)), rv = static_cast<A>(LoadAt(in_var, c));
        if (nout > 1) StoreAt(ctx.outputs[1], c, training ? mom * rm + (A(1) - mom) * mean : rm);
        if (nout > 2) StoreAt(ctx.outputs[2], c, training ? mom * rv + (A(1) - mom) * unbiased : rv);
        if (nout > 3) ctx.outputs[3].as<A>()[c] = mean;
        if (nout > 4) ctx.outputs[4].as<A>()[c] = inv;
      }
      return absl::OkStatus();
    });
  }
};

// training: dX = scale * inv * (dY - mean(dY) - xhat * mean(dY * xhat));
// evaluation: dX = scale * inv * dY.  dscale = sum(dY * xhat), dB = sum(dY) per channel.
template <typename T>
struct BatchNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool training = node.attrs.GetInt("training_mode", 0) != 0;
    const ChannelSplit cs = SplitChannels(node.inputs[1]->shape);
    const int64_t m = cs.n * cs.s;
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
#pragma omp parallel for if (cs.c > 1 && cs.n * cs.c * cs.s > 16384)
      for (int64_t c = 0; c < cs.c; ++c) {
        const A scale = static_cast<A>(LoadAt(ctx.inputs[2], c));
        const A mean = static_cast<A>(LoadAt(ctx.inputs[3], c));
        const A inv = static_cast<A>(LoadAt(ctx.inputs[4], c));
        A sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < cs.n; ++i) {
          const int64_t o = (i * cs.c + c) * cs.s;
#pragma omp simd reduction(+ : sdy, sdyx)
          for (int64_t k = 0; k < cs.s; ++k) {
            const A g = A(dy[o + k]);
            sdy += g;
            sdyx += g * (A(x[o + k]) - mean) * inv;
          }
        }
        const A a = scale * inv;
        const A mdy = sdy / static_cast<A>(m), mdyx = sdyx / static_cast<A>(m);
        for (int64_t i = 0; i < cs.n; ++i) {
          const int64_t o = (i * cs.c + c) * cs.s;
          for (int64_t k = 0; k < cs.s; ++k) {
            const A g = A(dy[o + k]);
            dx[o + k] = static_cast<T>(training ? a * (g - mdy - (A(x[o + k]) - mean) * inv * mdyx) : a * g);
          }
        }
        StoreAt(ctx.outputs[1], c, sdyx);
        StoreAt(ctx.outputs[2], c, sdy);
      }
      return absl::OkStatus();
    });
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateStatsUpdate(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    for (int i : {0, 1}) {
      const TensorView& dst = ctx.inputs[i];
      const TensorView& src = ctx.inputs[i + 2];
      if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.num_elements() * DTypeSize(dst.dtype));
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuNormKernels(KernelRegistry& r) {
  using cpu::RegisterFloatKernels;
  RegisterFloatKernels<ErfKernel>(r, "Erf");
  RegisterFloatKernels<SqrtKernel>(r, "Sqrt");
  RegisterFloatKernels<SqrtGradKernel>(r, "SqrtGrad");
  RegisterFloatKernels<ExpKernel>(r, "Exp");
  RegisterFloatKernels<LogKernel>(r, "Log");
  RegisterFloatKernels<ReciprocalKernel>(r, "Reciprocal");
  RegisterFloatKernels<PowKernel>(r, "Pow");
  RegisterFloatKernels<GeluKernel>(r, "Gelu");
  RegisterFloatKernels<GeluGradKernel>(r, "GeluGrad");
  RegisterFloatKernels<ReduceSumKernel>(r, "ReduceSum");
  RegisterFloatKernels<ReduceMeanKernel>(r, "ReduceMean");
  RegisterFloatKernels<LayerNormKernel>(r, "LayerNormalization");
  RegisterFloatKernels<LayerNormGradKernel>(r, "LayerNormGrad");
  RegisterFloatKernels<BatchNormKernel>(r, "BatchNormalization");
  RegisterFloatKernels<BatchNormGradKernel>(r, "BatchNormGrad");
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    r.Register("BatchNormStatsUpdate", "cpu", d, CreateStatsUpdate);
  }
}

}  // namespace mpc
