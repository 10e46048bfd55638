// The Fashion-MNIST CNN (models/fashion_cnn: two conv-BN-ReLU-maxpool blocks, a hidden
// fully connected layer with dropout) through the real command line on the CPU
// backend: 4 epochs in FP32 reach test accuracy >= 0.91, and bf16 autocast lands within
// 0.5 points of it. Batch norm trains with batch statistics and evaluates with the
// running ones the training program updated.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

double Train(const std::string& precision, const std::string& dir) {
  return testing::TrainThroughCli(testing::SourcePath("models/fashion_cnn/fashion_cnn.spec"),
                                  "--device cpu --precision " + precision, dir, precision);
}

TEST(FashionCnnTest, Fp32ReachesNinetyOnePercentAndBf16IsWithinHalfAPoint) {
  const std::string dir = testing::MakeTempDir("fashion_cnn");
  const double f32 = Train("f32", dir);
  const double bf16 = Train("bf16", dir);
  std::printf("Fashion CNN test accuracy: f32 %.4f  bf16 %.4f\n", f32, bf16);
  EXPECT_GE(f32, 0.91);
  EXPECT_GE(bf16, f32 - 0.005);
}

}  // namespace
}  // namespace mpc
