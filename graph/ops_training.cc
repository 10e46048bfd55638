// Optimizer update ops. They write persistent state in place (parameter, momentum,
// moments, step counter) and have no outputs; the optimizer pass orders them after
// every reader of the parameter with control dependencies.
//   SgdUpdate(param, grad, lr[, momentum_buf])          attrs: momentum, nesterov, weight_decay
//   AdamWUpdate(param, grad, lr, m, v, step)              attrs: beta1, beta2, eps, weight_decay
// Semantics are torch.optim.SGD / torch.optim.AdamW's, so runs can be compared step by step.
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Types = absl::StatusOr<std::vector<TensorType>>;

absl::Status CheckStateLike(const Node& n, int i, const Value* param) {
  const Value* v = n.inputs[i];
  if (v->shape != param->shape || v->dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state '", v->name, "' must be f32 ",
                                                   ShapeToString(param->shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckScalarF32(const Node& n, int i) {
  const Value* v = n.inputs[i];
  if (v->dtype != DType::kF32 || NumElements(v->shape) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", v->name, "' must be an f32 scalar"));
  }
  return absl::OkStatus();
}

Types InferUpdate(const Node& n, const std::vector<int>& state_inputs, const std::vector<int>& scalars) {
  const Value* param = n.inputs[0];
  if (param->dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("master weight '", param->name, "' must be f32"));
  }
  if (n.inputs[1]->shape != param->shape) {
    return absl::InvalidArgumentError(absl::StrCat("gradient ", ShapeToString(n.inputs[1]->shape),
                                                   " does not match parameter ", ShapeToString(param->shape)));
  }
  if (n.inputs[1]->dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("gradient of '", param->name, "' must arrive in f32"));
  }
  for (int i : state_inputs) {
    if (i < static_cast<int>(n.inputs.size())) MPC_RETURN_IF_ERROR(CheckStateLike(n, i, param));
  }
  for (int i : scalars) MPC_RETURN_IF_ERROR(CheckScalarF32(n, i));
  return std::vector<TensorType>{};
}

}  // namespace

void RegisterTrainingOps(OpRegistry& r) {
  OpDef sgd;
  sgd.name = "SgdUpdate";
  sgd.domain = "mpc";
  sgd.min_inputs = 3;
  sgd.max_inputs = 4;
  sgd.min_outputs = sgd.max_outputs = 0;
  sgd.has_side_effects = true;
  sgd.infer = [](const Node& n) { return InferUpdate(n, {3}, {2}); };
  r.Register(sgd);

  OpDef adamw;
  adamw.name = "AdamWUpdate";
  adamw.domain = "mpc";
  adamw.min_inputs = adamw.max_inputs = 6;
  adamw.min_outputs = adamw.max_outputs = 0;
  adamw.has_side_effects = true;
  adamw.infer = [](const Node& n) { return InferUpdate(n, {3, 4}, {2, 5}); };
  r.Register(adamw);
}

}  // namespace mpc
