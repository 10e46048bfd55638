// fuse-updates: replaces the per-parameter optimizer updates (SgdUpdate / AdamWUpdate)
// that share hyper-parameters, learning rate and gate flag with one MultiSgdUpdate /
// MultiAdamWUpdate (graph/multi_tensor_update.h), so a backend runs the whole optimizer
// step as one multi-tensor launch instead of one kernel per parameter (what apex's and
// torch's foreach/fused optimizers do). The values computed are the same, element for
// element; the fused node runs after every reader of every parameter it updates, so the
// gradients stay live until the end of the step, as they do in PyTorch's optimizer.step().
#pragma once

#include "passes/pass.h"

namespace mpc {

class FuseUpdatesPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-updates"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
