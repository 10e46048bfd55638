// One writer per output (engine/output_lock.h). A second run on a checkpoint directory,
// metrics file, TensorBoard directory or export path another run writes is refused at
// start, naming the holder, and the first run's checkpoints and metrics come out bit for
// bit as a solo run's; a holder killed with SIGKILL leaves nothing to clean up: the next
// run on the directory starts (and resumes) as it would have.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_replace.h"
#include "base/file_util.h"
#include "engine/mpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) { return ReadFileToString(path).value_or(""); }

class OutputLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  // The golden MLP's SGD spec with absolute paths, `steps` steps and a checkpoint every
  // `every` steps (all kept).
  std::string Spec(int steps, int every) {
    const std::string golden = testing::SourcePath("tests/golden/mlp");
    std::string text = ReadFile(golden + "/sgd.spec");
    text = absl::StrReplaceAll(text, {{"\"model.onnx\"", "\"" + golden + "/model.onnx\""},
                                      {"\"features.npy\"", "\"" + golden + "/features.npy\""},
                                      {"\"labels.npy\"", "\"" + golden + "/labels.npy\""},
                                      {"steps: 20", absl::StrCat("steps: ", steps)}});
    const std::string path = absl::StrCat(dir_, "/train_", steps, ".spec");
    std::ofstream(path) << text << "\ncheckpoint { every_n_steps: " << every << " keep_last: 0 }\n";
    return path;
  }

  EngineOptions Options(const std::string& spec, const std::string& name) {
    EngineOptions o;
    o.spec_path = spec;
    o.checkpoint_dir = dir_ + "/ckpt_" + name;
    o.metrics_path = dir_ + "/" + name + ".jsonl";
    return o;
  }

  std::string dir_;
};

// Two runs on one directory at once (in one process: the lock is per open file, so this is
// what two processes see too): the second is refused at start whatever it asks for, naming
// the first (this process); the first then runs to its end and writes exactly what a solo
// run writes. After it, the directory is free again.
TEST_F(OutputLockTest, SecondRunIsRefusedAndTheFirstWritesWhatASoloRunWrites) {
  const std::string spec = Spec(20, 2);
  {
    auto solo = Engine::Create(Options(spec, "solo"));
    ASSERT_TRUE(solo.ok()) << solo.status();
    ASSERT_TRUE((*solo)->Train().ok());
  }
  EngineOptions first_options = Options(spec, "shared");
  auto first = Engine::Create(first_options);
  ASSERT_TRUE(first.ok()) << first.status();

  const std::string holder = absl::StrCat("in use by another run (pid ", ::getpid(), " on host ");
  struct Attempt {
    const char* what;
    EngineOptions options;
  };
  std::vector<Attempt> attempts;
  attempts.push_back({"same directory, same metrics", first_options});
  EngineOptions overwrite = first_options;
  overwrite.metrics_path = dir_ + "/other.jsonl";
  overwrite.overwrite_checkpoints = true;
  attempts.push_back({"--overwrite_checkpoints", overwrite});
  EngineOptions resume = overwrite;
  resume.overwrite_checkpoints = false;
  resume.resume_if_present = true;
  attempts.push_back({"--resume_if_present", resume});
  EngineOptions metrics_only = Options(spec, "elsewhere");
  metrics_only.metrics_path = first_options.metrics_path;
  attempts.push_back({"another directory, the same metrics file", metrics_only});
  // The second runs start while the first is at step 7 (its checkpoints 2, 4, 6 written).
  TrainCallbacks callbacks;
  int refused = 0;
  callbacks.on_step = [&](const StepMetrics& m) {
    if (m.step != 7) return;
    for (const Attempt& a : attempts) {
      SCOPED_TRACE(a.what);
      auto second = Engine::Create(a.options);
      ASSERT_FALSE(second.ok());
      EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
      EXPECT_THAT(std::string(second.status().message()), HasSubstr(holder));
      ++refused;
    }
  };
  ASSERT_TRUE((*first)->Train(callbacks).ok());
  EXPECT_EQ(refused, 4);
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt_elsewhere/latest"));

  first->reset();
  EXPECT_EQ(testing::DirectoryFingerprint(dir_ + "/ckpt_shared"), testing::DirectoryFingerprint(dir_ + "/ckpt_solo"));
  EXPECT_FALSE(fs::exists(dir_ + "/ckpt_shared/.mpc-lock")) << "the lock file outlived its run";
  EXPECT_FALSE(fs::exists(first_options.metrics_path + ".lock"));
  // The metrics' train records (their losses) as the solo run's; the summary's times differ.
  auto train_records = [](const std::string& path) {
    std::string out;
    std::istringstream in(ReadFile(path));
    for (std::string line; std::getline(in, line);) {
      if (line.find("\"kind\":\"train\"") != std::string::npos) {
        out += line.substr(0, line.find(",\"step_ms\"")) + "\n";
      }
    }
    return out;
  };
  EXPECT_EQ(train_records(first_options.metrics_path), train_records(dir_ + "/solo.jsonl"));
  EXPECT_NE(train_records(dir_ + "/solo.jsonl"), "");

  EngineOptions again = first_options;
  again.resume = true;
  auto third = Engine::Create(again);
  EXPECT_TRUE(third.ok()) << third.status();
}

