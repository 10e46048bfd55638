// Indexing and data-movement ops: Gather (gradient: the mpc scatter-add GatherGrad),
// Where, Concat, Split, Slice (gradient: the mpc scatter SliceGrad), Squeeze, Unsqueeze,
// Expand; the comparison/logic ops attention masks are built from (Equal, Less,
// Greater, LessOrEqual, GreaterOrEqual, Not, And, Or, Xor: bool outputs, no gradient);
// ConstantOfShape, Shape and Range.
// Every op here is kOpaque for the pad-dims pass: none is known to be transparent to
// zero padding along the last axis. Integer operands that decide shapes (Slice's
// starts/ends, Split's sizes, Squeeze/Unsqueeze axes, Expand's shape...) must be
// constants: mpc compiles static shapes.
#include "graph/ops_tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace tensor_ops {
namespace {

std::string IntList(const std::vector<int64_t>& v) { return absl::StrCat("[", absl::StrJoin(v, ","), "]"); }

// A constant integer input, allowing an empty constant (ops::ConstantInts rejects it).
absl::StatusOr<std::vector<int64_t>> ConstInts(const Node& n, int i, const char* what) {
  MPC_ASSIGN_OR_RETURN(const Value* v, ops::RequiredInput(n, i));
  if (v->kind == ValueKind::kConstant && NumElements(v->shape) == 0) return std::vector<int64_t>{};
  if (IsFloating(v->dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " (input ", i, " '", v->name, "') has dtype ", DTypeName(v->dtype), "; it must be int64"));
  }
  // int64 read directly: going through double (ops::ConstantInts) turns INT64_MAX, the
  // "to the end" of exported Slices, into 2^63, which does not fit back.
  if (v->kind == ValueKind::kConstant && !v->data.empty() && v->data.dtype() == DType::kI64) {
    const int64_t* p = v->data.data<int64_t>();
    return std::vector<int64_t>(p, p + v->data.num_elements());
  }
  if (v->kind == ValueKind::kConstant && !v->data.empty() && v->data.dtype() == DType::kI32) {
    const int32_t* p = v->data.data<int32_t>();
    return std::vector<int64_t>(p, p + v->data.num_elements());
  }
  auto ints = ops::ConstantInts(n, i);
  if (!ints.ok()) {
    return absl::Status(ints.status().code(), absl::StrCat(what, ": ", ints.status().message()));
  }
  return ints;
}

// An int list given as input `input` (newer opsets) or attribute `attr` (older ones);
// nullopt when neither is there.
absl::StatusOr<std::optional<std::vector<int64_t>>> IntsFromInputOrAttr(const Node& n, int input, const char* attr) {
  if (input < static_cast<int>(n.inputs.size()) && n.inputs[input] != nullptr) {
    if (n.attrs.Has(attr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", attr, "' is given both as input ", input, " and as an attribute; give it once"));
    }
    MPC_ASSIGN_OR_RETURN(std::vector<int64_t> v, ConstInts(n, input, attr));
    return std::optional<std::vector<int64_t>>(std::move(v));
  }
  if (n.attrs.Has(attr)) return std::optional<std::vector<int64_t>>(n.attrs.GetInts(attr, {}));
  return std::optional<std::vector<int64_t>>();
}

absl::StatusOr<int> Axis(int64_t axis, const Shape& shape, const char* what) {
  const int rank = static_cast<int>(shape.size());
  if (rank == 0 || axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " axis ", axis, " is out of range for an input of shape ", ShapeToString(shape),
                     rank == 0 ? "; the input must have rank >= 1"
                               : absl::StrCat("; use an axis in [", -rank, ", ", rank - 1, "]")));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

bool IsIndexType(DType d) { return d == DType::kI64 || d == DType::kI32; }

}  // namespace

