// optimizer: appends one in-place update per trainable parameter (SgdUpdate or
// AdamWUpdate, torch.optim semantics) on the FP32 master weight, creates the optimizer
// state (momentum buffers, Adam moments and step counters) as persistent state values,
// and adds the scalar learning-rate input. Each update is ordered after every other
// reader of its parameter, so no forward or backward op sees a half-updated weight.
// When loss scaling found non-finite gradients (CompileInfo::found_nonfinite), every
// update is gated on that flag and leaves all state untouched.
#pragma once

#include "passes/pass.h"

namespace mpc {

class OptimizerPass : public Pass {
 public:
  std::string_view name() const override { return "optimizer"; }
  absl::StatusOr<bool> Run(Graph& graph, const PassContext& ctx) override;
};

}  // namespace mpc
