// Loss scaling end to end through the engine: a step with a non-finite gradient is
// skipped with every parameter and optimizer moment bitwise unchanged and the scale
// halved; the scale doubles after growth_interval clean steps; clipping sees unscaled
// gradients; scaler state survives checkpoint/resume exactly.
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

double Scale(const Engine& e) { return (*e.GetParameter("loss_scale"))[0]; }

TEST(LossScalingTest, InjectedOverflowSkipsTheStepBitwiseAndBacksOffThenGrows) {
  const std::string dir = testing::MakeTempDir("ls_fault");
  EngineOptions options;
  options.spec_path =
      testing::WriteGoldenSpec("adamw",
                               "loss_scaling { mode: DYNAMIC init_scale: 1024 growth_interval: 3 }\n"
                               "debug { inject_nonfinite { step: 4 parameter: \"2.weight\" value: \"nan\" } }",
                               dir, "train.spec");
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  for (int i = 0; i < 4; ++i) {
    auto s = e.Step();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_FALSE(s->skipped) << "step " << s->step;
  }
  // Steps 1-3 grew the scale once (interval 3): 1024 -> 2048; step 4 is clean (tracker 1).
  EXPECT_EQ(Scale(e), 2048);
  const auto before = testing::SnapshotState(e);
  auto faulty = e.Step();  // 0-based step 4: NaN injected
  ASSERT_TRUE(faulty.ok()) << faulty.status();
  EXPECT_TRUE(faulty->skipped);
  EXPECT_EQ(faulty->loss_scale, 2048);
  const auto after = testing::SnapshotState(e);
  for (const auto& [name, values] : before) {
    if (name.rfind("loss_scale", 0) == 0) continue;
    EXPECT_EQ(values, after.at(name)) << name << " changed during a skipped step";
  }
  EXPECT_EQ(Scale(e), 1024);  // halved
  for (int i = 0; i < 2; ++i) {
    auto s = e.Step();
    ASSERT_TRUE(s.ok());
    EXPECT_FALSE(s->skipped);
    EXPECT_TRUE(std::isfinite(s->loss));
  }
  EXPECT_EQ(Scale(e), 1024);
  ASSERT_TRUE(e.Step().ok());  // the third clean step since the overflow
  EXPECT_EQ(Scale(e), 2048);
}

TEST(LossScalingTest, ClippingSeesUnscaledGradients) {
  const std::string dir = testing::MakeTempDir("ls_clip");
  const std::string clip = "optimizer { clip_grad_norm: 0.05 }\n";
  EngineOptions plain, scaled;
  plain.spec_path = testing::WriteGoldenSpec("sgd", "", dir, "train.spec");
  // The golden spec already sets `optimizer { sgd {...} }`; merge the clip field in.
  std::ifstream in(plain.spec_path);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text = absl::StrReplaceAll(text, {{"weight_decay: 0.001 } }", "weight_decay: 0.001 } clip_grad_norm: 0.05 }"}});
  std::ofstream(plain.spec_path) << text;
  const std::string scaled_path = dir + "/scaled.spec";
  std::ofstream(scaled_path) << text << "\nloss_scaling { mode: STATIC static_scale: 4096 }\n";
  scaled.spec_path = scaled_path;
  auto a = Engine::Create(plain);
  auto b = Engine::Create(scaled);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  int clipped = 0;
  for (int i = 0; i < 10; ++i) {
    auto sa = (*a)->Step();
    auto sb = (*b)->Step();
    ASSERT_TRUE(sa.ok() && sb.ok());
    ASSERT_GE(sa->grad_norm, 0);
    EXPECT_EQ(sb->loss_scale, 4096);
    EXPECT_NEAR(sb->grad_norm, sa->grad_norm, 1e-6 * sa->grad_norm) << "step " << i + 1;
    EXPECT_NEAR(sb->loss, sa->loss, 1e-6 * sa->loss) << "step " << i + 1;
    clipped += sa->grad_norm > 0.05;
  }
  EXPECT_GT(clipped, 5);  // the clip was active, so the comparison means something
  (void)clip;
}

TEST(LossScalingTest, ScalerStateResumesExactly) {
  const std::string dir = testing::MakeTempDir("ls_resume");
  EngineOptions options;
  options.spec_path = testing::WriteGoldenSpec("adamw",
                                               "loss_scaling { mode: DYNAMIC init_scale: 256 growth_interval: 4 }\n"
                                               "debug { inject_nonfinite { step: 2 parameter: \"0.bias\" } }",
                                               dir, "train.spec");
  auto straight = Engine::Create(options);
  ASSERT_TRUE(straight.ok()) << straight.status();
  std::vector<StepMetrics> all;
  for (int i = 0; i < 20; ++i) all.push_back(*(*straight)->Step());

  auto first = Engine::Create(options);
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*first)->Step().ok());
  ASSERT_TRUE((*first)->SaveCheckpoint(dir + "/ckpt").ok());
  options.checkpoint_dir = dir + "/ckpt";
  options.resume = true;
  auto resumed = Engine::Create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  for (int i = 7; i < 20; ++i) {
    auto s = (*resumed)->Step();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->loss, all[i].loss) << "step " << i + 1;
    EXPECT_EQ(s->loss_scale, all[i].loss_scale) << "step " << i + 1;
    EXPECT_EQ(s->skipped, all[i].skipped);
  }
  EXPECT_TRUE(all[2].skipped);
  EXPECT_EQ(testing::SnapshotState(**straight), testing::SnapshotState(**resumed));
}

}  // namespace
}  // namespace mpc
