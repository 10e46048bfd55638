// Scaled dot-product attention as one op (mpc domain), what passes/fuse_attention.h makes
// of the MatMul, scale, mask, softmax, MatMul chain exporters write, for backends that run
// it as one fused kernel (cuDNN's flash attention on CUDA):
//   FusedAttention(Q, K, V[, Bias]) -> (Y, Stats)          attrs scale (float), causal (int, 0)
//     s_ij = scale * (q_i . k_j) + bias_ij, (i, j) with j > i masked when causal;
//     Y = softmax_j(s) V; Stats_i = log sum_j exp(s_ij) over the unmasked j (f32; f64 for
//     f64 Q), what the backward needs to rebuild the probabilities without storing them.
//     A row with every position masked (all -inf) has Stats -inf and Y 0.
//   FusedAttentionGrad(dY, Q, K, V, Y, Stats[, Bias]) -> (dQ, dK, dV)   same attributes
// Q [N..., Sq, D], K [N..., Sk, D], V [N..., Sk, Dv] with the same leading dims and dtype;
// Bias has that dtype and broadcasts (numpy rules) to the scores [N..., Sq, Sk]. Bias has
// no gradient: fuse-attention only takes a bias no parameter reaches (masks, not learned
// position biases).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

bool HasInput(const Node& n, int i) { return i < static_cast<int>(n.inputs.size()) && n.inputs[i]; }

absl::Status Mismatch(const Node& n, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(n.op, " node '", n.name, "': ", what));
}

// Checks Q, K, V at inputs q, q+1, q+2 (and Bias at `bias` when present); returns the
// scores' shape [N..., Sq, Sk].
absl::StatusOr<Shape> CheckOperands(const Node& n, int q, int bias) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, q));
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, q, q + 3));
  const Value* Q = n.inputs[q];
  const Value* K = n.inputs[q + 1];
  const Value* V = n.inputs[q + 2];
  const size_t rank = Q->shape.size();
  if (rank < 3 || K->shape.size() != rank || V->shape.size() != rank) {
    return Mismatch(n, absl::StrCat("Q, K and V must have one rank of at least 3 ([N..., S, D]); they are ",
                                    ShapeToString(Q->shape), ", ", ShapeToString(K->shape), " and ",
                                    ShapeToString(V->shape)));
  }
  const bool batch_equal = std::equal(Q->shape.begin(), Q->shape.end() - 2, K->shape.begin()) &&
                           std::equal(Q->shape.begin(), Q->shape.end() - 2, V->shape.begin());
  if (!batch_equal || Q->shape[rank - 1] != K->shape[rank - 1] || K->shape[rank - 2] != V->shape[rank - 2]) {
    return Mismatch(n, absl::StrCat("Q ", ShapeToString(Q->shape), ", K ", ShapeToString(K->shape), " and V ",
                                    ShapeToString(V->shape),
                                    " do not fit [N..., Sq, D], [N..., Sk, D], [N..., Sk, Dv] (same leading dims)"));
  }
  Shape scores = Q->shape;
  scores[rank - 1] = K->shape[rank - 2];
  if (HasInput(n, bias)) {
    const Value* b = n.inputs[bias];
    auto both = BroadcastShapes(b->shape, scores);
    if (b->shape.size() > rank || !both.ok() || *both != scores) {
      return Mismatch(n, absl::StrCat("Bias '", b->name, "' has shape ", ShapeToString(b->shape),
                                      ", which does not broadcast to the scores ", ShapeToString(scores)));
    }
    if (b->dtype != Q->dtype) {
      return Mismatch(n, absl::StrCat("Bias '", b->name, "' is ", DTypeName(b->dtype), " but Q is ",
                                      DTypeName(Q->dtype), "; insert a Cast"));
    }
  }
  if (n.attrs.GetInt("causal", 0) != 0 && n.attrs.GetInt("causal", 0) != 1) {
    return Mismatch(n, "attribute causal must be 0 or 1");
  }
  return scores;
}

