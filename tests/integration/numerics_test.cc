// Non-finite numbers through the real command line (docs/numerics.md, "Non-finite
// values"): bad data is refused naming the file, example and feature; a diverging run in
// f32, bf16 and fp16 stops with an error and leaves only a good checkpoint behind;
// --check-numerics names the op where a NaN or infinity first appears (and not the ops
// that pass it on), treats an overflow of the loss-scaled backward pass as expected, and
// changes nothing in the compiled program; --tensor-stats writes per-tensor statistics.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/dataset.h"
#include "engine/mpc.h"
#include "graph/graph_builder.h"
#include "graph/onnx_export.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

class NumericsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    golden_ = testing::SourcePath("tests/golden/mlp");
  }

  // The golden MLP's SGD spec (16 examples a batch, 20 features) with `features` as the
  // data and `extra` appended; checkpoints every 5 steps into DIR/ckpt.
  std::string Spec(const std::string& extra, const std::string& features = "") {
    std::string text = ReadFile(golden_ + "/sgd.spec");
    text = absl::StrReplaceAll(
        text, {{"\"model.onnx\"", "\"" + golden_ + "/model.onnx\""},
               {"\"features.npy\"", "\"" + (features.empty() ? golden_ + "/features.npy" : features) + "\""},
               {"\"labels.npy\"", "\"" + golden_ + "/labels.npy\""}});
    text += "\ncheckpoint { dir: \"" + dir_ + "/ckpt\" every_n_steps: 5 at_end: true }\n" + extra + "\n";
    const std::string path = dir_ + "/train.spec";
    std::ofstream(path) << text;
    return path;
  }

  testing::CommandResult Train(const std::string& spec, const std::string& flags) {
    return testing::RunCommand(
        absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec, " --metrics ", dir_, "/m.jsonl --overwrite_checkpoints ", flags));
  }

  // The golden features with one value replaced.
  std::string FeaturesWith(int64_t example, int64_t feature, float value) {
    auto x = ReadNpy(golden_ + "/features.npy");
    EXPECT_TRUE(x.ok()) << x.status();
    Tensor f = x->CastTo(DType::kF32);
    f.data<float>()[example * f.shape()[1] + feature] = value;
    const std::string path = dir_ + "/features.npy";
    EXPECT_TRUE(WriteNpy(path, f).ok());
    return path;
  }

  std::string dir_, golden_;
};

TEST_F(NumericsTest, NonFiniteFeaturesAreRefusedNamingFileExampleAndFeature) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const auto& [value, word] :
       std::vector<std::pair<float, std::string>>{{nan, "NaN"}, {inf, "+inf"}, {-inf, "-inf"}}) {
    SCOPED_TRACE(word);
    const std::string features = FeaturesWith(17, 3, value);
    const auto r = Train(Spec("", features), "");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(
        Contains(r.output, absl::StrCat("train_data.npy.features (", features, "): example 17, feature [3] is ", word)))
        << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/ckpt"));
  }
}

// SGD with lr 1e6 diverges within a few steps in every precision. The run stops with an
// error naming the step; the metrics say NaN/Infinity as strings; the checkpoint
// directory holds only a checkpoint the run can continue from: finite, and from before
// the failure.
TEST_F(NumericsTest, DivergingRunStopsAndKeepsOnlyAGoodCheckpoint) {
  for (const char* precision : {"f32", "bf16", "fp16"}) {
    SCOPED_TRACE(precision);
    std::filesystem::remove_all(dir_ + "/ckpt");
    const std::string spec = Spec("");
    std::string text = ReadFile(spec);
    text = absl::StrReplaceAll(text, {{"lr: 0.1", "lr: 1e6"}, {"steps: 20", "steps: 200"}});
    std::ofstream(spec) << text;
    const auto r = Train(spec, absl::StrCat("--precision ", precision));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(Contains(r.output, "the training loss is") || Contains(r.output, "consecutive steps") ||
                Contains(r.output, "loss scale fell") || Contains(r.output, "not writing a checkpoint"))
        << r.output;
    const std::string metrics = ReadFile(dir_ + "/m.jsonl");
    EXPECT_TRUE(Contains(metrics, "\"stopped\":")) << metrics;
    EXPECT_FALSE(Contains(metrics, "null")) << metrics;
    // Whatever checkpoint is there loads and holds finite weights from before step 200.
    if (std::filesystem::exists(dir_ + "/ckpt/latest")) {
      EngineOptions options;
      options.spec_path = spec;
      options.precision = precision;
      options.resume = true;
      auto engine = Engine::Create(options);
      ASSERT_TRUE(engine.ok()) << engine.status();
      EXPECT_LT((*engine)->step(), 200);
      for (const std::string& name : (*engine)->ParameterNames()) {
        auto values = (*engine)->GetParameter(name);
        ASSERT_TRUE(values.ok());
        for (float v : *values) ASSERT_TRUE(std::isfinite(v)) << name;
      }
    }
  }
}

