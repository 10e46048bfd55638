// The delayed-scaling update rule (see float8_scaling.h).
#include "graph/float8_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mpc {

float UpdateFp8Meta(float* history, int64_t len, float* scale, float* scale_inv, const Fp8ScaleRecipe& r) {
  float amax = history[0];
  if (!r.most_recent) {
    // NaN must win (std::max would drop it): it makes the amax non-finite, so the old
    // scale is kept.
    for (int64_t i = 1; i < len; ++i) {
      if (std::isnan(history[i]) || history[i] > amax) amax = history[i];
    }
  }
  if (std::isfinite(amax)) amax = std::max(amax, r.amax_floor);
  if (std::isfinite(amax) && amax > 0) {
    float s = (r.fp8_max / amax) / std::ldexp(1.0f, r.margin);
    if (std::isinf(s)) s = std::numeric_limits<float>::max();
    if (s > 0) *scale = s;
  }
  *scale_inv = 1.0f / *scale;
  if (!std::isfinite(history[0])) history[0] = 0.0f;
  std::rotate(history, history + 1, history + len);
  history[0] = 0.0f;
  return amax;
}

float Fp8DynamicScale(float amax, const Fp8DynamicRecipe& r) {
  if (!std::isfinite(amax)) return 1.0f;
  amax = std::max(amax, r.amax_floor);
  if (!(amax > 0)) return 1.0f;
  float s = (r.fp8_max / amax) / std::ldexp(1.0f, r.margin);
  if (std::isinf(s)) s = std::numeric_limits<float>::max();
  if (!(s > 0)) return 1.0f;  // a margin past the f32 range
  if (r.power_of_two) {
    int exponent = 0;
    std::frexp(s, &exponent);  // s = m * 2^exponent, m in [0.5, 1)
    s = std::ldexp(1.0f, exponent - 1);
  }
  return s;
}

}  // namespace mpc
