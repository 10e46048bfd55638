// Activation recomputation (memory.recompute; passes/recompute.h) on models other libraries
// wrote (the export corpus: Hugging Face GPT-2 and Llama, timm's ViT, a torchvision-style
// CNN with BatchNorm, a plain MLP; tests/golden/corpus): every policy trains the same
// losses and ends at the same weights, bit for bit, as no recomputation (the clones run the
// same kernels on the same bytes, and the updates wait for the clones that read the
// weights); SELECTIVE and FULL plan a smaller peak than NONE; FULL keeps the blocks' inputs
// it finds from the graph (the residual forks) or the ones a pattern names; a bad pattern
// is an error that says so.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "engine/mpc.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

struct Trained {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;
  int64_t planned_peak = 0;
};

Trained Train(const std::string& spec, const std::string& recompute, int steps, const std::string& boundaries = "") {
  Trained out;
  EngineOptions options;
  options.spec_path = testing::SourcePath("tests/golden/corpus/" + spec);
  options.device = "cpu";
  options.recompute = recompute;
  options.use_checkpoint_dir = false;
  if (!boundaries.empty()) {
    auto text = ReadFileToString(options.spec_path);
    EXPECT_TRUE(text.ok());
    options.spec_text = absl::StrCat(*text, "\nmemory { boundaries: \"", boundaries, "\" }\n");
    options.base_dir = testing::SourcePath("tests/golden/corpus/" + spec.substr(0, spec.find('/')));
    options.spec_path.clear();
  }
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return out;
  out.planned_peak = (*engine)->planned_peak_bytes();
  for (int i = 0; i < steps; ++i) {
    auto step = (*engine)->Step();
    EXPECT_TRUE(step.ok()) << step.status();
    if (!step.ok()) return out;
    out.losses.push_back(step->loss);
  }
  for (const std::string& name : (*engine)->ParameterNames()) {
    auto p = (*engine)->GetParameter(name);
    EXPECT_TRUE(p.ok()) << p.status();
    if (p.ok()) out.params.push_back(*p);
  }
  return out;
}

