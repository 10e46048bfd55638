// Padding does not change the model: a 784-700-300-10 MLP (class count 10 padded to 16)
// and a CNN with 6 and 10 channels and a BatchNormalization (channels padded to 8 and 16)
// trained with a forced multiple of 8 give the unpadded runs' per-step losses (f32), and
// their exported weights, running statistics and checkpoints are model shaped and equal.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/mpc.h"
#include "graph/graph_builder.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

std::string WriteAwkwardMlp(const std::string& dir) {
  Graph g;
  GraphBuilder b(&g);
  Value* h = g.AddInput("x", DType::kF32, {1, 784});
  const int64_t widths[] = {784, 700, 300, 10};
  for (int i = 0; i < 3; ++i) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(widths[i]));
    Value* w = g.AddParameter(absl::StrCat("fc", i, ".weight"),
                              testing::RandomTensor(DType::kF32, {widths[i + 1], widths[i]}, 40 + i, -bound, bound));
    Value* bias = g.AddParameter(absl::StrCat("fc", i, ".bias"),
                                 testing::RandomTensor(DType::kF32, {widths[i + 1]}, 50 + i, -bound, bound));
    AttrMap attrs;
    attrs.Set("transB", int64_t{1});
    h = b.Op("Gemm", {h, w, bias}, attrs);
    if (i < 2) h = b.Op("Relu", {h});
  }
  EXPECT_TRUE(b.status().ok());
  EXPECT_TRUE(g.RenameValue(h, "logits").ok());
  g.SetOutputs({h});
  const std::string path = dir + "/awkward.onnx";
  ExportOptions options;
  options.batch_dim_param = "batch";
  EXPECT_TRUE(ExportOnnxFile(g, options, path).ok());
  return path;
}

// x[N, 1, 12, 12] -> Conv(6) -> BatchNormalization -> Relu -> MaxPool -> Conv(10) -> Relu
// -> GlobalAveragePool -> Flatten -> Gemm(10): every channel count is unaligned.
std::string WriteAwkwardCnn(const std::string& dir) {
  Graph g;
  GraphBuilder b(&g);
  Value* h = g.AddInput("x", DType::kF32, {1, 1, 12, 12});
  auto conv = [&](Value* x, const std::string& name, int64_t out, int64_t in, uint64_t seed) {
    const double bound = 1.0 / std::sqrt(9.0 * in);
    Value* w =
        g.AddParameter(name + ".weight", testing::RandomTensor(DType::kF32, {out, in, 3, 3}, seed, -bound, bound));
    Value* bias = g.AddParameter(name + ".bias", testing::RandomTensor(DType::kF32, {out}, seed + 1, -bound, bound));
    AttrMap attrs;
    attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
    return b.Op("Conv", {x, w, bias}, std::move(attrs));
  };
  h = conv(h, "conv1", 6, 1, 60);
  Value* scale = g.AddParameter("bn.weight", testing::RandomTensor(DType::kF32, {6}, 62, 0.8, 1.2));
  Value* shift = g.AddParameter("bn.bias", testing::RandomTensor(DType::kF32, {6}, 63, -0.1, 0.1));
  Value* mean = g.AddParameter("bn.running_mean", testing::RandomTensor(DType::kF32, {6}, 64, -0.1, 0.1));
  Value* var = g.AddParameter("bn.running_var", testing::RandomTensor(DType::kF32, {6}, 65, 0.9, 1.1));
  h = b.Op("BatchNormalization", {h, scale, shift, mean, var});
  AttrMap pool;
  pool.Set("kernel_shape", std::vector<int64_t>{2, 2});
  pool.Set("strides", std::vector<int64_t>{2, 2});
  h = b.Op("MaxPool", {b.Op("Relu", {h})}, std::move(pool));
  h = b.Op("Relu", {conv(h, "conv2", 10, 6, 66)});
  h = b.Op("Flatten", {b.Op("GlobalAveragePool", {h})});
  Value* w = g.AddParameter("fc.weight", testing::RandomTensor(DType::kF32, {10, 10}, 68, -0.3, 0.3));
  Value* bias = g.AddParameter("fc.bias", testing::RandomTensor(DType::kF32, {10}, 69, -0.3, 0.3));
  AttrMap attrs;
  attrs.Set("transB", int64_t{1});
  h = b.Op("Gemm", {h, w, bias}, attrs);
  EXPECT_TRUE(b.status().ok()) << b.status();
  EXPECT_TRUE(g.RenameValue(h, "logits").ok());
  g.SetOutputs({h});
  const std::string path = dir + "/awkward_cnn.onnx";
  ExportOptions options;
  options.batch_dim_param = "batch";
  EXPECT_TRUE(ExportOnnxFile(g, options, path).ok());
  return path;
}

