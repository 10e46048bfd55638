// Checkpoint integrity (docs/training.md "Checkpoints"): damaged checkpoints (a flipped
// bit in a tensor or in the manifest, truncated and empty files, a missing manifest) and
// mismatched ones (another model, another optimizer) are refused with an error naming the
// cause, leave the live state and the checkpoint untouched; another precision resumes and
// says what it reset; a run does not overwrite checkpoints without --overwrite_checkpoints;
// --resume of a missing directory is an error, --resume_if_present is not; retention keeps
// keep_last; a resumed run's metrics have no duplicates and one resume marker; and a run
// killed (SIGKILL) at 25 random moments and resumed each time ends bit for bit where an
// uninterrupted run ends.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/checkpoint_format.h"
#include "engine/mpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Every file under `dir`, recursively: names, sizes and bytes.
std::string TreeFingerprint(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), dir).string()] = ReadFile(e.path().string());
  }
  std::string out;
  for (const auto& [name, bytes] : files) {
    absl::StrAppend(&out, name, ":", bytes.size(), ":", std::hash<std::string>()(bytes), "\n");
  }
  return out;
}

class CheckpointIntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    ckpt_ = dir_ + "/ckpt";
  }

  // The golden MLP spec `name` with absolute paths, `steps` steps (0: its 20) and `extra`
  // appended, as DIR/FILE.
  std::string Spec(const std::string& name = "sgd", const std::string& extra = "",
                   const std::string& file = "train.spec", int steps = 0) {
    const std::string golden = testing::SourcePath("tests/golden/mlp");
    std::string text = ReadFile(golden + "/" + name + ".spec");
    text = absl::StrReplaceAll(text, {{"\"model.onnx\"", "\"" + golden + "/model.onnx\""},
                                      {"\"features.npy\"", "\"" + golden + "/features.npy\""},
                                      {"\"labels.npy\"", "\"" + golden + "/labels.npy\""}});
    if (steps > 0) text = absl::StrReplaceAll(text, {{"steps: 20", absl::StrCat("steps: ", steps)}});
    const std::string path = dir_ + "/" + file;
    WriteFile(path, text + "\n" + extra + "\n");
    return path;
  }

  EngineOptions Options(const std::string& spec, bool resume) {
    EngineOptions options;
    options.spec_path = spec;
    options.checkpoint_dir = ckpt_;
    options.resume = resume;
    return options;
  }

  // A checkpoint at step 8 of the golden SGD run in ckpt_; returns its directory.
  std::string WriteCheckpoint(const std::string& spec_name = "sgd", const std::string& precision = "") {
    EngineOptions options;
    options.spec_path = Spec(spec_name);
    options.precision = precision;
    auto engine = Engine::Create(options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    for (int i = 0; i < 8; ++i) EXPECT_TRUE((*engine)->Step().ok());
    EXPECT_TRUE((*engine)->SaveCheckpoint(ckpt_).ok());
    return ckpt_ + "/step-00000008";
  }

  // Resuming from ckpt_ fails with a message containing `cause`; the checkpoint is
  // unchanged, and so is a live engine's state when it loads the checkpoint.
  void ExpectRefused(const std::string& cause, const std::string& spec_name = "sgd") {
    const std::string before = TreeFingerprint(ckpt_);
    auto engine = Engine::Create(Options(Spec(spec_name), /*resume=*/true));
    ASSERT_FALSE(engine.ok());
    EXPECT_THAT(std::string(engine.status().message()), HasSubstr(cause));
    EXPECT_EQ(TreeFingerprint(ckpt_), before) << "a failed load changed the checkpoint";
    EngineOptions options;
    options.spec_path = Spec(spec_name);
    auto live = Engine::Create(options);
    ASSERT_TRUE(live.ok()) << live.status();
    for (int i = 0; i < 3; ++i) ASSERT_TRUE((*live)->Step().ok());
    std::map<std::string, std::vector<float>> state;
    for (const std::string& n : (*live)->ParameterNames()) state[n] = *(*live)->GetParameter(n);
    for (const std::string& n : (*live)->StateNames()) state[n] = *(*live)->GetParameter(n);
    const absl::Status st = (*live)->LoadCheckpoint(ckpt_);
    ASSERT_FALSE(st.ok());
    EXPECT_THAT(std::string(st.message()), HasSubstr(cause));
    EXPECT_EQ((*live)->step(), 3);
    for (const auto& [n, values] : state) EXPECT_EQ(*(*live)->GetParameter(n), values) << n << " changed";
    EXPECT_EQ(TreeFingerprint(ckpt_), before);
  }

  std::string dir_, ckpt_;
};

