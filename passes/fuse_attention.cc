// Attention fusion (see fuse_attention.h): from each Softmax, forward to the MatMul with V
// (through dynamo's NaN guard), back through the mask and the scale to the MatMul of Q and
// K^T, then K found under its transpose; the mask turned into causal = 1, a Bias, or
// nothing.
#include "passes/fuse_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "passes/pattern_match.h"

namespace mpc {
namespace {

using pattern::Intermediate;
using pattern::IsMinusInfinity;
using pattern::ScalarConstant;
using pattern::ScaledBy;

// Masked positions of an additive mask: -inf, or finfo.min-like values (exp underflows to
// 0 against any score, as -inf does).
constexpr double kMaskedAtOrBelow = -1e30;
// What cuDNN's fused attention takes for the head dims.
constexpr int64_t kHeadDimMultiple = 8;
constexpr int64_t kMaxHeadDim = 256;

bool IsScalar(const Value* v, double want) {
  std::optional<double> c = ScalarConstant(v);
  return c && *c == want;
}

bool SwapsLastTwo(const Node* transpose) {
  const std::vector<int64_t> perm = transpose->attrs.GetInts("perm", {});
  const int rank = static_cast<int>(perm.size());
  if (rank < 2) return false;
  for (int i = 0; i < rank - 2; ++i) {
    if (perm[i] != i) return false;
  }
  return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
}

// The chain around one Softmax.
struct Chain {
  Node* softmax = nullptr;
  Node* pv = nullptr;  // MatMul(P, V)
  Value* q = nullptr;
  Value* kt = nullptr;  // K^T as the QK MatMul reads it
  Value* v = nullptr;
  Value* mask = nullptr;  // an additive mask (the Add's other operand)
  Value* keep = nullptr;  // Where(keep, scores, -inf)'s condition
  bool keep_inverted = false;
  double scale = 1;
  std::vector<Node*> removed;     // consumers first
  std::vector<Node*> maybe_dead;  // removed too when nothing else reads them (K's transposes, a Not)
};

// Softmax -> [NaN guard] -> MatMul(·, V). False when the Softmax's result goes elsewhere;
// `dropout` is set when a Dropout sits between it and the MatMul.
bool MatchConsumers(const Graph& g, Chain& c, bool* dropout) {
  Value* p = c.softmax->outputs[0];
  if (g.IsOutput(p) || p->consumers.empty()) return false;
  Value* out = p;
  std::vector<Node*> guard;
  // Where(IsNaN(P), 0, P), Where(Not(Equal(P, P)), 0, P) (dynamo) or Where(Equal(P, P), P, 0)
  // (the Attention-23 expansion).
  for (Node* w : p->consumers) {
    if (w->op != "Where" || !Intermediate(g, w->inputs[0])) continue;
    Node* test = w->inputs[0]->producer;
    auto self_equal = [&](const Node* n) { return n->op == "Equal" && n->inputs[0] == p && n->inputs[1] == p; };
    if (self_equal(test) && w->inputs[1] == p && IsScalar(w->inputs[2], 0.0)) {
      guard = {w, test};
    } else if (w->inputs[2] != p || !IsScalar(w->inputs[1], 0.0)) {
      continue;
    } else if (test->op == "IsNaN" && test->inputs[0] == p) {
      guard = {w, test};
    } else if (test->op == "Not" && Intermediate(g, test->inputs[0]) && self_equal(test->inputs[0]->producer)) {
      guard = {w, test, test->inputs[0]->producer};
    } else {
      continue;
    }
    out = w->outputs[0];
    break;
  }
  for (Node* consumer : p->consumers) {
    if (guard.empty() ? p->consumers.size() != 1 : std::find(guard.begin(), guard.end(), consumer) == guard.end()) {
      return false;
    }
  }
  if (!Intermediate(g, out)) return false;
  Node* next = out->consumers[0];
  if (next->op == "Dropout" && Intermediate(g, next->outputs[0]) && next->outputs[0]->consumers[0]->op == "MatMul") {
    *dropout = true;
    return false;
  }
  if (next->op != "MatMul" || next->inputs[0] != out || next->inputs[1] == out) return false;
  c.pv = next;
  c.v = next->inputs[1];
  c.removed.push_back(next);
  c.removed.insert(c.removed.end(), guard.begin(), guard.end());
  c.removed.push_back(c.softmax);
  return true;
}

// Softmax's input back to MatMul(Q, K^T): the mask, the scale, the operands.
bool MatchProducers(const Graph& g, Chain& c) {
  Value* x = c.softmax->inputs[0];
  const int64_t axis = c.softmax->attrs.GetInt("axis", -1);
  if (x->shape.size() != 4 || (axis != -1 && axis != 3)) return false;
  if (Intermediate(g, x) && x->producer->op == "Add") {
    Node* add = x->producer;
    for (int side = 0; side < 2; ++side) {
      Value* scores = add->inputs[side];
      Value* mask = add->inputs[1 - side];
      if (scores->shape != x->shape || !Intermediate(g, scores) || mask->dtype != x->dtype) continue;
      const std::string& op = scores->producer->op;
      if (op != "MatMul" && op != "Mul" && op != "Div") continue;
      c.mask = mask;
      c.removed.push_back(add);
      x = scores;
      break;
    }
  } else if (Intermediate(g, x) && x->producer->op == "Where") {
    Node* where = x->producer;
    for (int fill = 1; fill <= 2; ++fill) {
      Value* branch = where->inputs[3 - fill];
      if (!IsMinusInfinity(where->inputs[fill]) || branch->shape != x->shape || where->inputs[0]->dtype != DType::kBool) {
        continue;
      }
      c.keep = where->inputs[0];
      c.keep_inverted = fill == 1;
      c.removed.push_back(where);
      if (c.keep_inverted && c.keep->producer && c.keep->producer->op == "Not") c.maybe_dead.push_back(c.keep->producer);
      x = branch;
      break;
    }
  }
  if (auto scaled = ScaledBy(g, x, /*allow_div=*/true)) {
    c.removed.push_back(x->producer);
    x = scaled->first;
    c.scale *= scaled->second;
  }
  if (!Intermediate(g, x) || x->producer->op != "MatMul") return false;
  Node* qk = x->producer;
  c.removed.push_back(qk);
  if (qk->inputs[0] == qk->inputs[1]) return false;  // a Gram matrix, not Q K^T
  Value* operands[2] = {qk->inputs[0], qk->inputs[1]};
  for (Value*& operand : operands) {
    if (auto scaled = ScaledBy(g, operand, /*allow_div=*/false)) {
      c.removed.push_back(operand->producer);
      c.scale *= scaled->second;
      operand = scaled->first;
    }
  }
  c.q = operands[0];
  c.kt = operands[1];
  return true;
}

Shape SwappedLastTwo(Shape s) {
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

// K under K^T: the input of a Transpose of the last two axes, or of dynamo's
// Reshape([N, Sk, D]) -> Transpose(0, 2, 1) -> Reshape([B, H, D, Sk]). Null when K^T is
// computed some other way (a Transpose node is then added).
Value* KUnderTranspose(const Graph& g, Chain& c) {
  Node* n = c.kt->producer;
  if (!n) return nullptr;
  if (n->op == "Transpose" && SwapsLastTwo(n)) {
    c.maybe_dead.push_back(n);
    return n->inputs[0];
  }
  if (n->op != "Reshape") return nullptr;
  Node* t = n->inputs[0]->producer;
  if (!t || t->op != "Transpose" || t->inputs[0]->shape.size() != 3 || !SwapsLastTwo(t)) return nullptr;
  Node* r = t->inputs[0]->producer;
  if (!r || r->op != "Reshape") return nullptr;
  Value* k = r->inputs[0];
  const Shape& flat = t->inputs[0]->shape;  // [B * H, Sk, D]
  if (k->shape != SwappedLastTwo(c.kt->shape) || flat[0] != k->shape[0] * k->shape[1] || flat[1] != k->shape[2] ||
      flat[2] != k->shape[3]) {
    return nullptr;
  }
  c.maybe_dead.insert(c.maybe_dead.end(), {n, t, r});
  return k;
}

// Why Q, K^T and V cannot be one FusedAttention's operands, or "".
std::string OperandProblem(const Chain& c) {
  const Shape& q = c.q->shape;
  const Shape& kt = c.kt->shape;
  const Shape& v = c.v->shape;
  if (q.size() != 4 || kt.size() != 4 || v.size() != 4) {
    return absl::StrCat("Q, K^T and V are ", ShapeToString(q), ", ", ShapeToString(kt), " and ", ShapeToString(v),
                        ", not [B, H, S, D]");
  }
  if (q[0] != kt[0] || q[1] != kt[1] || q[0] != v[0] || q[1] != v[1]) {
    return absl::StrCat("Q ", ShapeToString(q), ", K^T ", ShapeToString(kt), " and V ", ShapeToString(v),
                        " do not share their [B, H] (a broadcast MatMul)");
  }
  if (c.q->dtype != c.kt->dtype || c.q->dtype != c.v->dtype || !IsFloating(c.q->dtype)) {
    return "Q, K and V differ in dtype";
  }
  for (int64_t d : {q[3], v[3]}) {
    if (d % kHeadDimMultiple != 0 || d > kMaxHeadDim) {
      return absl::StrCat("head dim ", d, " is not a multiple of ", kHeadDimMultiple, " up to ", kMaxHeadDim);
    }
  }
  return "";
}

// The first parameter `v` is computed from, or null.
const Value* ParameterUpstream(const Value* v) {
  std::vector<const Value*> stack{v};
  std::unordered_set<const Value*> seen;
  while (!stack.empty()) {
    const Value* x = stack.back();
    stack.pop_back();
    if (!x || !seen.insert(x).second) continue;
    if (x->kind == ValueKind::kParameter) return x;
    if (x->producer) stack.insert(stack.end(), x->producer->inputs.begin(), x->producer->inputs.end());
  }
  return nullptr;
}

// Calls f(i, j, element) for every element of a constant whose last two dims are [Sq, Sk].
template <typename F>
bool EveryElement(const Value* v, F f) {
  const int64_t sq = v->shape[v->shape.size() - 2], sk = v->shape.back();
  for (int64_t e = 0; e < v->data.num_elements(); ++e) {
    if (!f((e / sk) % sq, e % sk, v->data.GetAsDouble(e))) return false;
  }
  return true;
}

bool HasSquareTrailingDims(const Value* v) {
  return v->shape.size() >= 2 && v->shape.back() == v->shape[v->shape.size() - 2];
}

// A constant additive mask that is 0 on and below the diagonal and masked above it.
bool IsCausalBias(const Value* m) {
  return m->kind == ValueKind::kConstant && HasSquareTrailingDims(m) &&
         EveryElement(m, [](int64_t i, int64_t j, double x) { return j <= i ? x == 0 : x <= kMaskedAtOrBelow; });
}

// A constant bool keep-mask that keeps exactly the positions on and below the diagonal.
bool IsCausalKeep(const Value* keep, bool inverted) {
  return keep->kind == ValueKind::kConstant && HasSquareTrailingDims(keep) &&
         EveryElement(keep, [inverted](int64_t i, int64_t j, double x) { return ((x != 0) != inverted) == (j <= i); });
}

bool IsZeroConstant(const Value* m) {
  if (m->kind != ValueKind::kConstant) return false;
  for (int64_t e = 0; e < m->data.num_elements(); ++e) {
    if (m->data.GetAsDouble(e) != 0) return false;
  }
  return true;
}

// `bias` with rank 4 (leading 1s), as the fused kernels take it.
absl::StatusOr<Value*> RankFour(Graph& g, Value* bias, const std::string& name) {
  if (bias->shape.size() == 4) return bias;
  Shape four(4 - bias->shape.size(), 1);
  four.insert(four.end(), bias->shape.begin(), bias->shape.end());
  if (bias->kind == ValueKind::kConstant) {
    return g.AddConstant(g.UniqueName(absl::StrCat(bias->name, "/rank4")), bias->data.Reshaped(four));
  }
  Value* shape = g.AddConstant(g.UniqueName(absl::StrCat(name, "/bias_shape")), Tensor::FromVector<int64_t>({4}, four));
  MPC_ASSIGN_OR_RETURN(Node * reshape, g.AddNode("Reshape", {bias, shape}, {}, absl::StrCat(name, "/bias")));
  return reshape->outputs[0];
}

// The boolean keep-mask as an additive one: 0 where kept, -inf elsewhere.
absl::StatusOr<Value*> BiasFromKeep(Graph& g, const Chain& c, DType dtype, const std::string& name) {
  const double inf = std::numeric_limits<double>::infinity();
  if (c.keep->kind == ValueKind::kConstant) {
    Tensor bias(DType::kF64, c.keep->shape);
    for (int64_t e = 0; e < bias.num_elements(); ++e) {
      bias.data<double>()[e] = (c.keep->data.GetAsDouble(e) != 0) != c.keep_inverted ? 0.0 : -inf;
    }
    return g.AddConstant(g.UniqueName(absl::StrCat(name, "/bias")), bias.CastTo(dtype));
  }
  Value* zero = g.AddConstant(g.UniqueName(absl::StrCat(name, "/zero")), Tensor::FromVector<double>({}, {0.0}).CastTo(dtype));
  Value* masked =
      g.AddConstant(g.UniqueName(absl::StrCat(name, "/minus_inf")), Tensor::FromVector<double>({}, {-inf}).CastTo(dtype));
  std::vector<Value*> in = c.keep_inverted ? std::vector<Value*>{c.keep, masked, zero}
                                           : std::vector<Value*>{c.keep, zero, masked};
  MPC_ASSIGN_OR_RETURN(Node * where, g.AddNode("Where", std::move(in), {}, absl::StrCat(name, "/bias")));
  return where->outputs[0];
}

bool Dead(const Graph& g, const Node* n) {
  for (const Value* out : n->outputs) {
    if (!out->consumers.empty() || g.IsOutput(out)) return false;
  }
  return true;
}

}  // namespace

DType AttentionComputeDType(Precision precision) {
  switch (precision) {
    case Precision::kBF16:
    case Precision::kFP8:
      return DType::kBF16;
    case Precision::kFP16:
      return DType::kF16;
    default:
      return DType::kF32;
  }
}

absl::StatusOr<bool> FuseAttentionPass::Run(Graph& graph) {
  if (!caps_.fused_attention || !caps_.HasKernel("FusedAttention", compute_) ||
      !caps_.HasKernel("FusedAttentionGrad", compute_)) {
    return false;
  }
  std::vector<Node*> softmaxes;
  for (const auto& node : graph.nodes()) {
    if (node->op == "Softmax") softmaxes.push_back(node.get());
  }
  bool changed = false;
  for (Node* softmax : softmaxes) {
    Chain c;
    c.softmax = softmax;
    bool dropout = false;
    if (!MatchConsumers(graph, c, &dropout)) {
      if (dropout && result_) {
        result_->skipped.push_back({softmax->name, "dropout on the probabilities (the fused op has none)"});
      }
      continue;
    }
    if (!MatchProducers(graph, c)) continue;
    std::string problem = OperandProblem(c);
    const Value* learned = c.mask ? ParameterUpstream(c.mask) : c.keep ? ParameterUpstream(c.keep) : nullptr;
    if (problem.empty() && learned) {
      problem = absl::StrCat("the mask is computed from parameter '", learned->name,
                             "' (a learned bias needs a gradient the fused op does not give)");
    }
    if (!problem.empty()) {
      if (result_) result_->skipped.push_back({softmax->name, problem});
      continue;
    }

    const std::string name = absl::StrCat(softmax->name, "/fused_attention");
    Value* k = KUnderTranspose(graph, c);
    if (!k) {
      AttrMap perm;
      perm.Set("perm", std::vector<int64_t>{0, 1, 3, 2});
      MPC_ASSIGN_OR_RETURN(Node * t, graph.AddNode("Transpose", {c.kt}, std::move(perm), absl::StrCat(name, "/k")));
      k = t->outputs[0];
    }
    bool causal = false;
    Value* bias = nullptr;
    if (c.mask) {
      if (IsCausalBias(c.mask)) {
        causal = true;
      } else if (!IsZeroConstant(c.mask)) {
        bias = c.mask;
      }
    } else if (c.keep) {
      if (IsCausalKeep(c.keep, c.keep_inverted)) {
        causal = true;
      } else {
        MPC_ASSIGN_OR_RETURN(bias, BiasFromKeep(graph, c, c.q->dtype, name));
      }
    }
    std::vector<Value*> inputs{c.q, k, c.v};
    if (bias) {
      MPC_ASSIGN_OR_RETURN(bias, RankFour(graph, bias, name));
      inputs.push_back(bias);
    }
    AttrMap attrs;
    attrs.Set("scale", static_cast<float>(c.scale));
    attrs.Set("causal", int64_t{causal});
    MPC_ASSIGN_OR_RETURN(Node * fused, graph.AddNode("FusedAttention", std::move(inputs), std::move(attrs), name));
    fused->schedule_rank = c.removed.back()->schedule_rank;
    for (const Node* n : c.removed) fused->schedule_rank = std::min(fused->schedule_rank, n->schedule_rank);
    graph.ReplaceAllUsesWith(c.pv->outputs[0], fused->outputs[0]);
    for (Node* n : c.removed) MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
    int replaced = static_cast<int>(c.removed.size());
    for (Node* n : c.maybe_dead) {
      if (!Dead(graph, n)) continue;
      MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
      ++replaced;
    }
    if (result_) result_->fused.push_back({fused->name, causal, bias != nullptr, c.scale, replaced});
    changed = true;
  }
  if (changed) graph.RemoveDeadValues();
  return changed;
}

}  // namespace mpc