bool BitIdentical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class RecomputeCorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RecomputeCorpusTest, EveryPolicyTrainsBitForBitAsNoneWithASmallerPeak) {
  constexpr int kSteps = 4;
  const Trained none = Train(GetParam(), "none", kSteps);
  ASSERT_EQ(none.losses.size(), static_cast<size_t>(kSteps));
  for (const std::string policy : {"selective", "full"}) {
    const Trained other = Train(GetParam(), policy, kSteps);
    ASSERT_EQ(other.losses.size(), none.losses.size()) << policy;
    for (int i = 0; i < kSteps; ++i) {
      EXPECT_EQ(other.losses[i], none.losses[i]) << GetParam() << " " << policy << " step " << i + 1;
    }
    ASSERT_EQ(other.params.size(), none.params.size());
    for (size_t i = 0; i < none.params.size(); ++i) {
      EXPECT_TRUE(BitIdentical(other.params[i], none.params[i])) << GetParam() << " " << policy << " parameter " << i;
    }
    std::printf("%s: recompute %s planned peak %.3f MiB (none %.3f MiB)\n", GetParam().c_str(), policy.c_str(),
                other.planned_peak / 1048576.0, none.planned_peak / 1048576.0);
    EXPECT_LE(other.planned_peak, none.planned_peak) << policy;
    // A model whose peak is not its saved activations (the corpus MLP's is its first layer's
    // output and gradient) has nothing for recomputation to take.
    if (policy == std::string("full") && !absl::StartsWith(GetParam(), "mlp/")) {
      EXPECT_LT(other.planned_peak, none.planned_peak);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, RecomputeCorpusTest,
                         ::testing::Values("gpt2/dynamo_f32_adamw.spec", "gpt2/dynamo_bf16_adamw.spec",
                                           "llama/dynamo_f32_adamw.spec", "vit/dynamo_f32_adamw.spec",
                                           "cnn_bn/noopt_f32_adamw.spec", "mlp/ts18_f32_sgd.spec"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.find('.'));
                           for (char& c : name) {
                             if (c == '/') c = '_';
                           }
                           return name;
                         });

absl::StatusOr<Program> CompileCorpus(const std::string& spec_name, const std::string& memory) {
  const std::string path = testing::SourcePath("tests/golden/corpus/" + spec_name);
  MPC_ASSIGN_OR_RETURN(TrainSpec spec, LoadTrainSpec(path));
  MPC_ASSIGN_OR_RETURN(TrainSpec extra, ParseTrainSpec(absl::StrCat("memory { ", memory, " }"), "test", false));
  spec.MergeFrom(extra);
  ProgramOptions options;
  options.model_path = testing::SourcePath("tests/golden/corpus/" + spec_name.substr(0, spec_name.find('/')) + "/" +
                                           spec.model());
  options.training = true;
  options.batch_size = spec.batch_size();
  if (spec.features_input() == "input_ids") {  // the language models: one class per position
    options.label_row = {16};
    options.input_rows[spec.features_input()] = {16};
  }
  return CompileProgram(spec, testing::CpuBackend().capabilities(), options);
}

TEST(RecomputeTest, FullKeepsTheResidualStreamOfEveryBlockAndSaysWhatItCosts) {
  auto none = CompileCorpus("gpt2/dynamo_f32_adamw.spec", "recompute: NONE");
  ASSERT_TRUE(none.ok()) << none.status();
  auto full = CompileCorpus("gpt2/dynamo_f32_adamw.spec", "recompute: FULL");
  ASSERT_TRUE(full.ok()) << full.status();
  const RecomputeResult& r = full->results.recompute;
  EXPECT_EQ(r.policy, "full");
  EXPECT_EQ(r.boundaries_from, "residual forks");
  // GPT-2 with 2 layers: the embeddings' sum and the stream after each layer's attention and
  // after the first layer's MLP fork into the next sub-block and its residual add (the last
  // MLP's output goes only to the final LayerNorm).
  EXPECT_EQ(r.boundaries.size(), 4u);
  EXPECT_GT(r.recomputed, 0);
  EXPECT_GT(r.cloned_nodes, 0);
  EXPECT_GT(r.extra_flops, 0);
  EXPECT_LT(r.extra_flops, r.step_flops) << "at most the forward once more";
  EXPECT_LT(full->results.memory_plan.plan.peak_bytes, none->results.memory_plan.plan.peak_bytes);
  EXPECT_EQ(none->results.recompute.recomputed, 0);
}

TEST(RecomputeTest, SelectiveRunsNoWeightGemmAgain) {
  auto selective = CompileCorpus("gpt2/dynamo_f32_adamw.spec", "recompute: SELECTIVE");
  ASSERT_TRUE(selective.ok()) << selective.status();
  EXPECT_GT(selective->results.recompute.recomputed, 0);
  for (const auto& n : selective->graph->nodes()) {
    if (!absl::StartsWith(n->name, "recompute/")) continue;
    EXPECT_NE(n->op, "Gemm") << n->name;
    if (n->op == "MatMul") {
      for (const Value* in : n->inputs) EXPECT_NE(in->kind, ValueKind::kParameter) << n->name;
    }
  }
}

TEST(RecomputeTest, BoundariesByPatternAndABadPatternSaysSo) {
  auto typo = CompileCorpus("gpt2/dynamo_f32_adamw.spec", "recompute: FULL boundaries: \"no_such_value\"");
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("memory.boundaries: 'no_such_value' matches no activation"),
            std::string::npos)
      << typo.status();
  auto bad = CompileCorpus("gpt2/dynamo_f32_adamw.spec", "recompute: FULL boundaries: \"(\"");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("is not a valid regex"), std::string::npos) << bad.status();

  auto found = CompileCorpus("gpt2/dynamo_f32_adamw.spec", "recompute: FULL");
  ASSERT_TRUE(found.ok()) << found.status();
  const std::string first = found->results.recompute.boundaries.front();
  auto named = CompileCorpus("gpt2/dynamo_f32_adamw.spec", absl::StrCat("recompute: FULL boundaries: \"", first, "\""));
  ASSERT_TRUE(named.ok()) << named.status();
  EXPECT_EQ(named->results.recompute.boundaries, std::vector<std::string>{first});
  EXPECT_EQ(named->results.recompute.boundaries_from, absl::StrCat("pattern '", first, "'"));
}

TEST(RecomputeTest, AModelWithoutResidualsIsCutEverySqrtOfItsCutPoints) {
  auto full = CompileCorpus("mlp/ts18_f32_sgd.spec", "recompute: FULL");
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_TRUE(absl::StartsWith(full->results.recompute.boundaries_from, "one in "))
      << full->results.recompute.boundaries_from;
  EXPECT_FALSE(full->results.recompute.boundaries.empty());
}

TEST(RecomputeTest, AnUnknownPolicyOnTheCommandLineNamesTheChoices) {
  TrainSpec spec;
  SpecOverrides overrides;
  overrides.recompute = "some";
  const absl::Status status = ApplySpecOverrides(overrides, &spec);
  EXPECT_NE(status.message().find("--recompute 'some': expected none, selective or full"), std::string::npos)
      << status;
}

}  // namespace
}  // namespace mpc
