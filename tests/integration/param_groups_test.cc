// Parameter groups and frozen parameters against PyTorch: the golden MLP trained 20 steps
// with per-group weight decay and learning-rate multiplier (first matching group wins) and
// the first layer's weight frozen matches torch.optim param_groups + requires_grad=False
// step by step (relative 1e-4, the f32 golden tolerance) for AdamW and SGD; the frozen
// weight ends bit-identical to its initial value, it has no optimizer state, and no node of
// the compiled program computes its gradient. Golden data: tests/golden/make_param_groups_golden.py.
#include <cmath>
#include <fstream>

#include "engine/dataset.h"
#include "engine/mpc.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

class ParamGroupsGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ParamGroupsGoldenTest, MatchesTorchParamGroupsAndKeepsFrozenWeightsExact) {
  const std::string run = GetParam();
  const std::string dir = testing::SourcePath("tests/golden/mlp/");
  const std::vector<double> expected = testing::ReadLosses(dir + run + "_losses.txt");
  ASSERT_EQ(expected.size(), 20u);
  EngineOptions options;
  options.spec_path = dir + run + ".spec";
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<float> frozen_before = *(*engine)->GetParameter("0.weight");
  for (int i = 0; i < 20; ++i) {
    auto step = (*engine)->Step();
    ASSERT_TRUE(step.ok()) << step.status();
    EXPECT_LT(std::abs(step->loss - expected[i]) / std::abs(expected[i]), 1e-4)
        << run << " step " << i + 1 << ": mpc " << step->loss << " torch " << expected[i];
  }
  EXPECT_EQ(*(*engine)->GetParameter("0.weight"), frozen_before) << "a frozen weight changed";
  for (const std::string& name : (*engine)->ParameterNames()) {
    auto want = ReadNpy(dir + run + "_final/" + name + ".npy");
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*engine)->GetParameter(name);
    ASSERT_TRUE(got.ok()) << got.status();
    testing::ExpectMatchesGoldenF32(*got, *want, run + " " + name);
  }
  for (const std::string& state : (*engine)->StateNames()) {
    EXPECT_NE(state.rfind("0.weight.", 0), 0u) << "optimizer state for the frozen weight: " << state;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ParamGroupsGoldenTest, ::testing::Values("groups_adamw", "groups_sgd"));

// The compiled program computes no gradient for the frozen weight: autodiff reports it
// frozen, and no node produces a value of its shape (the first layer's [32, 20] weight
// gradient; no other value in this MLP has that shape).
TEST(FreezeTest, FrozenWeightGradientIsNotInTheProgram) {
  const std::string dir = testing::SourcePath("tests/golden/mlp/");
  for (const bool frozen : {false, true}) {
    auto spec = LoadTrainSpec(dir + (frozen ? "groups_adamw.spec" : "adamw.spec"));
    ASSERT_TRUE(spec.ok()) << spec.status();
    ProgramOptions options;
    options.model_path = dir + "model.onnx";
    options.batch_size = spec->batch_size();
    auto program = CompileProgram(*spec, testing::CpuBackend().capabilities(), options);
    ASSERT_TRUE(program.ok()) << program.status();
    const auto& autodiff = program->results.autodiff;
    EXPECT_EQ(autodiff.frozen, frozen ? std::vector<std::string>{"0.weight"} : std::vector<std::string>{});
    int weight_shaped = 0;
    for (const auto& node : program->graph->nodes()) {
      for (const Value* out : node->outputs) weight_shaped += out->shape == Shape{32, 20};
    }
    EXPECT_EQ(weight_shaped > 0, !frozen) << "nodes producing a [32, 20] value (the frozen weight's gradient)";
    EXPECT_EQ(autodiff.param_grads.size(), frozen ? 7u : 8u);
  }
}

TEST(FreezeTest, PatternsThatMatchNothingAreErrors) {
  const std::string dir = testing::SourcePath("tests/golden/mlp/");
  struct Case {
    std::string extra, message;
  };
  for (const Case& c : std::vector<Case>{
           {"freeze: \"encoder\\\\..*\"", "freeze pattern 'encoder\\..*' matches no parameter"},
           {"freeze: \".*\"", "nothing is left to train"},
           {"param_groups { pattern: \"head.*\" lr_scale: 2 }", "parameter group 0 pattern 'head.*' matches no"},
           {"param_groups { pattern: \"(\" }", "param_groups[0].pattern: '(' is not a valid regex"},
           {"param_groups { pattern: \".*\" lr_scale: -1 }", "param_groups[0].lr_scale"}}) {
    const std::string tmp = testing::MakeTempDir("freeze_errors");
    std::string text;
    {
      std::ifstream in(dir + "adamw.spec");
      text.assign(std::istreambuf_iterator<char>(in), {});
    }
    const std::string path = tmp + "/spec";
    std::ofstream(path) << text << "\n" << c.extra << "\n";
    auto spec = LoadTrainSpec(path);
    absl::Status status = spec.status();
    if (spec.ok()) {
      ProgramOptions options;
      options.model_path = dir + "model.onnx";
      options.batch_size = spec->batch_size();
      status = CompileProgram(*spec, testing::CpuBackend().capabilities(), options).status();
    }
    EXPECT_FALSE(status.ok()) << c.extra;
    EXPECT_NE(std::string(status.message()).find(c.message), std::string::npos) << c.extra << ": " << status;
  }
}

}  // namespace
}  // namespace mpc
