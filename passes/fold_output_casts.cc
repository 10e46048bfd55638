// Casts to f32 of low-precision GEMM results folded into the GEMM (see fold_output_casts.h).
#include "passes/fold_output_casts.h"

#include "base/status_macros.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

bool SoleUse(const Graph& g, const Value* v) { return v->consumers.size() == 1 && !g.IsOutput(v); }

// The Gemm/MatMul behind a Cast to f32 that may write f32 itself, or null; `view` is set
// to the Reshape between them when there is one (fold-transposes' Gemms over the batch
// folded into rows reach the Cast through the Reshape back to the model's shape: the
// backward data GEMMs whose result joins an f32 residual stream).
Node* FoldableProducer(const Graph& g, const Node& cast, Node** view) {
  *view = nullptr;
  if (cast.op != "Cast" || cast.outputs[0]->dtype != DType::kF32) return nullptr;
  const Value* v = cast.inputs[0];
  if (v->dtype != DType::kBF16 && v->dtype != DType::kF16) return nullptr;
  if (!SoleUse(g, v)) return nullptr;
  Node* p = v->producer;
  if (p && p->op == "Reshape" && SoleUse(g, p->inputs[0])) {
    *view = p;
    p = p->inputs[0]->producer;
  }
  if (!p || (p->op != "Gemm" && p->op != "MatMul")) return nullptr;
  if (p->attrs.Has("mpc_output_dtype") || p->attrs.Has("mpc_fp8")) return nullptr;
  return p;
}

// FP8 GEMMs, read by the Cast directly or through a Reshape that is their only reader (the
// fp8 pass's Linear layers over rows, reshaped back to the model's shape):
//   lowered:  Fp8Gemm(to = bf16/f16) [-> Reshape] -> Cast(f32)          the Fp8Gemm writes f32 (to)
//   emulated: Gemm|MatMul[mpc_fp8](f32) -> Cast(bf16/f16) [-> Reshape] -> Cast(f32)  both Casts go
// so a lowered program and its emulation keep computing the same f32 values. Returns the
// Fp8Gemm, or for the emulated form the narrowing Cast (whose input is the f32 product);
// `view` is set to the Reshape when there is one.
Node* FoldableFp8Producer(const Graph& g, const Node& cast, Node** view) {
  *view = nullptr;
  if (cast.op != "Cast" || cast.outputs[0]->dtype != DType::kF32) return nullptr;
  const Value* v = cast.inputs[0];
  if ((v->dtype != DType::kBF16 && v->dtype != DType::kF16) || !SoleUse(g, v) || !v->producer) return nullptr;
  Node* p = v->producer;
  if (p->op == "Reshape" && SoleUse(g, p->inputs[0]) && p->inputs[0]->producer) {
    *view = p;
    p = p->inputs[0]->producer;
  }
  if (p->op == "Fp8Gemm") return p;
  if (p->op != "Cast" || p->inputs[0]->dtype != DType::kF32 || !SoleUse(g, p->inputs[0])) return nullptr;
  const Node* product = p->inputs[0]->producer;
  if (!product || (product->op != "Gemm" && product->op != "MatMul") || !product->attrs.Has("mpc_fp8")) return nullptr;
  return p;
}

// Re-infers `n`'s first output's dtype after an input or attribute changed.
absl::Status Reinfer(Node* n) {
  MPC_ASSIGN_OR_RETURN(std::vector<TensorType> types, OpRegistry::Global().Find(n->op)->infer(*n));
  n->outputs[0]->dtype = types[0].dtype;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> FoldOutputCastsPass::Run(Graph& graph) {
  std::vector<Node*> folded;
  for (const auto& node : graph.nodes()) {
    Node* cast = node.get();
    Node* view = nullptr;
    if (Node* fp8 = FoldableFp8Producer(graph, *cast, &view)) {
      // As below, the Cast's input keeps its name and references (it may be the model's
      // logits) and now holds the f32 result; the Cast's readers read it.
      Value* v = cast->inputs[0];
      if (fp8->op == "Fp8Gemm") {
        fp8->attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(DType::kF32)));
        MPC_RETURN_IF_ERROR(Reinfer(fp8));
        if (view) MPC_RETURN_IF_ERROR(Reinfer(view));
      } else if (view) {
        // The Reshape reads the f32 product; the narrowing Cast is left reading nothing used.
        graph.SetNodeInput(view, 0, fp8->inputs[0]);
        MPC_RETURN_IF_ERROR(Reinfer(view));
        folded.push_back(fp8);
      } else {
        // v was the narrowing Cast's bf16 result: it becomes the emulated GEMM's f32
        // product, and the narrowing Cast is left holding the product's former value.
        graph.TradeProducers(v, fp8->inputs[0]);
        v->dtype = DType::kF32;
        folded.push_back(fp8);
      }
      graph.ReplaceAllUsesWith(cast->outputs[0], v);
      folded.push_back(cast);
      continue;
    }
    Node* product = FoldableProducer(graph, *cast, &view);
    if (!product) continue;
    product->attrs.Set("mpc_output_dtype", static_cast<int64_t>(DTypeToOnnx(DType::kF32)));
    MPC_RETURN_IF_ERROR(Reinfer(product));
    if (view) MPC_RETURN_IF_ERROR(Reinfer(view));
    graph.ReplaceAllUsesWith(cast->outputs[0], cast->inputs[0]);
    folded.push_back(cast);
  }
  // Each Cast read the product it now would replace (after a trade, its own output or the
  // other folded Cast's): every input goes first, then the nodes.
  for (Node* cast : folded) graph.SetNodeInput(cast, 0, nullptr);
  for (Node* cast : folded) MPC_RETURN_IF_ERROR(graph.RemoveNode(cast));
  if (!folded.empty()) graph.RemoveDeadValues();
  return !folded.empty();
}

}  // namespace mpc
