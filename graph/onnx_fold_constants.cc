// See onnx_fold_constants.h.
#include "graph/onnx_fold_constants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>

#include "graph/shape.h"

namespace mpc {
namespace {

constexpr int64_t kMaxFoldElements = int64_t{1} << 22;

bool IsFloatData(const Tensor& t) { return t.dtype() == DType::kF32 || t.dtype() == DType::kF64; }
bool IsIntData(const Tensor& t) { return t.dtype() == DType::kI64 || t.dtype() == DType::kI32; }

// Element `i` of a row-major `shape` read from `in` under numpy broadcasting.
int64_t BroadcastOffset(int64_t i, const Shape& shape, const Shape& in) {
  int64_t offset = 0, stride = 1;
  const size_t lead = shape.size() - in.size();
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const int64_t index = i % shape[d];
    i /= shape[d];
    if (d >= static_cast<int>(lead)) {
      const int64_t extent = in[d - lead];
      if (extent != 1) offset += index * stride;
      stride *= extent;
    }
  }
  return offset;
}

// Applies `f` elementwise in the dtype T of the (equal-typed) inputs.
template <typename T>
std::optional<Tensor> Elementwise(const std::vector<const Tensor*>& in, const std::function<T(T, T)>& f) {
  Shape shape = in[0]->shape();
  for (size_t k = 1; k < in.size(); ++k) {
    auto b = BroadcastShapes(shape, in[k]->shape());
    if (!b.ok()) return std::nullopt;
    shape = *b;
  }
  if (NumElements(shape) > kMaxFoldElements) return std::nullopt;
  Tensor out(in[0]->dtype(), shape);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const T a = in[0]->data<T>()[BroadcastOffset(i, shape, in[0]->shape())];
    const T b = in.size() > 1 ? in[1]->data<T>()[BroadcastOffset(i, shape, in[1]->shape())] : T(0);
    out.data<T>()[i] = f(a, b);
  }
  return out;
}

template <typename T>
std::optional<std::function<T(T, T)>> FloatFunction(const std::string& op, const AttrMap& attrs) {
  using F = std::function<T(T, T)>;
  if (op == "Neg") return F([](T a, T) { return -a; });
  if (op == "Abs") return F([](T a, T) { return std::fabs(a); });
  if (op == "Sqrt") return F([](T a, T) { return std::sqrt(a); });
  if (op == "Reciprocal") return F([](T a, T) { return T(1) / a; });
  if (op == "Exp") return F([](T a, T) { return std::exp(a); });
  if (op == "Log") return F([](T a, T) { return std::log(a); });
  if (op == "Sin") return F([](T a, T) { return std::sin(a); });
  if (op == "Cos") return F([](T a, T) { return std::cos(a); });
  if (op == "Tanh") return F([](T a, T) { return std::tanh(a); });
  if (op == "Sigmoid") return F([](T a, T) { return T(1) / (T(1) + std::exp(-a)); });
  if (op == "Erf") return F([](T a, T) { return std::erf(a); });
  if (op == "Floor") return F([](T a, T) { return std::floor(a); });
  if (op == "Ceil") return F([](T a, T) { return std::ceil(a); });
  if (op == "Relu") return F([](T a, T) { return a > T(0) ? a : T(0); });
  if (op == "Add") return F([](T a, T b) { return a + b; });
  if (op == "Sub") return F([](T a, T b) { return a - b; });
  if (op == "Mul") return F([](T a, T b) { return a * b; });
  if (op == "Div") return F([](T a, T b) { return a / b; });
  if (op == "Pow") return F([](T a, T b) { return std::pow(a, b); });
  if (op == "Max") return F([](T a, T b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); });
  if (op == "Min") return F([](T a, T b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); });
  if (op == "Mod") {
    if (attrs.GetInt("fmod", 0) == 0) return std::nullopt;  // ONNX: float Mod needs fmod = 1
    return F([](T a, T b) { return std::fmod(a, b); });
  }
  return std::nullopt;
}