TEST_F(CheckpointIntegrityTest, LayoutIsOneDirectoryPerStepWithManifestAndLatest) {
  const std::string step = WriteCheckpoint();
  EXPECT_TRUE(fs::exists(step + "/manifest.pb"));
  EXPECT_TRUE(fs::exists(step + "/tensors.bin"));
  EXPECT_EQ(ReadFile(ckpt_ + "/latest"), "step-00000008\n");
  auto resumed = Engine::Create(Options(Spec(), /*resume=*/true));
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 8);
}

TEST_F(CheckpointIntegrityTest, FlippedBitInATensorIsAChecksumMismatchNamingIt) {
  const std::string data = WriteCheckpoint() + "/tensors.bin";
  std::string bytes = ReadFile(data);
  bytes[bytes.size() / 3] ^= 0x10;
  WriteFile(data, bytes);
  ExpectRefused("checksum mismatch at tensor '");
}

TEST_F(CheckpointIntegrityTest, FlippedBitInTheManifestIsAChecksumMismatch) {
  const std::string manifest = WriteCheckpoint() + "/manifest.pb";
  std::string bytes = ReadFile(manifest);
  bytes[bytes.size() - 20] ^= 0x01;
  WriteFile(manifest, bytes);
  ExpectRefused("checksum mismatch in the checkpoint manifest");
}

TEST_F(CheckpointIntegrityTest, ManifestNamingADataFileOutsideTheCheckpointIsRefused) {
  // A manifest with a valid checksum whose data_file leads out of the directory (found by
  // reading the loader after the checkpoint fuzzer's run): refused before any file is opened.
  const std::string manifest = WriteCheckpoint() + "/manifest.pb";
  auto decoded = DecodeManifest(ReadFile(manifest), manifest);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  for (const std::string bad : {"../tensors.bin", "/etc/passwd", ".."}) {
    CheckpointManifest m = *decoded;
    m.set_data_file(bad);
    WriteFile(manifest, EncodeManifest(m));
    ExpectRefused("is not a file name in the checkpoint directory");
  }
}

TEST_F(CheckpointIntegrityTest, TruncatedAndEmptyFilesAreNamed) {
  const std::string step = WriteCheckpoint();
  const std::string data = ReadFile(step + "/tensors.bin"), manifest = ReadFile(step + "/manifest.pb");
  WriteFile(step + "/tensors.bin", data.substr(0, data.size() - 100));
  ExpectRefused("the file is truncated");
  WriteFile(step + "/tensors.bin", "");
  ExpectRefused("empty (0 bytes)");
  WriteFile(step + "/tensors.bin", data);
  WriteFile(step + "/manifest.pb", manifest.substr(0, 6));
  ExpectRefused("truncated checkpoint manifest");
  WriteFile(step + "/manifest.pb", "");
  ExpectRefused("the checkpoint manifest is empty (0 bytes)");
  fs::remove(step + "/manifest.pb");
  ExpectRefused("missing manifest");
}

TEST_F(CheckpointIntegrityTest, AnotherModelNamesTheTensorAndShape) {
  const std::string step = WriteCheckpoint();
  // The checkpoint of a model whose first layer is wider: its manifest says so.
  auto m = DecodeManifest(ReadFile(step + "/manifest.pb"), "manifest");
  ASSERT_TRUE(m.ok()) << m.status();
  CheckpointTensor* first = m->mutable_tensors(0);
  const std::string name = first->name();
  first->set_shape(0, first->shape(0) + 1);
  m->set_model_fingerprint("0123456789abcdef");
  WriteFile(step + "/manifest.pb", EncodeManifest(*m));
  ExpectRefused("written for a different model: '" + name + "' is f32[");
}

TEST_F(CheckpointIntegrityTest, AnotherOptimizerIsSaid) {
  WriteCheckpoint("sgd");
  ExpectRefused(
      "written for a different optimizer: the checkpoint has optimizer state for 'sgd momentum', this spec "
      "trains with 'adamw'",
      "adamw");
}

