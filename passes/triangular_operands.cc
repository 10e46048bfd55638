// Triangular MatMul operands (see triangular_operands.h): which values are zero above the
// diagonal of their last two axes, then how each MatMul reads them.
#include "passes/triangular_operands.h"

#include <cstdint>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "graph/matmul_layout.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

// A constant bool mask whose every [T, T] matrix (T >= 2) keeps its diagonal and nothing
// above it: the causal mask, whatever it keeps below.
bool IsCausalMask(const Value* keep) {
  if (keep == nullptr || keep->kind != ValueKind::kConstant || keep->dtype != DType::kBool || keep->data.empty()) {
    return false;
  }
  const Shape& s = keep->shape;
  if (s.size() < 2 || s.back() != s[s.size() - 2] || s.back() < 2) return false;
  const int64_t t = s.back(), matrices = NumElements(s) / (t * t);
  const bool* kept = keep->data.data<bool>();
  for (int64_t m = 0; m < matrices; ++m) {
    for (int64_t i = 0; i < t; ++i) {
      const bool* row = kept + (m * t + i) * t;
      if (!row[i]) return false;
      for (int64_t j = i + 1; j < t; ++j) {
        if (row[j]) return false;
      }
    }
  }
  return true;
}

// Whether node `n`'s output 0 is zero above the diagonal, given which values are. Beyond
// the softmax and its gradient, an elementwise op the registry says keeps 0 at 0 (casts,
// dropout, ReLU: PaddingRule::kZeroPreservingUnary, the rule pad-dims relies on) keeps it.
bool WritesZerosAbove(const Node& n, const absl::flat_hash_set<const Value*>& zero_above) {
  if (n.op == "MaskedSoftmax") return n.inputs.size() > 1 && IsCausalMask(n.inputs[1]);
  if (n.op == "MaskedSoftmaxGrad") return zero_above.contains(n.inputs[1]);
  const OpDef* def = OpRegistry::Global().Find(n.op);
  return def != nullptr && def->padding == PaddingRule::kZeroPreservingUnary && !n.inputs.empty() &&
         zero_above.contains(n.inputs[0]) && n.outputs[0]->shape == n.inputs[0]->shape;
}

}  // namespace

absl::StatusOr<bool> TriangularOperandsPass::Run(Graph& graph) {
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  absl::flat_hash_set<const Value*> zero_above;
  bool changed = false;
  for (Node* n : order) {
    if (WritesZerosAbove(*n, zero_above)) {
      zero_above.insert(n->outputs[0]);
      continue;
    }
    if (n->op != "MatMul" || !zero_above.contains(n->inputs[0]) || n->attrs.Has("mpc_a_zeros")) continue;
    absl::StatusOr<MatMulLayout> l = MatMulLayoutOf(*n);
    if (!l.ok()) continue;
    // A is stored contiguously as [..., T, T]: its rows have stride T, its columns 1. The
    // view reads them as they are (still zero above) or swapped (zero below); a view that
    // takes a batch axis into its matrix is left alone.
    const size_t r = l->a.size();
    const int64_t t = n->inputs[0]->shape.back();
    if (l->a[r - 2] != t || l->a[r - 1] != t) continue;
    const int64_t row_stride = l->a_strides[r - 2], col_stride = l->a_strides[r - 1];
    if (row_stride == t && col_stride == 1) {
      n->attrs.Set("mpc_a_zeros", std::string("above_diagonal"));
      ++result_->zero_above;
    } else if (row_stride == 1 && col_stride == t) {
      n->attrs.Set("mpc_a_zeros", std::string("below_diagonal"));
      ++result_->zero_below;
    } else {
      continue;
    }
    changed = true;
  }
  return changed;
}

}  // namespace mpc
