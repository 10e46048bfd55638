// CPU kernels for the indexing and data-movement ops (graph/ops_tensor.cc). Data
// movement (Gather, Concat, Split, Slice, SliceGrad, Squeeze, Unsqueeze, Expand, Where)
// is dtype-agnostic: it moves element-sized words, so it is registered for every dtype
// (index tensors move through exported graphs as often as activations). GatherGrad
// scatter-adds in Acc<T> (f32 for the 16-bit formats) and rounds once. The comparison
// and logic ops write bool (one byte, 0 or 1).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/ops_tensor.h"

namespace mpc {
namespace {

using cpu::MakeKernel;
using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

constexpr DType kAllDTypes[] = {DType::kF32,    DType::kF64, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                DType::kF8E5M2, DType::kI64, DType::kI32, DType::kU8,   DType::kBool};

// Calls f(Word{}) with the unsigned integer type of the element size.
template <typename F>
void WithWord(size_t elem, F f) {
  switch (elem) {
    case 8:
      f(uint64_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    default:
      f(uint8_t{});
      break;
  }
}

// Calls row(out_offset, offsets) for each innermost row of `out`, where offsets[k] is
// operand k's element offset for that row (strides aligned to out's rank).
template <size_t N, typename RowFn>
void ForEachRow(const Shape& out, const std::array<std::vector<int64_t>, N>& strides, RowFn row) {
  const int rank = static_cast<int>(out.size());
  const int64_t inner = rank == 0 ? 1 : out.back();
  const int64_t rows = inner == 0 ? 0 : NumElements(out) / inner;
#pragma omp parallel for if (rows > 256)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r;
    std::array<int64_t, N> off{};
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
    row(r * inner, off);
  }
}

size_t ElemSize(const TensorView& t) { return DTypeSize(t.dtype); }
char* Bytes(const TensorView& t) { return static_cast<char*>(t.data); }

int64_t Prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

int NormAxis(int64_t axis, size_t rank) {
  return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

KernelOr CreateCopy(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const size_t bytes = ctx.outputs[0].num_elements() * ElemSize(ctx.outputs[0]);
    if (bytes && ctx.outputs[0].data != ctx.inputs[0].data) std::memcpy(ctx.outputs[0].data, ctx.inputs[0].data, bytes);
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// Gather / GatherGrad: data viewed as [outer, dim, inner], indices flat [count].

struct GatherGeometry {
  int axis = 0;
  int64_t outer = 1, dim = 1, inner = 1, count = 0;
};

GatherGeometry GeometryOf(const Shape& data, const Shape& indices, int64_t axis_attr) {
  GatherGeometry g;
  g.axis = NormAxis(axis_attr, data.size());
  g.outer = Prod(data, 0, g.axis);
  g.dim = data[g.axis];
  g.inner = Prod(data, g.axis + 1, data.size());
  g.count = NumElements(indices);
  return g;
}

// Indices resolved to [0, dim), or an error naming the node and the bad index.
absl::Status ResolveIndices(const TensorView& idx, const GatherGeometry& g, const std::string& node,
                            std::vector<int64_t>& out) {
  out.resize(g.count);
  for (int64_t k = 0; k < g.count; ++k) {
    int64_t v = idx.dtype == DType::kI32 ? idx.as<int32_t>()[k] : idx.as<int64_t>()[k];
    if (v < -g.dim || v >= g.dim) {
      return absl::OutOfRangeError(absl::StrCat("node '", node, "': index ", v, " (element ", k,
                                                " of the indices) is out of range for axis ", g.axis, " of size ",
                                                g.dim, "; valid indices are ", -g.dim, " to ", g.dim - 1));
    }
    out[k] = v < 0 ? v + g.dim : v;
  }
  return absl::OkStatus();
}

KernelOr CreateGather(const Node& node, Backend&) {
  const GatherGeometry g = GeometryOf(node.inputs[0]->shape, node.inputs[1]->shape, node.attrs.GetInt("axis", 0));
  return MakeKernel([g, name = node.name](KernelContext& ctx) {
    std::vector<int64_t> idx;
    if (absl::Status st = ResolveIndices(ctx.inputs[1], g, name, idx); !st.ok()) return st;
    const size_t elem = ElemSize(ctx.inputs[0]);
    const size_t row = static_cast<size_t>(g.inner) * elem;
    if (row == 0) return absl::OkStatus();
    const char* src = Bytes(ctx.inputs[0]);
    char* dst = Bytes(ctx.outputs[0]);
    const int64_t total = g.outer * g.count;
#pragma omp parallel for if (total * g.inner > 65536)
    for (int64_t t = 0; t < total; ++t) {
      const int64_t o = t / g.count, k = t % g.count;
      std::memcpy(dst + t * row, src + (o * g.dim + idx[k]) * row, row);
    }
    return absl::OkStatus();
  });
}

template <typename T>
struct GatherGradKernel {
  static KernelOr Create(const Node& node, Backend&) {
    const Shape shape = node.attrs.GetInts("shape", {});
    const GatherGeometry g = GeometryOf(shape, node.inputs[1]->shape, node.attrs.GetInt("axis", 0));
    return MakeKernel([g, name = node.name](KernelContext& ctx) {
      std::vector<int64_t> idx;
      if (absl::Status st = ResolveIndices(ctx.inputs[1], g, name, idx); !st.ok()) return st;
      using A = cpu::Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t slab = g.dim * g.inner;
      // Each outer slab is independent; within one, indices are added in order, so
      // repeated indices sum deterministically. f32/f64 accumulate in the output itself;
      // the 16-bit formats in an f32 slab, rounded once.
      if constexpr (std::is_same_v<A, T>) {
        const size_t bytes = static_cast<size_t>(g.outer * slab) * sizeof(T);
        if (bytes) std::memset(dx, 0, bytes);
#pragma omp parallel for if (g.outer > 1 && g.outer * slab > 65536)
        for (int64_t o = 0; o < g.outer; ++o) {
          for (int64_t k = 0; k < g.count; ++k) {
            const T* src = dy + (o * g.count + k) * g.inner;
            T* a = dx + o * slab + idx[k] * g.inner;
            for (int64_t i = 0; i < g.inner; ++i) a[i] += src[i];
          }
        }
        return absl::OkStatus();
      }
#pragma omp parallel for if (g.outer > 1 && g.outer * slab > 65536)
      for (int64_t o = 0; o < g.outer; ++o) {
        std::vector<A> acc(slab, A(0));
        for (int64_t k = 0; k < g.count; ++k) {
          const T* src = dy + (o * g.count + k) * g.inner;
          A* a = acc.data() + idx[k] * g.inner;
          for (int64_t i = 0; i < g.inner; ++i) a[i] += A(src[i]);
        }
        T* out = dx + o * slab;
        for (int64_t i = 0; i < slab; ++i) out[i] = static_cast<T>(acc[i]);
      }
      return absl::OkStatus();
    });
  }
};

// ---------------------------------------------------------------------------------
// Where: out = cond ? x : y with three-way broadcasting.

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
        for (int64_t i = 0; i < inner; ++i) {
          po[o + i] = pc[off[0] + i * sc] ? px[off[1] + i * sx] : py[off[2] + i * sy];
        }
      });
    });
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// Concat / Split: rows of [outer, extent * inner] bytes laid side by side.

