// Import-time evaluation of static indexing/data-movement nodes (see FoldStatic in
// graph/ops_tensor.h). Plain host loops over element indices: the values are small
// shape tensors and masks, and data movement copies element bytes, so a folded result
// is bit-identical to what the CPU kernels would produce.
#include <algorithm>
#include <cstring>
#include <set>

#include "graph/op_registry.h"
#include "graph/ops_tensor.h"

namespace mpc::tensor_ops {
namespace {

constexpr int64_t kMaxFoldElements = int64_t{1} << 22;

const char* Bytes(const Tensor& t) { return static_cast<const char*>(t.raw()); }
char* Bytes(Tensor& t) { return static_cast<char*>(t.raw()); }

std::vector<int64_t> Unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

// Offset of the element a (right-aligned, numpy-broadcast) output index reads in `in`.
int64_t BroadcastOffset(const std::vector<int64_t>& out_idx, const Shape& in) {
  const size_t lead = out_idx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : out_idx[lead + d]);
  return flat;
}

int64_t Int(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kI64:
      return t.data<int64_t>()[i];
    case DType::kI32:
      return t.data<int32_t>()[i];
    default:
      return static_cast<int64_t>(t.GetAsDouble(i));
  }
}

int64_t Prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

template <typename V>
bool Compare(const std::string& op, V a, V b) {
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "LessOrEqual") return a <= b;
  if (op == "GreaterOrEqual") return a >= b;
  if (op == "Or") return a != 0 || b != 0;
  if (op == "Xor") return (a != 0) != (b != 0);
  return a != 0 && b != 0;  // And
}

bool IsCompare(const std::string& op) {
  return op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual" ||
         op == "And" || op == "Or" || op == "Xor";
}

}  // namespace

