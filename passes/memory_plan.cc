// Liveness analysis and offset assignment (see memory_plan.h).
#include "passes/memory_plan.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "base/status_macros.h"
#include "graph/capabilities.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

struct Interval {
  const Value* value;
  int64_t size;
  int first, last;  // step indices, inclusive
};

int64_t Align(int64_t bytes) { return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment; }

}  // namespace

// A view op's output (OpDef::view) is planned at its input's offset, so its copy kernel
// finds src == dst and does nothing. Activations are never written after they are
// produced, so sharing is safe.
bool IsPlannedView(const Node& n) {
  const OpDef* def = OpRegistry::Global().Find(n.op);
  return def && def->view && n.inputs[0]->dtype == n.outputs[0]->dtype && n.inputs[0]->bytes() == n.outputs[0]->bytes();
}

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, const std::vector<Node*>& order) {
  MemoryPlan plan;
  absl::flat_hash_map<const Node*, int> position;
  for (size_t i = 0; i < order.size(); ++i) position[order[i]] = static_cast<int>(i);
  const int end = static_cast<int>(order.size());

  // A view's output shares its input's bytes: both map to the value that owns them, whose
  // lifetime covers every reader of either.
  absl::flat_hash_map<const Value*, const Value*> owner;
  for (const Node* n : order) {
    const Value* in = n->inputs.empty() ? nullptr : n->inputs[0];
    if (IsPlannedView(*n) && in->kind == ValueKind::kActivation && in->producer) {
      auto it = owner.find(in);
      owner[n->outputs[0]] = it == owner.end() ? in : it->second;
    }
  }
  // An output that is a persistent input's bytes takes no arena space.
  for (const Node* n : order) {
    const OpDef* def = OpRegistry::Global().Find(n->op);
    if (!def || !def->output_is_state_input || n->inputs.empty() || n->outputs.empty()) continue;
    const Value* state = n->inputs[0];
    const Value* out = n->outputs[0];
    if (state->persistent() && state->bytes() == out->bytes() && state->dtype == out->dtype && !graph.IsOutput(out)) {
      plan.state_aliases[out] = state;
    }
  }
  absl::flat_hash_map<const Value*, size_t> interval_of;
  std::vector<Interval> intervals;
  for (const auto& v : graph.values()) {
    if (v->kind != ValueKind::kActivation) {
      const int64_t bytes = static_cast<int64_t>(v->bytes());
      plan.unplanned_bytes += bytes;
      if (v->persistent()) plan.persistent_bytes += bytes;
      continue;
    }
    if (!v->producer || owner.contains(v.get()) || plan.state_aliases.count(v.get()) > 0) continue;
    Interval iv{v.get(), Align(std::max<int64_t>(1, static_cast<int64_t>(v->bytes()))), position[v->producer], 0};
    iv.last = iv.first;
    interval_of[v.get()] = intervals.size();
    intervals.push_back(iv);
    plan.total_activation_bytes += iv.size;
  }
  for (const auto& v : graph.values()) {
    if (v->kind != ValueKind::kActivation || !v->producer || plan.state_aliases.count(v.get()) > 0) continue;
    auto it = owner.find(v.get());
    Interval& iv = intervals[interval_of[it == owner.end() ? v.get() : it->second]];
    for (const Node* c : v->consumers) iv.last = std::max(iv.last, position[c]);
    if (graph.IsOutput(v.get())) iv.last = end;
  }
  // Largest first; ties by first use then id, so the plan is deterministic.
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    if (a.size != b.size) return a.size > b.size;
    if (a.first != b.first) return a.first < b.first;
    return a.value->id < b.value->id;
  });
  struct Placed {
    int64_t offset, size;
    int first, last;
  };
  std::vector<Placed> placed;
  for (const Interval& iv : intervals) {
    // Collect the byte ranges of already-placed values alive at the same time, then
    // take the smallest gap that fits (best fit), or the end.
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (const Placed& p : placed) {
      if (p.first <= iv.last && iv.first <= p.last) busy.emplace_back(p.offset, p.offset + p.size);
    }
    std::sort(busy.begin(), busy.end());
    int64_t best = -1, best_gap = INT64_MAX, cursor = 0;
    for (const auto& [lo, hi] : busy) {
      if (lo > cursor && lo - cursor >= iv.size && lo - cursor < best_gap) {
        best = cursor;
        best_gap = lo - cursor;
      }
      cursor = std::max(cursor, hi);
    }
    if (best < 0) best = cursor;
    placed.push_back({best, iv.size, iv.first, iv.last});
    plan.offsets[iv.value] = best;
    plan.peak_bytes = std::max(plan.peak_bytes, best + iv.size);
  }
  for (const auto& [view, bytes_owner] : owner) plan.offsets[view] = plan.offsets[bytes_owner];
  return plan;
}

absl::StatusOr<bool> MemoryPlanPass::Run(Graph& graph) {
  MPC_ASSIGN_OR_RETURN(result_->order, graph.TopologicalOrder());
  MPC_ASSIGN_OR_RETURN(result_->plan, PlanMemory(graph, result_->order));
  return false;  // annotates; the graph itself is unchanged
}

}  // namespace mpc
