// Shape and type ops: Reshape, Flatten, Transpose, Identity, Cast, and the compiler's
// broadcast helpers ReduceSumTo / BroadcastTo (the pair that makes broadcasting
// differentiable: each is the other's gradient).
#include <numeric>

#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

Grads ReshapeBack(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  std::vector<Value*> grads{b.Reshape(dy[0], n.inputs[0]->shape)};
  grads.resize(n.inputs.size(), nullptr);
  return grads;
}

Types InferReshape(const Node& n) {
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> target, ops::ConstantInts(n, 1));
  const Shape& in = n.inputs[0]->shape;
  const bool allow_zero = n.attrs.GetInt("allowzero", 0) != 0;
  Shape out(target.size());
  int infer_at = -1;
  int64_t known = 1;
  for (size_t i = 0; i < target.size(); ++i) {
    int64_t d = target[i];
    if (d == 0 && !allow_zero) {
      if (i >= in.size()) return absl::InvalidArgumentError("Reshape: 0 copies a dimension the input lacks");
      d = in[i];
    }
    if (d == -1) {
      if (infer_at >= 0) return absl::InvalidArgumentError("Reshape: more than one -1 in the target shape");
      infer_at = static_cast<int>(i);
      continue;
    }
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat("Reshape: invalid dimension ", d));
    out[i] = d;
    // Checked: a corrupt target ([2, 2^62, ...]) overflowed int64 here (UB; found by
    // tools/fuzz/onnx_import_fuzzer, tests/fuzz_regressions/onnx_import/crash-cbfe75bc...).
    if (__builtin_mul_overflow(known, d, &known)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Reshape: the target shape [", absl::StrJoin(target, ","), "] is too large"));
    }
  }
  const int64_t total = NumElements(in);
  if (infer_at >= 0) {
    if (known == 0 || total % known != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("Reshape: cannot reshape ", ShapeToString(in), " to [", absl::StrJoin(target, ","), "]"));
    }
    out[infer_at] = total / known;
  }
  if (NumElements(out) != total) {
    return absl::InvalidArgumentError(absl::StrCat("Reshape: ", ShapeToString(in), " has ", total,
                                                   " elements but the target ", ShapeToString(out), " has ",
                                                   NumElements(out)));
  }
  return std::vector<TensorType>{{n.inputs[0]->dtype, out}};
}

Types InferFlatten(const Node& n) {
  const Shape& in = n.inputs[0]->shape;
  const int rank = static_cast<int>(in.size());
  int64_t axis = n.attrs.GetInt("axis", 1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) {
    return absl::InvalidArgumentError(
        absl::StrCat("Flatten axis ", n.attrs.GetInt("axis", 1), " out of range for rank ", rank));
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < rank; ++i) (i < axis ? outer : inner) *= in[i];
  return std::vector<TensorType>{{n.inputs[0]->dtype, {outer, inner}}};
}

absl::StatusOr<std::vector<int64_t>> TransposePerm(const Node& n) {
  const int rank = static_cast<int>(n.inputs[0]->shape.size());
  std::vector<int64_t> perm = n.attrs.GetInts("perm", {});
  if (perm.empty()) {
    perm.resize(rank);
    std::iota(perm.rbegin(), perm.rend(), 0);
  }
  std::vector<bool> seen(rank, false);
  if (static_cast<int>(perm.size()) != rank) {
    return absl::InvalidArgumentError(absl::StrCat("Transpose perm has ", perm.size(), " entries for rank ", rank));
  }
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return absl::InvalidArgumentError("Transpose perm is not a permutation");
    seen[p] = true;
  }
  return perm;
}

Types InferTranspose(const Node& n) {
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> perm, TransposePerm(n));
  Shape out;
  for (int64_t p : perm) out.push_back(n.inputs[0]->shape[p]);
  return std::vector<TensorType>{{n.inputs[0]->dtype, out}};
}

Grads GradTranspose(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  auto perm = TransposePerm(n);
  if (!perm.ok()) return perm.status();
  std::vector<int64_t> inverse(perm->size());
  for (size_t i = 0; i < perm->size(); ++i) inverse[(*perm)[i]] = static_cast<int64_t>(i);
  return std::vector<Value*>{b.Transpose(dy[0], inverse)};
}

Types InferCast(const Node& n) {
  if (!n.attrs.Has("to")) return absl::InvalidArgumentError("Cast needs the attribute 'to'");
  MPC_ASSIGN_OR_RETURN(DType to, DTypeFromOnnx(static_cast<int32_t>(n.attrs.GetInt("to", 0))));
  // Opset 19's saturate: 1 (the default) clamps out-of-range values to the float8 format's
  // largest, as mpc's casts do; 0 (overflow to inf/NaN) is not what they compute.
  if ((to == DType::kF8E4M3 || to == DType::kF8E5M2) && n.attrs.GetInt("saturate", 1) == 0) {
    return absl::UnimplementedError(absl::StrCat("Cast node '", n.name,
                                                 "': saturate = 0 to a float8 type is not supported; mpc's float8 "
                                                 "casts saturate (saturate = 1, the default)"));
  }
  return std::vector<TensorType>{{to, n.inputs[0]->shape}};
}

// Is `from` broadcastable to `to` (so ReduceSumTo(to -> from) is well defined)?
absl::Status CheckBroadcastable(const Shape& from, const Shape& to) {
  auto b = BroadcastShapes(from, to);
  if (!b.ok() || *b != to) {
    return absl::InvalidArgumentError(absl::StrCat(ShapeToString(from), " does not broadcast to ", ShapeToString(to)));
  }
  return absl::OkStatus();
}

