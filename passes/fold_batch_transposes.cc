// Permuted MatMul operands and results (see fold_batch_transposes.h). Perms compose as
// Transpose does: Transpose(Transpose(x, p), q) = Transpose(x, r) with r[i] = p[q[i]].
#include "passes/fold_batch_transposes.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/status_macros.h"
#include "graph/matmul_layout.h"

namespace mpc {
namespace {

using Perm = std::vector<int64_t>;

Perm Identity(size_t rank) {
  Perm p(rank);
  for (size_t i = 0; i < rank; ++i) p[i] = static_cast<int64_t>(i);
  return p;
}

Perm Compose(const Perm& first, const Perm& then) {
  Perm r(then.size());
  for (size_t i = 0; i < then.size(); ++i) r[i] = first[then[i]];
  return r;
}

// A MatMul the pass may rewrite: batched (rank >= 3 on both sides, batch axes equal as
// read), no FP8, no epilogue.
bool Eligible(const Node& n) {
  if (n.op != "MatMul" || n.attrs.Has("mpc_fp8") || n.attrs.Has("mpc_activation")) return false;
  if (n.inputs[0]->shape.size() < 3 || n.inputs[1]->shape.size() < 3) return false;
  absl::StatusOr<MatMulLayout> l = MatMulLayoutOf(n);
  return l.ok() && l->a.size() == l->b.size() &&
         Shape(l->a.begin(), l->a.end() - 2) == Shape(l->b.begin(), l->b.end() - 2);
}

// oneDNN's matrices need a unit-stride axis. An operand read as Transpose(stored, r): the
// stored last axis must land on one of the view's last two. A result needs its last axis
// unit-stride (a column-major destination sends oneDNN to its reference matmul, ~1000x
// slower): FoldResultTranspose computes the transposed product instead where it is not.
bool OperandKeepsUnitStride(const Perm& r) {
  const int64_t last = static_cast<int64_t>(r.size()) - 1;
  return r[last] == last || r[last - 1] == last;
}
const char* PermName(int input) { return input == 0 ? "mpc_perm_a" : "mpc_perm_b"; }
const char* TransName(int input) { return input == 0 ? "mpc_trans_a" : "mpc_trans_b"; }

// The perm MatMul `n` would read its input `input` through if that input were stored as
// X with Transpose(X, p) in its place.
Perm OperandPermAfterFolding(const Node& n, int input, const Perm& p) {
  Perm r = Compose(p, n.attrs.GetInts(PermName(input), Identity(p.size())));
  if (n.attrs.GetInt(TransName(input), 0) != 0) std::swap(r[r.size() - 1], r[r.size() - 2]);
  return r;
}

// Folds Transpose node `t` into every MatMul that reads it, if all of them can.
bool FoldOperandTranspose(Graph& g, Node* t) {
  Value* v = t->outputs[0];
  if (g.IsOutput(v) || v->consumers.empty()) return false;
  const Perm p = t->attrs.GetInts("perm", {});
  if (p.size() != t->inputs[0]->shape.size()) return false;
  struct Use {
    Node* node;
    int input;
    Perm perm;
  };
  std::vector<Use> uses;
  std::vector<Node*> readers;
  for (Node* reader : v->consumers) {
    if (std::find(readers.begin(), readers.end(), reader) == readers.end()) readers.push_back(reader);
  }
  for (Node* reader : readers) {
    if (!Eligible(*reader)) return false;
    for (int i = 0; i < 2; ++i) {
      if (reader->inputs[i] != v) continue;
      Perm r = OperandPermAfterFolding(*reader, i, p);
      if (!OperandKeepsUnitStride(r)) return false;
      uses.push_back({reader, i, std::move(r)});
    }
  }
  for (Use& u : uses) {
    u.node->attrs.Erase(TransName(u.input));
    u.node->attrs.Set(PermName(u.input), u.perm);
    g.SetNodeInput(u.node, u.input, t->inputs[0]);
  }
  return true;
}

Perm SwapLastTwo(Perm p) {
  std::swap(p[p.size() - 1], p[p.size() - 2]);
  return p;
}

// The perm MatMul `n` reads input `input` through, its trans flag folded in.
Perm OperandPerm(const Node& n, int input, size_t rank) { return OperandPermAfterFolding(n, input, Identity(rank)); }

// Makes MatMul `m` write its only reader, a Transpose, directly.
absl::StatusOr<bool> FoldResultTranspose(Graph& g, Node* m) {
  Value* y = m->outputs[0];
  if (g.IsOutput(y) || y->consumers.size() != 1 || y->consumers[0]->op != "Transpose") return false;
  Node* t = y->consumers[0];
  const Perm p = t->attrs.GetInts("perm", {});
  const size_t rank = y->shape.size();
  if (p.size() != rank) return false;
  // Stored result = Transpose(product, q); the Transpose reads that: Transpose(product, r).
  Perm r = Compose(m->attrs.GetInts("mpc_perm_y", Identity(rank)), p);
  std::vector<Value*> inputs = m->inputs;
  AttrMap attrs = m->attrs;
  const int64_t last = static_cast<int64_t>(rank) - 1;
  if (r[last] == last - 1) {
    // The product's rows would be the unit-stride axis: compute Y^T = B^T A^T, whose
    // columns are, and store it through r with Y^T's axes named.
    const Perm a = OperandPerm(*m, 0, m->inputs[0]->shape.size());
    const Perm b = OperandPerm(*m, 1, m->inputs[1]->shape.size());
    std::swap(inputs[0], inputs[1]);
    for (const char* name : {"mpc_trans_a", "mpc_trans_b"}) attrs.Erase(name);
    attrs.Set("mpc_perm_a", SwapLastTwo(b));
    attrs.Set("mpc_perm_b", SwapLastTwo(a));
    for (int64_t& axis : r) axis = axis == last ? last - 1 : axis == last - 1 ? last : axis;
  }
  if (r[last] != last) return false;
  attrs.Set("mpc_perm_y", r);
  MPC_ASSIGN_OR_RETURN(Node * folded, g.AddNode("MatMul", inputs, std::move(attrs), m->name));
  folded->schedule_rank = m->schedule_rank;
  // The Transpose's output keeps its name and uses; the fresh value goes to the Transpose.
  g.TradeProducers(t->outputs[0], folded->outputs[0]);
  MPC_RETURN_IF_ERROR(g.RemoveNode(t));
  MPC_RETURN_IF_ERROR(g.RemoveNode(m));
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldBatchTransposesPass::Run(Graph& graph) {
  if (!enabled_) return false;
  std::vector<Node*> transposes;
  for (const auto& node : graph.nodes()) {
    if (node->op == "Transpose") transposes.push_back(node.get());
  }
  int operands = 0, results = 0;
  for (Node* t : transposes) {
    if (!FoldOperandTranspose(graph, t)) continue;
    MPC_RETURN_IF_ERROR(graph.RemoveNode(t));
    ++operands;
  }
  std::vector<Node*> matmuls;
  for (const auto& node : graph.nodes()) {
    if (Eligible(*node)) matmuls.push_back(node.get());
  }
  for (Node* m : matmuls) {
    MPC_ASSIGN_OR_RETURN(bool folded, FoldResultTranspose(graph, m));
    results += folded;
  }
  if (result_) {
    result_->operand_transposes += operands;
    result_->result_transposes += results;
  }
  if (operands + results > 0) graph.RemoveDeadValues();
  return operands + results > 0;
}

}  // namespace mpc