absl::StatusOr<SliceSpec> ResolveSlice(const Node& n) {
  SliceSpec s;
  s.in = n.inputs[0]->shape;
  const int rank = static_cast<int>(s.in.size());
  std::vector<int64_t> starts, ends, axes, steps;
  const bool by_inputs = n.inputs.size() >= 3;
  if (by_inputs) {  // opset 10+
    MPC_ASSIGN_OR_RETURN(starts, ConstInts(n, 1, "Slice starts"));
    MPC_ASSIGN_OR_RETURN(ends, ConstInts(n, 2, "Slice ends"));
    if (n.inputs.size() > 3 && n.inputs[3]) {
      MPC_ASSIGN_OR_RETURN(axes, ConstInts(n, 3, "Slice axes"));
    }
    if (n.inputs.size() > 4 && n.inputs[4]) {
      MPC_ASSIGN_OR_RETURN(steps, ConstInts(n, 4, "Slice steps"));
    }
  } else if (n.inputs.size() == 1 && n.attrs.Has("starts") && n.attrs.Has("ends")) {  // opset 1-9
    starts = n.attrs.GetInts("starts", {});
    ends = n.attrs.GetInts("ends", {});
    axes = n.attrs.GetInts("axes", {});
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("Slice has ", n.inputs.size(),
                     " inputs; it needs data, starts and ends (and optionally axes, steps) as "
                     "inputs (opset 10+), or data alone with the attributes starts and ends (opset 1-9)"));
  }
  if (starts.size() != ends.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Slice starts ", IntList(starts), " and ends ", IntList(ends), " must have the same length"));
  }
  const size_t k = starts.size();
  if (axes.empty() && !(by_inputs && n.inputs.size() > 3 && n.inputs[3])) {
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(k, 1);
  if (axes.size() != k || steps.size() != k) {
    return absl::InvalidArgumentError(absl::StrCat("Slice starts ", IntList(starts), ", axes ", IntList(axes),
                                                   " and steps ", IntList(steps), " must have the same length"));
  }
  s.start.assign(rank, 0);
  s.step.assign(rank, 1);
  s.out = s.in;
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < k; ++i) {
    if (axes[i] < -rank || axes[i] >= rank) {
      return absl::InvalidArgumentError(absl::StrCat("Slice axis ", axes[i], " (axes ", IntList(axes),
                                                     ") is out of range for data of shape ", ShapeToString(s.in),
                                                     "; use axes in [", -rank, ", ", rank - 1, "]"));
    }
    const int d = static_cast<int>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (seen[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Slice axes ", IntList(axes), " name axis ", d, " twice"));
    }
    seen[d] = true;
    const int64_t step = steps[i];
    if (step == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Slice steps ", IntList(steps), " contain 0; steps must be nonzero"));
    }
    const int64_t dim = s.in[d];
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;  // INT64_MIN + dim cannot overflow; INT64_MAX is never shifted
    if (e < 0) e += dim;
    int64_t count = 0;
    if (dim == 0) {
      count = 0;
    } else if (step > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      if (e > b) count = (e - b - 1) / step + 1;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      if (b > e) count = (b - e - 1) / (-step) + 1;
    }
    s.start[d] = count > 0 ? b : 0;
    s.step[d] = step;
    s.out[d] = count;
  }
  return s;
}

namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

std::vector<Value*> NoGrads(const Node& n) { return std::vector<Value*>(n.inputs.size(), nullptr); }

// ---------------------------------------------------------------------------------
// Gather / GatherGrad

Types InferGather(const Node& n) {
  const Value* data = n.inputs[0];
  const Value* idx = n.inputs[1];
  if (!IsIndexType(idx->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("Gather indices '", idx->name, "' have dtype ",
                                                   DTypeName(idx->dtype),
                                                   "; they must be int64 or int32 (insert a Cast)"));
  }
  MPC_ASSIGN_OR_RETURN(int axis, Axis(n.attrs.GetInt("axis", 0), data->shape, "Gather"));
  const int64_t dim = data->shape[axis];
  if (idx->kind == ValueKind::kConstant && !idx->data.empty()) {
    for (int64_t k = 0; k < idx->data.num_elements(); ++k) {
      const auto v = static_cast<int64_t>(idx->data.GetAsDouble(k));
      if (v < -dim || v >= dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "Gather index ", v, " (element ", k, " of '", idx->name, "') is out of range for axis ", axis, " of data '",
            data->name, "' with shape ", ShapeToString(data->shape), "; valid indices are ", -dim, " to ", dim - 1));
      }
    }
  }
  Shape out(data->shape.begin(), data->shape.begin() + axis);
  out.insert(out.end(), idx->shape.begin(), idx->shape.end());
  out.insert(out.end(), data->shape.begin() + axis + 1, data->shape.end());
  return std::vector<TensorType>{{data->dtype, out}};
}