std::vector<Tensor> FoldStatic(const Node& node) {
  static const std::set<std::string> kFoldable = {
      "Shape", "Gather", "Squeeze", "Unsqueeze", "Concat", "Slice", "Expand", "Where", "Equal", "Less", "Greater",
      "Not", "And", "ConstantOfShape", "Range", "LessOrEqual", "GreaterOrEqual", "Or", "Xor",
      // Shape arithmetic exporters interleave with the above.
      "Reshape", "Flatten", "Identity", "Cast", "Add", "Sub", "Mul", "Div"};
  if (!kFoldable.count(node.op)) return {};
  const bool arithmetic = node.op == "Add" || node.op == "Sub" || node.op == "Mul" || node.op == "Div";
  if (arithmetic) {  // integers only: float arithmetic stays with its kernels and autocast
    for (const Value* v : node.inputs) {
      if (!v || (v->dtype != DType::kI64 && v->dtype != DType::kI32)) return {};
    }
  }
  const OpDef* def = OpRegistry::Global().Find(node.op);
  const int n_in = static_cast<int>(node.inputs.size());
  if (!def || n_in < def->min_inputs || n_in > def->max_inputs) return {};
  for (const Value* v : node.inputs) {
    if (node.op == "Shape") {
      if (!v) return {};
      continue;
    }
    if (v && (v->kind != ValueKind::kConstant || (v->data.empty() && NumElements(v->shape) > 0))) return {};
  }
  auto types = def->infer(node);
  if (!types.ok() || types->size() != 1) return {};
  const TensorType& type = (*types)[0];
  if (NumElements(type.shape) > kMaxFoldElements) return {};
  Tensor out(type.dtype, type.shape);
  const int64_t n = out.num_elements();
  const size_t elem = DTypeSize(type.dtype);
  const std::string& op = node.op;

  if (op == "Shape") {
    const Shape& in = node.inputs[0]->shape;
    const auto rank = static_cast<int64_t>(in.size());
    int64_t start = node.attrs.GetInt("start", 0);
    if (start < 0) start += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    for (int64_t i = 0; i < n; ++i) out.data<int64_t>()[i] = in[start + i];
  } else if (arithmetic) {
    const Tensor& a = node.inputs[0]->data;
    const Tensor& b = node.inputs[1]->data;
    Tensor v(DType::kI64, type.shape);
    for (int64_t i = 0; i < n; ++i) {
      const auto idx = Unravel(i, type.shape);
      const int64_t x = Int(a, BroadcastOffset(idx, a.shape())), y = Int(b, BroadcastOffset(idx, b.shape()));
      if (op == "Div" && y == 0) return {};
      v.data<int64_t>()[i] = op == "Add" ? x + y : op == "Sub" ? x - y : op == "Mul" ? x * y : x / y;
    }
    out = type.dtype == DType::kI64 ? v : v.CastTo(type.dtype);  // CastTo goes through double
  } else if (op == "Cast") {
    const DType from = node.inputs[0]->dtype;
    if (from == DType::kF8E4M3 || from == DType::kF8E5M2 || type.dtype == DType::kF8E4M3 ||
        type.dtype == DType::kF8E5M2) {
      return {};
    }
    out = from == type.dtype ? node.inputs[0]->data : node.inputs[0]->data.CastTo(type.dtype);
  } else if (op == "Squeeze" || op == "Unsqueeze" || op == "Reshape" || op == "Flatten" || op == "Identity") {
    out = node.inputs[0]->data.Reshaped(type.shape);
  } else if (op == "Gather") {
    const Tensor& data = node.inputs[0]->data;
    const Tensor& idx = node.inputs[1]->data;
    const Shape& ds = data.shape();
    int64_t axis = node.attrs.GetInt("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(ds.size());
    const int64_t outer = Prod(ds, 0, axis), dim = ds[axis], inner = Prod(ds, axis + 1, ds.size());
    const int64_t count = idx.num_elements();
    const size_t row = static_cast<size_t>(inner) * elem;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t k = 0; k < count; ++k) {
        int64_t j = Int(idx, k);
        if (j < 0) j += dim;
        if (row) std::memcpy(Bytes(out) + (o * count + k) * row, Bytes(data) + (o * dim + j) * row, row);
      }
    }
  } else if (op == "Concat") {
    int64_t axis = node.attrs.GetInt("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(type.shape.size());
    const int64_t outer = Prod(type.shape, 0, axis), inner = Prod(type.shape, axis + 1, type.shape.size());
    const size_t out_row = static_cast<size_t>(type.shape[axis] * inner) * elem;
    size_t at = 0;
    for (const Value* v : node.inputs) {
      const size_t chunk = static_cast<size_t>(v->shape[axis] * inner) * elem;
      for (int64_t o = 0; chunk && o < outer; ++o) {
        std::memcpy(Bytes(out) + o * out_row + at, Bytes(v->data) + o * chunk, chunk);
      }
      at += chunk;
    }
  } else if (op == "Slice") {
    auto spec = ResolveSlice(node);
    if (!spec.ok()) return {};
    const Tensor& data = node.inputs[0]->data;
    const auto strides = RowMajorStrides(spec->in);
    for (int64_t i = 0; i < n; ++i) {
      const auto oi = Unravel(i, type.shape);
      int64_t off = 0;
      for (size_t d = 0; d < oi.size(); ++d) off += (spec->start[d] + oi[d] * spec->step[d]) * strides[d];
      std::memcpy(Bytes(out) + i * elem, Bytes(data) + off * elem, elem);
    }
  } else if (op == "Expand") {
    const Tensor& data = node.inputs[0]->data;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t off = BroadcastOffset(Unravel(i, type.shape), data.shape());
      std::memcpy(Bytes(out) + i * elem, Bytes(data) + off * elem, elem);
    }
  } else if (op == "Where") {
    const Tensor& c = node.inputs[0]->data;
    const Tensor& x = node.inputs[1]->data;
    const Tensor& y = node.inputs[2]->data;
    for (int64_t i = 0; i < n; ++i) {
      const auto idx = Unravel(i, type.shape);
      const bool take_x = c.data<uint8_t>()[BroadcastOffset(idx, c.shape())] != 0;
      const Tensor& src = take_x ? x : y;
      std::memcpy(Bytes(out) + i * elem, Bytes(src) + BroadcastOffset(idx, src.shape()) * elem, elem);
    }
  } else if (op == "Not") {
    const Tensor& x = node.inputs[0]->data;
    for (int64_t i = 0; i < n; ++i) out.data<uint8_t>()[i] = x.data<uint8_t>()[i] ? 0 : 1;
  } else if (IsCompare(op)) {
    const Tensor& a = node.inputs[0]->data;
    const Tensor& b = node.inputs[1]->data;
    const bool ints = !IsFloating(a.dtype());
    for (int64_t i = 0; i < n; ++i) {
      const auto idx = Unravel(i, type.shape);
      const int64_t ia = BroadcastOffset(idx, a.shape()), ib = BroadcastOffset(idx, b.shape());
      const bool r = ints ? Compare<int64_t>(op, Int(a, ia), Int(b, ib))
                          : Compare<double>(op, a.GetAsDouble(ia), b.GetAsDouble(ib));
      out.data<uint8_t>()[i] = r ? 1 : 0;
    }
  } else if (op == "ConstantOfShape") {
    const Tensor one = IsFloating(type.dtype)
                           ? Tensor::FromVector<double>({}, {node.attrs.GetFloat("value", 0.0f)}).CastTo(type.dtype)
                       : type.dtype == DType::kI64
                           ? Tensor::FromVector<int64_t>({}, {node.attrs.GetInt("value", 0)})
                           : Tensor::FromVector<int64_t>({}, {node.attrs.GetInt("value", 0)}).CastTo(type.dtype);
    for (int64_t i = 0; i < n; ++i) std::memcpy(Bytes(out) + i * elem, one.raw(), elem);
  } else if (op == "Range") {
    const Tensor& s = node.inputs[0]->data;
    const Tensor& d = node.inputs[2]->data;
    if (!IsFloating(type.dtype)) {
      const int64_t start = Int(s, 0), delta = Int(d, 0);
      Tensor v(DType::kI64, type.shape);
      for (int64_t i = 0; i < n; ++i) v.data<int64_t>()[i] = start + i * delta;
      out = type.dtype == DType::kI64 ? v : v.CastTo(type.dtype);
    } else {
      // As the kernels compute: in f64 for f64, in f32 otherwise, rounded once.
      Tensor v(DType::kF64, type.shape);
      const double start = s.GetAsDouble(0), delta = d.GetAsDouble(0);
      for (int64_t i = 0; i < n; ++i) {
        v.data<double>()[i] =
            type.dtype == DType::kF64
                ? start + static_cast<double>(i) * delta
                : static_cast<double>(static_cast<float>(start) + static_cast<float>(i) * static_cast<float>(delta));
      }
      out = v.CastTo(type.dtype);
    }
  }
  std::vector<Tensor> result;
  result.push_back(std::move(out));
  return result;
}

}  // namespace mpc::tensor_ops
