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
#include "engine/memory_budget.h"
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

// `memory_fields`: more of the spec's memory { } (boundaries, full_blocks).
Trained Train(const std::string& spec, const std::string& recompute, int steps, const std::string& memory_fields = "") {
  Trained out;
  EngineOptions options;
  options.spec_path = testing::SourcePath("tests/golden/corpus/" + spec);
  options.device = "cpu";
  options.recompute = recompute;
  options.use_checkpoint_dir = false;
  if (!memory_fields.empty()) {
    auto text = ReadFileToString(options.spec_path);
    EXPECT_TRUE(text.ok());
    options.spec_text = absl::StrCat(*text, "\nmemory { ", memory_fields, " }\n");
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
  // (full_blocks 2: the first two blocks run again, the later ones as SELECTIVE would)
  for (const std::string policy : {"selective", "full", "full_blocks_2"}) {
    const bool partial = policy == "full_blocks_2";
    const Trained other =
        Train(GetParam(), partial ? "" : policy, kSteps, partial ? "recompute: FULL full_blocks: 2" : "");
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
  EXPECT_NE(status.message().find("--recompute 'some': expected none, selective, full or auto"), std::string::npos)
      << status;
}

// memory.recompute AUTO: the least recomputation whose plan fits memory.limit_mb. GPT-2's
// per-rank totals for NONE, SELECTIVE, FULL over the first k of its 4 blocks (SELECTIVE
// after them) decide the limits: above NONE's total it keeps everything; between
// SELECTIVE's and NONE's it takes SELECTIVE; at FULL-over-k's total, below SELECTIVE's, it
// takes the fewest leading blocks that fit; below FULL's it is refused naming the limit. AUTO without a limit, and
// full_blocks without FULL, are spec errors.
TEST(RecomputeTest, AutoTakesTheLeastRecomputationThatFitsTheLimit) {
  const std::string model = "gpt2/dynamo_f32_adamw.spec";
  auto total_mb = [&](const std::string& memory) {
    auto p = CompileCorpus(model, memory);
    EXPECT_TRUE(p.ok()) << memory << ": " << p.status();
    return p.ok() ? BreakdownOf(*p).total() / 1048576.0 : 0.0;
  };
  const double none = total_mb("recompute: NONE"), selective = total_mb("recompute: SELECTIVE");
  const double full = total_mb("recompute: FULL");
  std::vector<double> first_blocks;  // FULL over the first k blocks, k = 1..3
  for (int k = 1; k <= 3; ++k) first_blocks.push_back(total_mb(absl::StrCat("recompute: FULL full_blocks: ", k)));
  std::printf("gpt2 MiB per rank: none %.4f, selective %.4f, full over 1..3 of 4 blocks %.4f %.4f %.4f, full %.4f\n",
              none, selective, first_blocks[0], first_blocks[1], first_blocks[2], full);
  ASSERT_LT(selective, none);
  ASSERT_LT(full, selective);
  auto chosen = [&](double limit) { return CompileCorpus(model, absl::StrCat("recompute: AUTO limit_mb: ", limit)); };
  auto roomy = chosen(none * 1.01);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  EXPECT_EQ(roomy->results.recompute.policy, "none");
  EXPECT_GT(roomy->results.recompute.chosen_for_limit_mb, 0);
  auto middle = chosen((none + selective) / 2);
  ASSERT_TRUE(middle.ok()) << middle.status();
  EXPECT_EQ(middle->results.recompute.policy, "selective");
  // The fewest leading blocks whose total is under SELECTIVE's: AUTO's answer at that total.
  int k = 0;
  while (k < 3 && first_blocks[k] >= selective) ++k;
  if (k < 3) {
    const double limit = first_blocks[k] * 1.0001;  // (the limit is written with 6 digits)
    ASSERT_LT(limit, selective);
    auto partial = chosen(limit);
    ASSERT_TRUE(partial.ok()) << partial.status();
    EXPECT_EQ(partial->results.recompute.policy, "full");
    EXPECT_EQ(partial->results.recompute.blocks_recomputed, k + 1);
    EXPECT_LE(BreakdownOf(*partial).total() / 1048576.0, limit);
  } else {
    ADD_FAILURE() << "no partial FULL under SELECTIVE's total: the test no longer reaches full_blocks";
  }
  auto tight = chosen(full * 0.99);
  ASSERT_FALSE(tight.ok());
  EXPECT_EQ(tight.status().code(), absl::StatusCode::kResourceExhausted) << tight.status();
  EXPECT_NE(tight.status().message().find("over the limit"), std::string::npos) << tight.status();

  auto unlimited = ParseTrainSpec("batch_size: 4 memory { recompute: AUTO }", "test", false);
  EXPECT_FALSE(unlimited.ok() && ValidateTrainSpec(*unlimited, false).ok());
  auto blocks_alone = ParseTrainSpec("batch_size: 4 memory { recompute: SELECTIVE full_blocks: 2 }", "test", false);
  EXPECT_FALSE(blocks_alone.ok() && ValidateTrainSpec(*blocks_alone, false).ok());
}

}  // namespace
}  // namespace mpc
