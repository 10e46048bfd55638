// Learning-rate schedules: constant, and linear warmup followed by cosine decay.
#pragma once

#include <cstdint>

#include "proto/train_spec.pb.h"

namespace mpc {

// The optimizer's base learning rate from the spec.
double BaseLearningRate(const TrainSpec& spec);
// The rate for 0-based step `step` of `total_steps`.
double LearningRateAt(const TrainSpec& spec, int64_t step, int64_t total_steps);

}  // namespace mpc