KernelOr CreateConcat(const Node& node, Backend&) {
  const Shape& out_shape = node.outputs[0]->shape;
  const int axis = NormAxis(node.attrs.GetInt("axis", 0), out_shape.size());
  const int64_t outer = Prod(out_shape, 0, axis);
  const int64_t inner = Prod(out_shape, axis + 1, out_shape.size());
  std::vector<int64_t> extents;
  for (const Value* v : node.inputs) extents.push_back(v->shape[axis]);
  return MakeKernel([outer, inner, extents](KernelContext& ctx) {
    const size_t elem = ElemSize(ctx.outputs[0]);
    int64_t total = 0;
    for (int64_t e : extents) total += e;
    const size_t out_row = static_cast<size_t>(total * inner) * elem;
    char* dst = Bytes(ctx.outputs[0]);
    size_t at = 0;
    for (size_t j = 0; j < extents.size(); ++j) {
      const size_t chunk = static_cast<size_t>(extents[j] * inner) * elem;
      if (chunk) {
        const char* src = Bytes(ctx.inputs[j]);
        for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * out_row + at, src + o * chunk, chunk);
      }
      at += chunk;
    }
    return absl::OkStatus();
  });
}

KernelOr CreateSplit(const Node& node, Backend&) {
  const Shape& in_shape = node.inputs[0]->shape;
  const int axis = NormAxis(node.attrs.GetInt("axis", 0), in_shape.size());
  const int64_t outer = Prod(in_shape, 0, axis);
  const int64_t inner = Prod(in_shape, axis + 1, in_shape.size());
  std::vector<int64_t> extents;
  for (const Value* v : node.outputs) extents.push_back(v->shape[axis]);
  const int64_t row_elems = in_shape[axis] * inner;
  return MakeKernel([outer, inner, extents, row_elems](KernelContext& ctx) {
    const size_t elem = ElemSize(ctx.inputs[0]);
    const size_t in_row = static_cast<size_t>(row_elems) * elem;
    const char* src = Bytes(ctx.inputs[0]);
    size_t at = 0;
    for (size_t j = 0; j < extents.size(); ++j) {
      const size_t chunk = static_cast<size_t>(extents[j] * inner) * elem;
      if (chunk && j < ctx.outputs.size() && ctx.outputs[j].data) {
        char* dst = Bytes(ctx.outputs[j]);
        for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * chunk, src + o * in_row + at, chunk);
      }
      at += chunk;
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// Slice / SliceGrad: out index i along axis d reads input index start[d] + i * step[d].

struct StridedMap {
  Shape out;                     // the slice's shape
  std::vector<int64_t> strides;  // input element stride per slice axis (step * row-major stride)
  int64_t base = 0;              // input offset of the slice's first element
};

StridedMap MapOf(const Shape& in, const Shape& out, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& step) {
  StridedMap m;
  m.out = out;
  const auto dense = RowMajorStrides(in);
  m.strides.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    m.strides[d] = step[d] * dense[d];
    m.base += start[d] * dense[d];
  }
  return m;
}

// For each slice element: fn(slice_offset, input_offset) on words W.
template <typename F>
void ForEachSliceRow(const StridedMap& m, F fn) {
  const int64_t inner = m.out.empty() ? 1 : m.out.back();
  const int64_t s = m.out.empty() ? 0 : m.strides.back();
  ForEachRow<1>(m.out, {m.strides}, [&](int64_t o, const std::array<int64_t, 1>& off) {
    for (int64_t i = 0; i < inner; ++i) fn(o + i, m.base + off[0] + i * s);
  });
}

KernelOr CreateSlice(const Node& node, Backend&) {
  auto spec = tensor_ops::ResolveSlice(node);
  if (!spec.ok()) return spec.status();
  const StridedMap m = MapOf(spec->in, spec->out, spec->start, spec->step);
  return MakeKernel([m](KernelContext& ctx) {
    if (NumElements(m.out) == 0) return absl::OkStatus();
    WithWord(ElemSize(ctx.inputs[0]), [&](auto word) {
      using W = decltype(word);
      const W* src = ctx.inputs[0].as<W>();
      W* dst = ctx.outputs[0].as<W>();
      ForEachSliceRow(m, [&](int64_t o, int64_t i) { dst[o] = src[i]; });
    });
    return absl::OkStatus();
  });
}

KernelOr CreateSliceGrad(const Node& node, Backend&) {
  const StridedMap m = MapOf(node.attrs.GetInts("shape", {}), node.inputs[0]->shape, node.attrs.GetInts("starts", {}),
                             node.attrs.GetInts("steps", {}));
  return MakeKernel([m](KernelContext& ctx) {
    const TensorView& out = ctx.outputs[0];
    const size_t bytes = out.num_elements() * ElemSize(out);
    if (bytes) std::memset(out.data, 0, bytes);  // all-zero bits are +0 in every float format
    if (NumElements(m.out) == 0) return absl::OkStatus();
    WithWord(ElemSize(out), [&](auto word) {
      using W = decltype(word);
      const W* src = ctx.inputs[0].as<W>();
      W* dst = out.as<W>();
      ForEachSliceRow(m, [&](int64_t o, int64_t i) { dst[i] = src[o]; });  // slices never overlap
    });
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// Expand: numpy broadcast copy.

KernelOr CreateExpand(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const TensorView& in = ctx.inputs[0];
    const TensorView& out = ctx.outputs[0];
    const std::array<std::vector<int64_t>, 1> strides = {cpu::BroadcastStrides(in.shape, out.shape)};
    const int64_t inner = out.shape.empty() ? 1 : out.shape.back();
    const int64_t s = out.shape.empty() ? 0 : strides[0].back();
    WithWord(ElemSize(out), [&](auto word) {
      using W = decltype(word);
      const W* src = in.as<W>();
      W* dst = out.as<W>();
      ForEachRow<1>(out.shape, strides, [&](int64_t o, const std::array<int64_t, 1>& off) {
        for (int64_t i = 0; i < inner; ++i) dst[o + i] = src[off[0] + i * s];
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

// ---------------------------------------------------------------------------------
// ConstantOfShape, Shape, Range.

KernelOr CreateConstantOfShape(const Node& node, Backend&) {
  const DType dtype = node.outputs[0]->dtype;
  Tensor one;
  if (IsFloating(dtype)) {
    one = Tensor::FromVector<double>({}, {static_cast<double>(node.attrs.GetFloat("value", 0.0f))}).CastTo(dtype);
  } else {
    one = Tensor::FromVector<int64_t>({}, {node.attrs.GetInt("value", 0)});
    if (dtype != DType::kI64) one = one.CastTo(dtype);  // CastTo goes through double
  }
  return MakeKernel([one](KernelContext& ctx) {
    const size_t elem = DTypeSize(one.dtype());
    char* dst = Bytes(ctx.outputs[0]);
    const int64_t n = ctx.outputs[0].num_elements();
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * elem, one.raw(), elem);
    return absl::OkStatus();
  });
}

KernelOr CreateShape(const Node& node, Backend&) {
  const Shape& in = node.inputs[0]->shape;
  const int64_t n = node.outputs[0]->shape[0];
  const auto rank = static_cast<int64_t>(in.size());
  int64_t start = node.attrs.GetInt("start", 0);
  if (start < 0) start += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  const std::vector<int64_t> dims(in.begin() + start, in.begin() + start + n);
  return MakeKernel([dims](KernelContext& ctx) {
    if (!dims.empty()) std::memcpy(ctx.outputs[0].data, dims.data(), dims.size() * sizeof(int64_t));
    return absl::OkStatus();
  });
}

template <typename T>
struct RangeKernel {
  static KernelOr Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      using V = std::conditional_t<std::is_integral_v<T>, int64_t, cpu::Acc<T>>;
      const V start = static_cast<V>(ctx.inputs[0].as<T>()[0]);
      const V delta = static_cast<V>(ctx.inputs[2].as<T>()[0]);
      T* y = ctx.outputs[0].as<T>();
      const int64_t n = ctx.outputs[0].num_elements();
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(start + static_cast<V>(i) * delta);
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuTensorKernels(KernelRegistry& r) {
  for (DType d : kAllDTypes) {
    r.Register("Gather", "cpu", d, CreateGather);
    r.Register("Concat", "cpu", d, CreateConcat);
    r.Register("Split", "cpu", d, CreateSplit);
    r.Register("Slice", "cpu", d, CreateSlice);
    r.Register("Squeeze", "cpu", d, CreateCopy);
    r.Register("Unsqueeze", "cpu", d, CreateCopy);
    r.Register("Expand", "cpu", d, CreateExpand);
    r.Register("Shape", "cpu", d, CreateShape);
    // Where's kernel is looked up by its bool condition; it is registered under every
    // dtype too so autocast sees that it runs in bf16/f16 (Capabilities::HasKernel).
    r.Register("Where", "cpu", d, CreateWhere);
  }
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
    r.Register("SliceGrad", "cpu", d, CreateSliceGrad);
  cpu::RegisterFloatKernels<GatherGradKernel>(r, "GatherGrad");
  RegisterCompare<EqualOp>(r, "Equal", /*with_bool=*/true);
  RegisterCompare<LessOp>(r, "Less", false);
  RegisterCompare<GreaterOp>(r, "Greater", false);
  RegisterCompare<LessOrEqualOp>(r, "LessOrEqual", false);
  RegisterCompare<GreaterOrEqualOp>(r, "GreaterOrEqual", false);
  r.Register("And", "cpu", DType::kBool, CompareFactory<AndOp>::Create<uint8_t>);
  r.Register("Or", "cpu", DType::kBool, CompareFactory<OrOp>::Create<uint8_t>);
  r.Register("Xor", "cpu", DType::kBool, CompareFactory<XorOp>::Create<uint8_t>);
  r.Register("Not", "cpu", DType::kBool, CreateNot);
  r.Register("ConstantOfShape", "cpu", DType::kI64, CreateConstantOfShape);
  r.Register("ConstantOfShape", "cpu", DType::kI32, CreateConstantOfShape);
  cpu::RegisterFloatKernels<RangeKernel>(r, "Range");
  r.Register("Range", "cpu", DType::kI64, RangeKernel<int64_t>::Create);
  r.Register("Range", "cpu", DType::kI32, RangeKernel<int32_t>::Create);
}

}  // namespace mpc
