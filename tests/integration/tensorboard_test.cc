// mpc-train --tensorboard DIR end to end: a short run writes one event file whose every
// record an independent reader (tests/tools/read_tensorboard.py: its own TFRecord parser
// and CRC-32C, its own descriptors with TensorFlow's field numbers) accepts, and whose
// scalars are exactly the run's --metrics records, rounded to float32: every tag at every
// step, nothing more. Runs: fp16 with dynamic loss scaling, an injected overflow (a skipped
// step), clipping, evaluation (top-k, macro F1) and --tensor-stats; FP8 with its per-tensor amax/scale.
// A directory that cannot be created stops mpc-train before training.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using Key = std::pair<std::string, int64_t>;  // tag, step

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One metrics record: its top-level keys as raw JSON tokens (strings unquoted, arrays of
// numbers as they are), the members of a nested object as "<object>/<key>" (the "fp8"
// map). The metrics file is flat apart from that, and escapes nothing our names contain.
std::map<std::string, std::string> ParseRecord(const std::string& line) {
  std::map<std::string, std::string> out;
  std::string prefix;
  size_t i = 0;
  auto skip = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
  };
  auto string_at = [&] {
    std::string s;
    ++i;  // opening quote
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\') ++i;
      s += line[i++];
    }
    ++i;  // closing quote
    return s;
  };
  EXPECT_EQ(line.front(), '{') << line;
  i = 1;
  while (true) {
    skip();
    if (i >= line.size()) break;
    if (line[i] == '}') {
      ++i;
      prefix.clear();
      continue;
    }
    const std::string key = string_at();
    EXPECT_EQ(line[i], ':') << line;
    ++i;
    if (line[i] == '{') {
      prefix = key + "/";
      ++i;
      continue;
    }
    if (line[i] == '"') {
      out[prefix + key] = string_at();
    } else if (line[i] == '[') {  // per-class arrays of numbers: kept raw, no tag reads them
      const size_t end = line.find(']', i) + 1;
      out[prefix + key] = line.substr(i, end - i);
      i = end;
    } else {
      const size_t end = line.find_first_of(",}", i);
      out[prefix + key] = line.substr(i, end - i);
      i = end;
    }
  }
  return out;
}

double Number(const std::string& token) {
  if (token == "true") return 1;
  if (token == "false") return 0;
  if (token == "NaN") return NAN;
  if (token == "Infinity") return INFINITY;
  if (token == "-Infinity") return -INFINITY;
  double v;
  EXPECT_TRUE(absl::SimpleAtod(token, &v)) << token;
  return v;
}

// What the event file must hold for a metrics file: the TensorBoard tags of
// engine/tensorboard_writer.h, computed from the JSON records.
std::map<Key, double> ExpectedScalars(const std::string& metrics_path) {
  std::map<Key, double> expected;
  auto add = [&](const std::string& tag, int64_t step, double v) {
    EXPECT_TRUE(expected.emplace(Key{tag, step}, v).second) << "metrics repeat " << tag << " at step " << step;
  };
  int64_t skipped_total = 0;
  for (absl::string_view line : absl::StrSplit(ReadFile(metrics_path), '\n', absl::SkipEmpty())) {
    std::map<std::string, std::string> r = ParseRecord(std::string(line));
    const int64_t step = r.count("step") ? static_cast<int64_t>(Number(r["step"])) : -1;
    if (r["kind"] == "train") {
      skipped_total += r["skipped"] == "true";
      for (const char* key : {"loss", "lr", "loss_scale", "skipped"})
        add(absl::StrCat("train/", key), step, Number(r[key]));
      add("train/skipped_total", step, skipped_total);
      if (r.count("grad_norm")) add("train/grad_norm", step, Number(r["grad_norm"]));
      for (const auto& [key, token] : r) {
        if (key.rfind("fp8/", 0) == 0) add(key, step, Number(token));
      }
    } else if (r["kind"] == "tensor_stats") {
      for (const char* key : {"amax", "zero_fraction", "nonfinite", "subnormal_fraction"}) {
        if (r.count(key)) add(absl::StrCat("stats/", r["tensor"], "/", key), step, Number(r[key]));
      }
    } else if (r["kind"] == "eval") {
      for (const char* key : {"loss", "accuracy", "top_k_accuracy", "macro_f1", "perplexity"}) {
        if (r.count(key) && Number(r[key]) >= 0) add(absl::StrCat("eval/", key), step, Number(r[key]));
      }
    }
  }
  return expected;
}

