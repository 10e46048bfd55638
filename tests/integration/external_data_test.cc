// Models saved by Python onnx with external data (tests/graph/onnx_external_data_fixture.py)
// through the engine: InferenceSession::FromFile finds the side file next to the model
// (the weights are read when a program is compiled) and gives the same outputs as the
// inline copy; mpc-train trains it and exports the same weights as from the inline copy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/inference.h"
#include "graph/onnx_import.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// Writes DIR/inline.onnx, DIR/ext.onnx and DIR/weights.data (x[4,16] -> y[4,8]).
void SaveFixture(const std::string& dir) {
  const std::string command = absl::StrCat(
      testing::Python(), " ", testing::SourcePath("tests/graph/onnx_external_data_fixture.py"), " save ", dir);
  ASSERT_EQ(std::system(command.c_str()), 0);
}

TEST(ExternalData, InferenceGivesTheInlineModelsOutputs) {
  const std::string dir = testing::MakeTempDir("ext_inference");
  SaveFixture(dir);
  auto ext = InferenceSession::FromFile(dir + "/ext.onnx");
  ASSERT_TRUE(ext.ok()) << ext.status();
  auto inline_model = InferenceSession::FromFile(dir + "/inline.onnx");
  ASSERT_TRUE(inline_model.ok()) << inline_model.status();
  const Tensor x = testing::RandomTensor(DType::kF32, {4, 16}, 5);
  auto a = (*ext)->Run({{"x", x}});
  ASSERT_TRUE(a.ok()) << a.status();
  auto b = (*inline_model)->Run({{"x", x}});
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->size(), 1u);
  ASSERT_EQ(b->size(), 1u);
  EXPECT_EQ(testing::RelativeError((*a)[0].value, (*b)[0].value), 0.0);
  EXPECT_EQ((*a)[0].value.num_elements(), 32);  // y[4,8]
  EXPECT_EQ((*a)[0].value.NonFiniteCount(), 0);
}

std::map<std::string, std::string> ParameterBytes(const std::string& path) {
  std::map<std::string, std::string> out;
  auto g = ImportOnnxFile(path, ImportOptions{});
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return out;
  for (const Value* v : (*g)->ValuesOfKind(ValueKind::kParameter)) {
    out[v->name] = std::string(static_cast<const char*>(v->data.raw()), v->data.bytes());
  }
  return out;
}

TEST(ExternalData, MpcTrainTrainsAndExportsLikeTheInlineModel) {
  const std::string dir = testing::MakeTempDir("ext_train");
  SaveFixture(dir);
  const std::string spec = dir + "/train.spec";
  std::ofstream(spec) << "features_input: \"x\"\nloss { type: SOFTMAX_CROSS_ENTROPY output: \"y\" }\n"
                      << "train_data { synthetic { num_examples: 32 feature_shape: 16 num_classes: 8 seed: 3 } }\n"
                      << "batch_size: 4\nsteps: 3\nseed: 1\noptimizer { sgd { lr: 0.1 } }\n";
  for (const std::string name : {"ext", "inline"}) {
    const auto r = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --model ", dir, "/", name,
                                                    ".onnx --device cpu --checkpoint_dir ", dir, "/ckpt_", name,
                                                    " --export_onnx ", dir, "/trained_", name, ".onnx"));
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const auto from_ext = ParameterBytes(dir + "/trained_ext.onnx");
  ASSERT_EQ(from_ext.size(), 4u);  // w1, b1, w2, b2 (the Constant stays a constant)
  EXPECT_EQ(from_ext, ParameterBytes(dir + "/trained_inline.onnx"));
  EXPECT_NE(from_ext, ParameterBytes(dir + "/inline.onnx"));  // trained: the weights moved

  // --export_external_data: the same weights, written beside the model in FILE.data.
  const auto r = testing::RunCommand(
      absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --model ", dir, "/inline.onnx --device cpu --checkpoint_dir ",
                   dir, "/ckpt_side --export_external_data --export_onnx ", dir, "/trained_side.onnx"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/trained_side.onnx.data"));
  EXPECT_GT(std::filesystem::file_size(dir + "/trained_side.onnx.data"), 0u);
  EXPECT_LT(std::filesystem::file_size(dir + "/trained_side.onnx"),
            std::filesystem::file_size(dir + "/trained_inline.onnx"));
  EXPECT_EQ(ParameterBytes(dir + "/trained_side.onnx"), from_ext);
}

}  // namespace
}  // namespace mpc
