// When a training run stops on non-finite numbers (TrainSpec.numerics): a non-finite
// loss, too many consecutive skipped steps, or a dynamic loss scale that fell below its
// floor. Each is an error that says what happened, at which step, and what to try next;
// the engine stops before anything more is evaluated, checkpointed or exported.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "engine/mpc.h"
#include "proto/train_spec.pb.h"

namespace mpc {

class NumericsGuard {
 public:
  NumericsGuard() = default;
  NumericsGuard(const NumericsSpec& spec, bool dynamic_loss_scaling, bool checking_every_op)
      : spec_(spec), dynamic_(dynamic_loss_scaling), checking_(checking_every_op) {}

  // After each step: `scale_after` is the loss scale the next step will use (ignored
  // without dynamic loss scaling).
  absl::Status Check(const StepMetrics& step, double scale_after);

 private:
  NumericsSpec spec_;
  bool dynamic_ = false;
  bool checking_ = false;
  int64_t consecutive_skips_ = 0;
};

}  // namespace mpc
