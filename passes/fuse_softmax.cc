// Attention softmax fusion (see fuse_softmax.h): from each Softmax, walk back through an
// optional Where with a -inf fill and an optional Mul or Div by a scalar constant.
#include "passes/fuse_softmax.h"

#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "passes/pattern_match.h"

namespace mpc {
namespace {

using pattern::Intermediate;
using pattern::IsMinusInfinity;

struct Match {
  Value* scores = nullptr;     // what the softmax's row values are computed from
  Value* keep = nullptr;       // true where the scores are kept (null: no mask)
  bool keep_inverted = false;  // `keep` holds the masked-out positions (Where's fill branch)
  double scale = 1;
  std::vector<Node*> removed;  // consumers first
};

// Walks back from the Softmax's input. Nothing to fuse (no mask, no scale) gives nullopt.
std::optional<Match> MatchFrom(const Graph& g, Node* softmax) {
  const Value* out = softmax->outputs[0];
  const int rank = static_cast<int>(out->shape.size());
  const int64_t axis = softmax->attrs.GetInt("axis", -1);
  if (rank == 0 || (axis != -1 && axis != rank - 1)) return std::nullopt;
  Match m;
  m.removed.push_back(softmax);
  Value* v = softmax->inputs[0];
  if (Intermediate(g, v) && v->producer->op == "Where") {
    Node* where = v->producer;
    Value* cond = where->inputs[0];
    for (int fill = 1; fill <= 2; ++fill) {
      Value* branch = where->inputs[3 - fill];
      if (!IsMinusInfinity(where->inputs[fill]) || branch->shape != v->shape || branch->dtype != v->dtype ||
          cond->dtype != DType::kBool) {
        continue;
      }
      m.keep = cond;
      m.keep_inverted = fill == 1;  // Where(cond, -inf, x): cond marks what is masked
      m.removed.push_back(where);
      v = branch;
      break;
    }
  }
  if (auto scaled = pattern::ScaledBy(g, v, /*allow_div=*/true)) {
    m.scale = scaled->second;
    m.removed.push_back(v->producer);
    v = scaled->first;
  }
  if (m.removed.size() == 1) return std::nullopt;
  m.scores = v;
  return m;
}

// The mask as MaskedSoftmax reads it (true = kept): Where's condition, or its negation.
absl::StatusOr<Value*> KeepMask(Graph& g, const Match& m, const std::string& name) {
  if (!m.keep_inverted) return m.keep;
  if (m.keep->producer && m.keep->producer->op == "Not") return m.keep->producer->inputs[0];
  if (m.keep->kind == ValueKind::kConstant) {
    Tensor inverted(DType::kBool, m.keep->shape);
    const uint8_t* from = m.keep->data.data<uint8_t>();
    uint8_t* to = inverted.data<uint8_t>();
    for (int64_t i = 0; i < inverted.num_elements(); ++i) to[i] = from[i] ? 0 : 1;
    return g.AddConstant(g.UniqueName(absl::StrCat(m.keep->name, "/not")), std::move(inverted));
  }
  MPC_ASSIGN_OR_RETURN(Node * negation, g.AddNode("Not", {m.keep}, {}, absl::StrCat(name, "/keep")));
  return negation->outputs[0];
}

}  // namespace

absl::StatusOr<bool> FuseSoftmaxPass::Run(Graph& graph) {
  std::vector<Node*> candidates;
  for (const auto& node : graph.nodes()) {
    if (node->op == "Softmax") candidates.push_back(node.get());
  }
  bool changed = false;
  for (Node* softmax : candidates) {
    std::optional<Match> m = MatchFrom(graph, softmax);
    const DType dtype = softmax->outputs[0]->dtype;
    if (!m || !caps_.HasKernel("MaskedSoftmax", dtype) || !caps_.HasKernel("MaskedSoftmaxGrad", dtype)) continue;
    const std::string name = absl::StrCat(softmax->name, "/masked");
    std::vector<Value*> inputs = {m->scores};
    if (m->keep) {
      MPC_ASSIGN_OR_RETURN(Value * keep, KeepMask(graph, *m, name));
      inputs.push_back(keep);
    }
    AttrMap attrs;
    attrs.Set("scale", static_cast<float>(m->scale));
    MPC_ASSIGN_OR_RETURN(Node * fused, graph.AddNode("MaskedSoftmax", std::move(inputs), std::move(attrs), name));
    fused->schedule_rank = softmax->schedule_rank;
    graph.ReplaceAllUsesWith(softmax->outputs[0], fused->outputs[0]);
    for (Node* n : m->removed) MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
    int replaced = static_cast<int>(m->removed.size());
    // Where(Not(keep), -inf, x): the fused op reads keep, and the Not may have no reader left.
    Node* negation = m->keep ? m->keep->producer : nullptr;
    if (m->keep_inverted && negation && negation->op == "Not" && m->keep->consumers.empty() &&
        !graph.IsOutput(m->keep)) {
      MPC_RETURN_IF_ERROR(graph.RemoveNode(negation));
      ++replaced;
    }
    if (result_) {
      result_->fused.push_back({fused->name, m->keep != nullptr, m->scale, replaced});
    }
    changed = true;
  }
  if (changed) graph.RemoveDeadValues();
  return changed;
}

}  // namespace mpc