struct TrainRun {
  std::map<Key, double> scalars;   // what the reader decoded
  std::map<Key, double> expected;  // from the metrics file
};

// Trains with `flags`, --metrics and --tensorboard, and reads both files back.
TrainRun TrainAndRead(const std::string& name, const std::string& spec_extra, const std::string& flags) {
  const std::string dir = testing::MakeTempDir("tensorboard_" + name);
  const std::string spec = testing::WriteTwelveStepMlpSpec(dir, spec_extra);
  const std::string metrics = dir + "/metrics.jsonl", tb = dir + "/tb/run1";
  const auto r = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --device cpu --metrics ", metrics,
                                                  " --tensorboard ", tb, " ", flags));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  TrainRun run;
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(tb)) files.push_back(entry.path().string());
  EXPECT_EQ(files.size(), 1u) << absl::StrJoin(files, ", ");
  if (files.size() != 1) return run;
  EXPECT_TRUE(std::regex_match(std::filesystem::path(files[0]).filename().string(),
                               std::regex(R"(events\.out\.tfevents\.[0-9]{10}\.[^/]+)")))
      << files[0];

  const auto read = testing::RunCommand(
      absl::StrCat(testing::Python(), " ", testing::SourcePath("tests/tools/read_tensorboard.py"), " ", files[0]));
  EXPECT_EQ(read.exit_code, 0) << read.output;
  std::vector<std::string> lines = absl::StrSplit(read.output, '\n', absl::SkipEmpty());
  EXPECT_FALSE(lines.empty());
  if (lines.empty()) return run;
  EXPECT_EQ(lines[0], "file_version\tbrain.Event:2");
  EXPECT_TRUE(lines.size() > 1 && lines[1] == "session_start\t1") << (lines.size() > 1 ? lines[1] : "");
  for (size_t i = 2; i < lines.size(); ++i) {
    std::vector<std::string> f = absl::StrSplit(lines[i], '\t');
    EXPECT_EQ(f.size(), 3u) << lines[i];
    if (f.size() != 3) continue;
    int64_t step;
    EXPECT_TRUE(absl::SimpleAtoi(f[1], &step)) << lines[i];
    const std::string value = f[2] == "nan" ? "NaN" : f[2] == "inf" ? "Infinity" : f[2] == "-inf" ? "-Infinity" : f[2];
    EXPECT_TRUE(run.scalars.emplace(Key{f[0], step}, Number(value)).second) << "repeated: " << lines[i];
  }
  run.expected = ExpectedScalars(metrics);
  return run;
}

// Every expected tag at every step, nothing else, each value the metrics value as float32.
// The metrics file keeps 9 significant digits of the double, which rounds to the same
// float32 except right at a float32 rounding boundary: one float32 ulp is allowed.
void ExpectSameScalars(const TrainRun& run) {
  for (const auto& [key, want] : run.expected) {
    auto it = run.scalars.find(key);
    if (it == run.scalars.end()) {
      ADD_FAILURE() << "event file lacks " << key.first << " at step " << key.second;
      continue;
    }
    const float w = static_cast<float>(want), got = static_cast<float>(it->second);
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(got)) << key.first << " at step " << key.second << ": " << got;
    } else {
      EXPECT_TRUE(got == w || got == std::nextafter(w, INFINITY) || got == std::nextafter(w, -INFINITY))
          << key.first << " at step " << key.second << ": event file " << got << ", metrics " << want;
    }
  }
  for (const auto& [key, value] : run.scalars) {
    EXPECT_TRUE(run.expected.count(key)) << "event file has " << key.first << " at step " << key.second
                                         << " (= " << value << ") that the metrics file does not";
  }
}

