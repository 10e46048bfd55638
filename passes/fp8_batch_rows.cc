// Batched Linear layers folded into rows for FP8 (see fp8_batch_rows.h).
#include "passes/fp8_batch_rows.h"

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "passes/column_bias.h"

namespace mpc {
namespace {

// A MatMul without the transposed-operand flags fold-transposes adds (they come later; a
// graph that has them is not autodiff's form).
bool PlainMatMul(const Node* n) {
  return n->op == "MatMul" && !n->attrs.Has("mpc_trans_a") && !n->attrs.Has("mpc_trans_b");
}

// A Transpose that swaps the last two axes and nothing else.
bool SwapsLastTwo(const Node* t) {
  const int r = static_cast<int>(t->inputs[0]->shape.size());
  const std::vector<int64_t> perm = t->attrs.GetInts("perm", {});
  if (r < 2 || static_cast<int>(perm.size()) != r) return false;
  for (int i = 0; i < r - 2; ++i) {
    if (perm[i] != i) return false;
  }
  return perm[r - 2] == r - 1 && perm[r - 1] == r - 2;
}

// The weight gradient's sum over the batch: the only reader of the batched product, summing
// to W's shape in the product's dtype. Null when the product goes anywhere else.
Node* BatchSum(const Graph& g, const Node* product, const Value* w) {
  const Value* out = product->outputs[0];
  if (out->consumers.size() != 1 || g.IsOutput(out)) return nullptr;
  Node* sum = out->consumers[0];
  if (sum->op != "ReduceSumTo" || sum->outputs[0]->shape != w->shape || sum->outputs[0]->dtype != out->dtype) {
    return nullptr;
  }
  return sum;
}

// Whether every backward GEMM has autodiff's form (fp8_batch_rows.h); fills the sums of
// the weight gradients.
bool AutodiffForm(const Graph& g, const Node* forward, const std::vector<Fp8BackwardGemm>& backward,
                  std::vector<Node*>& sums) {
  const Value* w = forward->inputs[1];
  sums.assign(backward.size(), nullptr);
  for (size_t i = 0; i < backward.size(); ++i) {
    const Fp8BackwardGemm& bw = backward[i];
    if (!PlainMatMul(bw.node) || !bw.transpose) return false;
    if (bw.role == 1) {  // dX = dY · W^T
      if (bw.grad_index != 0 || bw.transpose->inputs[0] != w) return false;
    } else {  // dW = sum over the batch of X^T · dY
      if (bw.grad_index != 1 || bw.transpose->inputs[0] != forward->inputs[0] || !SwapsLastTwo(bw.transpose)) {
        return false;
      }
      sums[i] = BatchSum(g, bw.node, w);
      if (!sums[i]) return false;
    }
  }
  return true;
}

class RowRewriter {
 public:
  RowRewriter(Graph& g, RowViews& rows) : g_(g), rows_(rows), b_(&g, "fp8/rows/") {}

  // v as [R, last], made once per value.
  Value* Rows(Value* v, int schedule_rank) {
    Value*& view = rows_[v];
    if (!view) view = Placed(b_.Reshape(v, {NumElements(v->shape) / v->shape.back(), v->shape.back()}), schedule_rank);
    return view;
  }

  // A MatMul over rows standing in for `old`, named as it was, computing `result`.
  absl::StatusOr<Node*> Replace(Node* old, Value* a, Value* b, Value* result) {
    return Replace(old, "MatMul", {a, b}, old->attrs, result);
  }

  // `op` over rows standing in for `old`, named as it was, computing `result` (reshaped back
  // to its shape where needed).
  absl::StatusOr<Node*> Replace(Node* old, const std::string& op, std::vector<Value*> inputs, AttrMap attrs,
                                Value* result) {
    const std::string name = old->name;
    MPC_ASSIGN_OR_RETURN(Node * flat, g_.AddNode(op, std::move(inputs), std::move(attrs), name + "/rows"));
    flat->schedule_rank = old->schedule_rank;
    Value* out = flat->outputs[0];
    if (out->shape != result->shape) out = Placed(b_.Reshape(out, result->shape), old->schedule_rank);
    MPC_RETURN_IF_ERROR(b_.status());
    if (out->dtype != result->dtype) {
      return absl::InternalError(absl::StrCat("fp8: the row form of '", name, "' changed its dtype"));
    }
    // The result's Value (its uses, name and every reference to it: a parameter gradient)
    // moves behind the new nodes; its old producer gets the fresh value, read by nothing.
    g_.TradeProducers(result, out);
    flat->name = name;
    return flat;
  }

