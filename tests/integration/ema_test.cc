// The moving average of the weights (spec `ema`): over 100 steps of the golden MLP it
// matches a float64 recursion over the same weight trajectory within 1e-6; it survives a
// checkpoint and resume bit for bit; a skipped step (injected overflow) leaves it as it
// was; evaluation and ONNX export on the averaged weights use exactly those values.
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_replace.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr double kDecay = 0.9;

// The golden run `run` with `extra` spec text and `steps` steps instead of its 20.
std::string SpecWithSteps(const std::string& run, const std::string& extra, int steps, const std::string& dir) {
  const std::string path = testing::WriteGoldenSpec(run, extra, dir, "ema.spec");
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  std::ofstream(path) << absl::StrReplaceAll(text.str(), {{"steps: 20\n", "steps: " + std::to_string(steps) + "\n"}});
  return path;
}

std::unique_ptr<Engine> Create(const std::string& spec, const std::string& checkpoint = "", bool resume = false) {
  EngineOptions options;
  options.spec_path = spec;
  options.checkpoint_dir = checkpoint;
  options.resume = resume;
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

TEST(EmaTest, MatchesAFloat64AverageOfTheWeightsOver100Steps) {
  const std::string dir = testing::MakeTempDir("ema_f64");
  const std::string spec = SpecWithSteps("adamw", "ema { decay: 0.9 }", 100, dir);
  auto engine = Create(spec);
  ASSERT_TRUE(engine);
  ASSERT_EQ(engine->total_steps(), 100);
  ASSERT_TRUE(engine->keeps_weight_average());
  std::map<std::string, std::vector<double>> reference;
  for (const std::string& name : engine->ParameterNames()) {
    const std::vector<float> w = *engine->GetParameter(name);
    reference[name].assign(w.begin(), w.end());  // the average starts at the initial weights
  }
  for (int step = 0; step < 100; ++step) {
    auto s = engine->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    for (auto& [name, avg] : reference) {
      const std::vector<float> w = *engine->GetParameter(name);
      for (size_t i = 0; i < avg.size(); ++i) avg[i] = kDecay * avg[i] + (1 - kDecay) * w[i];
    }
  }
  double worst = 0;
  for (const auto& [name, avg] : reference) {
    auto got = engine->GetParameter(name + ".ema");
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), avg.size());
    for (size_t i = 0; i < avg.size(); ++i) worst = std::max(worst, std::abs((*got)[i] - avg[i]));
    // The average is not the weights: after 100 AdamW steps they differ.
    EXPECT_NE(*got, *engine->GetParameter(name)) << name;
  }
  EXPECT_LT(worst, 1e-6);
}

TEST(EmaTest, SurvivesResumeBitExactly) {
  const std::string dir = testing::MakeTempDir("ema_resume");
  const std::string spec = SpecWithSteps("sgd", "ema { decay: 0.95 }", 40, dir);
  auto straight = Create(spec);
  ASSERT_TRUE(straight);
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(straight->Step().ok());

  const std::string checkpoint = dir + "/ckpt";
  auto first = Create(spec);
  for (int i = 0; i < 17; ++i) ASSERT_TRUE(first->Step().ok());
  ASSERT_TRUE(first->SaveCheckpoint(checkpoint).ok());
  auto resumed = Create(spec, checkpoint, /*resume=*/true);
  ASSERT_TRUE(resumed);
  ASSERT_EQ(resumed->step(), 17);
  for (int i = 17; i < 40; ++i) ASSERT_TRUE(resumed->Step().ok());
  for (const std::string& name : straight->ParameterNames()) {
    EXPECT_EQ(*straight->GetParameter(name + ".ema"), *resumed->GetParameter(name + ".ema")) << name;
  }
}

TEST(EmaTest, ASkippedStepLeavesTheAverageAsItWas) {
  const std::string dir = testing::MakeTempDir("ema_skip");
  const std::string spec = testing::WriteGoldenSpec(
      "sgd", "ema { decay: 0.9 }\ndebug { inject_nonfinite { step: 3 parameter: \"2.weight\" value: \"nan\" } }", dir,
      "ema.spec");
  auto engine = Create(spec);
  ASSERT_TRUE(engine);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->Step().ok());
  const std::vector<float> before = *engine->GetParameter("2.weight.ema");
  auto s = engine->Step();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->skipped);
  EXPECT_EQ(*engine->GetParameter("2.weight.ema"), before);
  ASSERT_TRUE(engine->Step().ok());
  EXPECT_NE(*engine->GetParameter("2.weight.ema"), before);
}

TEST(EmaTest, EvaluatesAndExportsTheAveragedWeights) {
  const std::string dir = testing::MakeTempDir("ema_eval");
  const std::string spec = testing::WriteGoldenSpec(
      "adamw", "ema { decay: 0.8 evaluate: true }\neval { at_epoch_end: true }", dir, "e.spec");
  auto engine = Create(spec);
  ASSERT_TRUE(engine);
  std::vector<EvalMetrics> evals;
  TrainCallbacks callbacks;
  callbacks.on_eval = [&](const EvalMetrics& e) { evals.push_back(e); };
  auto summary = engine->Train(callbacks);
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(evals.size(), 2u) << "one evaluation per weight set at the epoch's end";
  EXPECT_FALSE(evals[0].averaged_weights);
  EXPECT_TRUE(evals[1].averaged_weights);
  EXPECT_NE(evals[0].loss, evals[1].loss);
  auto again = engine->Evaluate(Engine::Weights::kAverage);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->loss, evals[1].loss);

  // The exported averaged model, loaded as the model of a fresh run, evaluates to the same loss.
  const std::string onnx = dir + "/averaged.onnx";
  ASSERT_TRUE(engine->ExportOnnx(onnx, Engine::Weights::kAverage).ok());
  const std::string reload = testing::WriteGoldenSpec("adamw", "eval { at_epoch_end: true }", dir, "reload.spec", onnx);
  auto fresh = Create(reload);
  ASSERT_TRUE(fresh);
  auto reloaded = fresh->Evaluate();
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->loss, evals[1].loss);

  // Without an average, asking for one is an error that says how to get one.
  auto plain = Create(testing::WriteGoldenSpec("adamw", "", dir, "plain.spec"));
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->keeps_weight_average());
  const absl::Status st = plain->ExportOnnx(dir + "/x.onnx", Engine::Weights::kAverage);
  EXPECT_NE(st.message().find("add ema"), absl::string_view::npos) << st;
  EXPECT_FALSE(plain->Evaluate(Engine::Weights::kAverage).ok());
}

}  // namespace
}  // namespace mpc
