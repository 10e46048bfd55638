// Reverse-mode differentiation over the graph (see autodiff.h).
#include "passes/autodiff.h"

#include <algorithm>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"

namespace mpc {

absl::StatusOr<std::vector<Value*>> BuildGradients(Graph& graph, Value* loss, const std::vector<Value*>& wrt,
                                                   Value** seed_out) {
  if (!loss) return absl::FailedPreconditionError("no loss value to differentiate");
  if (NumElements(loss->shape) != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the loss '", loss->name, "' must be a scalar, got ", ShapeToString(loss->shape)));
  }
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());

  // Values that depend on something we differentiate with respect to.
  absl::flat_hash_set<const Value*> depends(wrt.begin(), wrt.end());
  for (Node* n : order) {
    for (Value* in : n->inputs) {
      if (in && depends.contains(in)) {
        for (Value* out : n->outputs) depends.insert(out);
        break;
      }
    }
  }
  if (!depends.contains(loss)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the loss '", loss->name, "' does not depend on any trainable parameter"));
  }

  GraphBuilder b(&graph, "grad/");
  absl::flat_hash_map<const Value*, Value*> grads;
  grads[loss] = b.ScalarConstant(1.0, loss->dtype);
  if (seed_out) *seed_out = grads[loss];
  if (loss->shape != Shape{}) grads[loss] = b.Reshape(grads[loss], loss->shape);

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node* n = *it;
    std::vector<Value*> dys;
    bool any = false;
    for (Value* out : n->outputs) {
      auto g = grads.find(out);
      dys.push_back(g == grads.end() ? nullptr : g->second);
      any |= g != grads.end();
    }
    if (!any) continue;
    bool needs = false;
    for (Value* in : n->inputs) needs |= in && depends.contains(in);
    if (!needs) continue;
    const OpDef* def = OpRegistry::Global().Find(n->op);
    if (!def->grad) {
      return absl::UnimplementedError(absl::StrCat("op '", n->op, "' at node '", n->name,
                                                   "' has no gradient, but a trainable parameter flows through it"));
    }
    auto dxs = def->grad(b, *n, dys);
    if (!dxs.ok()) {
      return absl::Status(dxs.status().code(),
                          absl::StrCat("gradient of node '", n->name, "' (", n->op, "): ", dxs.status().message()));
    }
    MPC_RETURN_IF_ERROR(b.status());
    for (size_t j = 0; j < n->inputs.size() && j < dxs->size(); ++j) {
      Value* in = n->inputs[j];
      Value* dx = (*dxs)[j];
      if (!in || !dx || !depends.contains(in)) continue;
      if (dx->shape != in->shape || dx->dtype != in->dtype) {
        return absl::InternalError(absl::StrCat("gradient of node '", n->name, "' input ", j, " is ",
                                                DTypeName(dx->dtype), ShapeToString(dx->shape), ", expected ",
                                                DTypeName(in->dtype), ShapeToString(in->shape)));
      }
      auto [slot, inserted] = grads.try_emplace(in, dx);
      if (!inserted) slot->second = b.Add(slot->second, dx);
    }
    MPC_RETURN_IF_ERROR(b.status());
  }
  std::vector<Value*> result;
  for (Value* v : wrt) {
    auto g = grads.find(v);
    result.push_back(g == grads.end() ? nullptr : g->second);
  }
  return result;
}

absl::StatusOr<bool> AutodiffPass::Run(Graph& graph) {
  if (!loss_->loss) return absl::FailedPreconditionError("no loss to differentiate; attach-loss must run first");
  std::vector<std::regex> freeze;
  for (const std::string& pattern : freeze_) {
    try {
      freeze.emplace_back(pattern);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("freeze pattern '", pattern, "' is not a valid regex: ", e.what()));
    }
  }
  result_->frozen.clear();
  std::vector<Value*> params;
  for (Value* p : graph.ValuesOfKind(ValueKind::kParameter)) {
    const bool frozen =
        std::any_of(freeze.begin(), freeze.end(), [&](const std::regex& re) { return std::regex_match(p->name, re); });
    if (frozen) {
      result_->frozen.push_back(p->name);
    } else {
      params.push_back(p);
    }
  }
  // A pattern that freezes nothing is a typo, not a request: say so rather than train it all.
  for (size_t i = 0; i < freeze.size(); ++i) {
    const auto all = graph.ValuesOfKind(ValueKind::kParameter);
    if (std::none_of(all.begin(), all.end(), [&](const Value* p) { return std::regex_match(p->name, freeze[i]); })) {
      std::vector<std::string> names;
      for (const Value* p : all) names.push_back(p->name);
      return absl::InvalidArgumentError(
          absl::StrCat("freeze pattern '", freeze_[i],
                       "' matches no parameter (a full match of the name); parameters: ", absl::StrJoin(names, ", ")));
    }
  }
  if (!freeze.empty() && params.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("the freeze patterns match all ", result_->frozen.size(),
                                                   " parameters; nothing is left to train"));
  }
  MPC_ASSIGN_OR_RETURN(std::vector<Value*> grads, BuildGradients(graph, loss_->loss, params, &result_->loss_seed));
  result_->param_grads.clear();
  for (size_t i = 0; i < params.size(); ++i) {
    if (grads[i]) result_->param_grads.emplace_back(params[i], grads[i]);
  }
  return true;
}

}  // namespace mpc
