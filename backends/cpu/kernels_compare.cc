// CPU comparison and logic ops (Equal, Less, Greater, LessOrEqual, GreaterOrEqual, And,
// Or, Xor, Not) and Where, with numpy broadcasting. Comparisons and logic write bool (one
// byte, 0 or 1). Where selects element words, so it runs for every dtype.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// ---------------------------------------------------------------------------------
// Where: out = cond ? x : y with three-way broadcasting.

// One output row of Where. Both candidates are loaded and one is selected, so the common
// stride patterns (1, or 0 for a broadcast scalar) vectorise; compiled for each vector ISA.
template <typename W>
MPC_ISA_CLONES void WhereRow(const uint8_t* c, int64_t sc, const W* x, int64_t sx, const W* y, int64_t sy, W* out,
                             int64_t n) {
  if (sc == 1 && sx == 1 && sy == 1) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const W a = x[i], b = y[i];
      out[i] = c[i] ? a : b;
    }
  } else if (sc == 1 && sx == 1 && sy == 0) {
    const W b = y[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const W a = x[i];
      out[i] = c[i] ? a : b;
    }
  } else if (sc == 1 && sx == 0 && sy == 1) {
    const W a = x[0];
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const W b = y[i];
      out[i] = c[i] ? a : b;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = c[i * sc] ? x[i * sx] : y[i * sy];
  }
}

KernelOr CreateWhere(const Node& node, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const TensorView &c = ctx.inputs[0], &x = ctx.inputs[1], &y = ctx.inputs[2], &out = ctx.outputs[0];
    const std::array<std::vector<int64_t>, 3> strides = {cpu::BroadcastStrides(c.shape, out.shape),
                                                         cpu::BroadcastStrides(x.shape, out.shape),
                                                         cpu::BroadcastStrides(y.shape, out.shape)};
    const int64_t inner = out.shape.empty() ? 1 : out.shape.back();
    const int64_t sc = out.shape.empty() ? 0 : strides[0].back();
    const int64_t sx = out.shape.empty() ? 0 : strides[1].back();
    const int64_t sy = out.shape.empty() ? 0 : strides[2].back();
    const uint8_t* pc = c.as<uint8_t>();
    WithWord(ElemSize(out), [&](auto word) {
      using W = decltype(word);
      const W* px = x.as<W>();
      const W* py = y.as<W>();
      W* po = out.as<W>();
      ForEachRow<3>(out.shape, strides, [&](int64_t o, const std::array<int64_t, 3>& off) {
        WhereRow<W>(pc + off[0], sc, px + off[1], sx, py + off[2], sy, po + o, inner);
      });
    });
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// Comparison and logic: bool outputs, broadcasting binaries.

// The value a comparison sees: 16-bit floats widen to f32 exactly; others as stored.
template <typename T>
using CmpType = std::conditional_t<std::is_same_v<T, Bf16> || std::is_same_v<T, Half>, float, T>;

struct EqualOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return a == b;
  }
};
struct LessOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return a >= b;
  }
};
struct AndOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return (a != 0) && (b != 0);
  }
};
struct OrOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return (a != 0) || (b != 0);
  }
};
struct XorOp {
  template <typename V>
  bool operator()(V a, V b) const {
    return (a != 0) != (b != 0);
  }
};

template <typename T, typename Op>
absl::Status RunCompare(KernelContext& ctx) {
  using V = CmpType<T>;
  const TensorView &a = ctx.inputs[0], &b = ctx.inputs[1], &out = ctx.outputs[0];
  const std::array<std::vector<int64_t>, 2> strides = {cpu::BroadcastStrides(a.shape, out.shape),
                                                       cpu::BroadcastStrides(b.shape, out.shape)};
  const int64_t inner = out.shape.empty() ? 1 : out.shape.back();
  const int64_t sa = out.shape.empty() ? 0 : strides[0].back();
  const int64_t sb = out.shape.empty() ? 0 : strides[1].back();
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  uint8_t* po = out.as<uint8_t>();
  const Op op;
  ForEachRow<2>(out.shape, strides, [&](int64_t o, const std::array<int64_t, 2>& off) {
    for (int64_t i = 0; i < inner; ++i) {
      po[o + i] = op(static_cast<V>(pa[off[0] + i * sa]), static_cast<V>(pb[off[1] + i * sb])) ? 1 : 0;
    }
  });
  return absl::OkStatus();
}

template <typename Op>
struct CompareFactory {
  template <typename T>
  static KernelOr Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) { return RunCompare<T, Op>(ctx); });
  }
};

template <typename Op>
void RegisterCompare(KernelRegistry& r, const std::string& op, bool with_bool) {
  using F = CompareFactory<Op>;
  r.Register(op, "cpu", DType::kF32, F::template Create<float>);
  r.Register(op, "cpu", DType::kF64, F::template Create<double>);
  r.Register(op, "cpu", DType::kBF16, F::template Create<Bf16>);
  r.Register(op, "cpu", DType::kF16, F::template Create<Half>);
  r.Register(op, "cpu", DType::kI64, F::template Create<int64_t>);
  r.Register(op, "cpu", DType::kI32, F::template Create<int32_t>);
  r.Register(op, "cpu", DType::kU8, F::template Create<uint8_t>);
  if (with_bool) r.Register(op, "cpu", DType::kBool, F::template Create<uint8_t>);
}

KernelOr CreateNot(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const uint8_t* x = ctx.inputs[0].as<uint8_t>();
    uint8_t* y = ctx.outputs[0].as<uint8_t>();
    const int64_t n = ctx.outputs[0].num_elements();
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] ? 0 : 1;
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuCompareKernels(KernelRegistry& r) {
  // Where's kernel is looked up by its bool condition; it is registered under every dtype
  // too so autocast sees that it runs in bf16/f16 (Capabilities::HasKernel).
  for (DType d : cpu::kAllDTypes) r.Register("Where", "cpu", d, CreateWhere);
  RegisterCompare<EqualOp>(r, "Equal", /*with_bool=*/true);
  RegisterCompare<LessOp>(r, "Less", false);
  RegisterCompare<GreaterOp>(r, "Greater", false);
  RegisterCompare<LessOrEqualOp>(r, "LessOrEqual", false);
  RegisterCompare<GreaterOrEqualOp>(r, "GreaterOrEqual", false);
  r.Register("And", "cpu", DType::kBool, CompareFactory<AndOp>::Create<uint8_t>);
  r.Register("Or", "cpu", DType::kBool, CompareFactory<OrOp>::Create<uint8_t>);
  r.Register("Xor", "cpu", DType::kBool, CompareFactory<XorOp>::Create<uint8_t>);
  r.Register("Not", "cpu", DType::kBool, CreateNot);
}

}  // namespace mpc
