// Activation recomputation (see recompute.h).
#include "passes/recompute.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/flops.h"
#include "graph/op_registry.h"
#include "passes/forward_nodes.h"

namespace mpc {

const char* RecomputePolicyName(RecomputeOptions::Policy policy) {
  switch (policy) {
    case RecomputeOptions::Policy::kNone:
      return "none";
    case RecomputeOptions::Policy::kSelective:
      return "selective";
    case RecomputeOptions::Policy::kFull:
      return "full";
  }
  return "?";
}

namespace {

using NodeSet = absl::flat_hash_set<const Node*>;
using ValueSet = absl::flat_hash_set<const Value*>;

// Values that change from batch to batch: the model's inputs and what the forward computes
// from them (not the weights' casts, a mask built from shapes, or the labels, which only the
// loss at the end reads).
ValueSet BatchDependent(const Graph& g, const std::vector<Node*>& forward_order, const Value* labels) {
  ValueSet dependent;
  for (const Value* in : g.inputs()) {
    if (in != labels) dependent.insert(in);
  }
  for (const Node* n : forward_order) {
    const bool reads_batch =
        std::any_of(n->inputs.begin(), n->inputs.end(), [&](const Value* v) { return v && dependent.contains(v); });
    if (!reads_batch) continue;
    for (const Value* out : n->outputs) dependent.insert(out);
  }
  return dependent;
}

class Planner {
 public:
  Planner(Graph& g, const RecomputeOptions& options, RecomputeResult& result) : g_(g), options_(options), r_(result) {}

  absl::Status Run(const Value* loss, const Value* labels) {
    forward_ = ForwardNodesOf(loss);
    MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g_.TopologicalOrder());
    for (Node* n : order) {
      r_.step_flops += EstimateFlops(*n);
      if (!forward_.contains(n)) continue;
      position_[n] = static_cast<int>(forward_order_.size());
      forward_order_.push_back(n);
    }
    batch_dependent_ = BatchDependent(g_, forward_order_, labels);
    // Saved activations, in forward order.
    for (const Node* n : forward_order_) {
      for (Value* out : n->outputs) {
        if (std::any_of(out->consumers.begin(), out->consumers.end(), [&](const Node* c) { return IsBackward(*c); })) {
          saved_.push_back(out);
          ++r_.saved;
          r_.saved_bytes += static_cast<int64_t>(out->bytes());
        }
      }
    }
    if (options_.policy == RecomputeOptions::Policy::kFull) MPC_RETURN_IF_ERROR(FindBoundaries());
    // Decide, in forward order: a saved value is recomputed when a chain of clonable nodes
    // leads to it from values that are kept; otherwise it is kept (which can only let
    // later values recompute from it).
    for (const Value* v : saved_) {
      if (kept_.contains(v)) continue;
      std::vector<const Node*> chain;
      const bool selective =
          options_.policy == RecomputeOptions::Policy::kSelective || selective_zone_.contains(v);
      if (CanRecompute(v, selective, &chain)) {
        for (const Node* n : chain) to_clone_.insert(n);
        recomputed_.push_back(v);
      } else {
        kept_.insert(v);
      }
    }
    return Rewrite();
  }

 private:
  // A reader that runs in the backward pass (or later): not a forward node, and not a
  // forward-time side effect such as BatchNorm's statistics update or a collective.
  bool IsBackward(const Node& n) const {
    if (forward_.contains(&n)) return false;
    const OpDef* def = OpRegistry::Global().Find(n.op);
    return def && !def->has_side_effects && !def->stochastic;
  }

  bool Clonable(const Node& n, bool selective) const {
    if (!forward_.contains(&n) || !n.control_deps.empty()) return false;
    const OpDef* def = OpRegistry::Global().Find(n.op);
    // ZeRO-3's AllGather of a parameter slice is the one collective cloned: it gives the same
    // bytes every time, and every rank runs the same clones in the same order.
    const bool gather = n.op == "AllGather";
    if (!def || def->has_side_effects || (def->stochastic && !gather) || def->output_is_state_input) return false;
    for (const Value* out : n.outputs) {
      if (g_.IsOutput(out)) return false;
    }
    if (selective) return !ExpensiveForSelective(n);
    return true;
  }

  // SELECTIVE keeps what a GEMM against weights, a convolution or fused attention made.
  bool ExpensiveForSelective(const Node& n) const {
    if (!IsContraction(n)) return false;
    if (n.op != "MatMul") return true;
    return std::any_of(n.inputs.begin(), n.inputs.end(),
                       [&](const Value* v) { return v && !batch_dependent_.contains(v); });
  }

