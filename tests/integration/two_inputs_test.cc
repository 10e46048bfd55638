// A model with two inputs, one float and one integer (dense features and category ids
// looked up in an embedding), fed from two named .npy arrays (npy.inputs): its first 20
// SGD steps match PyTorch (relative 1e-4 per step), evaluation feeds both inputs, and a
// model input left unfed, an array for an input the model lacks, or a row count that
// disagrees are errors that say what to fix. Golden data: tests/golden/make_two_input_golden.py.
#include <cmath>
#include <fstream>

#include "absl/strings/str_replace.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

const std::string& GoldenDir() {
  static const std::string dir = testing::SourcePath("tests/golden/two_inputs/");
  return dir;
}

// The golden spec with absolute paths, its data section replaced when `data` is given.
std::string WriteSpec(const std::string& name, const std::string& data = "", const std::string& extra = "") {
  std::ifstream in(GoldenDir() + "train.spec");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text = absl::StrReplaceAll(text, {{"\"model.onnx\"", "\"" + GoldenDir() + "model.onnx\""},
                                    {"\"dense.npy\"", "\"" + GoldenDir() + "dense.npy\""},
                                    {"\"ids.npy\"", "\"" + GoldenDir() + "ids.npy\""},
                                    {"\"labels.npy\"", "\"" + GoldenDir() + "labels.npy\""}});
  if (!data.empty()) {
    const size_t begin = text.find("train_data {"), end = text.find("batch_size:");
    text = text.substr(0, begin) + data + "\n" + text.substr(end);
  }
  const std::string path = testing::MakeTempDir("two_inputs_" + name) + "/train.spec";
  std::ofstream(path) << text << "\n" << extra << "\n";
  return path;
}

TEST(TwoInputsTest, FloatAndIntegerInputsTrainLikePyTorch) {
  const std::vector<double> expected = testing::ReadLosses(GoldenDir() + "losses.txt");
  ASSERT_EQ(expected.size(), 20u);
  EngineOptions options;
  options.spec_path = WriteSpec("golden", "", "eval { at_epoch_end: true }");
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (int i = 0; i < 20; ++i) {
    auto step = (*engine)->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LT(std::abs(step->loss - expected[i]) / expected[i], 1e-4)
        << "step " << i + 1 << ": mpc " << step->loss << " torch " << expected[i];
  }
  // Evaluation feeds both inputs: a wrong or missing ids batch would not reach this accuracy
  // on the training data it just fit (and would fail outright if unfed).
  auto eval = (*engine)->Evaluate();
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->examples, 160);
  EXPECT_GT(eval->accuracy, 0.5);
}

TEST(TwoInputsTest, InputsThatDoNotMatchTheModelAreErrors) {
  const std::string d = GoldenDir();
  struct Case {
    std::string data, message;
  };
  const std::string labels = "labels: \"" + d + "labels.npy\"";
  for (const Case& c : std::vector<Case>{
           {"train_data { npy { features: \"" + d + "dense.npy\" " + labels + " } shuffle: false }",
            "feeds nothing to model input 'ids'; add npy { inputs { input: \"ids\""},
           {"train_data { npy { features: \"" + d + "dense.npy\" " + labels + " inputs { input: \"ids\" file: \"" + d +
                "ids.npy\" } inputs { input: \"idz\" file: \"" + d + "ids.npy\" } } }",
            "model input 'idz' through npy.inputs, but the model has no such input; its inputs are: dense, ids"},
           {"train_data { npy { features: \"" + d + "dense.npy\" " + labels + " inputs { input: \"ids\" file: \"" + d +
                "labels.npy\" } } }",
            "input 'ids' has rows of shape [] (1 values) but the model input takes [3] (3 values)"},
           {"train_data { npy { features: \"" + d + "dense.npy\" " + labels + " inputs { input: \"ids\" file: \"" + d +
                "ids.npy\" } inputs { input: \"ids\" file: \"" + d + "ids.npy\" } } }",
            "train_data.npy.inputs[1].input: 'ids' is fed twice"},
           {"train_data { npy { features: \"" + d + "dense.npy\" " + labels + " inputs { input: \"ids\" file: \"" + d +
                "missing.npy\" } } }",
            "train_data.npy.inputs[0].file"}}) {
    EngineOptions options;
    options.spec_path = WriteSpec("errors", c.data);
    auto engine = Engine::Create(options);
    ASSERT_FALSE(engine.ok()) << c.data;
    EXPECT_NE(engine.status().message().find(c.message), absl::string_view::npos) << engine.status();
  }
}

}  // namespace
}  // namespace mpc
