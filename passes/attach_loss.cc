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
