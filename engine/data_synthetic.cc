// Synthetic classification data: Normal(0,1) features and labels from a random linear
// teacher (label = argmax of x·W), so a model can actually learn the task. Used by tests,
// benchmarks and smoke runs that should not depend on files.
//
// Reproducibility: std::normal_distribution's output is implementation-defined (it
// differs between libstdc++ and libc++), so normals are drawn with our own Box–Muller
// transform on std::mt19937_64, whose sequence the C++ standard fixes. The same seed
// gives the same data with any standard library (up to last-bit differences between
// C math libraries' log/sin/cos, which can flip a label only on an exact tie).
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "engine/dataset.h"

namespace mpc {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;

class NormalSampler {
 public:
  explicit NormalSampler(uint64_t seed) : rng_(seed) {}

  double Next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    // u1 in (0, 1] so log(u1) is finite; u2 in [0, 1).
    const double u1 = 1.0 - Uniform();
    const double u2 = Uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = kTwoPi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

 private:
  // 53 random bits -> a double in [0, 1), exactly representable.
  double Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

  std::mt19937_64 rng_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace

// Preconditions (checked by LoadDataSource, which reports spec errors): num_examples,
// num_classes and every feature dimension positive. Out-of-range values are clamped here
// only so a bad direct call cannot allocate a negative size.
Dataset MakeSynthetic(const SyntheticData& spec) {
  const int64_t n = std::max<int64_t>(0, spec.num_examples());
  const int64_t classes = std::max<int32_t>(1, spec.num_classes());
  Shape shape = {n};
  if (spec.feature_shape_size() == 0) {
    shape.push_back(16);
  } else {
    for (int64_t d : spec.feature_shape()) shape.push_back(std::max<int64_t>(1, d));
  }
  const int64_t features_per_example = NumElements(Shape(shape.begin() + 1, shape.end()));

  Dataset data;
  data.features = Tensor(DType::kF32, shape);
  data.labels = Tensor(DType::kI64, {n});
  // Draw order is part of the contract: all features (row-major), then the teacher.
  NormalSampler normal(spec.seed());
  float* x = data.features.data<float>();
  for (int64_t i = 0; i < n * features_per_example; ++i) x[i] = static_cast<float>(normal.Next());
  std::vector<double> teacher(static_cast<size_t>(features_per_example * classes));
  for (double& w : teacher) w = normal.Next();

  // Logits in f64 over the f32 features, so labels do not depend on summation rounding.
  std::vector<double> logits(static_cast<size_t>(classes));
  int64_t* labels = data.labels.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    std::fill(logits.begin(), logits.end(), 0.0);
    const float* row = x + i * features_per_example;
    for (int64_t f = 0; f < features_per_example; ++f) {
      const double xf = row[f];
      const double* w = teacher.data() + f * classes;
      for (int64_t c = 0; c < classes; ++c) logits[c] += xf * w[c];
    }
    int64_t best = 0;
    for (int64_t c = 1; c < classes; ++c) {
      if (logits[c] > logits[best]) best = c;
    }
    labels[i] = best;
  }
  return data;
}

}  // namespace mpc
