// Casts to f32 of low-precision GEMM results folded into the GEMM (see fold_output_casts.h).
#include "passes/fold_output_casts.h"

#include "base/status_macros.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

// The Gemm/MatMul behind a Cast to f32 that may write f32 itself, or null.
Node* FoldableProducer(const Graph& g, const Node& cast) {
  if (cast.op != "Cast" || cast.outputs[0]->dtype != DType::kF32) return nullptr;
  const Value* v = cast.inputs[0];
  Node* p = v->producer;
  if (!p || (p->op != "Gemm" && p->op != "MatMul")) return nullptr;
  if (v->dtype != DType::kBF16 && v->dtype != DType::kF16) return nullptr;
  if (v->consumers.size() != 1 || g.IsOutput(v)) return nullptr;
  if (p->attrs.Has("mpc_output_dtype") || p->attrs.Has("mpc_fp8")) return nullptr;
  return p;
}

}  // namespace

absl::StatusOr<bool> FoldOutputCastsPass::Run(Graph& graph) {
  std::vector<Node*> folded;
  for (const auto& node : graph.nodes()) {
    Node* cast = node.get();
    Node* product = FoldableProducer(graph, *cast);
    if (!product) continue;
    product->attrs.Set("mpc_output_dtype", static_cast<int64_t>(DTypeToOnnx(DType::kF32)));
    MPC_ASSIGN_OR_RETURN(std::vector<TensorType> types, OpRegistry::Global().Find(product->op)->infer(*product));
    Value* y = product->outputs[0];
    y->dtype = types[0].dtype;
    graph.ReplaceAllUsesWith(cast->outputs[0], y);
    folded.push_back(cast);
  }
  for (Node* cast : folded) {
    graph.SetNodeInput(cast, 0, nullptr);  // it read the product it now would replace
    MPC_RETURN_IF_ERROR(graph.RemoveNode(cast));
  }
  if (!folded.empty()) graph.RemoveDeadValues();
  return !folded.empty();
}

}  // namespace mpc
