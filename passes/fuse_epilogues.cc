// Gemm + Relu epilogue fusion (see fuse_epilogues.h).
#include "passes/fuse_epilogues.h"

#include "base/status_macros.h"

namespace mpc {

absl::StatusOr<bool> FuseEpiloguesPass::Run(Graph& graph) {
  std::vector<Node*> fused_relus;
  for (const auto& node : graph.nodes()) {
    Node* gemm = node.get();
    if (gemm->op != "Gemm" || gemm->attrs.Has("mpc_activation")) continue;
    Value* y = gemm->outputs[0];
    if (y->consumers.size() != 1 || graph.IsOutput(y)) continue;
    Node* relu = y->consumers[0];
    if (relu->op != "Relu") continue;
    gemm->attrs.Set("mpc_activation", std::string("Relu"));
    graph.ReplaceAllUsesWith(relu->outputs[0], y);
    fused_relus.push_back(relu);
  }
  for (Node* relu : fused_relus) {
    // The Relu now reads the fused output it would overwrite; drop it.
    graph.SetNodeInput(relu, 0, nullptr);
    MPC_RETURN_IF_ERROR(graph.RemoveNode(relu));
  }
  if (!fused_relus.empty()) graph.RemoveDeadValues();
  return !fused_relus.empty();
}

}  // namespace mpc
