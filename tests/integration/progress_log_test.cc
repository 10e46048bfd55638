// mpc-train's plain progress lines on a non-terminal: one per epoch always, and with the
// spec's log_every_n_steps one every N steps (step, total, loss, lr), none when it is 0.
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// Trains the Fashion MLP on 256 synthetic examples (8 steps an epoch) for 12 steps and
// returns mpc-train's output lines.
std::vector<std::string> TrainLines(int log_every) {
  const std::string dir = testing::MakeTempDir(absl::StrCat("progress_", log_every));
  const std::string spec = dir + "/train.spec";
  std::ofstream(spec) << "model: \"" << testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx") << "\"\n"
                      << "features_input: \"image\"\n"
                         "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
                         "train_data { synthetic { num_examples: 256 feature_shape: 784 num_classes: 10 seed: 3 } }\n"
                         "batch_size: 32\nsteps: 12\nseed: 5\n"
                         "optimizer { sgd { lr: 0.05 } }\n"
                      << "log_every_n_steps: " << log_every << "\n";
  const auto r = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --device cpu"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return absl::StrSplit(r.output, '\n', absl::SkipEmpty());
}

std::vector<std::string> StartingWith(const std::vector<std::string>& lines, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& l : lines) {
    if (l.rfind(prefix, 0) == 0) out.push_back(l);
  }
  return out;
}

TEST(ProgressLogTest, EveryNStepsALineWithStepLossAndLr) {
  const std::vector<std::string> lines = TrainLines(5);
  const std::vector<std::string> steps = StartingWith(lines, "step ");
  ASSERT_EQ(steps.size(), 2u) << absl::StrJoin(lines, "\n");
  EXPECT_EQ(steps[0].rfind("step 5/12  loss ", 0), 0u) << steps[0];
  EXPECT_EQ(steps[1].rfind("step 10/12  loss ", 0), 0u) << steps[1];
  EXPECT_NE(steps[0].find("  lr 0.05"), std::string::npos) << steps[0];
  EXPECT_EQ(StartingWith(lines, "epoch ").size(), 1u);  // the per-epoch line stays (epoch 2 is cut at step 12)
}

TEST(ProgressLogTest, ZeroMeansPerEpochOnly) {
  const std::vector<std::string> lines = TrainLines(0);
  EXPECT_TRUE(StartingWith(lines, "step ").empty()) << absl::StrJoin(lines, "\n");
  EXPECT_EQ(StartingWith(lines, "epoch ").size(), 1u) << absl::StrJoin(lines, "\n");
}

}  // namespace
}  // namespace mpc
