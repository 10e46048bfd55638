// FP8 training end to end on the CPU backend (exact FP8 emulation): the Fashion-MNIST
// MLP in FP8 (dims padded to 16) reaches test accuracy within 1 point of the same run
// in BF16, with the default first/last exclusion and with every GEMM in FP8; the FP8
// meta goes into checkpoints and a resumed run's losses equal the uninterrupted run's;
// `mpc compile` reports which GEMMs run in FP8.
#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// The shipped Fashion-MNIST spec with the model path made absolute, EPOCHS epochs instead
// of ten (to keep the test short; every run compared uses the same schedule), and `extra`
// appended.
std::string FashionSpec(const std::string& dir, const std::string& name, const std::string& extra, int epochs = 3) {
  return testing::ShippedSpecWithEpochs(testing::SourcePath("models/fashion_mlp/fashion_mlp.spec"), dir, name, epochs,
                                        extra);
}

double Train(const std::string& spec, const std::string& flags, const std::string& dir, const std::string& name) {
  return testing::TrainThroughCli(spec, flags, dir, name);
}

// One epoch: FP8's accuracy against bf16 shows in the first (bf16 0.8575, FP8 in the
// middle GEMM 0.8578, in every GEMM 0.8576, 2026-11-29), at a third of three epochs' time.
TEST(Fp8TrainingTest, FashionMlpInFp8WithinOnePointOfBf16) {
  const std::string dir = testing::MakeTempDir("fp8_fashion");
  const std::string base = FashionSpec(dir, "base", "", 1);
  const std::string all_fp8 = FashionSpec(dir, "all_fp8", "fp8 { include_first_last: true }", 1);
  const double bf16 = Train(base, "--precision bf16", dir, "bf16");
  const double fp8 = Train(base, "--precision fp8 --pad-multiple 16", dir, "fp8");
  const double fp8_all = Train(all_fp8, "--precision fp8 --pad-multiple 16", dir, "fp8_all");
  std::printf("test accuracy after one epoch: bf16 %.4f  fp8 (middle GEMM) %.4f  fp8 (all GEMMs) %.4f\n", bf16, fp8,
              fp8_all);
  EXPECT_GE(bf16, 0.84);
  EXPECT_GE(fp8, bf16 - 0.01);
  EXPECT_GE(fp8_all, bf16 - 0.01);
}

TEST(Fp8TrainingTest, CompileReportListsFp8Gemms) {
  const std::string dir = testing::MakeTempDir("fp8_report");
  const std::string spec = FashionSpec(dir, "report", "");
  const std::string report = dir + "/report.json";
  const auto r = testing::RunCommand(
      absl::StrCat(MPC_TOOL_BIN, " compile --spec ", spec, " --precision fp8 --pad-multiple 16 --report ", report));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("fp8: 1 of 3 forward GEMMs in FP8"), std::string::npos) << r.output;
  const std::string json = ReadFile(report);
  EXPECT_NE(json.find("\"fp8\":[{\"node\":"), std::string::npos) << json;
  EXPECT_NE(json.find("\"format_a\":\"e4m3\",\"format_b\":\"e4m3\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"e5m2\""), std::string::npos) << json;
  EXPECT_NE(json.find("first GEMM of the model"), std::string::npos) << json;
}

