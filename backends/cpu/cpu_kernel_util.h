// Small building blocks for CPU kernels: wrapping a lambda as a Kernel, registering a
// templated kernel for every float dtype (f32, f64, bf16, f16), the accumulator type a
// templated kernel reduces in, and walking broadcast operands row by row.
#pragma once

#include <memory>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_isa.h"
#include "graph/half_types.h"

namespace mpc::cpu {

template <typename F>
class LambdaKernel : public Kernel {
 public:
  explicit LambdaKernel(F fn) : fn_(std::move(fn)) {}
  absl::Status Run(KernelContext& ctx) override { return fn_(ctx); }

 private:
  F fn_;
};

template <typename F>
std::unique_ptr<Kernel> MakeKernel(F fn) {
  return std::make_unique<LambdaKernel<F>>(std::move(fn));
}

// The type a kernel over T computes and accumulates in: f64 for the f64 reference
// kernels, f32 for everything else (docs/numerics.md: reductions, softmax, norms and losses
// accumulate in f32 whatever their I/O dtype). Converting a Bf16/Half to it is exact.
template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;

// *p = v rounded to T. The 16-bit formats get their bits member written: assigning a
// Bf16/Half temporary is an aggregate copy, which GCC's loop vectoriser refuses (a bf16
// loop storing through this runs about 8x faster once vectorised).
template <typename T>
inline void StoreRounded(T* p, Acc<T> v) {
  *p = static_cast<T>(v);
}
template <>
inline void StoreRounded(Bf16* p, float v) {
  p->bits = FloatToBf16(v);
}
template <>
inline void StoreRounded(Half* p, float v) {
  p->bits = FloatToHalf(v);
}

// Registers Factory<float>, Factory<double> (the reference dtype), Factory<Bf16> and
// Factory<Half> for an op. The 16-bit instantiations compute in f32 (half_types.h) and
// round on store, so a templated kernel must keep its intermediates in Acc<T>.
template <template <typename> class Factory>
void RegisterFloatKernels(KernelRegistry& r, const std::string& op) {
  r.Register(op, "cpu", DType::kF32, Factory<float>::Create);
  r.Register(op, "cpu", DType::kF64, Factory<double>::Create);
  r.Register(op, "cpu", DType::kBF16, Factory<Bf16>::Create);
  r.Register(op, "cpu", DType::kF16, Factory<Half>::Create);
}

// Per-operand element strides aligned to the output's rank, 0 along broadcast axes.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out);

// Calls row(out_offset, a_offset, b_offset) for each innermost row of `out`, in
// parallel; inner strides are a_strides.back()/b_strides.back().
template <typename RowFn>
void ForEachBroadcastRow(const Shape& out, const std::vector<int64_t>& a_strides, const std::vector<int64_t>& b_strides,
                         RowFn row) {
  const int rank = static_cast<int>(out.size());
  const int64_t inner = rank == 0 ? 1 : out.back();
  const int64_t rows = inner == 0 ? 0 : NumElements(out) / inner;
#pragma omp parallel for if (rows > 64)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, a_off = 0, b_off = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      a_off += idx * a_strides[d];
      b_off += idx * b_strides[d];
    }
    row(r * inner, a_off, b_off);
  }
}

// y = f(x) and dx = g(dy, y) as flat loops for the elementwise kernel families; f and g
// take and return Acc<T>, so 16-bit results are the f32 result rounded once. The loops
// run per thread range and are compiled for each vector ISA (cpu_isa.h).
template <typename T, typename F>
MPC_ISA_CLONES void MapUnaryRange(int64_t begin, int64_t end, const T* x, T* y, F f) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) StoreRounded(y + i, f(Acc<T>(x[i])));
}

template <typename T, typename F>
MPC_ISA_CLONES void MapGradRange(int64_t begin, int64_t end, const T* dy, const T* y, T* dx, F f) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) StoreRounded(dx + i, f(Acc<T>(dy[i]), Acc<T>(y[i])));
}

template <typename T, typename F>
absl::Status MapUnary(KernelContext& ctx, F f) {
  const T* x = ctx.inputs[0].as<T>();
  T* y = ctx.outputs[0].as<T>();
  ParallelRanges(ctx.outputs[0].num_elements(), 32768,
                 [&](int64_t begin, int64_t end) { MapUnaryRange(begin, end, x, y, f); });
  return absl::OkStatus();
}

template <typename T, typename F>
absl::Status MapGrad(KernelContext& ctx, F f) {
  const T* dy = ctx.inputs[0].as<T>();
  const T* y = ctx.inputs[1].as<T>();
  T* dx = ctx.outputs[0].as<T>();
  ParallelRanges(ctx.outputs[0].num_elements(), 32768,
                 [&](int64_t begin, int64_t end) { MapGradRange(begin, end, dy, y, dx, f); });
  return absl::OkStatus();
}

// ReLU that propagates NaN as IEEE and PyTorch do: max(x, 0) for numbers (+0 for -0),
// NaN stays NaN. (oneDNN's ReLU, as an eltwise primitive or a post-op, turns NaN into 0.)
template <typename A>
inline A Relu(A x) {
  return x > A(0) || x != x ? x : A(0);
}
// In place over n elements of y (f32, bf16 or f16): the fused Gemm + ReLU epilogue.
void ReluInPlace(void* y, DType dtype, int64_t n);

#define MPC_UNARY_FACTORY(Name, expr)                                                                        \
  template <typename T>                                                                                      \
  struct Name {                                                                                              \
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {                           \
      using A = Acc<T>;                                                                                      \
      return MakeKernel([](KernelContext& ctx) { return MapUnary<T>(ctx, [](A x) -> A { return expr; }); }); \
    }                                                                                                        \
  };

#define MPC_GRAD_FACTORY(Name, expr)                                                                              \
  template <typename T>                                                                                           \
  struct Name {                                                                                                   \
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {                                \
      using A = Acc<T>;                                                                                           \
      return MakeKernel([](KernelContext& ctx) { return MapGrad<T>(ctx, [](A dy, A y) -> A { return expr; }); }); \
    }                                                                                                             \
  };

}  // namespace mpc::cpu
