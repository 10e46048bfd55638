// Grouping of optimizer updates into multi-tensor updates (see fuse_updates.h).
#include "passes/fuse_updates.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/multi_tensor_update.h"

namespace mpc {
namespace {

// One single-parameter update and where its inputs are.
struct Member {
  Node* node = nullptr;
  UpdateTensorInputs in;
};

// The inputs of SgdUpdate / AdamWUpdate, or false when the node does not have the shape a
// multi-tensor update can take over (an SGD node with momentum but no buffer, say, which
// only a hand-written graph has: MultiSgdUpdate carries a buffer exactly when momentum != 0).
bool DescribeUpdate(const Node& n, UpdateTensorInputs& in) {
  absl::StatusOr<UpdateTensorInputs> inputs = SingleUpdateInputsOf(n);
  if (!inputs.ok()) return false;
  const bool momentum = n.op == "SgdUpdate" && n.attrs.GetFloat("momentum", 0.0f) != 0.0f;
  if (n.op == "SgdUpdate" && (inputs->momentum_buf >= 0) != momentum) return false;
  in = *inputs;
  return true;
}

// Updates that can share one node: same op, same attributes apart from lowp_copy, same
// learning rate and gate flag.
std::string GroupKey(const Node& n) {
  AttrMap attrs = n.attrs;
  attrs.Erase("lowp_copy");
  const bool gated = n.attrs.GetInt("gated", 0) != 0;
  return absl::StrCat(n.op, "|", attrs.ToString(), "|", n.inputs[2]->name, "|",
                      gated ? n.inputs.back()->name : std::string());
}

void AddOnce(std::vector<Node*>& list, Node* node) {
  if (std::find(list.begin(), list.end(), node) == list.end()) list.push_back(node);
}

absl::Status FuseGroup(Graph& graph, const std::vector<Member>& members) {
  const Node& first = *members.front().node;
  const bool adamw = first.op == "AdamWUpdate";
  const bool gated = first.attrs.GetInt("gated", 0) != 0;
  std::vector<Value*> inputs{first.inputs[2]};
  if (gated) inputs.push_back(first.inputs.back());
  std::vector<int64_t> copies;
  for (const Member& m : members) {
    for (int i : {m.in.param, m.in.grad, m.in.momentum_buf, m.in.m, m.in.v, m.in.step, m.in.lowp_copy}) {
      if (i >= 0) inputs.push_back(m.node->inputs[i]);
    }
    copies.push_back(m.in.lowp_copy >= 0 ? 1 : 0);
  }
  AttrMap attrs = first.attrs;
  attrs.Erase("lowp_copy");
  attrs.Set("lowp_copies", copies);
  const std::string op = adamw ? "MultiAdamWUpdate" : "MultiSgdUpdate";
  MPC_ASSIGN_OR_RETURN(Node * fused, graph.AddNode(op, std::move(inputs), std::move(attrs),
                                                   graph.UniqueName(adamw ? "update/adamw" : "update/sgd")));
  // Everything the single updates waited for, the fused one waits for; whatever waited
  // for one of them waits for the fused one.
  std::vector<Node*> member_nodes;
  for (const Member& m : members) member_nodes.push_back(m.node);
  auto is_member = [&](const Node* n) {
    return std::find(member_nodes.begin(), member_nodes.end(), n) != member_nodes.end();
  };
  for (Node* m : member_nodes) {
    for (Node* dep : m->control_deps) {
      if (!is_member(dep)) AddOnce(fused->control_deps, dep);
    }
  }
  for (const auto& n : graph.nodes()) {
    if (n.get() == fused || is_member(n.get())) continue;
    auto& deps = n->control_deps;
    if (std::any_of(deps.begin(), deps.end(), is_member)) {
      deps.erase(std::remove_if(deps.begin(), deps.end(), is_member), deps.end());
      AddOnce(deps, fused);
    }
  }
  for (Node* m : member_nodes) MPC_RETURN_IF_ERROR(graph.RemoveNode(m));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> FuseUpdatesPass::Run(Graph& graph) {
  std::vector<std::string> keys;  // first-appearance order: parameters stay in graph order
  std::map<std::string, std::vector<Member>> groups;
  for (const auto& n : graph.nodes()) {
    if (n->op != "SgdUpdate" && n->op != "AdamWUpdate") continue;
    Member m{n.get(), {}};
    if (!DescribeUpdate(*n, m.in)) continue;
    const std::string key = GroupKey(*n);
    if (!groups.count(key)) keys.push_back(key);
    groups[key].push_back(m);
  }
  bool changed = false;
  for (const std::string& key : keys) {
    const std::vector<Member>& members = groups[key];
    if (members.size() < 2) continue;  // one parameter: the single update is the same launch
    MPC_RETURN_IF_ERROR(FuseGroup(graph, members));
    changed = true;
  }
  return changed;
}

}  // namespace mpc
