// The forward pass's nodes (see forward_nodes.h).
#include "passes/forward_nodes.h"

#include <vector>

namespace mpc {

absl::flat_hash_set<const Node*> ForwardNodesOf(const Value* loss) {
  absl::flat_hash_set<const Node*> forward;
  if (!loss || !loss->producer) return forward;
  std::vector<const Node*> stack{loss->producer};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!forward.insert(n).second) continue;
    for (const Value* in : n->inputs) {
      if (in && in->producer) stack.push_back(in->producer);
    }
  }
  return forward;
}

}  // namespace mpc