TEST_F(CheckpointIntegrityTest, OldSingleFileFormatIsRefusedAsSuch) {
  fs::create_directories(ckpt_);
  WriteFile(ckpt_ + "/checkpoint.pb", "format 1 bytes");
  auto engine = Engine::Create(Options(Spec(), /*resume=*/true));
  ASSERT_FALSE(engine.ok());
  EXPECT_THAT(std::string(engine.status().message()), HasSubstr("old single-file format"));
}

// f32 -> bf16: master weights and momentum carried, the bf16 copies recomputed, and said.
TEST_F(CheckpointIntegrityTest, ResumeInAnotherPrecisionCarriesWeightsAndSaysWhatItReset) {
  WriteCheckpoint("sgd");
  EngineOptions f32 = Options(Spec(), /*resume=*/true);
  std::map<std::string, std::vector<float>> want;  // the f32 resume's weights and momenta
  {
    auto reference = Engine::Create(f32);
    ASSERT_TRUE(reference.ok()) << reference.status();
    EXPECT_TRUE((*reference)->notices().empty()) << absl::StrJoin((*reference)->notices(), "\n");
    for (const std::string& n : (*reference)->ParameterNames()) {
      want[n] = *(*reference)->GetParameter(n);
      want[n + ".momentum"] = *(*reference)->GetParameter(n + ".momentum");
    }
  }  // one run at a time on a checkpoint directory
  EngineOptions bf16 = f32;
  bf16.precision = "bf16";
  auto resumed = Engine::Create(bf16);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 8);
  ASSERT_FALSE(want.empty());
  for (const auto& [n, values] : want) EXPECT_EQ(*(*resumed)->GetParameter(n), values) << n;
  const std::string notices = absl::StrJoin((*resumed)->notices(), "\n");
  EXPECT_THAT(notices, HasSubstr("written with precision f32, loss scaling off) with precision bf16"));
  EXPECT_THAT(notices, HasSubstr("recomputed from the master weights: "));
  EXPECT_THAT(notices, HasSubstr(".weight.lowp"));
  for (int i = 0; i < 3; ++i) {
    auto s = (*resumed)->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_TRUE(std::isfinite(s->loss));
  }
  resumed->reset();
  // fp16 with dynamic loss scaling: the scale restarts from its initial value.
  EngineOptions fp16 = f32;
  fp16.precision = "fp16";
  auto scaled = Engine::Create(fp16);
  ASSERT_TRUE(scaled.ok()) << scaled.status();
  EXPECT_THAT(absl::StrJoin((*scaled)->notices(), "\n"), HasSubstr("reset: the loss scale"));
}

TEST_F(CheckpointIntegrityTest, ARunDoesNotOverwriteCheckpointsUnlessToldTo) {
  WriteCheckpoint();
  const std::string before = TreeFingerprint(ckpt_);
  auto refused = Engine::Create(Options(Spec(), /*resume=*/false));
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--resume"));
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--overwrite_checkpoints"));
  EXPECT_EQ(TreeFingerprint(ckpt_), before);
  // Through the command line: exit code 1, one line, nothing changed.
  const auto r = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", Spec(), " --checkpoint_dir ", ckpt_));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--overwrite_checkpoints"));
  EXPECT_EQ(TreeFingerprint(ckpt_), before);
  EngineOptions overwrite = Options(Spec(), /*resume=*/false);
  overwrite.overwrite_checkpoints = true;
  auto fresh = Engine::Create(overwrite);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->step(), 0);
  EXPECT_THAT(absl::StrJoin((*fresh)->notices(), "\n"), HasSubstr("removed the checkpoints"));
  EXPECT_FALSE(fs::exists(ckpt_ + "/step-00000008"));
}

TEST_F(CheckpointIntegrityTest, ResumeOfAMissingOrEmptyDirectoryIsAnError) {
  auto missing = Engine::Create(Options(Spec(), /*resume=*/true));
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("does not exist"));
  fs::create_directories(ckpt_);
  auto empty = Engine::Create(Options(Spec(), /*resume=*/true));
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("there is no checkpoint in"));
  EXPECT_THAT(std::string(empty.status().message()), HasSubstr("--resume_if_present"));
}

