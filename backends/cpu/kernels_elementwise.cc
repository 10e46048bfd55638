// CPU elementwise kernels: broadcasting Add/Sub/Mul/Div, Neg, and the activations with
// their output-based gradients, in f32, f64, bf16 and f16. Same-shape operands take a
// flat vectorizable loop; broadcasts walk the output row by row with per-operand
// strides. Every kernel loads its operands into Acc<T> (f32 for the 16-bit formats),
// evaluates there and rounds once on the store, so a bf16/f16 result is the f32 result
// rounded to the format.
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"

namespace mpc {
namespace cpu {
namespace {

// ReLU and its gradient on the 16-bit formats, on the bits: the result is the input or a
// zero, so nothing is rounded, and integer compares vectorise where the widening
// conversions of the generic loop do not (a bf16 ResNet spends most of its elementwise
// time here). `kInf` is the format's +infinity; a magnitude above it is a NaN.
template <uint16_t kInf>
inline uint16_t ReluBits(uint16_t b) {
  const bool negative_number = (b & 0x8000) != 0 && (b & 0x7fff) <= kInf;  // NaN keeps its bits
  return negative_number ? 0 : b;
}

// All ones where y > 0 (not zero, not negative, not NaN), else zero. As a signed 16-bit
// number a positive non-NaN format value lies in [1, kInf]: one signed range test, which
// SSE2 has (pcmpgtw) where it has no unsigned 16-bit compare.
template <uint16_t kInf>
inline uint16_t PositiveMask(uint16_t b) {
  const int16_t s = static_cast<int16_t>(b);
  return (s > 0 && s <= static_cast<int16_t>(kInf)) ? uint16_t{0xffff} : uint16_t{0};
}

template <uint16_t kInf>
void ReluBitsLoop(const uint16_t* x, uint16_t* y, int64_t n) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) y[i] = ReluBits<kInf>(x[i]);
}

template <uint16_t kInf>
absl::StatusOr<std::unique_ptr<Kernel>> CreateReluBits(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    ReluBitsLoop<kInf>(static_cast<const uint16_t*>(ctx.inputs[0].data), static_cast<uint16_t*>(ctx.outputs[0].data),
                       ctx.outputs[0].num_elements());
    return absl::OkStatus();
  });
}

// ReluGrad(dY, Y): dX = dY where Y > 0, else 0 (the generic kernel's `y > 0 ? dy : 0`).
template <uint16_t kInf>
absl::StatusOr<std::unique_ptr<Kernel>> CreateReluGradBits(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const uint16_t* dy = static_cast<const uint16_t*>(ctx.inputs[0].data);
    const uint16_t* y = static_cast<const uint16_t*>(ctx.inputs[1].data);
    uint16_t* dx = static_cast<uint16_t*>(ctx.outputs[0].data);
    const int64_t n = ctx.outputs[0].num_elements();
#pragma omp parallel for simd if (n > 32768)
    // dY is read unconditionally and masked: a conditional load would keep the loop scalar.
    for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] & PositiveMask<kInf>(y[i]);
    return absl::OkStatus();
  });
}

constexpr uint16_t kBf16Inf = 0x7f80, kHalfInf = 0x7c00;

}  // namespace

void ReluInPlace(void* y, DType dtype, int64_t n) {
  auto run = [n](auto* p) {
    using T = std::remove_pointer_t<decltype(p)>;
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(Relu(Acc<T>(p[i])));
  };
  switch (dtype) {
    case DType::kBF16:
      return ReluBitsLoop<kBf16Inf>(static_cast<uint16_t*>(y), static_cast<uint16_t*>(y), n);
    case DType::kF16:
      return ReluBitsLoop<kHalfInf>(static_cast<uint16_t*>(y), static_cast<uint16_t*>(y), n);
    case DType::kF64:
      return run(static_cast<double*>(y));
    default:
      return run(static_cast<float*>(y));
  }
}

std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  const std::vector<int64_t> dense = RowMajorStrides(in);
  const size_t offset = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    strides[offset + i] = in[i] == 1 ? 0 : dense[i];
  }
  return strides;
}

namespace {

struct AddOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a + b;
  }
};
struct SubOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a - b;
  }
};
struct MulOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a * b;
  }
};
struct DivOp {
  template <typename T>
  T operator()(T a, T b) const {
    return a / b;
  }
};

