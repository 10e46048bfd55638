// The batch-norm-stats pass (see batch_norm_stats.h).
#include "passes/batch_norm_stats.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops_norm.h"

namespace mpc {

absl::StatusOr<bool> BatchNormStatsPass::Run(Graph& g) {
  std::vector<Node*> bns;
  for (const auto& n : g.nodes()) {
    if (n->op == "BatchNormalization" && ops::BatchNormTraining(*n)) bns.push_back(n.get());
  }
  bool changed = false;
  for (Node* bn : bns) {
    Value* mean = bn->inputs[3];
    Value* var = bn->inputs[4];
    if (mean->kind != ValueKind::kState || var->kind != ValueKind::kState) {
      // Nothing persistent to update (statistics fed as inputs or baked in as constants).
      if (mean->kind == ValueKind::kParameter || var->kind == ValueKind::kParameter) {
        return absl::InvalidArgumentError(absl::StrCat(
            "BatchNormalization node '", bn->name, "': running statistics '", mean->name, "' / '", var->name,
            "' are trainable parameters; they must be persistent state (the ONNX importer makes initializers "
            "used only as BatchNormalization input_mean/input_var state)"));
      }
      continue;
    }
    MPC_ASSIGN_OR_RETURN(Node * update, g.AddNode("BatchNormStatsUpdate", {mean, var, bn->outputs[1], bn->outputs[2]},
                                                  {}, g.UniqueName("update/" + bn->name + "/running_stats")));
    for (Value* v : {mean, var}) {
      for (Node* reader : v->consumers) {
        if (reader != update &&
            std::find(update->control_deps.begin(), update->control_deps.end(), reader) == update->control_deps.end()) {
          update->control_deps.push_back(reader);
        }
      }
    }
    changed = true;
  }
  return changed;
}

}  // namespace mpc
