// A single amax spike under each FP8 scaling recipe (issue 46's spike test): a stream of
// N(0,1) tensors, one of which holds a single value ~17000x the usual amax (a gradient blow-up). Delayed scaling
// quantizes the spike step with the scale of the steps before, so the spike is clipped to
// the format's range; the spike's amax then sits in the history, and the scale stays small
// (the ordinary values lose precision) for exactly as many steps as the window covers:
// amax_history_len steps with MAX, one with MOST_RECENT. Just-in-time scaling represents
// the spike in its own step (the rest of that tensor, or only of its row or tile, pays)
// and is back to normal the step after. The numbers are printed for docs/fp8-recipes.md.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <tuple>
#include <vector>

#include "graph/float8.h"
#include "graph/float8_scaling.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"
#include "tests/passes/fp8_pass_util.h"

namespace mpc {
namespace {

constexpr int kRows = 32, kCols = 128, kSpikeStep = 40, kSteps = 1200;
constexpr float kSpike = 65536.0f;  // ~17000x the amax of 4096 N(0,1) draws (about 3.9)

std::vector<float> StepTensor(int step) {
  std::mt19937 rng(1000 + step);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(kRows * kCols);
  for (float& v : x) v = normal(rng);
  if (step == kSpikeStep) x[5 * kCols + 7] = kSpike;
  return x;
}

// Relative RMS error of the quantize-dequantize of x (spike element left out) and the
// dequantized value of the spike element.
struct StepError {
  double rms = 0;
  float spike = 0;
};

StepError Measure(const std::vector<float>& x, const std::vector<float>& scale_of_element) {
  double err = 0, ref = 0;
  StepError out;
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = scale_of_element[i];
    const float q = RoundToF8E4M3(x[i] * s) * (1.0f / s);
    if (x[i] == kSpike) {
      out.spike = q;
      continue;
    }
    err += (q - x[i]) * (q - x[i]);
    ref += static_cast<double>(x[i]) * x[i];
  }
  out.rms = std::sqrt(err / ref);
  return out;
}

struct DelayedOutcome {
  float spike_quantized = 0;
  int small_scale_steps = 0;  // steps after the spike quantized with a scale < 1/16 of the usual
  double rms_normal = 0, rms_spike_step = 0, rms_small = 0;
};

DelayedOutcome RunDelayed(int history_len, bool most_recent) {
  std::vector<float> history(history_len, 0.0f);
  float scale = 1.0f, scale_inv = 1.0f, usual_scale = 0;
  Fp8ScaleRecipe recipe;
  recipe.most_recent = most_recent;
  DelayedOutcome out;
  for (int step = 0; step < kSteps; ++step) {
    const std::vector<float> x = StepTensor(step);
    const StepError e = Measure(x, std::vector<float>(x.size(), scale));
    if (step == kSpikeStep - 1) {
      usual_scale = scale;
      out.rms_normal = e.rms;
    }
    if (step == kSpikeStep) {
      out.spike_quantized = e.spike;
      out.rms_spike_step = e.rms;
    }
    if (step > kSpikeStep && scale < usual_scale / 16) {
      ++out.small_scale_steps;
      if (step == kSpikeStep + 1) out.rms_small = e.rms;
    }
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    history[0] = std::max(history[0], amax);
    UpdateFp8Meta(history.data(), history_len, &scale, &scale_inv, recipe);
  }
  return out;
}

TEST(Fp8SpikeTest, DelayedScalingClipsTheSpikeThenStaysSmallForTheWholeWindow) {
  for (const auto& [len, most_recent, small_steps] :
       std::vector<std::tuple<int, bool, int>>{{1024, false, 1024}, {16, false, 16}, {1024, true, 1}}) {
    const DelayedOutcome d = RunDelayed(len, most_recent);
    std::printf("delayed len %d %s: spike %.0f quantized to %.3f; scale < 1/16 of usual for %d steps; "
                "relative RMS error of the other values %.4f before, %.4f in the spike step, %.4f the step after\n",
                len, most_recent ? "MOST_RECENT" : "MAX", kSpike, d.spike_quantized, d.small_scale_steps,
                d.rms_normal, d.rms_spike_step, d.rms_small);
    // Clipped: quantized with the previous scale, the spike saturates at 448 / scale (about
    // the usual amax).
    EXPECT_LT(d.spike_quantized, 8.0f);
    EXPECT_EQ(d.small_scale_steps, small_steps) << len << (most_recent ? " most_recent" : " max");
    EXPECT_GT(d.rms_small, 2 * d.rms_normal);  // ordinary values fall into E4M3's subnormals
  }
}

// Just-in-time scaling, through the Fp8QuantizeDynamic CPU kernel: the spike step's scale
// comes from the spike. Per tensor (current) every value of that step pays; per row
// (rowwise; 1x128 tiles are the same here, a row being one tile) only the spike's row,
// every other row quantizing bit for bit as without the spike. Nothing carries over: the
// step after quantizes as if the spike had never been.
TEST(Fp8SpikeTest, JustInTimeScalingKeepsTheSpikeAndOnlyItsGroupPays) {
  const int spike_index = 5 * kCols + 7;
  for (const bool rowwise : {false, true}) {
    const std::string granularity = rowwise ? "rows" : "tensor";
    auto quantize = [&](const std::vector<float>& x) {
      return fp8_testing::QuantizeDynamicOnCpu(Tensor::FromVector<float>({kRows, kCols}, x), granularity, 1);
    };
    auto rms = [&](const std::vector<float>& x, const std::vector<float>& q) {
      double err = 0, ref = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (static_cast<int>(i) == spike_index) continue;
        err += (double(q[i]) - x[i]) * (double(q[i]) - x[i]);
        ref += double(x[i]) * x[i];
      }
      return std::sqrt(err / ref);
    };
    const std::vector<float> before = StepTensor(kSpikeStep - 1), spiked = StepTensor(kSpikeStep),
                             after = StepTensor(kSpikeStep + 1);
    std::vector<float> unspiked = spiked;
    unspiked[spike_index] = 0.5f;
    const std::vector<float> q_before = quantize(before), q_spiked = quantize(spiked), q_after = quantize(after),
                             q_unspiked = quantize(unspiked);
    const double rms_before = rms(before, q_before), rms_spike_step = rms(spiked, q_spiked),
                 rms_after = rms(after, q_after), rms_unspiked = rms(spiked, q_unspiked);
    std::printf("%s: spike %.0f quantized to %.1f; relative RMS error of the other values %.4f before, %.4f in the "
                "spike step (%.4f without the spike), %.4f the step after\n",
                rowwise ? "rowwise" : "current", kSpike, q_spiked[spike_index], rms_before, rms_spike_step,
                rms_unspiked, rms_after);
    EXPECT_NEAR(q_spiked[spike_index], kSpike, kSpike * 1e-6);  // scaled to 448 exactly; back through 1/scale in f32
    int changed = 0;
    for (size_t i = 0; i < spiked.size(); ++i) {
      if (static_cast<int>(i) != spike_index) changed += q_spiked[i] != q_unspiked[i];
      if (rowwise && static_cast<int>(i) / kCols != 5) {
        ASSERT_EQ(q_spiked[i], q_unspiked[i]) << "row " << i / kCols << ": only the spike's row may change";
      }
    }
    EXPECT_GT(changed, rowwise ? kCols / 2 : kRows * kCols / 2);
    if (!rowwise) EXPECT_GT(rms_spike_step, 2 * rms_unspiked);  // the whole tensor pays in that step
  }
}

}  // namespace
}  // namespace mpc