// y[i] = op(a[i * sa], b[i * sb]) over one row or one thread's range; the strides are 1
// or 0 (a broadcast operand) in the common cases, which get their own vector loops.
template <typename T, typename Op>
MPC_ISA_CLONES void BinaryRow(const T* a, int64_t sa, const T* b, int64_t sb, T* y, int64_t n) {
  using A = Acc<T>;
  const Op op;
  if (sa == 1 && sb == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) StoreRounded(y + i, op(A(a[i]), A(b[i])));
  } else if (sa == 1 && sb == 0) {
    const A bv = b[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) StoreRounded(y + i, op(A(a[i]), bv));
  } else if (sa == 0 && sb == 1) {
    const A av = a[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) StoreRounded(y + i, op(av, A(b[i])));
  } else {
    for (int64_t i = 0; i < n; ++i) StoreRounded(y + i, op(A(a[i * sa]), A(b[i * sb])));
  }
}

template <typename T, typename Op>
absl::Status RunBinary(KernelContext& ctx) {
  const TensorView& a = ctx.inputs[0];
  const TensorView& b = ctx.inputs[1];
  const TensorView& y = ctx.outputs[0];
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  T* py = y.as<T>();
  const int64_t n = y.num_elements();
  if (a.shape == y.shape && (b.shape == y.shape || b.num_elements() == 1)) {
    const int64_t sb = b.num_elements() == 1 && n > 1 ? 0 : 1;
    ParallelRanges(n, 32768, [&](int64_t begin, int64_t end) {
      BinaryRow<T, Op>(pa + begin, 1, pb + begin * sb, sb, py + begin, end - begin);
    });
    return absl::OkStatus();
  }
  const auto as = BroadcastStrides(a.shape, y.shape);
  const auto bs = BroadcastStrides(b.shape, y.shape);
  const int64_t inner = y.shape.empty() ? 1 : y.shape.back();
  const int64_t sa = as.empty() ? 0 : as.back(), sb = bs.empty() ? 0 : bs.back();
  ForEachBroadcastRow(y.shape, as, bs, [&](int64_t yo, int64_t ao, int64_t bo) {
    BinaryRow<T, Op>(pa + ao, sa, pb + bo, sb, py + yo, inner);
  });
  return absl::OkStatus();
}

template <typename Op>
struct BinaryFactory {
  template <typename T>
  struct For {
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
      return MakeKernel([](KernelContext& ctx) { return RunBinary<T, Op>(ctx); });
    }
  };
};

MPC_UNARY_FACTORY(NegKernel, -x)
MPC_UNARY_FACTORY(ReluKernel, Relu(x))
MPC_UNARY_FACTORY(SigmoidKernel, A(1) / (A(1) + std::exp(-x)))
MPC_UNARY_FACTORY(TanhKernel, std::tanh(x))
MPC_GRAD_FACTORY(ReluGradKernel, y > A(0) ? dy : A(0))
MPC_GRAD_FACTORY(SigmoidGradKernel, dy* y*(A(1) - y))
MPC_GRAD_FACTORY(TanhGradKernel, dy*(A(1) - y * y))

}  // namespace
}  // namespace cpu

void RegisterCpuElementwiseKernels(KernelRegistry& r) {
  using namespace cpu;
  RegisterFloatKernels<BinaryFactory<AddOp>::For>(r, "Add");
  RegisterFloatKernels<BinaryFactory<SubOp>::For>(r, "Sub");
  RegisterFloatKernels<BinaryFactory<MulOp>::For>(r, "Mul");
  RegisterFloatKernels<BinaryFactory<DivOp>::For>(r, "Div");
  RegisterFloatKernels<NegKernel>(r, "Neg");
  RegisterFloatKernels<ReluKernel>(r, "Relu");
  RegisterFloatKernels<SigmoidKernel>(r, "Sigmoid");
  RegisterFloatKernels<TanhKernel>(r, "Tanh");
  RegisterFloatKernels<ReluGradKernel>(r, "ReluGrad");
  r.Register("Relu", "cpu", DType::kBF16, CreateReluBits<kBf16Inf>);
  r.Register("Relu", "cpu", DType::kF16, CreateReluBits<kHalfInf>);
  r.Register("ReluGrad", "cpu", DType::kBF16, CreateReluGradBits<kBf16Inf>);
  r.Register("ReluGrad", "cpu", DType::kF16, CreateReluGradBits<kHalfInf>);
  RegisterFloatKernels<SigmoidGradKernel>(r, "SigmoidGrad");
  RegisterFloatKernels<TanhGradKernel>(r, "TanhGrad");
}

}  // namespace mpc