// Integer Mod: fmod = 0 takes the divisor's sign (Python's %), fmod = 1 the dividend's.
std::optional<Tensor> IntegerMod(const std::vector<const Tensor*>& in, const AttrMap& attrs) {
  const bool c_style = attrs.GetInt("fmod", 0) != 0;
  std::vector<Tensor> wide;
  for (const Tensor* t : in) wide.push_back(t->dtype() == DType::kI64 ? *t : t->CastTo(DType::kI64));
  for (int64_t i = 0; i < wide[1].num_elements(); ++i) {
    if (wide[1].data<int64_t>()[i] == 0) return std::nullopt;  // the kernel's business to refuse
  }
  auto out = Elementwise<int64_t>({&wide[0], &wide[1]}, [c_style](int64_t a, int64_t b) {
    int64_t r = a % b;
    if (!c_style && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  });
  if (out && in[0]->dtype() != DType::kI64) return out->CastTo(in[0]->dtype());
  return out;
}

// Trilu(x, k?): keeps the upper (upper = 1, j - i >= k) or lower (j - i <= k) triangle of
// every matrix in the last two axes, zeros elsewhere.
std::optional<Tensor> Trilu(const std::vector<const Tensor*>& in, const AttrMap& attrs) {
  const Tensor& x = *in[0];
  if (x.shape().size() < 2) return std::nullopt;
  const int64_t k = in.size() > 1 && in[1] ? static_cast<int64_t>(in[1]->GetAsDouble(0)) : 0;
  const bool upper = attrs.GetInt("upper", 1) != 0;
  const int64_t rows = x.shape()[x.shape().size() - 2], cols = x.shape().back();
  Tensor out(x.dtype(), x.shape());
  const size_t elem = DTypeSize(x.dtype());
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const int64_t col = i % cols, row = (i / cols) % rows;
    const bool keep = upper ? col - row >= k : col - row <= k;
    if (keep) {
      std::memcpy(static_cast<char*>(out.raw()) + i * elem, static_cast<const char*>(x.raw()) + i * elem, elem);
    }
  }
  return out;
}

std::optional<Tensor> Transpose(const Tensor& x, const AttrMap& attrs) {
  const int rank = static_cast<int>(x.shape().size());
  std::vector<int64_t> perm = attrs.GetInts("perm", {});
  if (perm.empty()) {
    for (int d = rank - 1; d >= 0; --d) perm.push_back(d);
  }
  if (static_cast<int>(perm.size()) != rank) return std::nullopt;
  Shape shape(rank);
  for (int d = 0; d < rank; ++d) {
    if (perm[d] < 0 || perm[d] >= rank) return std::nullopt;
    shape[d] = x.shape()[perm[d]];
  }
  const std::vector<int64_t> strides = RowMajorStrides(x.shape());
  Tensor out(x.dtype(), shape);
  const size_t elem = DTypeSize(x.dtype());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t rest = i, offset = 0;
    for (int d = rank - 1; d >= 0; --d) {
      offset += (rest % shape[d]) * strides[perm[d]];
      rest /= shape[d];
    }
    std::memcpy(static_cast<char*>(out.raw()) + i * elem, static_cast<const char*>(x.raw()) + offset * elem, elem);
  }
  return out;
}

int64_t IndexAt(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kI64 ? t.data<int64_t>()[i] : static_cast<int64_t>(t.GetAsDouble(i));
}

// The element offset in `shape` (row-major `strides`) of index tuple `t` of `indices`
// ([..., k]); negative indices count from the end; nullopt when one is out of range.
std::optional<int64_t> TupleOffset(const Tensor& indices, int64_t t, int64_t k, const Shape& shape,
                                   const std::vector<int64_t>& strides) {
  int64_t offset = 0;
  for (int64_t d = 0; d < k; ++d) {
    int64_t index = IndexAt(indices, t * k + d);
    if (index < 0) index += shape[d];
    if (index < 0 || index >= shape[d]) return std::nullopt;
    offset += index * strides[d];
  }
  return offset;
}

// ScatterND(data, indices, updates), reduction 'none': data with the slices indices name
// replaced by updates (any dtype). Out-of-range indices are left to the op's refusal.
std::optional<Tensor> ScatterND(const std::vector<const Tensor*>& in, const AttrMap& attrs) {
  if (in.size() != 3 || !in[1] || !in[2] || attrs.GetString("reduction", "none") != "none") return std::nullopt;
  const Tensor &data = *in[0], &indices = *in[1], &updates = *in[2];
  if (indices.shape().empty() || updates.dtype() != data.dtype() || !IsIntData(indices)) return std::nullopt;
  const int64_t k = indices.shape().back();
  const int rank = static_cast<int>(data.shape().size());
  if (k < 1 || k > rank) return std::nullopt;
  const int64_t tuples = indices.num_elements() / k;
  const int64_t slice = NumElements(Shape(data.shape().begin() + k, data.shape().end()));
  if (updates.num_elements() != tuples * slice) return std::nullopt;
  const std::vector<int64_t> strides = RowMajorStrides(data.shape());
  Tensor out = data;
  const size_t elem = DTypeSize(data.dtype());
  for (int64_t t = 0; t < tuples; ++t) {
    const std::optional<int64_t> offset = TupleOffset(indices, t, k, data.shape(), strides);
    if (!offset) return std::nullopt;
    std::memcpy(static_cast<char*>(out.raw()) + *offset * elem,
                static_cast<const char*>(updates.raw()) + t * slice * elem, slice * elem);
  }
  return out;
}

