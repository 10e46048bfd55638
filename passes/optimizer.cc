// Emission of optimizer updates and state (see optimizer.h).
#include "passes/optimizer.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace mpc {

namespace {

// Autocast gives a parameter read in bf16/f16 one shared Cast, which runs every step.
// Instead the update writes that copy from the new master weight (lowp_copy=1): the copy
// becomes persistent state `<param>.lowp`, initialised from the initial weights, and the
// Cast goes away. Same values (the update rounds the same f32 weight), one pass fewer.
absl::Status FuseLowPrecisionCopy(Graph& graph, Value* param, Node* update) {
  Node* cast = nullptr;
  for (Node* reader : param->consumers) {
    if (reader->op != "Cast" || reader->inputs.size() != 1 || reader->outputs.size() != 1) continue;
    const DType to = reader->outputs[0]->dtype;
    if (to != DType::kBF16 && to != DType::kF16) continue;
    if (cast) return absl::OkStatus();  // two casts of one weight: leave them (autocast shares, so unusual)
    cast = reader;
  }
  if (!cast) return absl::OkStatus();
  Value* cast_out = cast->outputs[0];
  Value* copy = graph.AddState(param->name + ".lowp", param->data.CastTo(cast_out->dtype));
  graph.ReplaceAllUsesWith(cast_out, copy);
  MPC_RETURN_IF_ERROR(graph.RemoveNode(cast));
  const bool gated = update->attrs.GetInt("gated", 0) != 0;
  graph.InsertNodeInput(update, static_cast<int>(update->inputs.size()) - (gated ? 1 : 0), copy);
  update->attrs.Set("lowp_copy", int64_t{1});
  // The update rewrites the copy: every other reader goes first.
  for (Node* reader : copy->consumers) {
    if (reader != update) update->control_deps.push_back(reader);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> OptimizerPass::Run(Graph& graph) {
  const OptimizerOptions& opt = options_;
  const ParamGrads& param_grads =
      loss_scaling_->param_grads.empty() ? autodiff_->param_grads : loss_scaling_->param_grads;
  Value* found_nonfinite = loss_scaling_->found_nonfinite;
  if (param_grads.empty()) {
    return absl::FailedPreconditionError("no parameter gradients; the autodiff pass must run first");
  }
  Value* lr = result_->learning_rate = graph.AddInput("lr", DType::kF32, {});
  for (auto& [param, grad] : param_grads) {
    const Tensor zeros(DType::kF32, param->shape);
    AttrMap attrs;
    std::vector<Value*> inputs{param, grad, lr};
    if (opt.kind == OptimizerOptions::Kind::kAdamW) {
      attrs.Set("beta1", opt.beta1);
      attrs.Set("beta2", opt.beta2);
      attrs.Set("eps", opt.eps);
      attrs.Set("weight_decay", opt.weight_decay);
      inputs.push_back(graph.AddState(param->name + ".adam_m", zeros));
      inputs.push_back(graph.AddState(param->name + ".adam_v", zeros));
      inputs.push_back(graph.AddState(param->name + ".adam_step", Tensor::Scalar(0.0f)));
    } else {
      attrs.Set("momentum", opt.momentum);
      attrs.Set("nesterov", static_cast<int64_t>(opt.nesterov));
      attrs.Set("weight_decay", opt.weight_decay);
      if (opt.momentum != 0.0f) inputs.push_back(graph.AddState(param->name + ".momentum", zeros));
    }
    if (found_nonfinite) {
      attrs.Set("gated", int64_t{1});
      inputs.push_back(found_nonfinite);
    }
    const char* op = opt.kind == OptimizerOptions::Kind::kAdamW ? "AdamWUpdate" : "SgdUpdate";
    MPC_ASSIGN_OR_RETURN(Node * update, graph.AddNode(op, std::move(inputs), std::move(attrs),
                                                      graph.UniqueName("update/" + param->name)));
    MPC_RETURN_IF_ERROR(FuseLowPrecisionCopy(graph, param, update));
    // Optimizer state of a padded parameter is padded alike and unpadded in checkpoints.
    for (Value* in : update->inputs) {
      if (in && in->kind == ValueKind::kState && in->shape == param->shape) in->logical_shape = param->logical_shape;
    }
    for (Node* reader : param->consumers) {
      if (reader != update) update->control_deps.push_back(reader);
    }
  }
  return true;
}

}  // namespace mpc
