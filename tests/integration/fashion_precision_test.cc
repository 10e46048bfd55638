// Fashion-MNIST MLP in low precision on the CPU backend: bf16 autocast, and fp16 with
// dynamic loss scaling (the default for fp16), each reach test accuracy within 0.5
// points of the same 10-epoch run in FP32.

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

double Train(const std::string& precision, const std::string& dir) {
  return testing::TrainThroughCli(testing::SourcePath("models/fashion_mlp/fashion_mlp.spec"),
                                  "--precision " + precision, dir, precision);
}

TEST(FashionPrecisionTest, Bf16AndFp16WithinHalfAPointOfFp32) {
  const std::string dir = testing::MakeTempDir("fashion_precision");
  const double f32 = Train("f32", dir);
  const double bf16 = Train("bf16", dir);
  const double fp16 = Train("fp16", dir);
  std::printf("test accuracy: f32 %.4f  bf16 %.4f  fp16 %.4f\n", f32, bf16, fp16);
  EXPECT_GE(f32, 0.88);
  EXPECT_GE(bf16, f32 - 0.005);
  EXPECT_GE(fp16, f32 - 0.005);
}

}  // namespace
}  // namespace mpc
