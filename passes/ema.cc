// The ema pass (see ema.h).
#include "passes/ema.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

// The node that writes a weight in place: by the time this pass runs, the only node with
// side effects (OpDef::has_side_effects) reading a trained parameter is its update, plain or
// fused, whatever the optimizer.
bool WritesParameter(const Node& n) {
  const OpDef* def = OpRegistry::Global().Find(n.op);
  return def != nullptr && def->has_side_effects;
}

}  // namespace

absl::StatusOr<bool> EmaPass::Run(Graph& g) {
  *result_ = EmaResult{};
  if (!options_.enabled) return false;
  if (!(options_.decay > 0 && options_.decay < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("ema.decay ", options_.decay, " must be in (0, 1)"));
  }
  if (optimizer_->updates.empty())
    return absl::FailedPreconditionError("no updates; the optimizer pass must run first");
  for (const OptimizerResult::ParamUpdate& u : optimizer_->updates) {
    Value* param = g.FindValue(u.param);
    if (!param || param->kind != ValueKind::kParameter) {
      return absl::InternalError(absl::StrCat("ema: updated parameter '", u.param, "' is not in the graph"));
    }
    Node* writer = nullptr;
    for (Node* reader : param->consumers) {
      if (!WritesParameter(*reader)) continue;
      if (writer) return absl::InternalError(absl::StrCat("ema: two nodes write parameter '", u.param, "'"));
      writer = reader;
    }
    if (!writer) return absl::InternalError(absl::StrCat("ema: no update writes parameter '", u.param, "'"));
    Value* average = g.AddState(param->name + ".ema", param->data);
    average->logical_shape = param->logical_shape;
    average->sharded_from = param->sharded_from;  // ZeRO-3: the average of this rank's slice, whole in checkpoints
    AttrMap attrs;
    attrs.Set("decay", options_.decay);
    std::vector<Value*> inputs{average, param};
    if (optimizer_->skip) {
      attrs.Set("gated", int64_t{1});
      inputs.push_back(optimizer_->skip);
    }
    MPC_ASSIGN_OR_RETURN(
        Node * update, g.AddNode("EmaUpdate", std::move(inputs), std::move(attrs), g.UniqueName("ema/" + param->name)));
    update->control_deps.push_back(writer);  // averages the weight after this step's update
    result_->averaged.emplace_back(param->name, average->name);
  }
  return true;
}

}  // namespace mpc