int CountTags(const TrainRun& run, const std::string& prefix) {
  int n = 0;
  for (const auto& [key, value] : run.scalars) n += key.first.rfind(prefix, 0) == 0;
  return n;
}

TEST(TensorBoardTest, Fp16LossScaledRunMatchesItsMetricsFile) {
  const TrainRun run = TrainAndRead("fp16",
                                    "loss_scaling { mode: DYNAMIC init_scale: 1024 growth_interval: 3 }\n"
                                    "debug { inject_nonfinite { step: 4 parameter: \"2.weight\" value: \"inf\" } }",
                                    "--precision fp16 --tensor-stats 5");
  ExpectSameScalars(run);
  // The run exercised what it is meant to: a skipped step, a changing scale, clipping,
  // evaluations and f16 tensor statistics.
  EXPECT_EQ(run.scalars.at(Key{"train/skipped", 5}), 1.0);
  EXPECT_EQ(run.scalars.at(Key{"train/skipped_total", 12}), 1.0);
  EXPECT_NE(run.scalars.at(Key{"train/loss_scale", 1}), run.scalars.at(Key{"train/loss_scale", 12}));
  EXPECT_EQ(CountTags(run, "train/grad_norm"), 12);
  EXPECT_EQ(CountTags(run, "eval/loss"), 3);  // steps 4, 8, 12
  EXPECT_EQ(CountTags(run, "eval/accuracy"), 3);
  EXPECT_EQ(CountTags(run, "eval/top_k_accuracy"), 3);  // eval.top_k: 3
  EXPECT_EQ(CountTags(run, "eval/macro_f1"), 3);
  EXPECT_GT(CountTags(run, "stats/"), 0);
  bool subnormal = false;
  for (const auto& [key, value] : run.scalars) subnormal |= key.first.find("/subnormal_fraction") != std::string::npos;
  EXPECT_TRUE(subnormal);
}

TEST(TensorBoardTest, Fp8RunReportsEveryAmaxAndScale) {
  const TrainRun run = TrainAndRead("fp8", "fp8 { include_first_last: true report_tensor: \".*\" }",
                                    "--precision fp8 --pad-multiple 16 --tensor-stats 4");
  ExpectSameScalars(run);
  EXPECT_GT(CountTags(run, "fp8/"), 0);
  EXPECT_EQ(CountTags(run, "fp8/") % 12, 0);  // the same tensors every one of the 12 steps
}

TEST(TensorBoardTest, ADirectoryThatCannotBeCreatedStopsBeforeTraining) {
  const std::string dir = testing::MakeTempDir("tensorboard_bad");
  const std::string blocker = dir + "/file";
  std::ofstream(blocker) << "x";
  const std::string spec = dir + "/train.spec";
  std::ofstream(spec) << "model: \"" << testing::SourcePath("tests/golden/mlp/model.onnx") << "\"\n"
                      << "features_input: \"x\"\nloss { output: \"logits\" }\n"
                      << "train_data { synthetic { num_examples: 64 feature_shape: 20 num_classes: 5 } }\n"
                      << "batch_size: 16\nsteps: 4\n";
  const auto r = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --device cpu --metrics ", dir,
                                                  "/m.jsonl --tensorboard ", blocker, "/tb"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("mpc-train: error: --tensorboard " + blocker + "/tb: cannot create the directory"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("done:"), std::string::npos) << r.output;
  EXPECT_EQ(ReadFile(dir + "/m.jsonl").find("\"kind\":\"train\""), std::string::npos);
}

}  // namespace
}  // namespace mpc
