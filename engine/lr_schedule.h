// Learning-rate schedules: constant; linear warmup followed by cosine or linear decay to a
// minimum at the last step; step decay. Each matches a torch.optim.lr_scheduler composition
// (tests/golden/make_schedule_golden.py says which; tests/engine/lr_schedule_test.cc checks).
#pragma once

#include <cstdint>

#include "proto/train_spec.pb.h"

namespace mpc {

// The optimizer's base learning rate from the spec.
double BaseLearningRate(const TrainSpec& spec);
// The rate for 0-based step `step` of `total_steps`.
double LearningRateAt(const TrainSpec& spec, int64_t step, int64_t total_steps);

}  // namespace mpc
