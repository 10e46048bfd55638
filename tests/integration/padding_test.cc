// Padding does not change the model: a 784-700-300-10 MLP (class count 10 padded to 16)
// trained with a forced multiple of 8 gives the unpadded run's per-step losses (f32,
// relative 1e-6), and its exported weights and checkpoints are model shaped and equal.
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

TEST(PaddingTest, PaddedTrainingEqualsUnpaddedStepByStep) {
  const std::string dir = testing::MakeTempDir("padding");
  const std::string model = WriteAwkwardMlp(dir);
  const std::string spec = dir + "/train.spec";
  std::ofstream(spec) << "model: \"" << model << "\"\n"
                      << "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
                         "train_data { synthetic { num_examples: 256 feature_shape: 784 num_classes: 10 seed: 3 } }\n"
                         "batch_size: 32\nsteps: 12\nseed: 5\n"
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
    EXPECT_NEAR(sb->loss, sa->loss, 1e-6 * std::abs(sa->loss)) << "step " << i + 1;
  }
  ASSERT_TRUE((*a)->ExportOnnx(dir + "/a.onnx").ok());
  ASSERT_TRUE((*b)->ExportOnnx(dir + "/b.onnx").ok());
  auto ga = ImportOnnxFile(dir + "/a.onnx", ImportOptions{});
  auto gb = ImportOnnxFile(dir + "/b.onnx", ImportOptions{});
  ASSERT_TRUE(ga.ok() && gb.ok());
  for (const Value* pa : (*ga)->ValuesOfKind(ValueKind::kParameter)) {
    const Value* pb = (*gb)->FindValue(pa->name);
    ASSERT_NE(pb, nullptr) << pa->name;
    ASSERT_EQ(pb->shape, pa->shape) << pa->name << ": exports must be model shaped";
    EXPECT_LT(testing::RelativeError(pb->data, pa->data), 1e-6) << pa->name;
  }
  // Checkpoints are model shaped too, and a padded run resumes from an unpadded one.
  ASSERT_TRUE((*a)->SaveCheckpoint(dir + "/ckpt").ok());
  auto c = Engine::Create(padded);
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE((*c)->LoadCheckpoint(dir + "/ckpt").ok());
  auto sa = (*a)->Step();
  auto sc = (*c)->Step();
  ASSERT_TRUE(sa.ok() && sc.ok());
  EXPECT_NEAR(sc->loss, sa->loss, 1e-6 * std::abs(sa->loss));
}

}  // namespace
}  // namespace mpc
