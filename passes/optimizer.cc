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
  update->inputs.insert(update->inputs.end() - (gated ? 1 : 0), copy);
  copy->consumers.push_back(update);
  update->attrs.Set("lowp_copy", int64_t{1});
  // The update rewrites the copy: every other reader goes first.
  for (Node* reader : copy->consumers) {
    if (reader != update) update->control_deps.push_back(reader);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> OptimizerPass::Run(Graph& graph, const PassContext& ctx) {
  const OptimizerSpec& opt = ctx.spec->optimizer();
  CompileInfo& info = *ctx.info;
  if (info.param_grads.empty()) {
    return absl::FailedPreconditionError("no parameter gradients; the autodiff pass must run first");
  }
  info.learning_rate = graph.AddInput("lr", DType::kF32, {});
  for (auto& [param, grad] : info.param_grads) {
    const Tensor zeros(DType::kF32, param->shape);
    Node* update = nullptr;
    if (opt.has_adamw()) {
      const AdamWSpec& a = opt.adamw();
      AttrMap attrs;
      attrs.Set("beta1", a.beta1());
      attrs.Set("beta2", a.beta2());
      attrs.Set("eps", a.eps());
      attrs.Set("weight_decay", a.weight_decay());
      Value* m = graph.AddState(param->name + ".adam_m", zeros);
      Value* v = graph.AddState(param->name + ".adam_v", zeros);
      Value* step = graph.AddState(param->name + ".adam_step", Tensor::Scalar(0.0f));
      std::vector<Value*> inputs{param, grad, info.learning_rate, m, v, step};
      if (info.found_nonfinite) {
        attrs.Set("gated", int64_t{1});
        inputs.push_back(info.found_nonfinite);
      }
      MPC_ASSIGN_OR_RETURN(update, graph.AddNode("AdamWUpdate", std::move(inputs), std::move(attrs),
                                                 graph.UniqueName("update/" + param->name)));
    } else {
      const SgdSpec& s = opt.sgd();  // the default optimizer when none is set
      AttrMap attrs;
      attrs.Set("momentum", s.momentum());
      attrs.Set("nesterov", static_cast<int64_t>(s.nesterov()));
      attrs.Set("weight_decay", s.weight_decay());
      std::vector<Value*> inputs{param, grad, info.learning_rate};
      if (s.momentum() != 0.0f) inputs.push_back(graph.AddState(param->name + ".momentum", zeros));
      if (info.found_nonfinite) {
        attrs.Set("gated", int64_t{1});
        inputs.push_back(info.found_nonfinite);
      }
      MPC_ASSIGN_OR_RETURN(update, graph.AddNode("SgdUpdate", std::move(inputs), std::move(attrs),
                                                 graph.UniqueName("update/" + param->name)));
    }
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
