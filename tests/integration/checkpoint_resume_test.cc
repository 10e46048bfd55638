// Checkpoint mid-run and resume: the resumed run continues exactly where the
// uninterrupted run was (same losses, bit for bit on the CPU backend), and the
// checkpoint holds the FP32 master weights and optimizer state.
#include <filesystem>

#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

std::vector<double> Losses(Engine& e, int steps) {
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) {
    auto s = e.Step();
    EXPECT_TRUE(s.ok()) << s.status();
    out.push_back(s.ok() ? s->loss : NAN);
  }
  return out;
}

class ResumeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ResumeTest, ResumedLossesEqualUninterruptedRun) {
  const std::string spec = testing::SourcePath("tests/golden/mlp/" + GetParam() + ".spec");
  const std::string ckpt = testing::MakeTempDir("resume_" + GetParam());
  EngineOptions options;
  options.spec_path = spec;

  auto straight = Engine::Create(options);
  ASSERT_TRUE(straight.ok()) << straight.status();
  const std::vector<double> all = Losses(**straight, 20);

  auto first = Engine::Create(options);
  ASSERT_TRUE(first.ok());
  const std::vector<double> head = Losses(**first, 8);
  ASSERT_TRUE((*first)->SaveCheckpoint(ckpt).ok());

  options.checkpoint_dir = ckpt;
  options.resume = true;
  auto resumed = Engine::Create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 8);
  const std::vector<double> tail = Losses(**resumed, 12);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(head[i], all[i]) << "step " << i + 1;
  for (int i = 0; i < 12; ++i) EXPECT_EQ(tail[i], all[8 + i]) << "step " << 9 + i;
  for (const std::string& name : (*straight)->ParameterNames()) {
    EXPECT_EQ(*(*straight)->GetParameter(name), *(*resumed)->GetParameter(name)) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ResumeTest, ::testing::Values("sgd", "adamw"));

}  // namespace
}  // namespace mpc