TEST_F(CheckpointIntegrityTest, ResumeIfPresentStartsFreshOrResumes) {
  EngineOptions options = Options(Spec(), /*resume=*/false);
  options.resume_if_present = true;
  auto fresh = Engine::Create(options);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->step(), 0);
  EXPECT_THAT(absl::StrJoin((*fresh)->notices(), "\n"), HasSubstr("starting at step 0"));
  fresh->reset();  // one run at a time on a checkpoint directory
  WriteCheckpoint();
  auto resumed = Engine::Create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 8);
}

TEST_F(CheckpointIntegrityTest, RetentionKeepsTheNewestKAndRemovesLeftovers) {
  fs::create_directories(ckpt_);
  WriteFile(ckpt_ + "/step-00000003.tmp.999999999", "an interrupted write");  // no such process
  EngineOptions options = Options(Spec("sgd", "checkpoint { every_n_steps: 1 keep_last: 3 }"), /*resume=*/false);
  options.resume_if_present = true;
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_THAT(absl::StrJoin((*engine)->notices(), "\n"), HasSubstr("removed 1 unfinished checkpoint write"));
  ASSERT_TRUE((*engine)->Train().ok());
  engine->reset();  // its lock file goes with it
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ckpt_)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"latest", "step-00000018", "step-00000019", "step-00000020"}));
  EXPECT_EQ(ReadFile(ckpt_ + "/latest"), "step-00000020\n");
}

// Train records of a metrics file by step (and the lines themselves), resume markers.
struct MetricsRecords {
  std::vector<int64_t> train_steps;
  std::vector<std::string> train_lines;
  int resumes = 0;
};
MetricsRecords ReadMetrics(const std::string& path) {
  MetricsRecords out;
  for (absl::string_view line : absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    if (absl::StrContains(line, "\"kind\":\"resume\"")) ++out.resumes;
    if (!absl::StrContains(line, "\"kind\":\"train\"")) continue;
    const size_t at = line.find("\"step\":") + 7;
    out.train_steps.push_back(std::stoll(std::string(line.substr(at, line.find(',', at) - at))));
    out.train_lines.emplace_back(line);
  }
  return out;
}

TEST_F(CheckpointIntegrityTest, ResumedMetricsHaveNoDuplicatesAndOneResumeMarker) {
  // An interrupted run: 12 steps logged, the last checkpoint at step 10.
  EngineOptions first = Options(Spec("sgd", "checkpoint { every_n_steps: 5 at_end: false }", "train.spec", 12), false);
  first.metrics_path = dir_ + "/m.jsonl";
  auto engine = Engine::Create(first);
  ASSERT_TRUE(engine.ok()) << engine.status();
  ASSERT_TRUE((*engine)->Train().ok());
  engine->reset();
  std::ofstream(first.metrics_path, std::ios::app) << "{\"kind\":\"train\",\"step\":13,\"lo";  // cut by a crash
  EngineOptions second = Options(Spec("sgd", "", "resume.spec"), /*resume=*/true);
  second.metrics_path = first.metrics_path;
  auto resumed = Engine::Create(second);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ((*resumed)->step(), 10);
  ASSERT_TRUE((*resumed)->Train().ok());
  const MetricsRecords m = ReadMetrics(first.metrics_path);
  std::vector<int64_t> expected(20);
  for (int i = 0; i < 20; ++i) expected[i] = i + 1;
  EXPECT_EQ(m.train_steps, expected);
  EXPECT_EQ(m.resumes, 1);
  EXPECT_THAT(ReadFile(first.metrics_path), HasSubstr("{\"kind\":\"resume\",\"step\":10}\n"));
}

