// Gradient accumulation (accumulate_steps): K micro-batches per optimizer step give the
// optimizer step of one batch K times larger. On the Fashion-MNIST MLP, 4 micro-batches of
// 25 reproduce batch 100's per-step losses (f32, within 1e-5) and weights; under fp16 with
// dynamic loss scaling and an injected overflow, both runs skip the same steps and move
// the loss scale the same way. Also: the memory plan holds one micro-batch of activations,
// the schedule counts optimizer steps, epochs drop the micro-batches that cannot fill a
// step, and a spec with too few examples for one step is an error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

std::string WriteSpec(const std::string& name, int batch, int accumulate, const std::string& extra) {
  return testing::WriteFashionMlpSpec(
      "grad_accum_" + name,
      absl::StrCat("batch_size: ", batch, "\naccumulate_steps: ", accumulate, "\n",
                   "optimizer { adamw { lr: 0.002 weight_decay: 0.01 } }\n",
                   "schedule { warmup_cosine { warmup_steps: 5 min_lr: 0.0001 } }\n", "seed: 7\n", extra));
}

std::unique_ptr<Engine> Create(const std::string& spec_path) {
  EngineOptions options;
  options.spec_path = spec_path;
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

TEST(GradAccumulationTest, FourMicroBatchesOf25MatchBatch100) {
  auto whole = Create(WriteSpec("whole", 100, 1, "steps: 30"));
  auto micro = Create(WriteSpec("micro", 25, 4, "steps: 30"));
  ASSERT_TRUE(whole && micro);
  for (int i = 0; i < 30; ++i) {
    auto a = whole->Step();
    auto b = micro->Step();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->lr, b->lr) << "step " << i + 1;
    EXPECT_NEAR(b->loss, a->loss, 1e-5) << "step " << i + 1;
    EXPECT_EQ(b->epoch, a->epoch);
  }
  for (const std::string& name : whole->ParameterNames()) {
    const std::vector<float> a = *whole->GetParameter(name), b = *micro->GetParameter(name);
    ASSERT_EQ(a.size(), b.size());
    double diff = 0, norm = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      diff += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
      norm += double(a[i]) * a[i];
    }
    EXPECT_LT(std::sqrt(diff / norm), 1e-5) << name;
  }
  // One micro-batch of activations: the plan of 25 examples is smaller than that of 100,
  // even with the accumulators (which are persistent, outside the arena).
  EXPECT_LT(micro->planned_peak_bytes(), whole->planned_peak_bytes());
}

TEST(GradAccumulationTest, Fp16SkipsTheSameStepsWithAnInjectedOverflow) {
  const std::string fp16 =
      "steps: 12\nprecision { compute: FP16 }\n"
      "loss_scaling { mode: DYNAMIC init_scale: 1024 growth_interval: 3 }\n"
      "debug { inject_nonfinite { step: 4 parameter: \"3.weight\" value: \"inf\" } }\n"
      "numerics { max_consecutive_skipped_steps: 0 }";
  auto whole = Create(WriteSpec("fp16_whole", 100, 1, fp16));
  auto micro = Create(WriteSpec("fp16_micro", 25, 4, fp16));
  ASSERT_TRUE(whole && micro);
  int skipped = 0;
  for (int i = 0; i < 12; ++i) {
    auto a = whole->Step();
    auto b = micro->Step();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    EXPECT_EQ(a->skipped, b->skipped) << "step " << i + 1;
    EXPECT_EQ(a->loss_scale, b->loss_scale) << "step " << i + 1;
    EXPECT_NEAR(b->loss, a->loss, 2e-3 * std::abs(a->loss)) << "step " << i + 1;  // fp16 rounding
    skipped += b->skipped;
  }
  EXPECT_EQ(skipped, 1) << "the injected overflow at step 5 (0-based 4) skips exactly that step";
}

using Weights = std::map<std::string, std::vector<float>>;

Weights AllWeights(Engine& e) {
  Weights w;
  for (const std::string& name : e.ParameterNames()) w[name] = *e.GetParameter(name);
  return w;
}

// ||(a1 - a0) - (b1 - b0)|| / ||b1 - b0|| over every parameter: how far one run's update
// is from another's.
double UpdateDistance(const Weights& a0, const Weights& a1, const Weights& b0, const Weights& b1) {
  double diff = 0, norm = 0;
  for (const auto& [name, w] : b1) {
    for (size_t i = 0; i < w.size(); ++i) {
      const double ua = double(a1.at(name)[i]) - a0.at(name)[i], ub = double(w[i]) - b0.at(name)[i];
      diff += (ua - ub) * (ua - ub);
      norm += ub * ub;
    }
  }
  return std::sqrt(diff / norm);
}

// FP8 under every recipe, every GEMM in FP8: an optimizer step of 4 micro-batches of 25
// against one batch of 100, from the same weights. The tolerance is the recipe's own error:
// the accumulated update must be closer to batch 100's in FP8 than that is to batch 100's
// in f32. Delayed scaling quantizes every micro-batch with the step's scales (the update is
// held to the step's end: passes/accumulate_gradients.h), so only the f32 summation order
// differs (2e-4 when written; 0.18 while the scales moved after every micro-batch). The
// just-in-time recipes scale each micro-batch's tensors by their own amaxes: 0.105 (current,
// per-tensor E5M2 gradients), 0.036 (rowwise), 0.025 (block), against FP8 errors of 0.13 to
// 0.20. SGD, whose update is the gradient (Adam's first update is about lr times its sign).
std::string WriteSgdSpec(const std::string& name, int batch, int accumulate, const std::string& extra) {
  return testing::WriteFashionMlpSpec(
      "grad_accum_" + name, absl::StrCat("batch_size: ", batch, "\naccumulate_steps: ", accumulate, "\n",
                                         "optimizer { sgd { lr: 0.05 } }\nseed: 7\nsteps: 3\n",
                                         "padding { multiple: 16 }\n", extra));
}

