// Gradient accumulation (accumulate_steps): K micro-batches per optimizer step give the
// optimizer step of one batch K times larger. On the Fashion-MNIST MLP, 4 micro-batches of
// 25 reproduce batch 100's per-step losses (f32, within 1e-5) and weights; under fp16 with
// dynamic loss scaling and an injected overflow, both runs skip the same steps and move
// the loss scale the same way. Also: the memory plan holds one micro-batch of activations,
// the schedule counts optimizer steps, epochs drop the micro-batches that cannot fill a
// step, and a spec with too few examples for one step is an error.
#include <cmath>
#include <fstream>

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