// Trains `model` on `data` for 12 AdamW steps unpadded and padded to a multiple of 8: the
// per-step losses agree to `tolerance`, the exports hold the same model-shaped tensors, and
// a padded engine resumes from the unpadded one's checkpoint.
void ExpectPaddingChangesNothing(const std::string& dir, const std::string& model, const std::string& data,
                                 double tolerance) {
  const std::string spec = dir + "/train.spec";
  std::ofstream(spec) << "model: \"" << model << "\"\n"
                      << "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
                      << "train_data { synthetic { " << data << " } }\n"
                      << "batch_size: 32\nsteps: 12\nseed: 5\n"
                         "optimizer { adamw { lr: 0.002 weight_decay: 0.05 } }\n";
  EngineOptions plain, padded;
  plain.spec_path = padded.spec_path = spec;
  plain.pad_multiple = 1;
  padded.pad_multiple = 8;
  auto a = Engine::Create(plain);
  auto b = Engine::Create(padded);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (int i = 0; i < 12; ++i) {
    auto sa = (*a)->Step();
    auto sb = (*b)->Step();
    ASSERT_TRUE(sa.ok() && sb.ok());
    EXPECT_NEAR(sb->loss, sa->loss, tolerance * std::abs(sa->loss)) << "step " << i + 1;
  }
  ASSERT_TRUE((*a)->ExportOnnx(dir + "/a.onnx").ok());
  ASSERT_TRUE((*b)->ExportOnnx(dir + "/b.onnx").ok());
  auto ga = ImportOnnxFile(dir + "/a.onnx", ImportOptions{});
  auto gb = ImportOnnxFile(dir + "/b.onnx", ImportOptions{});
  ASSERT_TRUE(ga.ok() && gb.ok());
  int compared = 0;
  for (ValueKind kind : {ValueKind::kParameter, ValueKind::kState}) {
    for (const Value* pa : (*ga)->ValuesOfKind(kind)) {
      const Value* pb = (*gb)->FindValue(pa->name);
      ASSERT_NE(pb, nullptr) << pa->name;
      ASSERT_EQ(pb->shape, pa->shape) << pa->name << ": exports must be model shaped";
      EXPECT_LT(testing::RelativeError(pb->data, pa->data), 10 * tolerance) << pa->name;
      ++compared;
    }
  }
  EXPECT_GE(compared, 6);
  // Checkpoints are model shaped too, and a padded run resumes from an unpadded one.
  ASSERT_TRUE((*a)->SaveCheckpoint(dir + "/ckpt").ok());
  auto c = Engine::Create(padded);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->LoadCheckpoint(dir + "/ckpt").ok());
  auto sa = (*a)->Step();
  auto sc = (*c)->Step();
  ASSERT_TRUE(sa.ok() && sc.ok());
  EXPECT_NEAR(sc->loss, sa->loss, tolerance * std::abs(sa->loss));
}

TEST(PaddingTest, PaddedTrainingEqualsUnpaddedStepByStep) {
  const std::string dir = testing::MakeTempDir("padding");
  ExpectPaddingChangesNothing(dir, WriteAwkwardMlp(dir), "num_examples: 256 feature_shape: 784 num_classes: 10 seed: 3",
                              1e-6);
}

// Conv channel padding (oneDNN picks other blockings for 8 and 16 channels than for 6 and
// 10, so the sums run in another order: 1e-5).
TEST(PaddingTest, PaddedConvolutionsTrainLikeUnpaddedOnes) {
  const std::string dir = testing::MakeTempDir("padding_cnn");
  ExpectPaddingChangesNothing(dir, WriteAwkwardCnn(dir),
                              "num_examples: 256 feature_shape: [1, 12, 12] num_classes: 10 seed: 3", 1e-5);
}

}  // namespace
}  // namespace mpc