  // Whether `v` can be rebuilt from kept values; `chain` collects the nodes to clone.
  bool CanRecompute(const Value* v, bool selective, std::vector<const Node*>* chain) {
    absl::flat_hash_set<const Node*> visiting;
    return Reach(v, selective, chain, visiting);
  }
  bool Reach(const Value* v, bool selective, std::vector<const Node*>* chain,
             absl::flat_hash_set<const Node*>& seen) {
    if (!v || v->kind != ValueKind::kActivation || kept_.contains(v)) return true;
    const Node* n = v->producer;
    if (!n || !Clonable(*n, selective)) return false;
    if (to_clone_.contains(n) || !seen.insert(n).second) return true;
    for (const Value* in : n->inputs) {
      if (!Reach(in, selective, chain, seen)) return false;
    }
    chain->push_back(n);
    return true;
  }

  absl::Status FindBoundaries() {
    std::vector<const Value*> boundaries;
    if (!options_.boundaries.empty()) {
      std::regex pattern;
      try {
        pattern = std::regex(options_.boundaries);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(absl::StrCat("spec field memory.boundaries: '", options_.boundaries,
                                                       "' is not a valid regex: ", e.what()));
      }
      for (const Node* n : forward_order_) {
        for (const Value* out : n->outputs) {
          if (std::regex_match(out->name, pattern)) boundaries.push_back(out);
        }
      }
      if (boundaries.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec field memory.boundaries: '", options_.boundaries,
            "' matches no activation of the forward pass (a full match of the value name; `mpc compile "
            "--recompute full` lists the block inputs it finds)"));
      }
      r_.boundaries_from = absl::StrCat("pattern '", options_.boundaries, "'");
    } else {
      // Cut points: after node i, the batch-dependent activations still to be read by a later
      // forward node; where that is one value, the forward runs through it alone.
      absl::flat_hash_map<const Value*, int> last_use;
      for (const Node* n : forward_order_) {
        for (const Value* out : n->outputs) {
          if (!batch_dependent_.contains(out)) continue;
          int last = -1;
          for (const Node* c : out->consumers) {
            if (forward_.contains(c)) last = std::max(last, position_.at(c));
          }
          last_use[out] = last;
        }
      }
      std::vector<const Value*> cuts, forks;
      ValueSet live;
      for (size_t i = 0; i < forward_order_.size(); ++i) {
        for (const Value* out : forward_order_[i]->outputs) {
          auto it = last_use.find(out);
          if (it != last_use.end() && it->second > static_cast<int>(i)) live.insert(out);
        }
        for (auto it = live.begin(); it != live.end();) {
          auto next = std::next(it);
          if (last_use.at(*it) <= static_cast<int>(i)) live.erase(it);
          it = next;
        }
        if (live.size() != 1) continue;
        const Value* cut = *live.begin();
        if (!cuts.empty() && cuts.back() == cut) continue;
        cuts.push_back(cut);
        absl::flat_hash_set<const Node*> readers;
        for (const Node* c : cut->consumers) {
          if (forward_.contains(c)) readers.insert(c);
        }
        if (readers.size() >= 2) forks.push_back(cut);
      }
      if (forks.size() >= 2) {
        boundaries = forks;
        r_.boundaries_from = "residual forks";
      } else if (!cuts.empty()) {
        const size_t every = std::max<size_t>(1, static_cast<size_t>(std::lround(std::sqrt(cuts.size()))));
        for (size_t i = every - 1; i < cuts.size(); i += every) boundaries.push_back(cuts[i]);
        r_.boundaries_from = absl::StrCat("one in ", every, " of ", cuts.size(), " cut points");
      }
    }
    std::sort(boundaries.begin(), boundaries.end(),
              [&](const Value* a, const Value* b) { return position_.at(a->producer) < position_.at(b->producer); });
    const size_t recomputed_blocks =
        options_.blocks > 0 ? std::min(boundaries.size(), static_cast<size_t>(options_.blocks)) : boundaries.size();
    r_.blocks_recomputed = static_cast<int>(recomputed_blocks);
    int last = -1;
    for (size_t i = 0; i < boundaries.size(); ++i) {
      const Value* b = boundaries[i];
      kept_.insert(b);
      r_.boundaries.push_back(b->name);
      if (i < recomputed_blocks) last = std::max(last, position_.at(b->producer));
    }
    // After the last block input: the head (and the loss), whose backward starts right
    // after the forward, is kept; after the first `blocks` of them, the later blocks and the
    // head recompute what SELECTIVE would.
    const bool partial = recomputed_blocks < boundaries.size();
    for (const Value* v : saved_) {
      if (position_.at(v->producer) <= last) continue;
      if (partial) {
        selective_zone_.insert(v);
      } else {
        kept_.insert(v);
      }
    }
    return absl::OkStatus();
  }

  absl::Status Rewrite() {
    // Clone in forward order, so a clone's producers are cloned first.
    absl::flat_hash_map<const Value*, Value*> clone_of;
    std::vector<std::pair<const Node*, Node*>> clones;
    for (const Node* n : forward_order_) {
      if (!to_clone_.contains(n)) continue;
      std::vector<Value*> inputs;
      for (Value* in : n->inputs) {
        auto it = in ? clone_of.find(in) : clone_of.end();
        inputs.push_back(it == clone_of.end() ? in : it->second);
      }
      MPC_ASSIGN_OR_RETURN(Node * c, g_.AddNode(n->op, inputs, n->attrs, g_.UniqueName("recompute/" + n->name)));
      if (c->outputs.size() != n->outputs.size()) {
        return absl::InternalError(absl::StrCat("recompute: the clone of '", n->name, "' has another output count"));
      }
      for (size_t i = 0; i < n->outputs.size(); ++i) {
        if (c->outputs[i]->dtype != n->outputs[i]->dtype || c->outputs[i]->shape != n->outputs[i]->shape) {
          return absl::InternalError(absl::StrCat("recompute: the clone of '", n->name, "' output ", i,
                                                  " has another type than the original"));
        }
        clone_of[n->outputs[i]] = c->outputs[i];
      }
      r_.extra_flops += EstimateFlops(*c);
      clones.emplace_back(n, c);
    }
    r_.cloned_nodes = static_cast<int>(clones.size());
    // The backward readers of each recomputed value read its clone.
    for (const Value* v : recomputed_) {
      Value* copy = clone_of.at(v);
      const std::vector<Node*> readers = v->consumers;
      for (Node* reader : readers) {
        if (!IsBackward(*reader)) continue;
        for (int i = 0; i < static_cast<int>(reader->inputs.size()); ++i) {
          if (reader->inputs[i] == v) g_.SetNodeInput(reader, i, copy);
        }
      }
      ++r_.recomputed;
      r_.recomputed_bytes += static_cast<int64_t>(v->bytes());
    }
    // Each clone runs right before its first reader (later clones read earlier ones, so
    // walking back settles every reader's rank first).
    for (auto it = clones.rbegin(); it != clones.rend(); ++it) {
      Node* c = it->second;
      int first = INT_MAX;
      for (const Value* out : c->outputs) {
        for (const Node* reader : out->consumers) first = std::min(first, reader->schedule_rank);
      }
      if (first != INT_MAX) c->schedule_rank = first;
    }
    // Whatever ran after the original (an update rewriting a weight it reads) runs after
    // the clone too.
    absl::flat_hash_map<const Node*, Node*> clone_node;
    for (const auto& [original, c] : clones) clone_node[original] = c;
    for (const auto& node : g_.nodes()) {
      const size_t deps = node->control_deps.size();
      for (size_t i = 0; i < deps; ++i) {
        auto it = clone_node.find(node->control_deps[i]);
        if (it != clone_node.end()) node->control_deps.push_back(it->second);
      }
    }
    return absl::OkStatus();
  }

  Graph& g_;
  const RecomputeOptions& options_;
  RecomputeResult& r_;
  NodeSet forward_;
  std::vector<Node*> forward_order_;
  absl::flat_hash_map<const Node*, int> position_;
  ValueSet batch_dependent_;
  std::vector<const Value*> saved_;
  ValueSet kept_;
  ValueSet selective_zone_;  // FULL over the first blocks only: the saved values after them
  NodeSet to_clone_;
  std::vector<const Value*> recomputed_;
};

}  // namespace

absl::StatusOr<bool> RecomputePass::Run(Graph& graph) {
  *result_ = RecomputeResult{};
  result_->policy = RecomputePolicyName(options_.policy);
  if (options_.policy == RecomputeOptions::Policy::kNone) return false;
  const Value* loss = loss_ ? loss_->loss : nullptr;
  if (!loss || !loss->producer) return absl::FailedPreconditionError("recompute: no loss; attach-loss must run first");
  Planner planner(graph, options_, *result_);
  MPC_RETURN_IF_ERROR(planner.Run(loss, loss_->labels));
  return result_->cloned_nodes > 0;
}

}  // namespace mpc
