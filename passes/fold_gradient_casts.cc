// Widening Casts of gradients folded into the optimizer update (see fold_gradient_casts.h).
#include "passes/fold_gradient_casts.h"

#include <algorithm>
#include <set>
#include <vector>

#include "base/status_macros.h"
#include "graph/multi_tensor_update.h"

namespace mpc {
namespace {

// Whether `reader` reads `v` only where a 16-bit gradient may stand in for an f32 one: a
// multi-tensor update's gradient slots, or any input of FindNonFinite.
bool ReadsOnlyAsGradient(const Node& reader, const Value* v) {
  if (reader.op == "FindNonFinite") return true;
  if (!IsMultiTensorUpdate(reader)) return false;
  auto layout = MultiUpdateLayoutOf(reader);
  if (!layout.ok()) return false;
  std::vector<bool> grad_slot(reader.inputs.size(), false);
  for (const UpdateTensorInputs& in : layout->tensors) grad_slot[static_cast<size_t>(in.grad)] = true;
  for (size_t i = 0; i < reader.inputs.size(); ++i) {
    if (reader.inputs[i] == v && !grad_slot[i]) return false;
  }
  return true;
}

bool Foldable(const Graph& g, const Node& cast) {
  if (cast.op != "Cast" || cast.inputs.size() != 1 || cast.outputs.size() != 1) return false;
  const Value* narrow = cast.inputs[0];
  const Value* wide = cast.outputs[0];
  if (!narrow || wide->dtype != DType::kF32) return false;
  if (narrow->dtype != DType::kBF16 && narrow->dtype != DType::kF16) return false;
  if (g.IsOutput(wide) || wide->consumers.empty()) return false;
  for (const Node* reader : wide->consumers) {
    if (!ReadsOnlyAsGradient(*reader, wide)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldGradientCastsPass::Run(Graph& graph) {
  if (!enabled_) return false;
  std::set<Node*> foldable;
  for (const auto& node : graph.nodes()) {
    if (Foldable(graph, *node)) foldable.insert(node.get());
  }
  // Kernels are looked up by their first input's dtype, and FindNonFinite's is f32 on every
  // backend: its gradients are an unordered set, so one that stays f32 goes first; a check
  // with none keeps its Casts.
  auto stays_f32 = [&](const Value* v) { return v->dtype == DType::kF32 && foldable.count(v->producer) == 0; };
  for (const auto& node : graph.nodes()) {
    if (node->op != "FindNonFinite") continue;
    const auto first_f32 = std::find_if(node->inputs.begin(), node->inputs.end(), stays_f32);
    if (first_f32 == node->inputs.end()) {
      for (const Value* v : node->inputs) foldable.erase(v->producer);
      continue;
    }
    const int at = static_cast<int>(first_f32 - node->inputs.begin());
    if (at == 0) continue;
    Value* f32 = *first_f32;
    Value* first = node->inputs[0];
    graph.SetNodeInput(node.get(), at, first);
    graph.SetNodeInput(node.get(), 0, f32);
  }
  std::vector<Node*> folded;  // in graph order, for a deterministic rewrite
  for (const auto& node : graph.nodes()) {
    if (foldable.count(node.get()) != 0) folded.push_back(node.get());
  }
  for (Node* cast : folded) {
    graph.ReplaceAllUsesWith(cast->outputs[0], cast->inputs[0]);
    MPC_RETURN_IF_ERROR(graph.RemoveNode(cast));
  }
  if (!folded.empty()) graph.RemoveDeadValues();
  return !folded.empty();
}

}  // namespace mpc
