// memory-plan: fixes the execution order (topological, deterministic) and gives every
// activation an offset in one arena. A value is live from the step that produces it
// to its last reader (graph outputs to the end); values whose lifetimes do not overlap
// share bytes. Placement is greedy best-fit by decreasing size, the usual heuristic for
// offline static allocation. The planned peak is known before anything runs. A Reshape,
// Flatten, Squeeze or Unsqueeze of an activation is a view: its output is placed at its
// input's offset (one buffer, alive for the readers of both), so it costs no copy.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class MemoryPlanPass : public Pass {
 public:
  explicit MemoryPlanPass(MemoryPlanResult* result) : result_(result) {}
  std::string_view name() const override { return "memory-plan"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  MemoryPlanResult* result_;
};

absl::StatusOr<MemoryPlan> PlanMemory(const Graph& graph, const std::vector<Node*>& order);

// Whether the plan places `n`'s output at its input's offset (OpDef::view, same dtype and
// bytes) when that input is an activation: one buffer for both.
bool IsPlannedView(const Node& n);

}  // namespace mpc