// GatherElements(data, indices, axis): out[i...] = data[i... with axis -> indices[i...]].
std::optional<Tensor> GatherElements(const std::vector<const Tensor*>& in, const AttrMap& attrs) {
  if (in.size() != 2 || !in[1] || !IsIntData(*in[1])) return std::nullopt;
  const Tensor &data = *in[0], &indices = *in[1];
  const int rank = static_cast<int>(data.shape().size());
  if (static_cast<int>(indices.shape().size()) != rank) return std::nullopt;
  int64_t axis = attrs.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  const std::vector<int64_t> strides = RowMajorStrides(data.shape());
  Tensor out(data.dtype(), indices.shape());
  const size_t elem = DTypeSize(data.dtype());
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    int64_t rest = i, offset = 0;
    for (int d = rank - 1; d >= 0; --d) {
      int64_t coordinate = rest % indices.shape()[d];
      rest /= indices.shape()[d];
      if (d == axis) {
        coordinate = IndexAt(indices, i);
        if (coordinate < 0) coordinate += data.shape()[d];
      }
      if (coordinate < 0 || coordinate >= data.shape()[d]) return std::nullopt;
      offset += coordinate * strides[d];
    }
    std::memcpy(static_cast<char*>(out.raw()) + i * elem, static_cast<const char*>(data.raw()) + offset * elem, elem);
  }
  return out;
}

// GatherND(data, indices), batch_dims 0: out[i...] = data[indices[i...]] (slices).
std::optional<Tensor> GatherND(const std::vector<const Tensor*>& in, const AttrMap& attrs) {
  if (in.size() != 2 || !in[1] || !IsIntData(*in[1]) || attrs.GetInt("batch_dims", 0) != 0) return std::nullopt;
  const Tensor &data = *in[0], &indices = *in[1];
  if (indices.shape().empty()) return std::nullopt;
  const int64_t k = indices.shape().back();
  const int rank = static_cast<int>(data.shape().size());
  if (k < 1 || k > rank) return std::nullopt;
  Shape shape(indices.shape().begin(), indices.shape().end() - 1);
  for (int d = static_cast<int>(k); d < rank; ++d) shape.push_back(data.shape()[d]);
  const int64_t tuples = indices.num_elements() / k;
  const int64_t slice = NumElements(Shape(data.shape().begin() + k, data.shape().end()));
  const std::vector<int64_t> strides = RowMajorStrides(data.shape());
  Tensor out(data.dtype(), shape);
  const size_t elem = DTypeSize(data.dtype());
  for (int64_t t = 0; t < tuples; ++t) {
    const std::optional<int64_t> offset = TupleOffset(indices, t, k, data.shape(), strides);
    if (!offset) return std::nullopt;
    std::memcpy(static_cast<char*>(out.raw()) + t * slice * elem,
                static_cast<const char*>(data.raw()) + *offset * elem, slice * elem);
  }
  return out;
}

// CumSum(x, axis): running sums along the axis (exclusive, reverse attributes), integers in
// int64 and floats in double, rounded once to x's dtype.
std::optional<Tensor> CumSum(const std::vector<const Tensor*>& in, const AttrMap& attrs) {
  if (in.size() != 2 || !in[1] || in[1]->num_elements() != 1) return std::nullopt;
  const Tensor& x = *in[0];
  const bool ints = IsIntData(x);
  if (!ints && !IsFloatData(x)) return std::nullopt;
  const int rank = static_cast<int>(x.shape().size());
  int64_t axis = IndexAt(*in[1], 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  const bool exclusive = attrs.GetInt("exclusive", 0) != 0, reverse = attrs.GetInt("reverse", 0) != 0;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (int d = static_cast<int>(axis) + 1; d < rank; ++d) inner *= x.shape()[d];
  const int64_t len = x.shape()[axis];
  Tensor wide = x.CastTo(ints ? DType::kI64 : DType::kF64);
  Tensor sums(wide.dtype(), x.shape());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      double fsum = 0;
      int64_t isum = 0;
      for (int64_t step = 0; step < len; ++step) {
        const int64_t j = reverse ? len - 1 - step : step;
        const int64_t at = (o * len + j) * inner + i;
        if (!exclusive) ints ? void(isum += wide.data<int64_t>()[at]) : void(fsum += wide.data<double>()[at]);
        if (ints) {
          sums.data<int64_t>()[at] = isum;
        } else {
          sums.data<double>()[at] = fsum;
        }
        if (exclusive) ints ? void(isum += wide.data<int64_t>()[at]) : void(fsum += wide.data<double>()[at]);
      }
    }
  }
  return sums.CastTo(x.dtype());
}