TEST(Fp8TrainingTest, Fp8MetaResumesExactly) {
  const std::string dir = testing::MakeTempDir("fp8_resume");
  EngineOptions options;
  // A short history so that it rolls over several times before and after the checkpoint.
  options.spec_path = testing::WriteGoldenSpec("adamw", "fp8 { amax_history_len: 4 margin: 1 }", dir, "fp8.spec");
  options.precision = "fp8";
  options.pad_multiple = 16;
  auto straight = Engine::Create(options);
  ASSERT_TRUE(straight.ok()) << straight.status();
  std::vector<StepMetrics> all;
  for (int i = 0; i < 20; ++i) {
    auto s = (*straight)->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(std::isfinite(s->loss));
    all.push_back(*s);
  }
  // The meta is training state: scales moved away from their initial 1.
  int metas = 0;
  for (const std::string& n : (*straight)->StateNames()) {
    if (n.size() > 10 && n.compare(n.size() - 10, 10, ".fp8_scale") == 0) {
      ++metas;
      EXPECT_NE((*(*straight)->GetParameter(n))[0], 1.0f) << n;
    }
  }
  EXPECT_EQ(metas, 6);  // two FP8 GEMMs (the first has K=20, the last is excluded) x 3 tensors

  auto first = Engine::Create(options);
  ASSERT_TRUE(first.ok()) << first.status();
  for (int i = 0; i < 7; ++i) ASSERT_TRUE((*first)->Step().ok());
  ASSERT_TRUE((*first)->SaveCheckpoint(dir + "/ckpt").ok());
  options.checkpoint_dir = dir + "/ckpt";
  options.resume = true;
  auto resumed = Engine::Create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_EQ((*resumed)->step(), 7);
  for (int i = 7; i < 20; ++i) {
    auto s = (*resumed)->Step();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->loss, all[i].loss) << "step " << i + 1;
  }
  EXPECT_EQ(testing::SnapshotState(**straight), testing::SnapshotState(**resumed));
}

// Another FP8 recipe on resume is another precision: the weights and optimizer state carry
// over, and the notice says what of the FP8 state was set aside or reset. The just-in-time
// recipes have no state, so one resumes exactly.
TEST(Fp8TrainingTest, ResumingUnderAnotherRecipeSaysWhatItReset) {
  const std::string dir = testing::MakeTempDir("fp8_recipe_resume");
  EngineOptions options;
  options.spec_path = testing::WriteGoldenSpec("adamw", "fp8 { amax_history_len: 4 }", dir, "fp8.spec");
  options.precision = "fp8";
  options.pad_multiple = 16;
  auto delayed = Engine::Create(options);
  ASSERT_TRUE(delayed.ok()) << delayed.status();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE((*delayed)->Step().ok());
  ASSERT_TRUE((*delayed)->SaveCheckpoint(dir + "/delayed").ok());

  EngineOptions rowwise = options;
  rowwise.fp8_recipe = "rowwise";
  rowwise.checkpoint_dir = dir + "/delayed";
  rowwise.resume = true;
  auto resumed = Engine::Create(rowwise);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 4);
  std::string notices = absl::StrJoin((*resumed)->notices(), "\n");
  EXPECT_NE(notices.find("fp8 recipe rowwise"), std::string::npos) << notices;
  EXPECT_NE(notices.find("not used"), std::string::npos) << notices;
  EXPECT_NE(notices.find("FP8 scaling state (amax history, scales) of 6 tensors"), std::string::npos) << notices;
  for (const std::string& name : (*delayed)->ParameterNames()) {
    EXPECT_EQ(*(*resumed)->GetParameter(name), *(*delayed)->GetParameter(name)) << name;
  }

  // rowwise -> its own checkpoint -> rowwise again: nothing to reset, the same losses.
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*resumed)->Step().ok());
  ASSERT_TRUE((*resumed)->SaveCheckpoint(dir + "/rowwise").ok());
  rowwise.checkpoint_dir = dir + "/rowwise";
  auto again = Engine::Create(rowwise);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE((*again)->notices().empty()) << absl::StrJoin((*again)->notices(), "\n");
  for (int i = 0; i < 3; ++i) {
    auto a = (*resumed)->Step();
    auto b = (*again)->Step();
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->loss, b->loss) << "step " << 8 + i;
  }

  // rowwise checkpoint -> delayed: the delayed recipe's scales start again from 1.
  again->reset();  // the engines that hold the checkpoint directories
  resumed->reset();
  EngineOptions back = options;
  back.checkpoint_dir = dir + "/rowwise";
  back.resume = true;
  auto delayed_again = Engine::Create(back);
  ASSERT_TRUE(delayed_again.ok()) << delayed_again.status();
  notices = absl::StrJoin((*delayed_again)->notices(), "\n");
  EXPECT_NE(notices.find("reset"), std::string::npos) << notices;
  EXPECT_NE(notices.find("fp8"), std::string::npos) << notices;
}

}  // namespace
}  // namespace mpc