Grads GradGather(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  if (!dy[0] || !IsFloating(n.inputs[0]->dtype)) return NoGrads(n);
  const Shape& shape = n.inputs[0]->shape;
  const int64_t axis = n.attrs.GetInt("axis", 0);
  AttrMap attrs;
  attrs.Set("axis", axis < 0 ? axis + static_cast<int64_t>(shape.size()) : axis);
  attrs.Set("shape", shape);
  Value* grad = b.Op("GatherGrad", {dy[0], n.inputs[1]}, std::move(attrs));
  // An embedding with a padding index (nn.Embedding(padding_idx=p), which an ONNX Gather
  // cannot say and the importer reads from the exporter's FX metadata): its row p gets no
  // gradient, as in PyTorch.
  const int64_t padding = n.attrs.GetInt("mpc_padding_idx", -1);
  if (padding >= 0 && padding < shape[0] && grad) {
    Shape rows(shape.size(), 1);
    rows[0] = shape[0];
    Tensor keep(DType::kF64, rows);
    for (int64_t r = 0; r < shape[0]; ++r) keep.data<double>()[r] = r == padding ? 0.0 : 1.0;
    Graph& g = *b.graph();
    grad = b.Mul(grad, g.AddConstant(g.UniqueName(n.name + "/padding_row"), keep.CastTo(grad->dtype)));
  }
  return std::vector<Value*>{grad, nullptr};
}

// GatherGrad(dY, indices) attrs axis, shape: zeros of `shape` with dY's slices added
// at the gathered positions (repeated indices sum), accumulated in f32.
Types InferGatherGrad(const Node& n) {
  const Value* dy = n.inputs[0];
  const Value* idx = n.inputs[1];
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  if (!IsIndexType(idx->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("GatherGrad indices '", idx->name, "' have dtype ",
                                                   DTypeName(idx->dtype), "; they must be int64 or int32"));
  }
  if (!n.attrs.Has("shape"))
    return absl::InvalidArgumentError("GatherGrad needs the attribute 'shape' (the data's shape)");
  const Shape shape = n.attrs.GetInts("shape", {});
  MPC_ASSIGN_OR_RETURN(int axis, Axis(n.attrs.GetInt("axis", 0), shape, "GatherGrad"));
  Shape expect(shape.begin(), shape.begin() + axis);
  expect.insert(expect.end(), idx->shape.begin(), idx->shape.end());
  expect.insert(expect.end(), shape.begin() + axis + 1, shape.end());
  if (dy->shape != expect) {
    return absl::InvalidArgumentError(absl::StrCat("GatherGrad dY '", dy->name, "' has shape ",
                                                   ShapeToString(dy->shape), "; gathering indices of shape ",
                                                   ShapeToString(idx->shape), " along axis ", axis, " of ",
                                                   ShapeToString(shape), " gives ", ShapeToString(expect)));
  }
  return std::vector<TensorType>{{dy->dtype, shape}};
}

// ---------------------------------------------------------------------------------
// Where

Types InferWhere(const Node& n) {
  const Value* c = n.inputs[0];
  const Value* x = n.inputs[1];
  const Value* y = n.inputs[2];
  if (c->dtype != DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat("Where condition '", c->name, "' has dtype ", DTypeName(c->dtype),
                                                   "; it must be bool (insert a Cast to bool)"));
  }
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 1, 3));
  auto cx = BroadcastShapes(c->shape, x->shape);
  absl::StatusOr<Shape> out = cx.ok() ? BroadcastShapes(*cx, y->shape) : cx;
  if (!out.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Where condition ", ShapeToString(c->shape), ", X ",
                                                   ShapeToString(x->shape), " and Y ", ShapeToString(y->shape),
                                                   " do not broadcast together (numpy rules: trailing axes must be "
                                                   "equal or 1)"));
  }
  return std::vector<TensorType>{{x->dtype, *out}};
}

Grads GradWhere(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  std::vector<Value*> grads = NoGrads(n);
  if (!dy[0] || !IsFloating(n.inputs[1]->dtype)) return grads;
  Value* zero = b.ScalarConstant(0, dy[0]->dtype);
  grads[1] = b.ReduceSumTo(b.Op("Where", {n.inputs[0], dy[0], zero}), n.inputs[1]->shape);
  grads[2] = b.ReduceSumTo(b.Op("Where", {n.inputs[0], zero, dy[0]}), n.inputs[2]->shape);
  return grads;
}

