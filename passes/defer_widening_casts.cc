// Widening casts scheduled next to their first reader (see defer_widening_casts.h).
#include "passes/defer_widening_casts.h"

#include <algorithm>
#include <climits>

namespace mpc {

absl::StatusOr<bool> DeferWideningCastsPass::Run(Graph& graph) {
  bool changed = false;
  for (const auto& node : graph.nodes()) {
    Node* cast = node.get();
    if (cast->op != "Cast" || cast->inputs.empty() || !cast->inputs[0] || cast->outputs.empty()) continue;
    const Value* in = cast->inputs[0];
    const Value* out = cast->outputs[0];
    if (DTypeSize(out->dtype) <= DTypeSize(in->dtype) || out->consumers.empty() || graph.IsOutput(out)) continue;
    // In-place state updates order themselves with control dependencies; leave those alone.
    if (!cast->control_deps.empty()) continue;
    int first_reader = INT_MAX;
    for (const Node* reader : out->consumers) first_reader = std::min(first_reader, reader->schedule_rank);
    if (first_reader > cast->schedule_rank) {
      cast->schedule_rank = first_reader;
      changed = true;
    }
  }
  return changed;
}

}  // namespace mpc
