// RMSNorm pattern fusion (see fuse_rms_norm.h). The match starts at each ReduceMean and
// walks the chain forward through single-consumer intermediates; operands of Mul, Add and
// Div may come in either order where the op commutes.
#include "passes/fuse_rms_norm.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops_norm.h"
#include "passes/pattern_match.h"

namespace mpc {
namespace {

using pattern::Intermediate;
using pattern::NumericScalar;

// The single consumer of an intermediate `v` if it is `op`, else nullptr.
Node* OnlyConsumer(const Graph& g, const Value* v, const char* op) {
  if (!Intermediate(g, v)) return nullptr;
  Node* c = v->consumers[0];
  return c->op == op ? c : nullptr;
}

// The operand of binary `n` that is not `v` (nullptr unless `v` is one of them).
Value* OtherOperand(const Node& n, const Value* v) {
  if (n.inputs.size() != 2) return nullptr;
  if (n.inputs[0] == v) return n.inputs[1];
  if (n.inputs[1] == v) return n.inputs[0];
  return nullptr;
}

struct Chain {
  Value* x = nullptr;
  Value* scale = nullptr;   // the weight, when its Mul is part of the chain
  Value* result = nullptr;  // the value the fused node's Y replaces
  int axis = -1;
  double epsilon = 0;
  std::vector<Node*> nodes;  // every node of the chain, to remove
};

// x from Pow(x, 2) or Mul(x, x).
Value* SquaredOperand(const Node& sq) {
  if (sq.op == "Pow" && sq.inputs.size() == 2 && NumericScalar(sq.inputs[1]) == 2.0) return sq.inputs[0];
  if (sq.op == "Mul" && sq.inputs.size() == 2 && sq.inputs[0] == sq.inputs[1]) return sq.inputs[0];
  return nullptr;
}

// The first normalised axis when `mean` reduces X's trailing axes with keepdims, else -1.
int TrailingAxis(const Node& mean, int rank) {
  if (mean.attrs.GetInt("keepdims", 1) == 0) return -1;
  auto axes = ops::ReduceAxes(mean);
  if (!axes.ok() || axes->empty() || axes->back() != rank - 1) return -1;
  for (size_t i = 1; i < axes->size(); ++i) {
    if ((*axes)[i] != (*axes)[i - 1] + 1) return -1;
  }
  return axes->front();
}

// Whether `w` can be RmsNorm's Scale: x's dtype, broadcasting to X.shape[axis:].
bool ScaleOperand(const Value* w, const Value* x, int axis) {
  if (!w || w == x || w->dtype != x->dtype) return false;
  const Shape norm(x->shape.begin() + axis, x->shape.end());
  auto b = BroadcastShapes(w->shape, norm);
  return w->shape.size() <= norm.size() && b.ok() && *b == norm;
}

std::optional<Chain> MatchChain(const Graph& g, Node* mean) {
  Chain c;
  Value* squared = mean->inputs[0];
  if (!Intermediate(g, squared)) return std::nullopt;
  Node* sq = squared->producer;
  c.x = SquaredOperand(*sq);
  if (!c.x || !IsFloating(c.x->dtype)) return std::nullopt;
  c.axis = TrailingAxis(*mean, static_cast<int>(c.x->shape.size()));
  if (c.axis < 0) return std::nullopt;
  c.nodes = {sq, mean};

  Node* add = OnlyConsumer(g, mean->outputs[0], "Add");
  if (!add) return std::nullopt;
  std::optional<double> eps = NumericScalar(OtherOperand(*add, mean->outputs[0]));
  if (!eps || *eps < 0) return std::nullopt;
  c.epsilon = *eps;
  Node* sqrt = OnlyConsumer(g, add->outputs[0], "Sqrt");
  if (!sqrt) return std::nullopt;
  c.nodes.push_back(add);
  c.nodes.push_back(sqrt);

  // x * (1 / sqrt), as Reciprocal or Div(1, .) and a Mul; or x / sqrt.
  Value* root = sqrt->outputs[0];
  if (!Intermediate(g, root)) return std::nullopt;
  Node* next = root->consumers[0];
  Value* normalized = nullptr;
  if (next->op == "Div" && next->inputs[1] == root && next->inputs[0] == c.x) {
    normalized = next->outputs[0];
    c.nodes.push_back(next);
  } else {
    const bool reciprocal = next->op == "Reciprocal" ||
                            (next->op == "Div" && next->inputs[1] == root && NumericScalar(next->inputs[0]) == 1.0);
    if (!reciprocal) return std::nullopt;
    Node* mul = OnlyConsumer(g, next->outputs[0], "Mul");
    if (!mul || OtherOperand(*mul, next->outputs[0]) != c.x) return std::nullopt;
    normalized = mul->outputs[0];
    c.nodes.push_back(next);
    c.nodes.push_back(mul);
  }
  if (normalized->shape != c.x->shape || normalized->dtype != c.x->dtype) return std::nullopt;
  c.result = normalized;

  // The weight.
  if (Node* weight_mul = OnlyConsumer(g, normalized, "Mul")) {
    Value* w = OtherOperand(*weight_mul, normalized);
    if (ScaleOperand(w, c.x, c.axis) && weight_mul->outputs[0]->shape == c.x->shape) {
      c.scale = w;
      c.result = weight_mul->outputs[0];
      c.nodes.push_back(weight_mul);
    }
  }
  return c;
}

std::string RmsNormNodeName(const Node& mean) {
  const size_t slash = mean.name.rfind('/');
  return slash == std::string::npos ? absl::StrCat(mean.name, "_rms_norm")
                                    : absl::StrCat(mean.name.substr(0, slash + 1), "RmsNorm");
}

}  // namespace

absl::StatusOr<bool> FuseRmsNormPass::Run(Graph& graph) {
  std::vector<Node*> means;
  for (const auto& node : graph.nodes()) {
    if (node->op == "ReduceMean") means.push_back(node.get());
  }
  bool changed = false;
  for (Node* mean : means) {
    std::optional<Chain> c = MatchChain(graph, mean);
    if (!c) continue;
    const DType dtype = c->x->dtype;
    if (!caps_.HasKernel("RmsNorm", dtype) || !caps_.HasKernel("RmsNormGrad", dtype)) continue;
    AttrMap attrs;
    attrs.Set("axis", static_cast<int64_t>(c->axis));
    attrs.Set("epsilon", static_cast<float>(c->epsilon));
    std::vector<Value*> inputs{c->x};
    if (c->scale) inputs.push_back(c->scale);
    MPC_ASSIGN_OR_RETURN(Node * rms, graph.AddNode("RmsNorm", inputs, std::move(attrs), RmsNormNodeName(*mean)));
    rms->schedule_rank = c->nodes.front()->schedule_rank;  // where the chain's first op ran
    graph.ReplaceAllUsesWith(c->result, rms->outputs[0]);
    for (auto it = c->nodes.rbegin(); it != c->nodes.rend(); ++it) MPC_RETURN_IF_ERROR(graph.RemoveNode(*it));
    if (result_) result_->fused.push_back({rms->name, static_cast<int>(c->nodes.size()), c->scale != nullptr});
    changed = true;
  }
  if (changed) graph.RemoveDeadValues();
  return changed;
}

}  // namespace mpc