// ---------------------------------------------------------------------------------
// Concat / Split

Types InferConcat(const Node& n) {
  if (!n.attrs.Has("axis")) return absl::InvalidArgumentError("Concat needs the attribute 'axis'");
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) return absl::InvalidArgumentError(absl::StrCat("Concat input ", i, " is absent"));
  }
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, static_cast<int>(n.inputs.size())));
  const Shape& first = n.inputs[0]->shape;
  MPC_ASSIGN_OR_RETURN(int axis, Axis(n.attrs.GetInt("axis", 0), first, "Concat"));
  Shape out = first;
  out[axis] = 0;
  for (const Value* v : n.inputs) {
    bool ok = v->shape.size() == first.size();
    for (size_t d = 0; ok && d < first.size(); ++d) ok = static_cast<int>(d) == axis || v->shape[d] == first[d];
    if (!ok) {
      std::vector<std::string> shapes;
      for (const Value* w : n.inputs) shapes.push_back(absl::StrCat("'", w->name, "' ", ShapeToString(w->shape)));
      return absl::InvalidArgumentError(absl::StrCat("Concat along axis ", axis, ": inputs ",
                                                     absl::StrJoin(shapes, ", "),
                                                     " must have the same rank and agree on every other axis"));
    }
    out[axis] += v->shape[axis];
  }
  return std::vector<TensorType>{{n.inputs[0]->dtype, out}};
}

Grads GradConcat(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  if (!dy[0] || !IsFloating(n.inputs[0]->dtype)) return NoGrads(n);
  const int rank = static_cast<int>(n.inputs[0]->shape.size());
  int64_t axis = n.attrs.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (n.inputs.size() == 1) return std::vector<Value*>{dy[0]};
  std::vector<int64_t> sizes;
  for (const Value* v : n.inputs) sizes.push_back(v->shape[axis]);
  AttrMap attrs;
  attrs.Set("axis", axis);
  std::vector<Value*> parts = b.OpN("Split", {dy[0], b.ShapeConstant(sizes)}, std::move(attrs));
  if (parts.size() != n.inputs.size()) return NoGrads(n);  // the builder holds the error
  return parts;
}

Types InferSplit(const Node& n) {
  const Value* x = n.inputs[0];
  MPC_ASSIGN_OR_RETURN(int axis, Axis(n.attrs.GetInt("axis", 0), x->shape, "Split"));
  const int64_t dim = x->shape[axis];
  MPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> split, IntsFromInputOrAttr(n, 1, "split"));
  std::vector<int64_t> sizes;
  if (split) {
    sizes = *split;
    if (n.attrs.Has("num_outputs")) {
      return absl::InvalidArgumentError("Split has both split sizes and 'num_outputs'; give one of them");
    }
  } else if (n.attrs.Has("num_outputs")) {  // opset 18: equal chunks, the last one smaller
    const int64_t parts = n.attrs.GetInt("num_outputs", 0);
    if (parts < 1 || parts > std::max<int64_t>(dim, 1)) {
      return absl::InvalidArgumentError(absl::StrCat("Split num_outputs ", parts, " is invalid for axis ", axis,
                                                     " of size ", dim, " (shape ", ShapeToString(x->shape),
                                                     "); use 1 to ", std::max<int64_t>(dim, 1)));
    }
    const int64_t chunk = (dim + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  } else {
    return absl::InvalidArgumentError(
        "Split needs the sizes of its outputs: input 'split' (opset 13+), the attribute 'split' (opset < 13) or "
        "the attribute 'num_outputs' (opset 18)");
  }
  if (sizes.empty()) return absl::InvalidArgumentError("Split sizes are empty; give at least one output size");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0)
      return absl::InvalidArgumentError(absl::StrCat("Split sizes ", IntList(sizes), " contain a negative size"));
    total += s;
  }
  if (total != dim) {
    return absl::InvalidArgumentError(absl::StrCat("Split sizes ", IntList(sizes), " sum to ", total, " but axis ",
                                                   axis, " of the input ", ShapeToString(x->shape), " has size ", dim,
                                                   "; the sizes must add up to it"));
  }
  std::vector<TensorType> types;
  for (int64_t s : sizes) {
    Shape shape = x->shape;
    shape[axis] = s;
    types.push_back({x->dtype, shape});
  }
  return types;
}

