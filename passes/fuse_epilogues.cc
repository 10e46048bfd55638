// Gemm + Relu and MatMul + bias epilogue fusion (see fuse_epilogues.h).
#include "passes/fuse_epilogues.h"

#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "passes/column_bias.h"
#include "passes/simplify.h"

namespace mpc {
namespace {

// Y = Add(MatMul(X[..., K], W[K, N]), b[N])  ->  Reshape(Gemm(X[R, K], W, b), Y's shape): the
// bias is added by the GEMM (oneDNN's bias, cuBLASLt's bias epilogue) instead of a pass
// over Y, and the product without the bias is never stored. Transformer layers export
// their linear layers this way. Under autocast a layer whose sum stays f32 (the
// residual stream: a projection back into it) reads Add(Cast(MatMul(bf16), f32), b f32);
// that becomes the same Gemm writing f32 (mpc_output_dtype, which fold-output-casts would
// give the MatMul anyway) with the f32 bias as C. Returns the replaced Add, or null.
absl::StatusOr<Node*> FuseMatMulBias(Graph& g, Node* mm) {
  if (mm->op != "MatMul" || mm->attrs.Has("mpc_fp8") || mm->attrs.Has("mpc_output_dtype")) return nullptr;
  Value* x = mm->inputs[0];
  Value* w = mm->inputs[1];
  Value* product = mm->outputs[0];
  if (w->shape.size() != 2 || x->shape.size() < 2) return nullptr;
  const std::optional<ColumnBiasAdd> found = FindColumnBiasAdd(g, product);
  if (!found) return nullptr;
  Node* add = found->add;
  Value* bias = found->bias;
  const int64_t k = x->shape.back(), n = w->shape.back();
  AttrMap attrs;
  if (found->widened) attrs.Set("mpc_output_dtype", static_cast<int64_t>(DTypeToOnnx(DType::kF32)));
  GraphBuilder b(&g, "fuse-epilogues/");
  Value* rows = x->shape.size() == 2 ? x : b.Reshape(x, {NumElements(x->shape) / k, k});
  Value* c = bias->shape.size() == 1 ? bias : b.Reshape(bias, {n});
  Value* y = b.Op("Gemm", {rows, w, c}, std::move(attrs));
  if (x->shape.size() != 2) y = b.Reshape(y, add->outputs[0]->shape);
  MPC_RETURN_IF_ERROR(b.status());
  // The sum's Value (its uses, its name: a model's logits, which the engine fetches by
  // name) moves behind the Gemm; the Add gets the fresh value, which nothing reads.
  g.TradeProducers(add->outputs[0], y);
  return add;
}

}  // namespace

absl::StatusOr<bool> FuseEpiloguesPass::Run(Graph& graph) {
  // MatMul + bias first: the Gemms it makes may then take a ReLU below.
  std::vector<Node*> matmuls;
  for (const auto& node : graph.nodes()) {
    if (node->op == "MatMul") matmuls.push_back(node.get());
  }
  bool fused_bias = false;
  for (Node* mm : matmuls) {
    const size_t before = graph.nodes().size();
    MPC_ASSIGN_OR_RETURN(Node * add, FuseMatMulBias(graph, mm));
    if (!add) continue;
    // The new nodes run where the MatMul would have.
    for (size_t i = before; i < graph.nodes().size(); ++i) graph.nodes()[i]->schedule_rank = mm->schedule_rank;
    fused_bias = true;
  }
  if (fused_bias) MPC_RETURN_IF_ERROR(EliminateDeadCode(graph).status());

  std::vector<Node*> fused_relus;
  for (const auto& node : graph.nodes()) {
    Node* gemm = node.get();
    if (gemm->op != "Gemm" || gemm->attrs.Has("mpc_activation")) continue;
    Value* y = gemm->outputs[0];
    if (y->consumers.size() != 1 || graph.IsOutput(y)) continue;
    Node* relu = y->consumers[0];
    if (relu->op != "Relu") continue;
    gemm->attrs.Set("mpc_activation", std::string("Relu"));
    graph.ReplaceAllUsesWith(relu->outputs[0], y);
    fused_relus.push_back(relu);
  }
  for (Node* relu : fused_relus) {
    // The Relu now reads the fused output it would overwrite; drop it.
    graph.SetNodeInput(relu, 0, nullptr);
    MPC_RETURN_IF_ERROR(graph.RemoveNode(relu));
  }
  if (!fused_relus.empty()) graph.RemoveDeadValues();
  return fused_bias || !fused_relus.empty();
}

}  // namespace mpc
