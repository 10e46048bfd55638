// LayerNormalization's narrowing Cast and LayerNormGrad's gradient sum folded into them
// (see fuse_layer_norm_edges.h).
#include "passes/fuse_layer_norm_edges.h"

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "passes/pattern_match.h"

namespace mpc {
namespace {

// The LayerNormalization whose Y `cast` narrows from f32 to bf16/f16, or null.
Node* NarrowableNorm(const Graph& g, const Node& cast) {
  if (cast.op != "Cast") return nullptr;
  const DType to = cast.outputs[0]->dtype;
  if (to != DType::kBF16 && to != DType::kF16) return nullptr;
  const Value* y = cast.inputs[0];
  Node* norm = y->producer;
  if (!norm || norm->op != "LayerNormalization" || norm->outputs[0] != y) return nullptr;
  if (y->dtype != DType::kF32 || norm->attrs.Has("mpc_output_dtype") || !pattern::Intermediate(g, y)) return nullptr;
  return norm;
}

// Whether `target` is `from` or one of the nodes `from` (transitively) reads.
bool DependsOn(const Node* from, const Node* target) {
  std::vector<const Node*> stack{from};
  absl::flat_hash_set<const Node*> seen{from};
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (n == target) return true;
    auto visit = [&](const Node* p) {
      if (p && seen.insert(p).second) stack.push_back(p);
    };
    for (const Value* in : n->inputs) {
      if (in) visit(in->producer);
    }
    for (const Node* dep : n->control_deps) visit(dep);
  }
  return false;
}

// For an Add of a LayerNormGrad's dX and a same-typed gradient G that does not depend on
// it: the operand index of dX (G is the other), or -1. The right operand first: autodiff
// adds each new gradient to the sum so far on the right, so the newer gradient, which runs
// after the sum exists anyway, takes it.
int AccumulableOperand(const Graph& g, const Node& add) {
  if (add.op != "Add" || add.inputs.size() != 2) return -1;
  for (int i : {1, 0}) {
    const Value* dx = add.inputs[i];
    const Value* other = add.inputs[1 - i];
    const Node* grad = dx->producer;
    if (!grad || grad->op != "LayerNormGrad" || grad->outputs[0] != dx || grad->inputs.size() > 5) continue;
    if (!pattern::Intermediate(g, dx) || dx == other) continue;
    if (other->dtype != dx->dtype || other->shape != dx->shape || add.outputs[0]->shape != dx->shape) continue;
    if (other->producer && DependsOn(other->producer, grad)) continue;
    return i;
  }
  return -1;
}

// The readers of a LayerNormGrad's dX that its epilogue can take over: a ReduceSumTo to
// the normalised shape (the bias gradient of the layer before) and, for f32 dX, a Cast to
// bf16/f16 (the low-precision GEMMs' copy). Either may be null.
struct DxReaders {
  Node* column_sum = nullptr;
  Node* narrow = nullptr;
};

DxReaders EpilogueReaders(const Node& grad) {
  DxReaders r;
  const Value* dx = grad.outputs[0];
  for (Node* reader : dx->consumers) {
    if (reader->inputs.empty() || reader->inputs[0] != dx) continue;
    if (!r.column_sum && reader->op == "ReduceSumTo" && reader->outputs[0]->shape == grad.outputs[1]->shape &&
        reader->outputs[0]->dtype == dx->dtype) {
      r.column_sum = reader;
    } else if (!r.narrow && reader->op == "Cast" && dx->dtype == DType::kF32 &&
               (reader->outputs[0]->dtype == DType::kBF16 || reader->outputs[0]->dtype == DType::kF16)) {
      r.narrow = reader;
    }
  }
  return r;
}

// Rebuilds `grad` with the epilogue outputs its readers ask for; every value keeps its
// identity (the new node takes over dX, dScale, dB and the readers' outputs).
absl::Status FuseEpilogue(Graph& graph, Node* grad, const DxReaders& readers) {
  AttrMap attrs = grad->attrs;
  if (readers.column_sum) attrs.Set("mpc_dx_column_sum", int64_t{1});
  if (readers.narrow) {
    attrs.Set("mpc_narrow_dx_dtype", static_cast<int64_t>(DTypeToOnnx(readers.narrow->outputs[0]->dtype)));
  }
  MPC_ASSIGN_OR_RETURN(Node * fused,
                       graph.AddNode("LayerNormGrad", grad->inputs, std::move(attrs), graph.UniqueName(grad->name)));
  fused->schedule_rank = grad->schedule_rank;
  fused->control_deps = grad->control_deps;
  // Nodes ordered after the gradient (the in-place updates of the scale it reads) are
  // ordered after its replacement.
  for (const auto& other : graph.nodes()) {
    for (Node*& dep : other->control_deps) {
      if (dep == grad) dep = fused;
    }
  }
  for (int i = 0; i < 3; ++i) graph.TradeProducers(grad->outputs[i], fused->outputs[i]);
  if (readers.column_sum) graph.TradeProducers(readers.column_sum->outputs[0], fused->outputs[3]);
  if (readers.narrow) graph.TradeProducers(readers.narrow->outputs[0], fused->outputs[4]);
  for (Node* gone : {readers.column_sum, readers.narrow, grad}) {
    if (gone) MPC_RETURN_IF_ERROR(graph.RemoveNode(gone));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> FuseLayerNormEdgesPass::Run(Graph& graph) {
  if (!enabled_) return false;
  std::vector<Node*> removed;
  // Snapshots: the first loop only marks nodes for removal, the second rebuilds nodes.
  std::vector<Node*> nodes;
  for (const auto& n : graph.nodes()) nodes.push_back(n.get());
  for (Node* node : nodes) {
    if (Node* norm = NarrowableNorm(graph, *node)) {
      // As below: the Cast's output stays the value its readers refer to, now written by
      // the normalisation (its dtype is already the one mpc_output_dtype names); the Cast
      // is left holding the f32 Y, read by nothing.
      norm->attrs.Set("mpc_output_dtype", static_cast<int64_t>(DTypeToOnnx(node->outputs[0]->dtype)));
      graph.TradeProducers(node->outputs[0], node->inputs[0]);
      graph.SetNodeInput(node, 0, nullptr);
      removed.push_back(node);
      ++result_->narrowed_outputs;
      continue;
    }
    const int i = AccumulableOperand(graph, *node);
    if (i < 0) continue;
    Value* dx = node->inputs[i];
    Value* other = node->inputs[1 - i];
    Node* grad = dx->producer;
    // The Add's output stays the value its readers (and any pass result) refer to; the
    // gradient now produces it, and the Add is left holding the old dX, read by nothing.
    graph.TradeProducers(node->outputs[0], dx);
    graph.InsertNodeInput(grad, 5, other);
    graph.SetNodeInput(node, 0, nullptr);
    graph.SetNodeInput(node, 1, nullptr);
    removed.push_back(node);
    ++result_->accumulated_grads;
  }
  for (Node* n : removed) MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
  // The gradients' epilogues, once the Adds above are in them (dX is then the sum the
  // readers read).
  // Only the gradients are snapshot: each fusion deletes its gradient (already visited)
  // and the readers it takes over (never gradients).
  int epilogues = 0;
  std::vector<Node*> grads;
  for (const auto& n : graph.nodes()) {
    if (n->op == "LayerNormGrad") grads.push_back(n.get());
  }
  for (Node* grad : grads) {
    if (grad->outputs.size() > 3 || graph.IsOutput(grad->outputs[0])) continue;
    const DxReaders readers = EpilogueReaders(*grad);
    if (!readers.column_sum && !readers.narrow) continue;
    MPC_RETURN_IF_ERROR(FuseEpilogue(graph, grad, readers));
    result_->summed_columns += readers.column_sum != nullptr;
    result_->narrowed_grads += readers.narrow != nullptr;
    ++epilogues;
  }
  if (!removed.empty() || epilogues > 0) graph.RemoveDeadValues();
  return !removed.empty() || epilogues > 0;
}

}  // namespace mpc