Grads GradSplit(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  std::vector<Value*> grads = NoGrads(n);
  if (!IsFloating(n.inputs[0]->dtype)) return grads;
  const int rank = static_cast<int>(n.inputs[0]->shape.size());
  int64_t axis = n.attrs.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  std::vector<Value*> parts;
  bool any = false;
  for (size_t i = 0; i < n.outputs.size(); ++i) {
    Value* g = i < dy.size() ? dy[i] : nullptr;
    any |= g != nullptr;
    if (!g) {  // an output that does not reach the loss: its gradient is zero
      AttrMap attrs;
      attrs.Set("shape", n.outputs[i]->shape);
      g = b.Op("BroadcastTo", {b.ScalarConstant(0, n.outputs[i]->dtype)}, std::move(attrs));
    }
    parts.push_back(g);
  }
  if (!any) return grads;
  if (parts.size() == 1) {
    grads[0] = parts[0];
  } else {
    AttrMap attrs;
    attrs.Set("axis", axis);
    grads[0] = b.Op("Concat", parts, std::move(attrs));
  }
  return grads;
}

// ---------------------------------------------------------------------------------
// Slice / SliceGrad

Types InferSlice(const Node& n) {
  MPC_ASSIGN_OR_RETURN(SliceSpec s, ResolveSlice(n));
  return std::vector<TensorType>{{n.inputs[0]->dtype, s.out}};
}

Grads GradSlice(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  if (!dy[0] || !IsFloating(n.inputs[0]->dtype)) return NoGrads(n);
  auto s = ResolveSlice(n);
  if (!s.ok()) return s.status();
  std::vector<Value*> grads = NoGrads(n);
  AttrMap attrs;
  attrs.Set("shape", s->in);
  attrs.Set("starts", s->start);
  attrs.Set("steps", s->step);
  grads[0] = b.Op("SliceGrad", {dy[0]}, std::move(attrs));
  return grads;
}

// SliceGrad(dY) attrs shape, starts, steps (one per axis): zeros of `shape` with dY
// written at start + i * step along every axis.
Types InferSliceGrad(const Node& n) {
  const Value* dy = n.inputs[0];
  const Shape shape = n.attrs.GetInts("shape", {});
  const std::vector<int64_t> starts = n.attrs.GetInts("starts", {});
  const std::vector<int64_t> steps = n.attrs.GetInts("steps", {});
  const size_t rank = dy->shape.size();
  if (shape.size() != rank || starts.size() != rank || steps.size() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("SliceGrad: dY ", ShapeToString(dy->shape), ", shape ",
                                                   ShapeToString(shape), ", starts ", IntList(starts), " and steps ",
                                                   IntList(steps), " must all have the same rank"));
  }
  for (size_t d = 0; d < rank; ++d) {
    const int64_t count = dy->shape[d];
    if (count == 0) continue;
    const int64_t last = starts[d] + (count - 1) * steps[d];
    if (steps[d] == 0 || starts[d] < 0 || starts[d] >= shape[d] || last < 0 || last >= shape[d]) {
      return absl::InvalidArgumentError(absl::StrCat("SliceGrad: axis ", d, " takes ", count, " elements from ",
                                                     starts[d], " in steps of ", steps[d], ", outside the shape ",
                                                     ShapeToString(shape)));
    }
  }
  return std::vector<TensorType>{{dy->dtype, shape}};
}

// ---------------------------------------------------------------------------------
// Squeeze / Unsqueeze / Expand

Grads ReshapeBackFirst(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  std::vector<Value*> grads = NoGrads(n);
  if (dy[0] && IsFloating(n.inputs[0]->dtype)) grads[0] = b.Reshape(dy[0], n.inputs[0]->shape);
  return grads;
}

