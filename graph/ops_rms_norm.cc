// RMS normalisation (mpc domain), the op passes/fuse_rms_norm.h makes of the chain
// exporters write for an RMSNorm layer (Llama, T5, Mistral, ...):
//   RmsNorm(X[, Scale]) -> (Y, InvRms)      attrs axis (default -1), epsilon (default 1e-5)
//     Y = X * InvRms * Scale, InvRms = 1 / sqrt(mean(X^2 over X.shape[axis:]) + epsilon)
//   RmsNormGrad(dY, X, InvRms[, Scale]) -> (dX[, dScale])
//     dX = InvRms * (g - xhat * mean(g * xhat)), g = dY * Scale, xhat = X * InvRms;
//     dScale = sum over rows of dY * xhat (the normalised shape; the gradient reduces it
//     to Scale's shape)
// As LayerNormalization: statistics in f32 (f64 for f64 X), InvRms stored in that dtype
// with X's rank and 1 on the normalised axes; Scale broadcasts to the normalised shape
// and has X's dtype. Without Scale the layer has no weight (Scale = 1) and RmsNormGrad
// has no dScale.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops_common.h"
#include "graph/ops_norm.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

bool HasInput(const Node& n, int i) { return i < static_cast<int>(n.inputs.size()) && n.inputs[i]; }

// X.shape[axis:] and the statistics' shape (X's with 1 from axis on).
struct NormShapes {
  Shape norm, stats;
};

absl::StatusOr<NormShapes> ShapesOf(const Node& n, const Value* x) {
  MPC_ASSIGN_OR_RETURN(int axis, ops::LayerNormAxis(n));
  NormShapes s;
  s.norm.assign(x->shape.begin() + axis, x->shape.end());
  s.stats = x->shape;
  for (size_t i = axis; i < s.stats.size(); ++i) s.stats[i] = 1;
  return s;
}

absl::Status CheckScale(const Node& n, const Value* x, int i, const Shape& norm) {
  if (!HasInput(n, i)) return absl::OkStatus();
  const Value* scale = n.inputs[i];
  auto b = BroadcastShapes(scale->shape, norm);
  if (scale->shape.size() > norm.size() || !b.ok() || *b != norm) {
    return absl::InvalidArgumentError(absl::StrCat(n.op, " node '", n.name, "': scale '", scale->name, "' has shape ",
                                                   ShapeToString(scale->shape),
                                                   ", which does not broadcast to the normalised shape ",
                                                   ShapeToString(norm), " (X's dimensions from axis on)"));
  }
  if (scale->dtype != x->dtype) {
    return absl::InvalidArgumentError(absl::StrCat(n.op, " node '", n.name, "': scale '", scale->name, "' is ",
                                                   DTypeName(scale->dtype), " but X is ", DTypeName(x->dtype),
                                                   "; insert a Cast"));
  }
  return absl::OkStatus();
}

DType StatsDType(DType x) { return x == DType::kF64 ? DType::kF64 : DType::kF32; }

Types InferRmsNorm(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* x = n.inputs[0];
  MPC_ASSIGN_OR_RETURN(NormShapes s, ShapesOf(n, x));
  MPC_RETURN_IF_ERROR(CheckScale(n, x, 1, s.norm));
  return std::vector<TensorType>{{x->dtype, x->shape}, {StatsDType(x->dtype), s.stats}};
}

Grads GradRmsNorm(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  if (dys.size() > 1 && dys[1]) {
    return absl::UnimplementedError(absl::StrCat("RmsNorm node '", n.name,
                                                 "': InvRms reaches the loss, but mpc does not differentiate it"));
  }
  AttrMap attrs;
  attrs.Set("axis", n.attrs.GetInt("axis", -1));
  Value* x = n.inputs[0];
  const bool scaled = HasInput(n, 1);
  std::vector<Value*> in{b.Cast(dys[0], x->dtype), x, n.outputs[1]};
  if (scaled) in.push_back(n.inputs[1]);
  std::vector<Value*> g = b.OpN("RmsNormGrad", std::move(in), std::move(attrs));
  if (g.size() != (scaled ? 2u : 1u)) {
    return b.status().ok() ? absl::InternalError("RmsNormGrad: wrong output count") : b.status();
  }
  std::vector<Value*> grads{g[0]};
  if (scaled) grads.push_back(b.ReduceSumTo(g[1], n.inputs[1]->shape));
  return grads;
}

Types InferRmsNormGrad(const Node& n) {
  const Value* dy = n.inputs[0];
  const Value* x = n.inputs[1];
  const Value* inv = n.inputs[2];
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 1));
  if (dy->dtype != x->dtype || dy->shape != x->shape) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNormGrad node '", n.name, "': dY '", dy->name, "' is ",
                                                   DTypeName(dy->dtype), ShapeToString(dy->shape), " but X is ",
                                                   DTypeName(x->dtype), ShapeToString(x->shape)));
  }
  MPC_ASSIGN_OR_RETURN(NormShapes s, ShapesOf(n, x));
  if (!IsFloating(inv->dtype) || NumElements(inv->shape) != NumElements(s.stats)) {
    return absl::InvalidArgumentError(absl::StrCat("RmsNormGrad node '", n.name, "': InvRms '", inv->name, "' is ",
                                                   DTypeName(inv->dtype), ShapeToString(inv->shape),
                                                   "; it must be a float ", ShapeToString(s.stats),
                                                   " (one value per normalised row)"));
  }
  MPC_RETURN_IF_ERROR(CheckScale(n, x, 3, s.norm));
  std::vector<TensorType> types{{x->dtype, x->shape}};
  if (HasInput(n, 3)) types.push_back({x->dtype, s.norm});
  return types;
}

}  // namespace

void RegisterRmsNormOps(OpRegistry& r) {
  OpDef rms;
  rms.name = "RmsNorm";
  rms.domain = "mpc";
  rms.min_inputs = 1;
  rms.max_inputs = 2;
  rms.min_outputs = 1;
  rms.max_outputs = 2;
  rms.infer = InferRmsNorm;
  rms.grad = GradRmsNorm;
  r.Register(rms);

  OpDef grad;
  grad.name = "RmsNormGrad";
  grad.domain = "mpc";
  grad.min_inputs = 3;
  grad.max_inputs = 4;
  grad.min_outputs = 1;
  grad.max_outputs = 2;
  grad.infer = InferRmsNormGrad;
  r.Register(grad);
}

}  // namespace mpc
