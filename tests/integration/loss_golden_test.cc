// Label smoothing and binary cross-entropy with logits against PyTorch (CPU): a tiny MLP
// trained 8 SGD+momentum steps from fixed weights and a fixed batch order with
// nn.CrossEntropyLoss(label_smoothing=0.1) and nn.BCEWithLogitsLoss() (0/1 and soft
// targets); every step's loss within relative 1e-4 in f32, and within docs/numerics.md's
// bf16 tolerance (1e-2) under bf16 autocast against torch.autocast('cpu', bfloat16).
// Golden data (committed, small): tests/golden/make_loss_golden.py.
#include <cmath>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

class LossGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(LossGoldenTest, EightStepsMatchPyTorchPerStep) {
  const std::string run = GetParam();
  const double tolerance = run.rfind("bf16_", 0) == 0 ? 1e-2 : 1e-4;
  const std::string dir = testing::SourcePath("tests/golden/losses/");
  const std::vector<double> expected = testing::ReadLosses(dir + run + "_losses.txt");
  ASSERT_EQ(expected.size(), 8u);

  EngineOptions options;
  options.spec_path = dir + run + ".spec";
  options.device = "cpu";
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_EQ((*engine)->total_steps(), 8);
  for (int i = 0; i < 8; ++i) {
    auto step = (*engine)->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    const double rel = std::abs(step->loss - expected[i]) / std::abs(expected[i]);
    EXPECT_LT(rel, tolerance) << run << " step " << i + 1 << ": mpc " << step->loss << " torch " << expected[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Losses, LossGoldenTest, ::testing::Values("smooth", "bce", "bf16_smooth", "bf16_bce"));

// The last "eval" record of a metrics file.
std::string LastEvalRecord(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"eval\"") != std::string::npos) last = line;
  }
  return last;
}

// A golden spec run through Train() with evaluation: the classification metrics reach the
// metrics file's eval record where they apply, and only there.
TEST(LossMetricsFileTest, EvalRecordsCarryTheMetricsThatApply) {
  const std::string golden = testing::SourcePath("tests/golden/losses/");
  const std::string dir = testing::MakeTempDir("loss_metrics_file");
  for (const std::string run : {"smooth", "bce"}) {
    std::ifstream in(golden + run + ".spec");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    for (const char* file : {"model.onnx", "features.npy", "labels.npy", "targets.npy"}) {
      const std::string quoted = std::string("\"") + file + "\"";
      for (size_t at = text.find(quoted); at != std::string::npos; at = text.find(quoted, at + 1)) {
        text.replace(at, quoted.size(), "\"" + golden + file + "\"");
      }
    }
    text += run == "smooth" ? "eval { top_k: 3 }\n" : "eval { }\n";
    const std::string spec = dir + "/" + run + ".spec";
    std::ofstream(spec) << text;
    EngineOptions options;
    options.spec_path = spec;
    options.device = "cpu";
    options.metrics_path = dir + "/" + run + ".jsonl";
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto summary = (*engine)->Train();
    ASSERT_TRUE(summary.ok()) << summary.status();
    ASSERT_TRUE(summary->evaluated);
    const EvalMetrics& m = summary->last_eval;
    const std::string record = LastEvalRecord(options.metrics_path);
    ASSERT_FALSE(record.empty()) << run;
    EXPECT_GE(m.accuracy, 0.0);
    EXPECT_LE(m.accuracy, 1.0);
    EXPECT_EQ(record.find("perplexity"), std::string::npos) << record;
    if (run == "smooth") {
      EXPECT_EQ(m.top_k, 3);
      EXPECT_GE(m.top_k_accuracy, m.accuracy);
      EXPECT_EQ(m.class_precision.size(), 6u);
      for (const char* key :
           {"\"top_k\":3", "\"top_k_accuracy\":", "\"macro_f1\":", "\"precision\":[", "\"recall\":[", "\"f1\":["}) {
        EXPECT_NE(record.find(key), std::string::npos) << key << " missing from " << record;
      }
    } else {
      EXPECT_LT(m.macro_f1, 0);
      EXPECT_EQ(record.find("macro_f1"), std::string::npos) << record;
      EXPECT_EQ(record.find("top_k"), std::string::npos) << record;
    }
  }
}

}  // namespace
}  // namespace mpc