Types InferSqueeze(const Node& n) {
  const Shape& in = n.inputs[0]->shape;
  const int rank = static_cast<int>(in.size());
  MPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, IntsFromInputOrAttr(n, 1, "axes"));
  std::vector<bool> drop(rank, false);
  if (!axes) {
    for (int d = 0; d < rank; ++d) drop[d] = in[d] == 1;
  } else {
    for (int64_t a : *axes) {
      if (a < -rank || a >= rank) {
        return absl::InvalidArgumentError(absl::StrCat("Squeeze axes ", IntList(*axes), " are out of range for shape ",
                                                       ShapeToString(in), "; use axes in [", -rank, ", ", rank - 1,
                                                       "]"));
      }
      const int d = static_cast<int>(a < 0 ? a + rank : a);
      if (in[d] != 1) {
        return absl::InvalidArgumentError(absl::StrCat("Squeeze axis ", a, " of shape ", ShapeToString(in),
                                                       " has size ", in[d], "; only axes of size 1 can be squeezed"));
      }
      drop[d] = true;
    }
  }
  Shape out;
  for (int d = 0; d < rank; ++d) {
    if (!drop[d]) out.push_back(in[d]);
  }
  return std::vector<TensorType>{{n.inputs[0]->dtype, out}};
}

Types InferUnsqueeze(const Node& n) {
  const Shape& in = n.inputs[0]->shape;
  MPC_ASSIGN_OR_RETURN(std::optional<std::vector<int64_t>> axes, IntsFromInputOrAttr(n, 1, "axes"));
  if (!axes) return absl::InvalidArgumentError("Unsqueeze needs axes: input 1 (opset 13+) or the attribute 'axes'");
  const int out_rank = static_cast<int>(in.size() + axes->size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *axes) {
    if (a < -out_rank || a >= out_rank) {
      return absl::InvalidArgumentError(absl::StrCat("Unsqueeze axes ", IntList(*axes), " are out of range for input ",
                                                     ShapeToString(in), " (output rank ", out_rank, "); use axes in [",
                                                     -out_rank, ", ", out_rank - 1, "]"));
    }
    const int d = static_cast<int>(a < 0 ? a + out_rank : a);
    if (inserted[d]) {
      return absl::InvalidArgumentError(absl::StrCat("Unsqueeze axes ", IntList(*axes), " name axis ", d, " twice"));
    }
    inserted[d] = true;
  }
  Shape out;
  size_t next = 0;
  for (int d = 0; d < out_rank; ++d) out.push_back(inserted[d] ? 1 : in[next++]);
  return std::vector<TensorType>{{n.inputs[0]->dtype, out}};
}

Types InferExpand(const Node& n) {
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstInts(n, 1, "Expand shape"));
  const Shape& in = n.inputs[0]->shape;
  auto out = BroadcastShapes(in, shape);
  if (!out.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("Expand cannot broadcast the input ", ShapeToString(in),
                                                   " with the shape ", IntList(shape),
                                                   ": each trailing axis must be equal or 1 in one of them"));
  }
  return std::vector<TensorType>{{n.inputs[0]->dtype, *out}};
}

Grads GradExpand(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  std::vector<Value*> grads = NoGrads(n);
  if (dy[0] && IsFloating(n.inputs[0]->dtype)) grads[0] = b.ReduceSumTo(dy[0], n.inputs[0]->shape);
  return grads;
}

// ---------------------------------------------------------------------------------
// Comparison / logic

Types InferCompare(const Node& n) {
  MPC_ASSIGN_OR_RETURN(std::vector<TensorType> t, ops::BroadcastBinary(n));
  if (t[0].dtype == DType::kF8E4M3 || t[0].dtype == DType::kF8E5M2) {
    return absl::InvalidArgumentError(absl::StrCat(n.op, " does not compare fp8 values; Cast to f32 first"));
  }
  if (n.op != "Equal" && t[0].dtype == DType::kBool) {
    return absl::InvalidArgumentError(absl::StrCat(n.op, " compares numbers, not bool; Cast to int first"));
  }
  t[0].dtype = DType::kBool;
  return t;
}

absl::Status CheckBool(const Node& n) {
  for (const Value* v : n.inputs) {
    if (v->dtype != DType::kBool) {
      return absl::InvalidArgumentError(absl::StrCat(n.op, " input '", v->name, "' has dtype ", DTypeName(v->dtype),
                                                     "; it must be bool (insert a Cast to bool)"));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------
// ConstantOfShape / Shape / Range

Types InferConstantOfShape(const Node& n) {
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstInts(n, 0, "ConstantOfShape shape"));
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat("ConstantOfShape shape ", IntList(shape), " has a negative size"));
    }
  }
  MPC_ASSIGN_OR_RETURN(DType dtype, DTypeFromOnnx(static_cast<int32_t>(n.attrs.GetInt("dtype", 1))));
  return std::vector<TensorType>{{dtype, shape}};
}

