// CSE, identity folding and DCE (see simplify.h).
#include "passes/simplify.h"

#include <cstring>
#include <map>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

bool Pure(const Node& n) {
  const OpDef* def = OpRegistry::Global().Find(n.op);
  return def && !def->has_side_effects && !def->stochastic;
}

bool SameConstant(const Value* a, const Value* b) {
  return a->dtype == b->dtype && a->shape == b->shape &&
         std::memcmp(a->data.raw(), b->data.raw(), a->data.bytes()) == 0;
}

}  // namespace

absl::StatusOr<bool> EliminateCommonSubexpressions(Graph& graph) {
  bool changed = false;
  // Constants: merge byte-identical ones so nodes using them become comparable.
  std::vector<Value*> constants = graph.ValuesOfKind(ValueKind::kConstant);
  std::vector<Value*> kept;
  for (Value* c : constants) {
    Value* twin = nullptr;
    for (Value* k : kept) {
      if (SameConstant(c, k)) {
        twin = k;
        break;
      }
    }
    if (twin && !graph.IsOutput(c)) {
      if (!c->consumers.empty()) changed = true;
      graph.ReplaceAllUsesWith(c, twin);
    } else {
      kept.push_back(c);
    }
  }
  // Nodes, in topological order so merged inputs expose merged consumers.
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  std::map<std::tuple<std::string, std::vector<const Value*>>, std::vector<Node*>> seen;
  std::vector<Node*> dead;
  for (Node* n : order) {
    if (!Pure(*n) || !n->control_deps.empty()) continue;
    auto key = std::make_tuple(n->op, std::vector<const Value*>(n->inputs.begin(), n->inputs.end()));
    Node* twin = nullptr;
    for (Node* candidate : seen[key]) {
      if (candidate->attrs == n->attrs && candidate->outputs.size() == n->outputs.size()) {
        twin = candidate;
        break;
      }
    }
    if (!twin) {
      seen[key].push_back(n);
      continue;
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) graph.ReplaceAllUsesWith(n->outputs[i], twin->outputs[i]);
    dead.push_back(n);
  }
  for (Node* n : dead) MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
  if (changed || !dead.empty()) graph.RemoveDeadValues();
  return changed || !dead.empty();
}

absl::StatusOr<bool> FoldIdentities(Graph& graph) {
  std::vector<Node*> dead;
  for (const auto& node : graph.nodes()) {
    Node* n = node.get();
    const bool identity = n->op == "Identity" ||
                          ((n->op == "Cast" || n->op == "Reshape" || n->op == "Flatten") &&
                           n->inputs[0]->dtype == n->outputs[0]->dtype && n->inputs[0]->shape == n->outputs[0]->shape);
    if (!identity || graph.IsOutput(n->outputs[0])) continue;
    graph.ReplaceAllUsesWith(n->outputs[0], n->inputs[0]);
    dead.push_back(n);
  }
  for (Node* n : dead) MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
  if (!dead.empty()) graph.RemoveDeadValues();
  return !dead.empty();
}

absl::StatusOr<bool> EliminateDeadCode(Graph& graph) {
  // Live = reaches a graph output or a side-effecting node through data edges.
  absl::flat_hash_set<const Node*> live;
  std::vector<const Node*> work;
  auto mark = [&](const Node* n) {
    if (n && live.insert(n).second) work.push_back(n);
  };
  for (const Value* out : graph.outputs()) mark(out->producer);
  for (const auto& n : graph.nodes()) {
    const OpDef* def = OpRegistry::Global().Find(n->op);
    if (def && def->has_side_effects) mark(n.get());
  }
  while (!work.empty()) {
    const Node* n = work.back();
    work.pop_back();
    for (const Value* in : n->inputs) {
      if (in) mark(in->producer);
    }
    // Control dependencies only order nodes; they do not keep a node alive (a dead
    // reader of a parameter is dropped, and RemoveNode unlinks it from the update).
  }
  std::vector<Node*> dead;
  for (const auto& n : graph.nodes()) {
    if (!live.contains(n.get())) dead.push_back(n.get());
  }
  // Remove consumers before producers: walk in reverse topological order.
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  absl::flat_hash_set<Node*> dead_set(dead.begin(), dead.end());
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (dead_set.contains(*it)) MPC_RETURN_IF_ERROR(graph.RemoveNode(*it));
  }
  if (!dead.empty()) graph.RemoveDeadValues();
  return !dead.empty();
}

absl::StatusOr<bool> SimplifyPass::Run(Graph& graph) {
  bool changed = false;
  for (int round = 0; round < 8; ++round) {
    MPC_ASSIGN_OR_RETURN(bool cse, EliminateCommonSubexpressions(graph));
    MPC_ASSIGN_OR_RETURN(bool fold, FoldIdentities(graph));
    MPC_ASSIGN_OR_RETURN(bool dce, EliminateDeadCode(graph));
    if (!cse && !fold && !dce) break;
    changed = true;
  }
  return changed;
}

}  // namespace mpc
