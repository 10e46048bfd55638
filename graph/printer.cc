// Text and Graphviz views of a Graph (see printer.h). Both walk nodes in the graph's
// deterministic topological order so that dumps of two pipeline stages diff cleanly.
// Neither ever fails: a graph with a cycle (mid-surgery, or broken by a bug) is still
// printed, in creation order, with a note saying so.
#include "graph/printer.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mpc {
namespace {

std::string TypeString(const Value& v) { return absl::StrCat(DTypeName(v.dtype), ShapeToString(v.shape)); }

// Nodes in topological order, or creation order plus a note when there is a cycle.
std::vector<const Node*> PrintOrder(const Graph& graph, std::string* note) {
  std::vector<const Node*> order;
  auto topo = graph.TopologicalOrder();
  if (topo.ok()) {
    order.assign(topo->begin(), topo->end());
  } else {
    *note = std::string(topo.status().message());
    for (const auto& n : graph.nodes()) order.push_back(n.get());
  }
  return order;
}

// Small constants (shapes, axes, scalars) are printed inline: they decide what the
// consuming op does, so a reader needs them.
std::string ConstantPreview(const Value& v) {
  constexpr int64_t kMaxShown = 8;
  if (v.data.empty() || v.data.num_elements() > kMaxShown) return "";
  std::vector<std::string> items;
  for (int64_t i = 0; i < v.data.num_elements(); ++i) items.push_back(absl::StrCat(v.data.GetAsDouble(i)));
  return absl::StrCat(" = [", absl::StrJoin(items, ","), "]");
}

std::string DotEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

}  // namespace

std::string GraphToText(const Graph& graph) {
  std::string out;
  std::string cycle;
  const std::vector<const Node*> order = PrintOrder(graph, &cycle);
  if (!cycle.empty()) absl::StrAppend(&out, "# not a DAG (", cycle, "); nodes in creation order\n");

  for (const Value* v : graph.inputs()) absl::StrAppend(&out, "input %", v->name, ": ", TypeString(*v), "\n");
  const std::pair<ValueKind, const char*> kHeaderKinds[] = {
      {ValueKind::kParameter, "parameter"}, {ValueKind::kState, "state"}, {ValueKind::kConstant, "constant"}};
  for (const auto& [kind, label] : kHeaderKinds) {
    for (const Value* v : graph.ValuesOfKind(kind)) {
      absl::StrAppend(&out, label, " %", v->name, ": ", TypeString(*v),
                      kind == ValueKind::kConstant ? ConstantPreview(*v) : "", "\n");
    }
  }

  for (const Node* node : order) {
    std::vector<std::string> outs, ins, notes;
    for (const Value* o : node->outputs) outs.push_back(absl::StrCat("%", o->name, " ", TypeString(*o)));
    for (const Value* i : node->inputs) ins.push_back(i ? absl::StrCat("%", i->name) : "none");
    std::string line = absl::StrCat(absl::StrJoin(outs, ", "), outs.empty() ? "" : " ", "= ", node->op, "(",
                                    absl::StrJoin(ins, ", "), ")");
    const std::string attrs = node->attrs.ToString();
    if (!attrs.empty()) absl::StrAppend(&line, " {", attrs, "}");
    // The node name is usually visible as the "<name>:0" output; otherwise show it.
    if (node->outputs.empty() || node->outputs[0]->name != absl::StrCat(node->name, ":0")) {
      notes.push_back(absl::StrCat("node '", node->name, "'"));
    }
    if (!node->control_deps.empty()) {
      std::vector<std::string> deps;
      for (const Node* d : node->control_deps) deps.push_back(d->name);
      notes.push_back(absl::StrCat("after ", absl::StrJoin(deps, ", ")));
    }
    if (!notes.empty()) absl::StrAppend(&line, "  # ", absl::StrJoin(notes, "; "));
    absl::StrAppend(&out, line, "\n");
  }

  for (const Value* v : graph.outputs()) absl::StrAppend(&out, "output %", v->name, ": ", TypeString(*v), "\n");
  return out;
}

std::string GraphToDot(const Graph& graph) {
  std::string out = "digraph mpc {\n  rankdir=TB;\n";
  absl::StrAppend(&out, "  node [fontname=\"Helvetica\", fontsize=10];\n",
                  "  edge [fontname=\"Helvetica\", fontsize=9];\n");
  std::string cycle;
  const std::vector<const Node*> order = PrintOrder(graph, &cycle);
  if (!cycle.empty()) absl::StrAppend(&out, "  label=\"", DotEscape("not a DAG: " + cycle), "\";\n");

  // Values without a producer are drawn as their own shapes (never boxes: boxes are ops).
  for (const auto& v : graph.values()) {
    const char* shape = nullptr;
    switch (v->kind) {
      case ValueKind::kInput:
        shape = "ellipse";
        break;
      case ValueKind::kParameter:
      case ValueKind::kState:
        shape = "cylinder";
        break;
      case ValueKind::kConstant:
        shape = "diamond";
        break;
      case ValueKind::kActivation:
        break;
    }
    if (shape == nullptr) continue;
    absl::StrAppend(&out, "  v", v->id, " [shape=", shape, ", label=\"", DotEscape(v->name), "\\n",
                    ValueKindName(v->kind), "\"];\n");
  }
  for (const Node* node : order) {
    absl::StrAppend(&out, "  n", node->id, " [shape=box, label=\"", DotEscape(node->op), "\\n", DotEscape(node->name),
                    "\"];\n");
  }
  auto source = [](const Value* v) {
    return v->producer ? absl::StrCat("n", v->producer->id) : absl::StrCat("v", v->id);
  };
  for (const Node* node : order) {
    for (const Value* in : node->inputs) {
      if (in == nullptr) continue;
      absl::StrAppend(&out, "  ", source(in), " -> n", node->id, " [label=\"", DotEscape(TypeString(*in)), "\"];\n");
    }
    for (const Node* dep : node->control_deps) {
      absl::StrAppend(&out, "  n", dep->id, " -> n", node->id, " [style=dashed];\n");
    }
  }
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Value* v = graph.outputs()[i];
    absl::StrAppend(&out, "  out", i, " [shape=ellipse, style=bold, label=\"", DotEscape(v->name), "\\noutput\"];\n");
    absl::StrAppend(&out, "  ", source(v), " -> out", i, " [label=\"", DotEscape(TypeString(*v)), "\"];\n");
  }
  out += "}\n";
  return out;
}

}  // namespace mpc
