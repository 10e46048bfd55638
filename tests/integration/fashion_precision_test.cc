// Fashion-MNIST MLP in low precision on the CPU backend: bf16 autocast, and fp16 with
// dynamic loss scaling (the default for fp16), each reach test accuracy within 0.5
// points of the same 10-epoch run in FP32; TF32 (every GEMM's operands rounded to TF32,
// exactly as tensor cores do) within 0.5 points of FP32 over one epoch (~6 s a run).
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// The shipped spec with the model path made absolute and `epochs` epochs instead of ten.
std::string ShortSpec(const std::string& dir, int epochs) {
  std::ifstream in(testing::SourcePath("models/fashion_mlp/fashion_mlp.spec"));
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text = absl::StrReplaceAll(
      text,
      {{"\"fashion_mlp.onnx\"", absl::StrCat("\"", testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx"), "\"")},
       {"epochs: 10", absl::StrCat("epochs: ", epochs)}});
  const std::string path = absl::StrCat(dir, "/fashion_mlp_", epochs, "_epochs.spec");
  std::ofstream(path) << text;
  return path;
}

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

TEST(FashionPrecisionTest, Tf32WithinHalfAPointOfFp32) {
  const std::string dir = testing::MakeTempDir("fashion_precision_tf32");
  const std::string spec = ShortSpec(dir, 1);
  const double f32 = testing::TrainThroughCli(spec, "--precision f32", dir, "f32");
  const double tf32 = testing::TrainThroughCli(spec, "--precision tf32", dir, "tf32");
  std::printf("test accuracy after 1 epoch: f32 %.4f  tf32 %.4f\n", f32, tf32);
  EXPECT_GE(f32, 0.84);
  EXPECT_GE(tf32, f32 - 0.005);
}

}  // namespace
}  // namespace mpc
