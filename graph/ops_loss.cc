// Losses: ONNX SoftmaxCrossEntropyLoss (scores [N,C], integer labels [N], reduction
// mean|sum, optional ignore_index) and mpc's MeanSquaredError (mean over all elements),
// with their fused gradients. Losses accumulate in f32 whatever their input dtype.
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

Types InferSoftmaxCrossEntropy(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* scores = n.inputs[0];
  const Value* labels = n.inputs[1];
  if (n.inputs.size() > 2 && n.inputs[2]) {
    return absl::UnimplementedError("SoftmaxCrossEntropyLoss class weights are not supported");
  }
  if (scores->shape.size() != 2) {
    return absl::UnimplementedError(
        absl::StrCat("SoftmaxCrossEntropyLoss needs scores of shape [N, C], got ", ShapeToString(scores->shape)));
  }
  if (labels->dtype != DType::kI64 && labels->dtype != DType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "labels '", labels->name, "' must be int64 or int32 class indices, got ", DTypeName(labels->dtype)));
  }
  if (labels->shape != Shape{scores->shape[0]}) {
    return absl::InvalidArgumentError(absl::StrCat("labels shape ", ShapeToString(labels->shape),
                                                   " does not match scores ", ShapeToString(scores->shape),
                                                   "; expected [", scores->shape[0], "]"));
  }
  const std::string reduction = n.attrs.GetString("reduction", "mean");
  if (reduction != "mean" && reduction != "sum") {
    return absl::UnimplementedError(
        absl::StrCat("SoftmaxCrossEntropyLoss reduction '", reduction, "' is not supported; use mean or sum"));
  }
  return std::vector<TensorType>{{scores->dtype, {}}, {scores->dtype, scores->shape}};
}

Grads GradSoftmaxCrossEntropy(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  if (dy.size() > 1 && dy[1]) {
    return absl::UnimplementedError("gradient through SoftmaxCrossEntropyLoss's log_prob output");
  }
  AttrMap attrs;
  attrs.Set("reduction", n.attrs.GetString("reduction", "mean"));
  if (n.attrs.Has("ignore_index")) attrs.Set("ignore_index", n.attrs.GetInt("ignore_index", -1));
  return std::vector<Value*>{b.Op("SoftmaxCrossEntropyGrad", {dy[0], n.inputs[0], n.inputs[1]}, std::move(attrs)),
                             nullptr};
}

}  // namespace

void RegisterLossOps(OpRegistry& r) {
  OpDef sce;
  sce.name = "SoftmaxCrossEntropyLoss";
  sce.min_inputs = 2;
  sce.max_inputs = 3;
  sce.min_outputs = 1;
  sce.max_outputs = 2;
  sce.infer = InferSoftmaxCrossEntropy;
  sce.grad = GradSoftmaxCrossEntropy;
  r.Register(sce);

  OpDef sce_grad;
  sce_grad.name = "SoftmaxCrossEntropyGrad";  // (dLoss, scores, labels) -> dScores
  sce_grad.domain = "mpc";
  sce_grad.min_inputs = sce_grad.max_inputs = 3;
  sce_grad.infer = [](const Node& n) { return ops::SameAsInput(n, 1); };
  r.Register(sce_grad);

  OpDef mse;
  mse.name = "MeanSquaredError";  // mean((pred - target)^2) over all elements
  mse.domain = "mpc";
  mse.min_inputs = mse.max_inputs = 2;
  mse.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
    MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
    if (n.inputs[0]->shape != n.inputs[1]->shape) {
      return absl::InvalidArgumentError(absl::StrCat("MeanSquaredError: prediction ", ShapeToString(n.inputs[0]->shape),
                                                     " and target ", ShapeToString(n.inputs[1]->shape),
                                                     " must have the same shape"));
    }
    return std::vector<TensorType>{{n.inputs[0]->dtype, {}}};
  };
  mse.grad = [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    // d/dtarget = -d/dpred: a target computed from parameters must get its gradient.
    Value* dpred = b.Op("MeanSquaredErrorGrad", {dy[0], n.inputs[0], n.inputs[1]});
    return std::vector<Value*>{dpred, b.Neg(dpred)};
  };
  r.Register(mse);

  OpDef mse_grad;
  mse_grad.name = "MeanSquaredErrorGrad";  // (dLoss, pred, target) -> 2 (pred - target) dLoss / numel
  mse_grad.domain = "mpc";
  mse_grad.min_inputs = mse_grad.max_inputs = 3;
  mse_grad.infer = [](const Node& n) { return ops::SameAsInput(n, 1); };
  r.Register(mse_grad);
}

}  // namespace mpc