// mpc-train holding a directory, its metrics, a TensorBoard directory and an export path:
// a second mpc-train on any of them exits non-zero at once naming the first's pid; after
// kill -9 of the first, a new run on the same directory resumes without any clean-up.
TEST_F(OutputLockTest, CliRefusesEachOutputInUseAndAKilledHolderLeavesNothingToCleanUp) {
  const std::string spec = Spec(2000000, 500);
  const std::string ckpt = dir_ + "/ckpt", metrics = dir_ + "/a.jsonl", tb = dir_ + "/tb", onnx = dir_ + "/a.onnx";
  const std::string first_cmd = absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --checkpoint_dir ", ckpt,
                                             " --metrics ", metrics, " --tensorboard ", tb, " --export_onnx ", onnx);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const std::string cmd = absl::StrCat("exec ", first_cmd, " > ", dir_, "/first.log 2>&1");
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), nullptr);
    ::_exit(127);
  }
  // Until the first run has its first checkpoint (it holds every lock by then).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(5);
  int status = 0;
  while (!fs::exists(ckpt + "/latest") && std::chrono::steady_clock::now() < deadline) {
    ASSERT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the first run ended: " << ReadFile(dir_ + "/first.log");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(fs::exists(ckpt + "/latest")) << ReadFile(dir_ + "/first.log");

  const std::string holder = absl::StrCat("in use by another run (pid ", pid, " on host ");
  const std::string base = absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec);
  const std::vector<std::pair<std::string, std::string>> seconds = {
      {"checkpoint directory", absl::StrCat(base, " --checkpoint_dir ", ckpt, " --resume_if_present")},
      {"--metrics", absl::StrCat(base, " --checkpoint_dir ", dir_, "/b --metrics ", metrics)},
      {"--tensorboard directory", absl::StrCat(base, " --checkpoint_dir ", dir_, "/c --tensorboard ", tb)},
      {"--export_onnx", absl::StrCat(base, " --checkpoint_dir ", dir_, "/d --export_onnx ", onnx)},
  };
  for (const auto& [what, cmd] : seconds) {
    SCOPED_TRACE(what);
    const testing::CommandResult r = testing::RunCommand(cmd);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_THAT(r.output, HasSubstr(what));
    EXPECT_THAT(r.output, HasSubstr(holder));
  }
  EXPECT_EQ(::waitpid(pid, &status, WNOHANG), 0) << "the first run did not survive the attempts";

  ::kill(pid, SIGKILL);
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(fs::exists(ckpt + "/.mpc-lock")) << "a killed run cannot remove its lock file";
  // The same run, 100 steps past its newest checkpoint.
  int64_t latest = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripPrefix(absl::StripAsciiWhitespace(ReadFile(ckpt + "/latest")), "step-"),
                               &latest));
  const std::string resumed_spec = Spec(static_cast<int>(latest) + 100, 500);
  const testing::CommandResult resumed =
      testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", resumed_spec, " --checkpoint_dir ", ckpt,
                                        " --metrics ", metrics, " --tensorboard ", tb, " --export_onnx ", onnx,
                                        " --resume_if_present"));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(fs::exists(onnx));
  EXPECT_FALSE(fs::exists(ckpt + "/.mpc-lock"));
}

}  // namespace
}  // namespace mpc
