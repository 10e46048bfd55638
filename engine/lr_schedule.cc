// Schedule formulas (see lr_schedule.h).
#include "engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace mpc {

double BaseLearningRate(const TrainSpec& spec) {
  if (spec.optimizer().has_adamw()) return spec.optimizer().adamw().lr();
  return spec.optimizer().sgd().lr();
}

namespace {

// Warmup: step s of W runs at base * (s + 1) / W (PyTorch's LinearLR from 1/W to 1).
double WarmupRate(double base, int64_t step, int64_t warmup_steps) {
  return base * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
}

// How far into the decay step `step` is, 0 to 1, the decay ending exactly at the last step.
double DecayProgress(int64_t step, int64_t warmup_steps, int64_t total_steps) {
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - warmup_steps - 1);
  return std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps));
}

}  // namespace

double LearningRateAt(const TrainSpec& spec, int64_t step, int64_t total_steps) {
  const double base = BaseLearningRate(spec);
  const ScheduleSpec& schedule = spec.schedule();
  if (schedule.has_warmup_cosine()) {
    const auto& w = schedule.warmup_cosine();
    if (step < w.warmup_steps()) return WarmupRate(base, step, w.warmup_steps());
    const double progress = DecayProgress(step, w.warmup_steps(), total_steps);
    return w.min_lr() + 0.5 * (base - w.min_lr()) * (1.0 + std::cos(M_PI * progress));
  }
  if (schedule.has_warmup_linear()) {
    const auto& w = schedule.warmup_linear();
    if (step < w.warmup_steps()) return WarmupRate(base, step, w.warmup_steps());
    return base + (w.min_lr() - base) * DecayProgress(step, w.warmup_steps(), total_steps);
  }
  if (schedule.has_step_decay()) {
    const auto& d = schedule.step_decay();
    return base * std::pow(static_cast<double>(d.gamma()), static_cast<double>(step / d.step_size()));
  }
  return base;
}

}  // namespace mpc