DType StatsDType(DType q) { return q == DType::kF64 ? DType::kF64 : DType::kF32; }

Types InferAttention(const Node& n) {
  MPC_ASSIGN_OR_RETURN(Shape scores, CheckOperands(n, 0, 3));
  const Value* q = n.inputs[0];
  Shape y = q->shape;
  y.back() = n.inputs[2]->shape.back();
  Shape stats(scores.begin(), scores.end() - 1);
  return std::vector<TensorType>{{q->dtype, y}, {StatsDType(q->dtype), stats}};
}

AttrMap SameAttributes(const Node& n) {
  AttrMap attrs;
  attrs.Set("scale", n.attrs.GetFloat("scale", 1.0f));
  attrs.Set("causal", n.attrs.GetInt("causal", 0));
  return attrs;
}

Grads GradAttention(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  if (dys.size() > 1 && dys[1]) {
    return absl::UnimplementedError(
        absl::StrCat("FusedAttention node '", n.name, "': Stats reaches the loss, but mpc does not differentiate it"));
  }
  Value* q = n.inputs[0];
  std::vector<Value*> in{b.Cast(dys[0], q->dtype), q, n.inputs[1], n.inputs[2], n.outputs[0], n.outputs[1]};
  if (HasInput(n, 3)) in.push_back(n.inputs[3]);
  std::vector<Value*> g = b.OpN("FusedAttentionGrad", std::move(in), SameAttributes(n));
  if (g.size() != 3) return b.status().ok() ? absl::InternalError("FusedAttentionGrad: wrong output count") : b.status();
  if (HasInput(n, 3)) g.push_back(nullptr);  // the bias (a mask) has no gradient
  return g;
}

Types InferAttentionGrad(const Node& n) {
  MPC_ASSIGN_OR_RETURN(Shape scores, CheckOperands(n, 1, 6));
  const Value* q = n.inputs[1];
  const Value* dy = n.inputs[0];
  const Value* y = n.inputs[4];
  const Value* stats = n.inputs[5];
  Shape y_shape = q->shape;
  y_shape.back() = n.inputs[3]->shape.back();
  if (dy->dtype != q->dtype || dy->shape != y_shape || y->dtype != q->dtype || y->shape != y_shape) {
    return Mismatch(n, absl::StrCat("dY ", DTypeName(dy->dtype), ShapeToString(dy->shape), " and Y ",
                                    DTypeName(y->dtype), ShapeToString(y->shape), " must both be ",
                                    DTypeName(q->dtype), ShapeToString(y_shape)));
  }
  const Shape rows(scores.begin(), scores.end() - 1);
  if (!IsFloating(stats->dtype) || stats->shape != rows) {
    return Mismatch(n, absl::StrCat("Stats '", stats->name, "' is ", DTypeName(stats->dtype),
                                    ShapeToString(stats->shape), "; it must be a float ", ShapeToString(rows),
                                    " (FusedAttention's second output)"));
  }
  return std::vector<TensorType>{{q->dtype, q->shape}, {q->dtype, n.inputs[2]->shape}, {q->dtype, n.inputs[3]->shape}};
}

}  // namespace

void RegisterAttentionOps(OpRegistry& r) {
  OpDef attention;
  attention.name = "FusedAttention";
  attention.domain = "mpc";
  attention.min_inputs = 3;
  attention.max_inputs = 4;
  attention.min_outputs = 1;
  attention.max_outputs = 2;
  attention.infer = InferAttention;
  attention.grad = GradAttention;
  r.Register(attention);

  OpDef grad;
  grad.name = "FusedAttentionGrad";
  grad.domain = "mpc";
  grad.min_inputs = 6;
  grad.max_inputs = 7;
  grad.min_outputs = grad.max_outputs = 3;
  grad.infer = InferAttentionGrad;
  r.Register(grad);
}

}  // namespace mpc
