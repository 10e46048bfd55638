// See channels_last.h.
#include "passes/channels_last.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/ops_conv_util.h"

namespace mpc {
namespace {

// Elementwise ops that compute each output element from the same element of each operand,
// so they run unchanged on a permuted layout when every operand has the output's shape.
const absl::flat_hash_set<std::string>& LayoutAgnosticOps() {
  static const auto* ops =
      new absl::flat_hash_set<std::string>{"Relu", "LeakyRelu", "Sigmoid", "Silu", "Tanh", "Cast", "Identity", "Neg",
                                           "Abs",  "Add",       "Sub",     "Mul",  "Div",  "Max",      "Min"};
  return *ops;
}

// Ops with a channels-last form (mpc_channels_last); their other inputs keep their layout.
bool LayoutSensitive(const std::string& op) { return op == "Conv" || op == "BatchNormalization" || op == "MaxPool"; }

class Rewriter {
 public:
  Rewriter(Graph& graph, const std::map<DType, int64_t>& min_plane, ChannelsLastResult* result)
      : graph_(graph), min_plane_(min_plane), result_(result) {}

  absl::StatusOr<bool> Run() {
    MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, graph_.TopologicalOrder());
    bool changed = false;
    for (Node* node : order) {
      if (!Converts(*node)) continue;
      MPC_RETURN_IF_ERROR(Convert(node));
      changed = true;
    }
    if (!changed) return false;
    MPC_RETURN_IF_ERROR(RemoveUnreadTransposes());
    graph_.RemoveDeadValues();
    int transposes = 0;
    for (const auto& n : graph_.nodes()) transposes += made_.contains(n.get());
    if (result_) result_->transposes = transposes;
    return true;
  }

 private:
  // A Transpose this pass made from channels-last back to channels-first.
  bool FromChannelsLast(const Value* v) const { return v->producer != nullptr && back_.contains(v->producer); }

  bool Converts(const Node& node) const {
    if (node.op == "Conv") return ConvEligible(node);
    if (node.op == "BatchNormalization") {
      return node.inputs[0]->shape.size() >= 3 && FromChannelsLast(node.inputs[0]);
    }
    if (node.op == "MaxPool") {  // without the optional Indices output
      return node.inputs[0]->shape.size() == 4 && node.outputs.size() == 1 && FromChannelsLast(node.inputs[0]);
    }
    if (!LayoutAgnosticOps().contains(node.op) || node.outputs.size() != 1) return false;
    const Shape& shape = node.outputs[0]->shape;
    if (shape.size() < 3) return false;
    bool any_channels_last = false;
    for (const Value* in : node.inputs) {
      if (in == nullptr || in->shape != shape) return false;  // broadcasting operands keep their layout
      any_channels_last |= FromChannelsLast(in);
    }
    return any_channels_last;
  }

  bool ConvEligible(const Node& node) const {
    const Value* x = node.inputs[0];
    const Value* y = node.outputs[0];
    if (x->shape.size() != 4 || node.attrs.GetInt("group", 1) != 1 || conv::ChannelsLast(node)) return false;
    auto it = min_plane_.find(x->dtype);
    return it != min_plane_.end() && y->shape[2] * y->shape[3] >= it->second;
  }

  // The channels-last form of channels-first `v`: what a Transpose back read, else a new
  // (shared) Transpose of v.
  absl::StatusOr<Value*> ChannelsLastOf(Value* v, int schedule_rank) {
    if (FromChannelsLast(v)) return v->producer->inputs[0];
    if (auto it = to_last_.find(v); it != to_last_.end()) return it->second;
    AttrMap attrs;
    attrs.Set("perm", conv::ToChannelsLastPerm(static_cast<int>(v->shape.size())));
    MPC_ASSIGN_OR_RETURN(Node * t, graph_.AddNode("Transpose", {v}, std::move(attrs),
                                                  graph_.UniqueName(absl::StrCat(v->name, "/to_channels_last"))));
    t->schedule_rank = schedule_rank;
    made_.insert(t);
    to_last_[v] = t->outputs[0];
    return t->outputs[0];
  }

  // Replaces `node` by its channels-last form: same name, same outputs (the first one now
  // written by a Transpose back to channels-first).
  absl::Status Convert(Node* node) {
    std::vector<Value*> inputs = node->inputs;
    const bool elementwise = !LayoutSensitive(node->op);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (i == 0 || (elementwise && inputs[i] != nullptr)) {
        MPC_ASSIGN_OR_RETURN(inputs[i], ChannelsLastOf(inputs[i], node->schedule_rank));
      }
    }
    AttrMap attrs = node->attrs;
    if (!elementwise) attrs.Set("mpc_channels_last", int64_t{1});
    const std::string name = node->name;
    MPC_ASSIGN_OR_RETURN(Node * twin, graph_.AddNode(node->op, std::move(inputs), std::move(attrs),
                                                     graph_.UniqueName(absl::StrCat(name, "/channels_last"))));
    twin->schedule_rank = node->schedule_rank;
    twin->control_deps = node->control_deps;
    AttrMap back_attrs;
    back_attrs.Set("perm", conv::ToChannelsFirstPerm(static_cast<int>(twin->outputs[0]->shape.size())));
    MPC_ASSIGN_OR_RETURN(Node * back, graph_.AddNode("Transpose", {twin->outputs[0]}, std::move(back_attrs),
                                                     graph_.UniqueName(absl::StrCat(name, "/to_channels_first"))));
    back->schedule_rank = node->schedule_rank;
    made_.insert(back);
    back_.insert(back);
    // The model's values keep their identity (uses, outputs, results): the first is now
    // written by the Transpose back, the others (BatchNormalization's statistics) by the twin.
    const std::vector<Value*> outputs = node->outputs;
    graph_.TradeProducers(outputs[0], back->outputs[0]);
    for (size_t i = 1; i < outputs.size(); ++i) graph_.TradeProducers(outputs[i], twin->outputs[i]);
    for (const auto& other : graph_.nodes()) {
      for (Node*& dep : other->control_deps) {
        if (dep == node) dep = twin;
      }
    }
    MPC_RETURN_IF_ERROR(graph_.RemoveNode(node));
    twin->name = name;
    if (result_ && !elementwise) result_->converted.push_back(name);
    return absl::OkStatus();
  }

  // Removes the Transposes this pass made that nothing reads (a run's inner boundaries),
  // repeatedly: removing one can leave its input's Transpose unread.
  absl::Status RemoveUnreadTransposes() {
    for (bool removed = true; removed;) {
      removed = false;
      for (const auto& n : graph_.nodes()) {
        Node* node = n.get();
        if (!made_.contains(node) || !node->outputs[0]->consumers.empty() || graph_.IsOutput(node->outputs[0])) {
          continue;
        }
        made_.erase(node);
        back_.erase(node);
        MPC_RETURN_IF_ERROR(graph_.RemoveNode(node));
        removed = true;
        break;
      }
    }
    return absl::OkStatus();
  }

  Graph& graph_;
  const std::map<DType, int64_t>& min_plane_;
  ChannelsLastResult* result_;
  absl::flat_hash_set<Node*> made_;              // every Transpose this pass made
  absl::flat_hash_set<Node*> back_;              // those from channels-last back to channels-first
  absl::flat_hash_map<Value*, Value*> to_last_;  // channels-first value -> its Transpose to channels-last
};

}  // namespace

absl::StatusOr<bool> ChannelsLastPass::Run(Graph& graph) {
  if (min_plane_.empty()) return false;
  return Rewriter(graph, min_plane_, result_).Run();
}

}  // namespace mpc