// SliceTo / PadTo: same rank, every target extent <= (shrink) or >= (grow) the input's.
Types PaddedShapeCheck(const Node& n, bool shrink) {
  const Shape target = n.attrs.GetInts("shape", {});
  const Shape& in = n.inputs[0]->shape;
  bool ok = target.size() == in.size();
  for (size_t i = 0; ok && i < in.size(); ++i) ok = shrink ? target[i] <= in[i] : target[i] >= in[i];
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.op, ": cannot go from ", ShapeToString(in), " to ", ShapeToString(target)));
  }
  return std::vector<TensorType>{{n.inputs[0]->dtype, target}};
}

}  // namespace

void RegisterShapeOps(OpRegistry& r) {
  OpDef reshape;
  reshape.name = "Reshape";
  reshape.min_inputs = reshape.max_inputs = 2;
  reshape.infer = InferReshape;
  reshape.grad = ReshapeBack;
  reshape.view = true;
  r.Register(reshape);

  OpDef flatten;
  flatten.name = "Flatten";
  flatten.min_inputs = flatten.max_inputs = 1;
  flatten.infer = InferFlatten;
  flatten.grad = ReshapeBack;
  flatten.view = true;
  flatten.padding = PaddingRule::kFlatten;
  r.Register(flatten);

  OpDef transpose;
  transpose.name = "Transpose";
  transpose.min_inputs = transpose.max_inputs = 1;
  transpose.infer = InferTranspose;
  transpose.grad = GradTranspose;
  r.Register(transpose);

  OpDef identity;
  identity.name = "Identity";
  identity.min_inputs = identity.max_inputs = 1;
  identity.infer = [](const Node& n) { return ops::SameAsInput(n, 0); };
  identity.padding = PaddingRule::kZeroPreservingUnary;
  identity.grad = [](GraphBuilder&, const Node&, const std::vector<Value*>& dy) -> Grads {
    return std::vector<Value*>{dy[0]};
  };
  r.Register(identity);

  OpDef cast;
  cast.name = "Cast";
  cast.min_inputs = cast.max_inputs = 1;
  cast.infer = InferCast;
  cast.padding = PaddingRule::kZeroPreservingUnary;  // casts keep 0 exactly
  // The gradient of a Cast is a Cast back to the input's dtype.
  cast.grad = [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    if (!IsFloating(n.inputs[0]->dtype)) return std::vector<Value*>{nullptr};
    return std::vector<Value*>{b.Cast(dy[0], n.inputs[0]->dtype)};
  };
  r.Register(cast);

  OpDef reduce_to;
  reduce_to.name = "ReduceSumTo";  // sums over the axes along which `shape` was broadcast
  reduce_to.domain = "mpc";
  reduce_to.min_inputs = reduce_to.max_inputs = 1;
  reduce_to.infer = [](const Node& n) -> Types {
    Shape target = n.attrs.GetInts("shape", {});
    MPC_RETURN_IF_ERROR(CheckBroadcastable(target, n.inputs[0]->shape));
    return std::vector<TensorType>{{n.inputs[0]->dtype, target}};
  };
  reduce_to.grad = [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    AttrMap attrs;
    attrs.Set("shape", n.inputs[0]->shape);
    return std::vector<Value*>{b.Op("BroadcastTo", {dy[0]}, std::move(attrs))};
  };
  r.Register(reduce_to);

  // Leading-corner slice and its inverse, zero padding: the pad-dims pass uses them
  // where a padded activation meets an op that must see the model's shape.
  OpDef slice_to;
  slice_to.name = "SliceTo";
  slice_to.domain = "mpc";
  slice_to.min_inputs = slice_to.max_inputs = 1;
  slice_to.infer = [](const Node& n) -> Types { return PaddedShapeCheck(n, /*shrink=*/true); };
  slice_to.grad = [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    AttrMap attrs;
    attrs.Set("shape", n.inputs[0]->shape);
    return std::vector<Value*>{b.Op("PadTo", {dy[0]}, std::move(attrs))};
  };
  r.Register(slice_to);

  OpDef pad_to;
  pad_to.name = "PadTo";
  pad_to.domain = "mpc";
  pad_to.min_inputs = pad_to.max_inputs = 1;
  pad_to.infer = [](const Node& n) -> Types { return PaddedShapeCheck(n, /*shrink=*/false); };
  pad_to.grad = [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    AttrMap attrs;
    attrs.Set("shape", n.inputs[0]->shape);
    return std::vector<Value*>{b.Op("SliceTo", {dy[0]}, std::move(attrs))};
  };
  r.Register(pad_to);

  OpDef broadcast_to;
  broadcast_to.name = "BroadcastTo";
  broadcast_to.domain = "mpc";
  broadcast_to.min_inputs = broadcast_to.max_inputs = 1;
  broadcast_to.infer = [](const Node& n) -> Types {
    Shape target = n.attrs.GetInts("shape", {});
    MPC_RETURN_IF_ERROR(CheckBroadcastable(n.inputs[0]->shape, target));
    return std::vector<TensorType>{{n.inputs[0]->dtype, target}};
  };
  broadcast_to.grad = [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    return std::vector<Value*>{b.ReduceSumTo(dy[0], n.inputs[0]->shape)};
  };
  r.Register(broadcast_to);
}

}  // namespace mpc
