// Schedule formulas (see lr_schedule.h).
#include "engine/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace mpc {

double BaseLearningRate(const TrainSpec& spec) {
  if (spec.optimizer().has_adamw()) return spec.optimizer().adamw().lr();
  return spec.optimizer().sgd().lr();
}

double LearningRateAt(const TrainSpec& spec, int64_t step, int64_t total_steps) {
  const double base = BaseLearningRate(spec);
  if (!spec.schedule().has_warmup_cosine()) return base;
  const auto& w = spec.schedule().warmup_cosine();
  if (step < w.warmup_steps()) return base * static_cast<double>(step + 1) / static_cast<double>(w.warmup_steps());
  const int64_t decay_steps = std::max<int64_t>(1, total_steps - w.warmup_steps() - 1);
  const double progress = std::min(1.0, static_cast<double>(step - w.warmup_steps()) / decay_steps);
  return w.min_lr() + 0.5 * (base - w.min_lr()) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace mpc