// MatMul of f32/f64 matrices (rank >= 2 each, batch axes broadcast), accumulated in the
// operands' dtype in order of k.
template <typename T>
std::optional<Tensor> MatMul(const Tensor& a, const Tensor& b) {
  if (a.shape().size() < 2 || b.shape().size() < 2) return std::nullopt;
  const int64_t m = a.shape()[a.shape().size() - 2], k = a.shape().back();
  const int64_t kb = b.shape()[b.shape().size() - 2], n = b.shape().back();
  if (k != kb) return std::nullopt;
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  auto batch = BroadcastShapes(a_batch, b_batch);
  if (!batch.ok()) return std::nullopt;
  Shape shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  if (NumElements(shape) > kMaxFoldElements || NumElements(shape) * k > (int64_t{1} << 28)) return std::nullopt;
  Tensor out(a.dtype(), shape);
  const int64_t batches = NumElements(*batch);
  for (int64_t p = 0; p < batches; ++p) {
    const T* pa = a.data<T>() + BroadcastOffset(p, *batch, a_batch) * m * k;
    const T* pb = b.data<T>() + BroadcastOffset(p, *batch, b_batch) * k * n;
    T* py = out.data<T>() + p * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T sum = 0;
        for (int64_t q = 0; q < k; ++q) sum += pa[i * k + q] * pb[q * n + j];
        py[i * n + j] = sum;
      }
    }
  }
  return out;
}

}  // namespace

const std::vector<std::string>& FoldOnlyOps() {
  static const auto* ops =
      new std::vector<std::string>{"Abs", "Ceil",      "Cos", "CumSum", "Floor", "GatherElements", "GatherND",
                                   "Max", "Min",       "Mod", "ScatterND", "Sin", "Trilu"};
  return *ops;
}

bool IsFoldOnlyOp(const std::string& op) {
  const auto& ops = FoldOnlyOps();
  return std::find(ops.begin(), ops.end(), op) != ops.end();
}

std::optional<Tensor> FoldConstantMath(const std::string& op, const std::vector<const Tensor*>& inputs,
                                       const AttrMap& attrs) {
  if (inputs.empty() || inputs[0] == nullptr || inputs[0]->num_elements() > kMaxFoldElements) return std::nullopt;
  const Tensor& x = *inputs[0];
  if (op == "Trilu") return Trilu(inputs, attrs);
  if (op == "ScatterND") return ScatterND(inputs, attrs);
  if (op == "GatherElements") return GatherElements(inputs, attrs);
  if (op == "GatherND") return GatherND(inputs, attrs);
  if (op == "CumSum") return CumSum(inputs, attrs);
  if (op == "Transpose") return Transpose(x, attrs);
  for (const Tensor* t : inputs) {
    if (t == nullptr || t->dtype() != x.dtype()) return std::nullopt;
  }
  if ((op == "Max" || op == "Min") && inputs.size() == 1) return x;  // variadic: one input is itself
  if (op == "Mod" && IsIntData(x) && inputs.size() == 2) return IntegerMod(inputs, attrs);
  // Shape and index arithmetic (T5's relative-position buckets: -min(i - j, 0)).
  if (IsIntData(x) && (op == "Max" || op == "Min" || op == "Abs" || op == "Neg")) {
    std::vector<Tensor> wide;
    for (const Tensor* t : inputs) wide.push_back(t->CastTo(DType::kI64));
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : wide) ptrs.push_back(&t);
    const bool unary = op == "Abs" || op == "Neg";
    if (ptrs.size() != (unary ? 1u : 2u)) return std::nullopt;
    auto out = Elementwise<int64_t>(ptrs, [&op](int64_t a, int64_t b) {
      return op == "Abs" ? (a < 0 ? -a : a) : op == "Neg" ? -a : op == "Max" ? std::max(a, b) : std::min(a, b);
    });
    if (out && x.dtype() != DType::kI64) return out->CastTo(x.dtype());
    return out;
  }
  if (!IsFloatData(x)) return std::nullopt;
  if (op == "MatMul") {
    if (inputs.size() != 2) return std::nullopt;
    return x.dtype() == DType::kF32 ? MatMul<float>(x, *inputs[1]) : MatMul<double>(x, *inputs[1]);
  }
  const bool binary = op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Max" ||
                      op == "Min" || op == "Mod";
  if (inputs.size() != (binary ? 2u : 1u)) return std::nullopt;
  if (x.dtype() == DType::kF32) {
    auto f = FloatFunction<float>(op, attrs);
    return f ? Elementwise<float>(inputs, *f) : std::nullopt;
  }
  auto f = FloatFunction<double>(op, attrs);
  return f ? Elementwise<double>(inputs, *f) : std::nullopt;
}

}  // namespace mpc
