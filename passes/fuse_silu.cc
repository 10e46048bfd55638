// SiLU pattern fusion (see fuse_silu.h).
#include "passes/fuse_silu.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "passes/pattern_match.h"

namespace mpc {
namespace {

// The Mul that makes x * Sigmoid(x) of this Sigmoid, or nullptr.
Node* SiluProduct(const Graph& g, const Node& sigmoid) {
  Value* gate = sigmoid.outputs[0];
  if (!pattern::Intermediate(g, gate)) return nullptr;
  Node* mul = gate->consumers[0];
  if (mul->op != "Mul" || mul->inputs.size() != 2) return nullptr;
  const Value* other = mul->inputs[0] == gate ? mul->inputs[1] : mul->inputs[0];
  if (other != sigmoid.inputs[0] || mul->outputs[0]->shape != other->shape) return nullptr;
  return mul;
}

std::string SiluNodeName(const Node& sigmoid) {
  const size_t slash = sigmoid.name.rfind('/');
  return slash == std::string::npos ? absl::StrCat(sigmoid.name, "_silu")
                                    : absl::StrCat(sigmoid.name.substr(0, slash + 1), "Silu");
}

}  // namespace

absl::StatusOr<bool> FuseSiluPass::Run(Graph& graph) {
  std::vector<Node*> sigmoids;
  for (const auto& node : graph.nodes()) {
    if (node->op == "Sigmoid") sigmoids.push_back(node.get());
  }
  bool changed = false;
  for (Node* sigmoid : sigmoids) {
    Node* mul = SiluProduct(graph, *sigmoid);
    if (!mul) continue;
    MPC_ASSIGN_OR_RETURN(Node * silu, graph.AddNode("Silu", {sigmoid->inputs[0]}, AttrMap(), SiluNodeName(*sigmoid)));
    graph.ReplaceAllUsesWith(mul->outputs[0], silu->outputs[0]);
    MPC_RETURN_IF_ERROR(graph.RemoveNode(mul));
    MPC_RETURN_IF_ERROR(graph.RemoveNode(sigmoid));
    if (result_) result_->fused.push_back(silu->name);
    changed = true;
  }
  if (changed) graph.RemoveDeadValues();
  return changed;
}

}  // namespace mpc