TEST(GradAccumulationTest, Fp8EveryRecipeMatchesTheWholeBatchWithinFp8sOwnError) {
  auto reference = Create(WriteSgdSpec("fp8_ref_f32", 100, 1, ""));
  ASSERT_TRUE(reference);
  const Weights w0 = AllWeights(*reference);
  ASSERT_TRUE(reference->Step().ok());
  const Weights f32 = AllWeights(*reference);
  for (const char* recipe : {"DELAYED", "CURRENT", "ROWWISE", "BLOCK"}) {
    SCOPED_TRACE(recipe);
    const std::string fp8 =
        absl::StrCat("precision { compute: FP8 }\nfp8 { include_first_last: true recipe: ", recipe, " }\n");
    auto whole = Create(WriteSgdSpec(absl::StrCat("fp8_whole_", recipe), 100, 1, fp8));
    auto micro = Create(WriteSgdSpec(absl::StrCat("fp8_micro_", recipe), 25, 4, fp8));
    ASSERT_TRUE(whole && micro);
    ASSERT_EQ(AllWeights(*whole), w0);
    ASSERT_EQ(AllWeights(*micro), w0);
    auto a = whole->Step();
    auto b = micro->Step();
    ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
    // The step's loss is the mean over the 100 examples either way; only the FP8 forward
    // (scales from 25 rows instead of 100) differs.
    EXPECT_NEAR(b->loss, a->loss, 1e-2 * a->loss);
    const double accumulation = UpdateDistance(w0, AllWeights(*micro), w0, AllWeights(*whole));
    const double fp8_error = UpdateDistance(w0, AllWeights(*whole), w0, f32);
    std::printf("fp8 %s: step 1 of 4 x 25 against 100: loss %.6f vs %.6f, update %.4f relative; "
                "100 in fp8 against f32: update %.4f relative\n",
                recipe, b->loss, a->loss, accumulation, fp8_error);
    EXPECT_LT(accumulation, fp8_error);
    if (std::string(recipe) != "DELAYED") continue;
    EXPECT_LT(accumulation, 1e-3);
    // The held update ran once in the step of 4 micro-batches: each history holds exactly
    // one amax (in its last slot, the largest of the micro-batches'), the slot being filled
    // is empty again, and the scale moved from its initial 1 — as in the batch-100 run.
    int histories = 0;
    for (const std::string& name : micro->StateNames()) {
      if (!absl::EndsWith(name, ".fp8_amax_history")) continue;
      ++histories;
      const std::vector<float> h = *micro->GetParameter(name), hw = *whole->GetParameter(name);
      int filled = 0;
      for (float v : h) filled += v != 0.0f;
      EXPECT_EQ(filled, 1) << name;
      EXPECT_GT(h.back(), 0.0f) << name;
      EXPECT_EQ(h.front(), 0.0f) << name;
      const std::string scale = name.substr(0, name.size() - std::string("amax_history").size()) + "scale";
      EXPECT_NE((*micro->GetParameter(scale))[0], 1.0f) << scale;
      // Forward amaxes: the largest over 4 x 25 rows is batch 100's largest (the weights'
      // exactly; activations up to the f32 summation order of their GEMMs).
      if (absl::StrContains(name, "/weight")) EXPECT_EQ(h.back(), hw.back()) << name;
      if (absl::StrContains(name, "/input")) EXPECT_NEAR(h.back(), hw.back(), 1e-2 * hw.back()) << name;
    }
    EXPECT_EQ(histories, 9);  // 3 GEMMs x (input, weight, grad_output)
  }
}

TEST(GradAccumulationTest, EpochsCountOptimizerStepsAndDropPartialSteps) {
  // 2000 examples, micro-batches of 30: 66 per epoch, 16 steps of 4 (2 micro-batches left over).
  auto engine = Create(WriteSpec("epochs", 30, 4, "epochs: 2"));
  ASSERT_TRUE(engine);
  EXPECT_EQ(engine->total_steps(), 32);
  auto summary = engine->Train();
  ASSERT_TRUE(summary.ok()) << summary.status();
  EXPECT_EQ(summary->steps, 32);
}

TEST(GradAccumulationTest, TooFewExamplesForOneStepIsASpecError) {
  EngineOptions options;
  options.spec_path = WriteSpec("too_few", 500, 5, "steps: 3");
  auto engine = Engine::Create(options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("accumulate_steps"), absl::string_view::npos) << engine.status();
  options.spec_path = WriteSpec("zero", 25, 0, "steps: 3");
  engine = Engine::Create(options);
  ASSERT_FALSE(engine.ok());
  EXPECT_NE(engine.status().message().find("accumulate_steps: 0 must be >= 1"), absl::string_view::npos)
      << engine.status();
}

}  // namespace
}  // namespace mpc
