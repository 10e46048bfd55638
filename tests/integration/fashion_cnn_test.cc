// The Fashion-MNIST CNN (models/fashion_cnn: two conv-BN-ReLU-maxpool blocks, a hidden
// fully connected layer with dropout) through the real command line on the CPU backend:
// one epoch (the shipped spec's warmup and cosine decay over 600 steps) in FP32 reaches
// test accuracy >= 0.885 (0.8946 measured, bf16 0.8928), and bf16 autocast lands within
// 0.5 points of it. Batch norm trains with batch statistics and evaluates with the running
// ones the training program updated. The shipped spec's four epochs (0.9163 f32, 0.9172
// bf16, 2026-11-29) are four times the CPU time for the same comparison.
#include <cstdio>

#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

TEST(FashionCnnTest, OneEpochReachesEightyEightAndAHalfPercentAndBf16IsWithinHalfAPoint) {
  const std::string dir = testing::MakeTempDir("fashion_cnn");
  const std::string spec =
      testing::ShippedSpecWithEpochs(testing::SourcePath("models/fashion_cnn/fashion_cnn.spec"), dir, "one_epoch", 1);
  const double f32 = testing::TrainThroughCli(spec, "--device cpu --precision f32", dir, "f32");
  const double bf16 = testing::TrainThroughCli(spec, "--device cpu --precision bf16", dir, "bf16");
  std::printf("Fashion CNN test accuracy after one epoch: f32 %.4f  bf16 %.4f\n", f32, bf16);
  EXPECT_GE(f32, 0.885);
  EXPECT_GE(bf16, f32 - 0.005);
}

}  // namespace
}  // namespace mpc