TEST_F(NumericsTest, MetricsTellNaNFromInfinity) {
  const std::string spec = Spec("");
  std::string text = ReadFile(spec);
  text = absl::StrReplaceAll(text, {{"lr: 0.1", "lr: 1e6"}, {"steps: 20", "steps: 200"}});
  std::ofstream(spec) << text;
  Train(spec, "--precision fp16 --loss-scaling off");
  const std::string metrics = ReadFile(dir_ + "/m.jsonl");
  EXPECT_TRUE(Contains(metrics, "\"loss\":\"NaN\"") || Contains(metrics, "\"loss\":\"Infinity\"")) << metrics;
}

// Two small models, exported to ONNX: `log` takes the log of a value that is negative in
// places (x - 2 with x in [0, 4)), so Log makes the first NaN and the MatMul after it
// spreads it; `overflow` has a middle MatMul whose f16 result exceeds 65504.
std::string ExportModel(const std::string& dir, const std::string& name) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4, 8});
  auto named = [&](Value* v, const std::string& node) {
    b.last_node()->name = node;
    return v;
  };
  Value* y = nullptr;
  if (name == "log") {
    Value* shifted = named(b.Op("Sub", {x, g.AddConstant("two", Tensor::Scalar(2.0f))}), "shift");
    Value* logged = named(b.Op("Log", {shifted}), "log");
    y = named(b.Op("MatMul", {logged, g.AddParameter("w", testing::RandomTensor(DType::kF32, {8, 3}, 1))}), "mix");
  } else {
    Value* h1 =
        named(b.Op("MatMul", {x, g.AddParameter("w1", testing::RandomTensor(DType::kF32, {8, 8}, 2, 0.5, 1))}), "mm1");
    Tensor big = testing::RandomTensor(DType::kF32, {8, 8}, 3, 3000, 4000);
    Value* h2 = named(b.Op("MatMul", {h1, g.AddParameter("w2", big)}), "mm2");
    y = named(b.Op("MatMul", {h2, g.AddParameter("w3", testing::RandomTensor(DType::kF32, {8, 3}, 4))}), "mm3");
  }
  EXPECT_TRUE(b.status().ok()) << b.status();
  EXPECT_TRUE(g.RenameValue(y, "y").ok());
  g.SetOutputs({y});
  const std::string path = dir + "/" + name + ".onnx";
  EXPECT_TRUE(ExportOnnxFile(g, ExportOptions{}, path).ok());
  return path;
}

TEST_F(NumericsTest, CheckNumericsNamesTheOpThatMadeTheFirstNonFiniteValue) {
  const Tensor x = testing::RandomTensor(DType::kF32, {4, 8}, 9, 0, 4);
  ASSERT_TRUE(WriteNpy(dir_ + "/x.npy", x).ok());
  const Tensor ones = testing::RandomTensor(DType::kF32, {4, 8}, 10, 2.5, 3);
  ASSERT_TRUE(WriteNpy(dir_ + "/x_big.npy", ones).ok());
  struct Case {
    std::string model, input, precision, node, op;
  };
  for (const Case& c : {Case{"log", "x.npy", "f32", "log", "Log, f32, forward"},
                        Case{"overflow", "x_big.npy", "fp16", "mm2", "MatMul, f16, forward"}}) {
    SCOPED_TRACE(c.model);
    const std::string model = ExportModel(dir_, c.model);
    const std::string run = absl::StrCat(MPC_TOOL_BIN, " run --model ", model, " --precision ", c.precision,
                                         " --input x=", dir_, "/", c.input, " --output-dir ", dir_, "/out");
    // Without the flag the values flow on to the output, silently.
    const auto plain = testing::RunCommand(run);
    EXPECT_EQ(plain.exit_code, 0) << plain.output;
    auto y = ReadNpy(dir_ + "/out/y.npy");
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_GT(y->NonFiniteCount(), 0);
    const auto checked = testing::RunCommand(run + " --check-numerics");
    EXPECT_EQ(checked.exit_code, 1) << checked.output;
    EXPECT_TRUE(Contains(checked.output, absl::StrCat("of node '", c.node, "' (", c.op))) << checked.output;
    EXPECT_TRUE(Contains(checked.output, "from the model")) << checked.output;
  }
}