// mpc-train with a checkpoint every step, killed with SIGKILL at 25 random moments (during
// start-up, steps and checkpoint writes) and resumed each time, ends with the weights
// and the losses of an uninterrupted run, bit for bit.
TEST_F(CheckpointIntegrityTest, KilledAndResumedRunEqualsUninterruptedRun) {
  const std::string spec = Spec("sgd", "checkpoint { every_n_steps: 1 keep_last: 2 }", "train.spec", /*steps=*/300);
  auto command = [&](const std::string& name, const std::string& flags) {
    return absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --checkpoint_dir ", dir_, "/ckpt_", name, " --metrics ",
                        dir_, "/", name, ".jsonl --export_onnx ", dir_, "/", name, ".onnx ", flags, " > ", dir_, "/",
                        name, ".log 2>&1");
  };
  // The uninterrupted run, timed: how long until its first checkpoint exists (start-up:
  // loading, compiling, the first step and write) and how long in all.
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_ms = [&start] {
    return static_cast<int>(
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count());
  };
  const pid_t straight_pid = ::fork();
  ASSERT_GE(straight_pid, 0);
  if (straight_pid == 0) {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command("straight", "")).c_str(), nullptr);
    ::_exit(127);
  }
  int startup_ms = -1, straight_status = 0;
  while (::waitpid(straight_pid, &straight_status, WNOHANG) == 0) {
    if (startup_ms < 0 && fs::exists(dir_ + "/ckpt_straight/latest")) startup_ms = elapsed_ms();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const int straight_ms = elapsed_ms();
  ASSERT_TRUE(WIFEXITED(straight_status) && WEXITSTATUS(straight_status) == 0) << ReadFile(dir_ + "/straight.log");
  if (startup_ms < 0) startup_ms = straight_ms;

  // A fifth of the kills land in start-up (before that run writes any checkpoint); the
  // rest once the run has gone a random number of steps past where it resumed, at most an
  // even share of the steps left over the kills still to come, then a random fraction of a
  // step later so that some land inside a checkpoint write. Paced by the steps each run
  // reaches, not by a time estimate: under CI's load the uninterrupted run's timing says
  // little about the killed runs' (a run that finished before its kill failed this test).
  const int kills = 25, steps = 300;
  const double ms_per_step = std::max(0.05, static_cast<double>(straight_ms - startup_ms) / steps);
  std::mt19937 rng(20261125);
  auto reached_step = [&] {
    const std::string latest = ReadFile(dir_ + "/ckpt_killed/latest");
    int64_t step = 0;
    return ParseStepDirName(std::string(absl::StripAsciiWhitespace(latest)), &step) ? step : int64_t{0};
  };
  int killed = 0;
  for (int attempt = 0; attempt < kills; ++attempt) {
    const int64_t before = reached_step();
    const bool in_startup = attempt % 5 == 0;
    const int startup_delay_ms = std::uniform_int_distribution<int>(20, std::max(21, startup_ms))(rng);
    const int64_t share = std::max<int64_t>(1, (steps - before) / (kills - attempt + 1));
    const int64_t target = before + std::uniform_int_distribution<int64_t>(1, share)(rng);
    const int within_step_us = std::uniform_int_distribution<int>(0, static_cast<int>(ms_per_step * 1000))(rng);
    const auto launched = std::chrono::steady_clock::now();
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", ("exec " + command("killed", "--resume_if_present")).c_str(), nullptr);
      ::_exit(127);
    }
    int status = 0;
    bool exited = false;
    while (!(exited = ::waitpid(pid, &status, WNOHANG) == pid)) {
      const auto since_launch = std::chrono::steady_clock::now() - launched;
      const bool due = in_startup ? (since_launch >= std::chrono::milliseconds(startup_delay_ms) ||
                                     reached_step() > before)
                                  : reached_step() >= target;
      if (due) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    if (!exited) {
      if (!in_startup) std::this_thread::sleep_for(std::chrono::microseconds(within_step_us));
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    if (WIFSIGNALED(status)) {
      ++killed;
    } else {
      ASSERT_EQ(WEXITSTATUS(status), 0) << ReadFile(dir_ + "/killed.log");
    }
  }
  EXPECT_GE(killed, 20) << "the run of " << straight_ms << " ms (start-up " << startup_ms
                        << " ms) finished before too many of the kills";
  const auto last = testing::RunCommand(command("killed", "--resume_if_present"));
  ASSERT_EQ(last.exit_code, 0) << ReadFile(dir_ + "/killed.log");

  EXPECT_EQ(ReadFile(dir_ + "/killed.onnx"), ReadFile(dir_ + "/straight.onnx")) << "the final weights differ";
  const MetricsRecords a = ReadMetrics(dir_ + "/straight.jsonl"), b = ReadMetrics(dir_ + "/killed.jsonl");
  EXPECT_EQ(b.train_steps, a.train_steps);
  EXPECT_EQ(b.train_lines, a.train_lines);
  EXPECT_GE(b.resumes, 1);
  for (const auto& e : fs::directory_iterator(dir_ + "/ckpt_killed")) {
    EXPECT_FALSE(absl::StrContains(e.path().filename().string(), ".tmp.")) << e.path();
  }
}

}  // namespace
}  // namespace mpc
