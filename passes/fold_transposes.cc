// Backward MatMul GEMMs with transposed operands folded into Gemm (see fold_transposes.h).
#include "passes/fold_transposes.h"

#include <algorithm>
#include <optional>

#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "passes/simplify.h"

namespace mpc {
namespace {

// The input of a Transpose that swaps the last two axes of `v` (and nothing else), or null.
Value* UntransposedLastTwo(const Value* v) {
  const Node* t = v->producer;
  if (!t || t->op != "Transpose") return nullptr;
  const std::vector<int64_t> perm = t->attrs.GetInts("perm", {});
  const int r = static_cast<int>(t->inputs[0]->shape.size());
  if (r < 2 || static_cast<int>(perm.size()) != r) return nullptr;
  for (int i = 0; i < r - 2; ++i) {
    if (perm[i] != i) return nullptr;
  }
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2 ? t->inputs[0] : nullptr;
}

// A MatMul the pass may replace: plain (no FP8 conversion, no epilogue).
bool PlainMatMul(const Node& n) {
  return n.op == "MatMul" && !n.attrs.Has("mpc_fp8") && !n.attrs.Has("mpc_activation");
}

int64_t Rows(const Shape& s) { return NumElements(s) / s.back(); }

AttrMap GemmAttrs(const Node& matmul, int64_t trans_a, int64_t trans_b) {
  AttrMap attrs;
  attrs.Set("transA", trans_a);
  attrs.Set("transB", trans_b);
  if (matmul.attrs.Has("mpc_output_dtype")) {
    attrs.Set("mpc_output_dtype", matmul.attrs.GetInt("mpc_output_dtype", 0));
  }
  return attrs;
}

// dW = ReduceSumTo(MatMul(Transpose(X), dY), [K, N])  ->  Gemm(X[R,K], dY[R,N], transA=1).
absl::StatusOr<bool> FoldWeightGradient(Graph& g, Node* mm) {
  Value* x = UntransposedLastTwo(mm->inputs[0]);
  Value* dy = mm->inputs[1];
  Value* out = mm->outputs[0];
  if (!x || x->shape.size() < 2 || dy->shape.size() != x->shape.size()) return false;
  // The batch dimensions must match (no broadcasting): X[..., M, K] and dY[..., M, N].
  if (!std::equal(x->shape.begin(), x->shape.end() - 1, dy->shape.begin())) return false;
  const int64_t k = x->shape.back(), n = dy->shape.back();
  Node* sum = nullptr;
  if (x->shape.size() > 2) {
    // Batched: the partial products must go only into a sum over the batch.
    if (out->consumers.size() != 1 || g.IsOutput(out)) return false;
    sum = out->consumers[0];
    if (sum->op != "ReduceSumTo" || sum->outputs[0]->shape != Shape{k, n} || sum->outputs[0]->dtype != out->dtype) {
      return false;
    }
  }
  GraphBuilder b(&g, "fold-transposes/");
  Value* dw =
      b.Op("Gemm", {b.Reshape(x, {Rows(x->shape), k}), b.Reshape(dy, {Rows(dy->shape), n})}, GemmAttrs(*mm, 1, 0));
  MPC_RETURN_IF_ERROR(b.status());
  g.ReplaceAllUsesWith(sum ? sum->outputs[0] : out, dw);
  return true;
}

// dX = MatMul(dY, Transpose(W)) with W 2-D  ->  Reshape(Gemm(dY[R,N], W, transB=1), dX's shape).
absl::StatusOr<bool> FoldInputGradient(Graph& g, Node* mm) {
  Value* w = UntransposedLastTwo(mm->inputs[1]);
  Value* dy = mm->inputs[0];
  if (!w || w->shape.size() != 2 || dy->shape.size() < 2) return false;
  Value* out = mm->outputs[0];
  GraphBuilder b(&g, "fold-transposes/");
  Value* dx = b.Op("Gemm", {b.Reshape(dy, {Rows(dy->shape), dy->shape.back()}), w}, GemmAttrs(*mm, 0, 1));
  dx = b.Reshape(dx, out->shape);
  MPC_RETURN_IF_ERROR(b.status());
  g.ReplaceAllUsesWith(out, dx);
  return true;
}

// A Transpose output whose every reader is a plain MatMul (which fold it below) and that is
// no program output: after the fold nothing reads it and it is never materialised.
bool OnlyFeedsMatMuls(const Graph& g, const Value* v) {
  if (g.IsOutput(v) || v->consumers.empty()) return false;
  return std::all_of(v->consumers.begin(), v->consumers.end(), [](const Node* c) { return PlainMatMul(*c); });
}

// MatMul(..., Transpose(X, swap last two), ...) -> MatMul(..., X, ...) with mpc_trans_a /
// mpc_trans_b toggled (graph/ops_nn.cc): the kernels read X through strides. Any rank and
// any batch broadcast; the remaining attributes (mpc_output_dtype) are kept.
absl::StatusOr<bool> FoldOperandTransposes(Graph& g, Node* mm) {
  Value* operands[2] = {mm->inputs[0], mm->inputs[1]};
  bool trans[2] = {mm->attrs.GetInt("mpc_trans_a", 0) != 0, mm->attrs.GetInt("mpc_trans_b", 0) != 0};
  bool folded = false;
  for (int i = 0; i < 2; ++i) {
    Value* x = UntransposedLastTwo(operands[i]);
    if (!x || !OnlyFeedsMatMuls(g, operands[i])) continue;
    operands[i] = x;
    trans[i] = !trans[i];
    folded = true;
  }
  if (!folded) return false;
  AttrMap attrs = mm->attrs;
  attrs.Set("mpc_trans_a", static_cast<int64_t>(trans[0]));
  attrs.Set("mpc_trans_b", static_cast<int64_t>(trans[1]));
  GraphBuilder b(&g, "fold-transposes/");
  Value* y = b.Op("MatMul", {operands[0], operands[1]}, std::move(attrs));
  MPC_RETURN_IF_ERROR(b.status());
  Value* out = mm->outputs[0];
  if (y->shape != out->shape || y->dtype != out->dtype) {
    return absl::InternalError("fold-transposes: the folded MatMul changed its output type");
  }
  g.ReplaceAllUsesWith(out, y);
  return true;
}

}  // namespace

absl::StatusOr<bool> FoldTransposesPass::Run(Graph& graph) {
  std::vector<Node*> matmuls;
  for (const auto& n : graph.nodes()) {
    if (PlainMatMul(*n)) matmuls.push_back(n.get());
  }
  bool changed = false;
  for (Node* mm : matmuls) {
    const size_t before = graph.nodes().size();
    MPC_ASSIGN_OR_RETURN(bool folded, FoldWeightGradient(graph, mm));
    if (!folded) {
      MPC_ASSIGN_OR_RETURN(folded, FoldInputGradient(graph, mm));
    }
    if (!folded) {
      MPC_ASSIGN_OR_RETURN(folded, FoldOperandTransposes(graph, mm));
    }
    // The new nodes run where the MatMul would have.
    for (size_t i = before; i < graph.nodes().size(); ++i) graph.nodes()[i]->schedule_rank = mm->schedule_rank;
    changed = changed || folded;
  }
  // The replaced MatMuls, their Transposes and sums now feed nothing.
  if (changed) MPC_RETURN_IF_ERROR(EliminateDeadCode(graph).status());
  return changed;
}

}  // namespace mpc