  // Removes `n` and then whatever of its inputs' producers (Transposes, the batched
  // product under a sum, the product and its widening Cast under a bias add) nothing reads
  // any more.
  absl::Status RemoveUnused(Node* n) {
    for (const Value* out : n->outputs) {
      if (!out->consumers.empty() || g_.IsOutput(out)) return absl::OkStatus();
    }
    std::vector<Value*> inputs = n->inputs;
    MPC_RETURN_IF_ERROR(g_.RemoveNode(n));
    for (Value* in : inputs) {
      Node* p = in ? in->producer : nullptr;
      if (p && (p->op == "Transpose" || p->op == "MatMul" || p->op == "Cast")) MPC_RETURN_IF_ERROR(RemoveUnused(p));
    }
    return absl::OkStatus();
  }

  GraphBuilder& builder() { return b_; }

 private:
  Value* Placed(Value* v, int schedule_rank) {
    if (v && v->producer) v->producer->schedule_rank = schedule_rank;
    return v;
  }

  Graph& g_;
  RowViews& rows_;
  GraphBuilder b_;
};

}  // namespace

absl::StatusOr<Node*> FoldBatchIntoRows(Graph& g, Node* forward, std::vector<Fp8BackwardGemm>& backward,
                                        RowViews& rows) {
  Value* x = forward->inputs[0];
  Value* w = forward->inputs[1];
  if (!PlainMatMul(forward) || x->shape.size() < 3 || w->shape.size() != 2) return forward;
  std::vector<Node*> sums;
  if (!AutodiffForm(g, forward, backward, sums)) return forward;

  RowRewriter rw(g, rows);
  Value* x_rows = rw.Rows(x, forward->schedule_rank);
  Node* flat_forward = nullptr;
  const std::optional<ColumnBiasAdd> bias = FindColumnBiasAdd(g, forward->outputs[0]);
  // A widened layer's f32 bias stays an f32 Add after the f32 product (the same sum):
  // cuBLASLt's FP8 GEMMs with an f32 output take only a bf16 bias (backends/cuda/
  // cublaslt_fp8.cc), and rounding the bias would part the lowered program from the emulated one.
  if (bias && !bias->widened) {
    // The layer's bias as the Gemm's C, added before the one rounding of the sum.
    AttrMap attrs;
    attrs.Set("transA", int64_t{0});
    attrs.Set("transB", int64_t{0});
    Value* c = rw.builder().Reshape(bias->bias, {w->shape[1]});
    MPC_RETURN_IF_ERROR(rw.builder().status());
    if (c != bias->bias) c->producer->schedule_rank = forward->schedule_rank;
    MPC_ASSIGN_OR_RETURN(flat_forward,
                         rw.Replace(forward, "Gemm", {x_rows, w, c}, std::move(attrs), bias->add->outputs[0]));
    MPC_RETURN_IF_ERROR(rw.RemoveUnused(bias->add));
  } else {
    MPC_ASSIGN_OR_RETURN(flat_forward, rw.Replace(forward, x_rows, w, forward->outputs[0]));
    MPC_RETURN_IF_ERROR(rw.RemoveUnused(forward));
  }

  std::vector<Fp8BackwardGemm> kept;
  for (size_t i = 0; i < backward.size(); ++i) {
    Fp8BackwardGemm bw = backward[i];
    Node* old = bw.node;
    if (bw.role == 1 && old->outputs[0]->consumers.empty() && !g.IsOutput(old->outputs[0])) {
      // Autodiff's dX of a layer whose input needs no gradient (the model's input): read
      // by nothing, so not rewritten or converted, just removed.
      MPC_RETURN_IF_ERROR(rw.RemoveUnused(old));
      continue;
    }
    Value* dy_rows = rw.Rows(old->inputs[bw.grad_index], old->schedule_rank);
    if (bw.role == 1) {
      MPC_ASSIGN_OR_RETURN(bw.node, rw.Replace(old, dy_rows, old->inputs[1], old->outputs[0]));
      MPC_RETURN_IF_ERROR(rw.RemoveUnused(old));
      kept.push_back(bw);
      continue;
    }
    Value* x_rows_t = rw.builder().Transpose(x_rows, {1, 0});
    MPC_RETURN_IF_ERROR(rw.builder().status());
    x_rows_t->producer->schedule_rank = old->schedule_rank;
    MPC_ASSIGN_OR_RETURN(bw.node, rw.Replace(old, x_rows_t, dy_rows, sums[i]->outputs[0]));
    bw.transpose = x_rows_t->producer;
    MPC_RETURN_IF_ERROR(rw.RemoveUnused(sums[i]));
    kept.push_back(bw);
  }
  backward = std::move(kept);
  return flat_forward;
}

}  // namespace mpc
