// GELU pattern fusion (see fuse_gelu.h). The matcher reads products and sums as flat
// lists of factors, so the order PyTorch (or another exporter) wrote them in does not
// matter; only the values that reach the chain from outside (x) and the coefficients do.
#include "passes/fuse_gelu.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "passes/pattern_match.h"

namespace mpc {
namespace {

using pattern::Intermediate;
using pattern::ScalarConstant;

constexpr double kCoefficientTolerance = 1e-6;  // relative; exporters write these in f32 or f64
constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kSqrt2OverPi = 0.79788456080286535588;
constexpr double kTanhCubic = 0.044715;

bool Near(double a, double b) { return std::abs(a - b) <= kCoefficientTolerance * std::max(std::abs(a), std::abs(b)); }

// A product read as coefficient * factors[0] * factors[1] * ..., with the nodes it was
// read from in consumer-before-producer order (the order to remove them in).
struct Product {
  std::vector<Value*> factors;
  double coefficient = 1;
  std::vector<Node*> nodes;

  std::vector<int> SortedFactorIds() const {
    std::vector<int> ids;
    for (const Value* f : factors) ids.push_back(f->id);
    std::sort(ids.begin(), ids.end());
    return ids;
  }
};

// Reads `v` as a product, descending into Mul, Div by a constant and Pow to a small
// integer constant where the intermediate is used only there (`v` itself may be used
// more widely when `is_root`).
void ReadProduct(const Graph& g, Value* v, bool is_root, Product& p) {
  if (std::optional<double> c = ScalarConstant(v)) {
    p.coefficient *= *c;
    return;
  }
  Node* n = v->producer;
  if (!n || !(is_root || Intermediate(g, v))) {
    p.factors.push_back(v);
    return;
  }
  if (n->op == "Mul") {
    p.nodes.push_back(n);
    ReadProduct(g, n->inputs[0], false, p);
    ReadProduct(g, n->inputs[1], false, p);
    return;
  }
  if (n->op == "Div") {
    std::optional<double> divisor = ScalarConstant(n->inputs[1]);
    if (divisor && *divisor != 0) {
      p.nodes.push_back(n);
      p.coefficient /= *divisor;
      ReadProduct(g, n->inputs[0], false, p);
      return;
    }
  }
  if (n->op == "Pow") {
    std::optional<double> e = ScalarConstant(n->inputs[1]);
    if (e && *e >= 1 && *e <= 4 && *e == std::floor(*e)) {
      p.nodes.push_back(n);
      for (int i = 0; i < static_cast<int>(*e); ++i) p.factors.push_back(n->inputs[0]);
      return;
    }
  }
  p.factors.push_back(v);
}

// `v` = Add(other, c) in either order with a scalar constant c: returns other and c.
std::optional<std::pair<Value*, double>> PlusConstant(const Value* v) {
  const Node* n = v->producer;
  if (!n || n->op != "Add") return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (std::optional<double> c = ScalarConstant(n->inputs[1 - i])) return std::make_pair(n->inputs[i], *c);
  }
  return std::nullopt;
}

struct Match {
  Value* x = nullptr;
  Node* root = nullptr;        // its output is the GELU
  std::vector<Node*> removed;  // every node of the chain, consumers first
  std::string approximate;
};

// The argument of Erf: x / sqrt(2) (or x * 0.7071...). Returns x.
std::optional<Value*> ErfArgument(const Graph& g, Value* arg, std::vector<Node*>& nodes) {
  if (!Intermediate(g, arg)) return std::nullopt;
  Product p;
  ReadProduct(g, arg, true, p);
  if (p.factors.size() != 1 || !Near(p.coefficient, kInvSqrt2)) return std::nullopt;
  nodes.insert(nodes.end(), p.nodes.begin(), p.nodes.end());
  return p.factors[0];
}

// The argument of Tanh: sqrt(2/pi) * (x + 0.044715 * x^3). Returns x.
std::optional<Value*> TanhArgument(const Graph& g, Value* arg, std::vector<Node*>& nodes) {
  if (!Intermediate(g, arg)) return std::nullopt;
  Product outer;
  ReadProduct(g, arg, true, outer);
  if (outer.factors.size() != 1 || !Near(outer.coefficient, kSqrt2OverPi)) return std::nullopt;
  Value* sum = outer.factors[0];
  if (!Intermediate(g, sum) || sum->producer->op != "Add") return std::nullopt;
  Node* add = sum->producer;
  for (int i = 0; i < 2; ++i) {
    Value* x = add->inputs[i];
    Value* cubic = add->inputs[1 - i];
    if (!Intermediate(g, cubic)) continue;
    Product p;
    ReadProduct(g, cubic, false, p);
    const bool x_cubed = p.factors.size() == 3 &&
                         std::all_of(p.factors.begin(), p.factors.end(), [x](const Value* f) { return f == x; });
    if (!x_cubed || !Near(p.coefficient, kTanhCubic)) continue;
    nodes.insert(nodes.end(), outer.nodes.begin(), outer.nodes.end());
    nodes.push_back(add);
    nodes.insert(nodes.end(), p.nodes.begin(), p.nodes.end());
    return x;
  }
  return std::nullopt;
}

// From an Erf or Tanh node: its argument, "1 + f", then the product 0.5 * x * (1 + f)
// at most a few Muls further on.
std::optional<Match> MatchAt(const Graph& g, Node* f) {
  Match m;
  m.approximate = f->op == "Erf" ? "none" : "tanh";
  std::vector<Node*> argument_nodes;
  std::optional<Value*> x =
      f->op == "Erf" ? ErfArgument(g, f->inputs[0], argument_nodes) : TanhArgument(g, f->inputs[0], argument_nodes);
  if (!x) return std::nullopt;
  m.x = *x;
  Value* fy = f->outputs[0];
  if (!Intermediate(g, fy)) return std::nullopt;
  Value* one_plus = fy->consumers[0]->outputs[0];
  std::optional<std::pair<Value*, double>> plus = PlusConstant(one_plus);
  if (!plus || plus->first != fy || !Near(plus->second, 1.0) || !Intermediate(g, one_plus)) return std::nullopt;

  std::vector<int> want = {m.x->id, one_plus->id};
  std::sort(want.begin(), want.end());
  Node* candidate = one_plus->consumers[0];
  constexpr int kMaxProductDepth = 3;  // 0.5, x and (1 + f) take at most two Muls; one spare
  for (int depth = 0; depth < kMaxProductDepth && candidate->op == "Mul"; ++depth) {
    Value* out = candidate->outputs[0];
    Product p;
    ReadProduct(g, out, true, p);
    if (p.SortedFactorIds() == want && Near(p.coefficient, 0.5) && out->shape == m.x->shape &&
        out->dtype == m.x->dtype) {
      m.root = candidate;
      m.removed = p.nodes;
      m.removed.push_back(one_plus->producer);
      m.removed.push_back(f);
      m.removed.insert(m.removed.end(), argument_nodes.begin(), argument_nodes.end());
      return m;
    }
    if (!Intermediate(g, out)) break;
    candidate = out->consumers[0];
  }
  return std::nullopt;
}

std::string GeluNodeName(const Node& f) {
  const size_t slash = f.name.rfind('/');
  return slash == std::string::npos ? "Gelu" : absl::StrCat(f.name.substr(0, slash + 1), "Gelu");
}

}  // namespace

absl::StatusOr<bool> FuseGeluPass::Run(Graph& graph) {
  std::vector<Node*> candidates;
  for (const auto& node : graph.nodes()) {
    if (node->op == "Erf" || node->op == "Tanh") candidates.push_back(node.get());
  }
  bool changed = false;
  for (Node* f : candidates) {
    std::optional<Match> m = MatchAt(graph, f);
    if (!m) continue;
    AttrMap attrs;
    attrs.Set("approximate", m->approximate);
    MPC_ASSIGN_OR_RETURN(Node * gelu, graph.AddNode("Gelu", {m->x}, std::move(attrs), GeluNodeName(*f)));
    graph.ReplaceAllUsesWith(m->root->outputs[0], gelu->outputs[0]);
    for (Node* n : m->removed) MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
    if (result_) result_->fused.push_back({gelu->name, m->approximate, static_cast<int>(m->removed.size())});
    changed = true;
  }
  if (changed) graph.RemoveDeadValues();
  return changed;
}

}  // namespace mpc
