// VerifyGraph: structural and type invariants of the IR.
#include "graph/verifier.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/op_registry.h"

namespace mpc {

absl::Status VerifyGraph(const Graph& graph) {
  absl::flat_hash_set<const Value*> values;
  for (const auto& v : graph.values()) values.insert(v.get());
  absl::flat_hash_set<const Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.insert(n.get());

  for (const auto& n : graph.nodes()) {
    const OpDef* def = OpRegistry::Global().Find(n->op);
    if (!def) return absl::InternalError(absl::StrCat("node '", n->name, "': op '", n->op, "' is not registered"));
    const int n_in = static_cast<int>(n->inputs.size());
    if (n_in < def->min_inputs || n_in > def->max_inputs) {
      return absl::InternalError(absl::StrCat("node '", n->name, "' (", n->op, ") has ", n_in, " inputs"));
    }
    for (const Value* in : n->inputs) {
      if (!in) continue;
      if (!values.contains(in)) {
        return absl::InternalError(absl::StrCat("node '", n->name, "' reads a value that is not in the graph"));
      }
      if (std::count(in->consumers.begin(), in->consumers.end(), n.get()) !=
          std::count(n->inputs.begin(), n->inputs.end(), in)) {
        return absl::InternalError(
            absl::StrCat("value '", in->name, "': consumer list out of sync with node '", n->name, "'"));
      }
      if (in->kind == ValueKind::kActivation && (!in->producer || !nodes.contains(in->producer))) {
        return absl::InternalError(
            absl::StrCat("node '", n->name, "' reads '", in->name, "', which no node in the graph produces"));
      }
    }
    for (const Value* out : n->outputs) {
      if (out->producer != n.get()) {
        return absl::InternalError(
            absl::StrCat("value '", out->name, "' does not point back to its producer '", n->name, "'"));
      }
    }
    for (const Node* dep : n->control_deps) {
      if (!nodes.contains(dep)) {
        return absl::InternalError(absl::StrCat("node '", n->name, "' has a control dependency on a removed node"));
      }
    }
    auto types = def->infer(*n);
    if (!types.ok()) {
      return absl::Status(types.status().code(),
                          absl::StrCat("node '", n->name, "' (", n->op, "): ", types.status().message()));
    }
    for (size_t i = 0; i < n->outputs.size() && i < types->size(); ++i) {
      const Value* out = n->outputs[i];
      if (out->dtype != (*types)[i].dtype || out->shape != (*types)[i].shape) {
        return absl::InternalError(absl::StrCat("node '", n->name, "' (", n->op, ") output '", out->name,
                                                "' is recorded as ", DTypeName(out->dtype), ShapeToString(out->shape),
                                                " but inference gives ", DTypeName((*types)[i].dtype),
                                                ShapeToString((*types)[i].shape)));
      }
    }
  }
  for (const Value* out : graph.outputs()) {
    if (!values.contains(out)) return absl::InternalError("a graph output is not in the graph");
  }
  MPC_RETURN_IF_ERROR(graph.TopologicalOrder().status());
  return absl::OkStatus();
}

}  // namespace mpc
