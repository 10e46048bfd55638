// The set-mode pass (see set_mode.h).
#include "passes/set_mode.h"

namespace mpc {

absl::StatusOr<bool> SetModePass::Run(Graph& graph) {
  bool changed = false;
  for (const auto& n : graph.nodes()) {
    if (n->op != "Dropout" && n->op != "BatchNormalization") continue;
    n->attrs.Set("mpc_training", static_cast<int64_t>(training_));
    changed = true;
  }
  return changed;
}

}  // namespace mpc
