// defer-widening-casts: a Cast that widens (bf16/fp16 -> f32, or any cast to more bytes per
// element) runs where its first reader would run, not as soon as its input exists.
//
// Under autocast every convolution weight gradient is a bf16 ConvGradWeight followed by a
// Cast to f32 for the f32 optimizer, which reads all gradients only at the end of the
// step. Cast eagerly, each f32 gradient sits in the arena from its layer's backward to the
// end; deferred, the bf16 one (half the bytes) does, and the f32 copies appear after the
// activations are gone. Only the order changes: every value is computed exactly as before.
//
// Runs last before the memory plan, on the graph that will run; it sets schedule_rank,
// which the plan's topological order follows (Graph::TopologicalOrder).
#pragma once

#include "passes/pass.h"

namespace mpc {

class DeferWideningCastsPass : public Pass {
 public:
  std::string_view name() const override { return "defer-widening-casts"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
