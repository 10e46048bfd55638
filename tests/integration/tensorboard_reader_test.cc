// mpc-train --tensorboard DIR read by TensorBoard's own reader (issue 48): a short run's
// event directory goes through tests/tools/check_tensorboard_with_tensorboard.py, which
// loads it with the tensorboard package's scalars data provider and compares every scalar
// (every tag, every step) with the run's --metrics file as float32. Runs: fp16 with dynamic
// loss scaling, an injected overflow (a skipped step), clipping, evaluation (top-k, macro
// F1) of the trained and the averaged weights, --tensor-stats; FP8 with its per-tensor
// amax/scale. A metrics file with one value changed, or one record missing, is refused.
//
// Opt-in: it needs the development environment's Python (.venv/bin/python with tensorboard,
// made by tools/pyenv/setup.sh); without it every case skips. CI does not have it.
// tests/integration/tensorboard_test.cc checks the same files with an independent reader
// that needs only python3-protobuf.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr char kEnable[] =
    "tools/pyenv/setup.sh (it creates .venv/ with tools/pyenv/requirements.txt, tensorboard among them) enables it";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// .venv/bin/python of the source tree when it can import tensorboard; "" otherwise, with
// the reason in `why`.
std::string TensorBoardPython(std::string* why) {
  const std::string python = testing::SourcePath(".venv/bin/python");
  if (!std::filesystem::exists(python)) {
    *why = absl::StrCat(python, " does not exist");
    return "";
  }
  const auto r = testing::RunCommand(absl::StrCat(python, " -c 'import tensorboard'"));
  if (r.exit_code != 0) {
    std::string error = r.output;  // the traceback's last line
    while (!error.empty() && error.back() == '\n') error.pop_back();
    *why = absl::StrCat(python, " cannot import tensorboard: ", error.substr(error.rfind('\n') + 1));
    return "";
  }
  return python;
}

#define SKIP_WITHOUT_TENSORBOARD(python)                                                                  \
  std::string why;                                                                                        \
  const std::string python = TensorBoardPython(&why);                                                     \
  if (python.empty()) {                                                                                   \
    GTEST_SKIP() << "TensorBoard's own reader is not installed (" << why << "); running " << kEnable; \
  }

struct TrainedRun {
  std::string dir, metrics, tb;
};

// Trains the golden MLP for 12 steps with `spec_extra` and `flags`, writing both outputs.
TrainedRun Train(const std::string& name, const std::string& spec_extra, const std::string& flags) {
  TrainedRun run;
  run.dir = testing::MakeTempDir("tensorboard_reader_" + name);
  const std::string spec = testing::WriteTwelveStepMlpSpec(run.dir, spec_extra);
  run.metrics = run.dir + "/metrics.jsonl";
  run.tb = run.dir + "/tb/run1";
  const auto r = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --device cpu --metrics ",
                                                  run.metrics, " --tensorboard ", run.tb, " ", flags));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return run;
}

testing::CommandResult Check(const std::string& python, const std::string& tb, const std::string& metrics) {
  return testing::RunCommand(absl::StrCat(
      python, " ", testing::SourcePath("tests/tools/check_tensorboard_with_tensorboard.py"), " ", tb, " ", metrics));
}

// The run agrees, and the check's summary line counts at least `min_points` points.
void ExpectAgreement(const std::string& python, const TrainedRun& run, int min_points) {
  const auto r = Check(python, run.tb, run.metrics);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(agrees with metrics\.jsonl: (\d+) tags, (\d+) points)")))
      << r.output;
  EXPECT_GE(std::stoi(m[2]), min_points) << r.output;
  std::printf("%s", r.output.c_str());  // the summary line, in the test's log
}

TEST(TensorBoardReaderTest, Fp16RunAgreesAndAnAlteredMetricsFileDoesNot) {
  SKIP_WITHOUT_TENSORBOARD(python);
  const TrainedRun run = Train("fp16",
                        "loss_scaling { mode: DYNAMIC init_scale: 1024 growth_interval: 3 }\n"
                        "debug { inject_nonfinite { step: 4 parameter: \"2.weight\" value: \"inf\" } }\n"
                        "ema { decay: 0.9 evaluate: true }",
                        "--precision fp16 --tensor-stats 5");
  // 12 steps x 6 train tags, 3 evaluations x 4 tags x 2 (eval/, eval_ema/), tensor statistics.
  ExpectAgreement(python, run, 12 * 6 + 3 * 4 * 2 + 1);

  const std::string text = ReadFile(run.metrics);
  // One value changed: train/loss at step 7.
  const std::regex step7(R"((\{"kind":"train","step":7,[^\n]*"loss":)[^,]*)");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(text, m, step7)) << text;
  const std::string altered = run.dir + "/altered.jsonl";
  std::ofstream(altered) << m.prefix() << m[1] << "123.25" << m.suffix();
  auto r = Check(python, run.tb, altered);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("1 disagreement(s)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("train/loss at step 7: TensorBoard reads "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the metrics file says 123.25"), std::string::npos) << r.output;

  // One record missing: the averaged weights' last evaluation.
  const size_t last_ema = text.rfind("{\"kind\":\"eval\",\"step\":12,");
  ASSERT_NE(last_ema, std::string::npos) << text;
  const size_t end = text.find('\n', last_ema);
  ASSERT_NE(text.substr(last_ema, end - last_ema).find("\"weights\":\"ema\""), std::string::npos) << text;
  const std::string missing = run.dir + "/missing.jsonl";
  std::ofstream(missing) << text.substr(0, last_ema) << text.substr(end + 1);
  r = Check(python, run.tb, missing);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("TensorBoard has eval_ema/loss at step 12 (= "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("the metrics file does not"), std::string::npos) << r.output;
}

TEST(TensorBoardReaderTest, Fp8RunAgrees) {
  SKIP_WITHOUT_TENSORBOARD(python);
  const TrainedRun run = Train("fp8", "fp8 { include_first_last: true report_tensor: \".*\" }",
                        "--precision fp8 --pad-multiple 16 --tensor-stats 4");
  ExpectAgreement(python, run, 12 * 6 + 3 * 4 + 12 * 2);  // at least one fp8 tensor's amax and scale
  EXPECT_NE(ReadFile(run.metrics).find("\"fp8\":{"), std::string::npos);
}

}  // namespace
}  // namespace mpc
