// The default model end to end through the real command line: the Fashion-MNIST MLP
// (models/fashion_mlp) trains for its 10 epochs in FP32 on the CPU backend and reaches
// test accuracy >= 0.88; the metrics file has the documented records; the trained
// model exports to ONNX and loads back.
#include <fstream>

#include "absl/strings/str_cat.h"
#include "graph/onnx_import.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

double NumberAfter(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  return at == std::string::npos ? NAN : std::stod(line.substr(at + key.size() + 3));
}

TEST(FashionMlpTest, TenEpochsFp32ReachAtLeast88PercentTestAccuracy) {
  const std::string dir = testing::MakeTempDir("fashion_mlp");
  const auto r = testing::RunCommand(absl::StrCat(
      MPC_TRAIN_BIN, " --spec ", testing::SourcePath("models/fashion_mlp/fashion_mlp.spec"), " --metrics ", dir,
      "/metrics.jsonl --checkpoint_dir ", dir, "/ckpt --export_onnx ", dir, "/trained.onnx --device cpu"));
  ASSERT_EQ(r.exit_code, 0) << r.output;

  std::ifstream metrics(dir + "/metrics.jsonl");
  std::string line, last_eval, summary;
  int train_records = 0, eval_records = 0;
  while (std::getline(metrics, line)) {
    if (line.find("\"kind\":\"train\"") != std::string::npos) {
      ++train_records;
      EXPECT_FALSE(std::isnan(NumberAfter(line, "loss"))) << line;
      EXPECT_FALSE(std::isnan(NumberAfter(line, "lr"))) << line;
    } else if (line.find("\"kind\":\"eval\"") != std::string::npos) {
      ++eval_records;
      last_eval = line;
    } else if (line.find("\"kind\":\"summary\"") != std::string::npos) {
      summary = line;
    }
  }
  EXPECT_EQ(train_records, 6000);
  EXPECT_EQ(eval_records, 10);  // one per epoch
  EXPECT_EQ(NumberAfter(last_eval, "epoch"), 9);
  const double accuracy = NumberAfter(last_eval, "accuracy");
  EXPECT_GE(accuracy, 0.88) << last_eval;
  EXPECT_EQ(NumberAfter(summary, "steps"), 6000) << summary;
  EXPECT_GT(NumberAfter(summary, "planned_peak_bytes"), 0) << summary;

  auto exported = ImportOnnxFile(dir + "/trained.onnx", ImportOptions{});
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ((*exported)->ValuesOfKind(ValueKind::kParameter).size(), 6u);
}

}  // namespace
}  // namespace mpc
