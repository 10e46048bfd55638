// The attach-loss and select-outputs passes (see attach_loss.h).
#include "passes/attach_loss.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"

namespace mpc {
namespace {

absl::StatusOr<Value*> FindOutput(const Graph& g, const std::string& name) {
  for (Value* v : g.outputs()) {
    if (v->name == name) return v;
  }
  return absl::InvalidArgumentError(absl::StrCat("the model has no output named '", name, "'"));
}

// A mean over every element, as a scalar.
Value* MeanOfAll(GraphBuilder& b, Value* x) {
  AttrMap attrs;
  attrs.Set("keepdims", int64_t{0});
  return b.Op("ReduceMean", {x}, std::move(attrs));
}

// PyTorch's label smoothing: with target (1-eps)*onehot + eps/C the loss is
// (1-eps)*CE + eps*mean_c(-log_softmax(x)_c), and averaging over the rows too gives
// eps*mean(-LogSoftmax(x)) over every element. Composed rather than a kernel attribute, so
// every backend has it; LogSoftmax and ReduceMean are autocast deny ops, which keeps the
// whole sum f32 (docs/autocast.md).
Value* SmoothCrossEntropy(GraphBuilder& b, Value* logits, Value* cross_entropy, double eps) {
  AttrMap axis;
  axis.Set("axis", int64_t{-1});
  Value* log_probs = b.Op("LogSoftmax", {logits}, std::move(axis));
  Value* uniform = b.Neg(MeanOfAll(b, log_probs));
  return b.Add(b.Mul(cross_entropy, b.ScalarConstant(1.0 - eps, DType::kF32)),
               b.Mul(uniform, b.ScalarConstant(eps, DType::kF32)));
}

// PyTorch's numerically stable BCEWithLogitsLoss, mean over elements:
// max(x,0) - x*y + log(1 + exp(-|x|)), with max(x,0) = Relu(x) and -|x| = x - 2*Relu(x)
// (there is no Abs op). exp(-|x|) is in (0, 1], so neither Exp nor Log can overflow. Its
// gradient through these ops is sigmoid(x) - y for x of either sign (at x = 0 too, where
// ReluGrad is 0), a sum of terms of size ~1 that cancel: each must be f32. So the loss reads
// the logits through an explicit Cast to f32 (a no-op now; autocast keeps a model's casts,
// so under bf16 it is the one cast of the logits and its gradient the one cast back):
// Relu, a clear op, would otherwise follow a bf16 Gemm into bf16 (docs/autocast.md).
Value* BinaryCrossEntropyWithLogits(GraphBuilder& b, Value* logits, Value* y) {
  AttrMap to_f32;
  to_f32.Set("to", static_cast<int64_t>(DTypeToOnnx(DType::kF32)));
  Value* x = b.Op("Cast", {logits}, std::move(to_f32));
  Value* relu = b.Op("Relu", {x});
  Value* neg_abs = b.Sub(x, b.Add(relu, relu));
  Value* softplus = b.Op("Log", {b.Add(b.Op("Exp", {neg_abs}), b.ScalarConstant(1.0, DType::kF32))});
  return MeanOfAll(b, b.Add(b.Sub(relu, b.Mul(x, y)), softplus));
}

}  // namespace

absl::StatusOr<bool> AttachLossPass::Run(Graph& g) {
  const AttachLossOptions& o = options_;
  MPC_ASSIGN_OR_RETURN(Value * logits, FindOutput(g, o.logits));
  if (g.FindValue(o.labels)) {
    return absl::InvalidArgumentError(absl::StrCat("spec field labels_input: the model already has a value named '",
                                                   o.labels, "'; choose another labels_input name"));
  }
  GraphBuilder b(&g, "loss/");
  Value* labels = nullptr;
  Value* loss = nullptr;
  if (o.kind == AttachLossOptions::Kind::kMeanSquaredError) {
    labels = g.AddInput(o.labels, logits->dtype, logits->shape);
    loss = b.Op("MeanSquaredError", {logits, labels});
  } else if (o.kind == AttachLossOptions::Kind::kBinaryCrossEntropyWithLogits) {
    if (!IsFloating(logits->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("binary cross-entropy needs float logits; output '", logits->name,
                                                     "' is ", DTypeName(logits->dtype)));
    }
    labels = g.AddInput(o.labels, DType::kF32, logits->shape);
    loss = BinaryCrossEntropyWithLogits(b, logits, labels);
  } else {
    Shape label_row = o.label_row;
    if (label_row.empty() && logits->shape.size() == 2 && logits->shape[0] != o.batch_size &&
        logits->shape[0] % o.batch_size == 0) {
      label_row = {logits->shape[0] / o.batch_size};
    }
    Shape label_shape{o.batch_size};
    label_shape.insert(label_shape.end(), label_row.begin(), label_row.end());
    labels = g.AddInput(o.labels, DType::kI64, label_shape);
    Value* flat_labels = labels;
    if (!label_row.empty()) {
      const int64_t rows = NumElements(label_shape);
      // Logits with the labels' shape and a class axis ([batch, positions, classes], as a
      // language model returns them; PyTorch users flatten them in the loss call) are
      // flattened here to [batch*positions, classes]: the same bytes, a view.
      Shape per_position = label_shape;
      if (logits->shape.size() == label_shape.size() + 1) per_position.push_back(logits->shape.back());
      if (logits->shape == per_position) {
        logits = b.Reshape(logits, {rows, logits->shape.back()});
      } else if (logits->shape.size() == label_shape.size() + 1 && logits->shape[0] == label_shape[0] &&
                 Shape(logits->shape.begin() + 2, logits->shape.end()) == label_row) {
        // Classes on axis 1 ([batch, classes, H, W], a segmentation head, as PyTorch's
        // CrossEntropyLoss takes them): moved last, then flattened.
        const int64_t classes = logits->shape[1];
        std::vector<int64_t> perm{0};
        for (int64_t d = 2; d < static_cast<int64_t>(logits->shape.size()); ++d) perm.push_back(d);
        perm.push_back(1);
        logits = b.Reshape(b.Transpose(logits, perm), {rows, classes});
      }
      if (logits->shape.size() != 2 || logits->shape[0] != rows) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the labels have one class per position (", ShapeToString(label_shape), " per batch) but output '",
            logits->name, "' is ", ShapeToString(logits->shape), "; softmax cross-entropy needs logits of shape [",
            rows, ", classes]: flatten the model's logits to [batch*positions, classes]"));
      }
      flat_labels = b.Reshape(labels, {rows});
    }
    AttrMap attrs;
    attrs.Set("reduction", std::string("mean"));
    loss = b.Op("SoftmaxCrossEntropyLoss", {logits, flat_labels}, std::move(attrs));
    if (o.label_smoothing != 0) {
      if (!(o.label_smoothing > 0 && o.label_smoothing < 1)) {
        return absl::InvalidArgumentError(absl::StrCat("label smoothing ", o.label_smoothing,
                                                       " must be in [0, 1) (spec field loss.label_smoothing)"));
      }
      loss = SmoothCrossEntropy(b, logits, loss, o.label_smoothing);
    }
  }
  MPC_RETURN_IF_ERROR(b.status());
  result_->loss = loss;
  result_->labels = labels;
  g.SetOutputs({loss});
  return true;
}

absl::StatusOr<bool> SelectOutputsPass::Run(Graph& g) {
  std::vector<Value*> outputs;
  for (const std::string& name : outputs_) {
    MPC_ASSIGN_OR_RETURN(Value * v, FindOutput(g, name));
    outputs.push_back(v);
  }
  const bool changed = outputs != g.outputs();
  g.SetOutputs(std::move(outputs));
  return changed;
}

}  // namespace mpc