// Under dynamic loss scaling an overflow in the scaled backward pass is what the scale
// is for: with --check-numerics it is reported (overflow_node) and the step skipped, not
// an error; the run goes on once the scale has backed off.
TEST_F(NumericsTest, CheckNumericsExpectsOverflowsOfTheScaledBackwardPass) {
  const std::string spec = Spec("loss_scaling { mode: DYNAMIC init_scale: 1e9 }");
  std::string text = ReadFile(spec);
  std::ofstream(spec) << absl::StrReplaceAll(text, {{"steps: 20", "steps: 40"}});
  const auto r = Train(spec, "--precision fp16 --check-numerics");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  int skipped_with_node = 0, clean = 0;
  for (absl::string_view line : absl::StrSplit(ReadFile(dir_ + "/m.jsonl"), '\n', absl::SkipEmpty())) {
    if (!Contains(std::string(line), "\"kind\":\"train\"")) continue;
    if (Contains(std::string(line), "\"skipped\":true")) {
      EXPECT_TRUE(Contains(std::string(line), "\"overflow_node\":\"grad/")) << line;
      ++skipped_with_node;
    } else {
      ++clean;
    }
  }
  EXPECT_GT(skipped_with_node, 0);
  EXPECT_GT(clean, 0);
}

// The checks are the executor's: the compiled program is the same with them on.
TEST_F(NumericsTest, CheckingChangesNothingInTheCompiledProgram) {
  auto report = [&](const std::string& extra) {
    const auto r = testing::RunCommand(
        absl::StrCat(MPC_TOOL_BIN, " compile --spec ", Spec(extra), " --precision fp16 --report ", dir_, "/r.json"));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    std::string json = ReadFile(dir_ + "/r.json");
    // Pass timings differ from run to run.
    std::string out;
    for (absl::string_view part : absl::StrSplit(json, "\"ms\":")) {
      out += out.empty() ? std::string(part) : std::string(part.substr(part.find(',')));
    }
    return out;
  };
  EXPECT_EQ(report(""), report("numerics { check_every_op: true tensor_stats_every_n_steps: 1 }"));
}

// --tensor-stats: every N steps one record per forward and backward tensor; f16 tensors
// say how much of them is zero or subnormal. Without loss scaling the small f16
// gradients of this MLP underflow far more than with it.
TEST_F(NumericsTest, TensorStatsShowF16GradientsUnderflowWithoutLossScaling) {
  auto underflow = [&](const std::string& scaling) {
    const auto r = Train(Spec(""), "--precision fp16 --tensor-stats 5 --loss-scaling " + scaling);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    double worst = 0;
    int records = 0;
    for (absl::string_view line : absl::StrSplit(ReadFile(dir_ + "/m.jsonl"), '\n', absl::SkipEmpty())) {
      const std::string l(line);
      if (!Contains(l, "\"kind\":\"tensor_stats\"")) continue;
      ++records;
      if (!Contains(l, "\"phase\":\"backward\"") || !Contains(l, "\"dtype\":\"f16\"")) continue;
      auto field = [&](const std::string& key) {
        const size_t at = l.find("\"" + key + "\":");
        return at == std::string::npos ? 0.0 : std::stod(l.substr(at + key.size() + 3));
      };
      EXPECT_TRUE(Contains(l, "\"subnormal_fraction\":")) << l;
      worst = std::max(worst, field("subnormal_fraction"));
    }
    EXPECT_GT(records, 0);
    return worst;
  };
  const double scaled = underflow("dynamic");
  const double unscaled = underflow("off");
  EXPECT_GT(unscaled, scaled);
  EXPECT_GT(unscaled, 0.01);
}

}  // namespace
}  // namespace mpc