// Shape's [start, end) per opset 15, clamped to the rank.
std::pair<int64_t, int64_t> ShapeRange(const Node& n) {
  const auto rank = static_cast<int64_t>(n.inputs[0]->shape.size());
  int64_t start = n.attrs.GetInt("start", 0), end = n.attrs.GetInt("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  return {start, std::max(start, end)};
}

Types InferShape(const Node& n) {
  auto [start, end] = ShapeRange(n);
  return std::vector<TensorType>{{DType::kI64, {end - start}}};
}

Types InferRange(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 3));
  const DType dtype = n.inputs[0]->dtype;
  if (!IsFloating(dtype) && !IsIndexType(dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Range runs on float, int64 or int32 scalars, not ", DTypeName(dtype)));
  }
  double v[3];
  for (int i = 0; i < 3; ++i) {
    const Value* in = n.inputs[i];
    if (in->kind != ValueKind::kConstant || in->data.num_elements() != 1) {
      return absl::UnimplementedError(
          absl::StrCat("Range input '", in->name,
                       "' must be a constant scalar: the output's length depends on start, limit and "
                       "delta, and mpc compiles static shapes"));
    }
    v[i] = in->data.GetAsDouble(0);
  }
  if (v[2] == 0) return absl::InvalidArgumentError("Range delta is 0; it must be nonzero");
  const double count = std::ceil((v[1] - v[0]) / v[2]);
  return std::vector<TensorType>{{dtype, {static_cast<int64_t>(std::max(0.0, count))}}};
}

OpDef Def(const char* name, int min_in, int max_in, InferFn infer, GradFn grad = nullptr) {
  OpDef d;
  d.name = name;
  d.min_inputs = min_in;
  d.max_inputs = max_in;
  d.infer = std::move(infer);
  d.grad = std::move(grad);
  d.padding = PaddingRule::kOpaque;
  return d;
}

}  // namespace
}  // namespace tensor_ops

void RegisterTensorOps(OpRegistry& r) {
  using namespace tensor_ops;  // NOLINT
  r.Register(Def("Gather", 2, 2, InferGather, GradGather));
  OpDef gather_grad = Def("GatherGrad", 2, 2, InferGatherGrad);
  gather_grad.domain = "mpc";
  r.Register(gather_grad);

  r.Register(Def("Where", 3, 3, InferWhere, GradWhere));
  r.Register(Def("Concat", 1, 1 << 16, InferConcat, GradConcat));
  OpDef split = Def("Split", 1, 2, InferSplit, GradSplit);
  split.max_outputs = 1 << 16;
  r.Register(split);

  r.Register(Def("Slice", 1, 5, InferSlice, GradSlice));
  OpDef slice_grad = Def("SliceGrad", 1, 1, InferSliceGrad);
  slice_grad.domain = "mpc";
  r.Register(slice_grad);

  // &Infer*: clang deduces pair<..., function type> from a bare function name (g++ decays it).
  for (auto [name, infer] : {std::pair{"Squeeze", &InferSqueeze}, std::pair{"Unsqueeze", &InferUnsqueeze}}) {
    OpDef d = Def(name, 1, 2, infer, ReshapeBackFirst);
    d.view = true;  // the same bytes with a unit axis removed or added
    r.Register(d);
  }
  r.Register(Def("Expand", 2, 2, InferExpand, GradExpand));

  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    r.Register(Def(op, 2, 2, InferCompare));
  }
  r.Register(Def("Not", 1, 1, [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(CheckBool(n));
    return ops::SameAsInput(n, 0);
  }));
  for (const char* op : {"And", "Or", "Xor"}) {
    r.Register(Def(op, 2, 2, [](const Node& n) -> Types {
      MPC_RETURN_IF_ERROR(CheckBool(n));
      return ops::BroadcastBinary(n);
    }));
  }

  r.Register(Def("ConstantOfShape", 1, 1, InferConstantOfShape));
  r.Register(Def("Shape", 1, 1, InferShape));
  r.Register(Def("Range", 3, 3, InferRange));
}

}  // namespace mpc
