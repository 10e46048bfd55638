// CPU elementwise math (graph/ops_norm.cc): Erf, Sqrt, SqrtGrad, Exp, Log, Reciprocal,
// Gelu, GeluGrad as flat loops and Pow with broadcasting (an exponent of any float or
// integer dtype), in f32, f64, bf16 and f16, computed in Acc<T> and rounded once.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "backends/cpu/gelu_math.h"
#include "graph/ops_norm.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

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

// f32 and bf16 Gelu run on oneDNN (kernels_dnnl_eltwise.cc); f16's erf form takes
// gelu_math.h's vector loop, f64 (the reference) std::erf.
template <typename T>
struct GeluKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool approx = node.attrs.GetString("approximate", "none") == "tanh";
    if constexpr (!std::is_same_v<T, double>) {
      if (!approx) {
        return MakeKernel([](KernelContext& ctx) {
          const T* x = ctx.inputs[0].as<T>();
          T* y = ctx.outputs[0].as<T>();
          ParallelRanges(ctx.outputs[0].num_elements(), 32768,
                         [&](int64_t begin, int64_t end) { GeluErfRange(begin, end, x, y); });
          return absl::OkStatus();
        });
      }
    }
    return MakeKernel(
        [approx](KernelContext& ctx) { return MapUnary<T>(ctx, [approx](Acc<T> x) { return GeluValue(x, approx); }); });
  }
};

// GeluGrad in f32, bf16 and f16 through gelu_math.h's vector loops (both forms); f64
// keeps the libm reference.
template <typename T>
void RunGeluGrad(KernelContext& ctx, bool tanh_form) {
  const T* dy = ctx.inputs[0].as<T>();
  const T* x = ctx.inputs[1].as<T>();
  T* dx = ctx.outputs[0].as<T>();
  ParallelRanges(ctx.outputs[0].num_elements(), 32768, [&](int64_t begin, int64_t end) {
    if (tanh_form) {
      GeluGradRange<T, true>(begin, end, dy, x, dx);
    } else {
      GeluGradRange<T, false>(begin, end, dy, x, dx);
    }
  });
}

template <typename T>
struct GeluGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool approx = node.attrs.GetString("approximate", "none") == "tanh";
    if constexpr (!std::is_same_v<T, double>) {
      return MakeKernel([approx](KernelContext& ctx) {
        RunGeluGrad<T>(ctx, approx);
        return absl::OkStatus();
      });
    } else {
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

}  // namespace

void RegisterCpuMathKernels(KernelRegistry& r) {
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
}

}  // namespace mpc
