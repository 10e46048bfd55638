// The corpus of real architectures exported by PyTorch 2.15 (tests/golden/corpus, made by
// tools/export_corpus/make_corpus.py with transformers, timm and torchvision configs, random
// weights): every model x exporter x run trains 20 steps from the committed files, is held
// to PyTorch's own losses (docs/onnx-import.md has the table), and then evaluates (a
// finite loss from the separately compiled evaluation program):
//   f32 (AdamW and SGD): every step within relative 1e-4 of PyTorch's;
//   bf16 autocast:       ||mpc - torch|| / ||torch|| over the 20 losses < 1e-2.
// An export mpc cannot train as written must be refused with the error that says why
// (Refused below); one that trains but not yet to PyTorch's numbers is held to the bounds
// measured for it (Diverging below, each with the reason); any other failure fails.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

namespace fs = std::filesystem;

struct CorpusRun {
  std::string model;     // the corpus folder: mlp, gpt2, ...
  std::string exporter;  // ts18 (TorchScript, opset 18), dynamo (torch.onnx.export defaults), dynamo23,
                         // noopt (optimize=False), ts18fn (ts18 with modules as local functions)
  std::string run;       // f32_adamw, f32_sgd, bf16_adamw
};

void PrintTo(const CorpusRun& c, std::ostream* os) { *os << c.model << "/" << c.exporter << "_" << c.run; }

// Exports that do not hold the model PyTorch trains, refused with the reason, and what the
// error must say.
const std::map<std::string, std::string>& Refused() {
  static const auto* refused = new std::map<std::string, std::string>{
      // onnxscript's optimizer folded BatchNorm into the convolutions (FuseBatchNormIntoConv).
      {"cnn_bn/dynamo", "FuseBatchNormIntoConv"},
      {"efficientnet/dynamo", "FuseBatchNormIntoConv"},
      // TorchScript's export_modules_as_functions wrote torchvision's SwinTransformerBlock
      // with an output its body never computes (onnx.inliner's result is unsorted too).
      {"swin/ts18fn", "is neither computed by its body nor one of its inputs"},
  };
  return *refused;
}

// Exports that train but not yet to PyTorch's numbers: the worst f32 step and the bf16
// trajectory measured, as bounds that catch a regression (and an improvement, which should
// move the export out of this table), and why (docs/onnx-import.md).
struct Divergence {
  double f32_worst_step;
  double bf16_norm;
  const char* why;
};
const std::map<std::string, Divergence>& Diverging() {
  static const auto* diverging = new std::map<std::string, Divergence>{
      // TorchScript writes nn.Embedding(padding_idx=0) as a plain Gather: mpc trains the
      // padding row, PyTorch does not (the dynamo exports say it; they match to 1.2e-7).
      {"bert_mlm/ts18", {5e-4, 1e-2, "the TorchScript export loses the embedding's padding_idx"}},
      // onnxscript folded the layer-scale gammas (reshaped to [1, C, 1, 1]) and ViT's
      // cls_token (expanded over the batch) into constants whose sources the file no longer
      // names as parameters: mpc leaves them untrained. optimize=False exports match to 1e-7.
      {"convnext/dynamo", {2e-4, 1e-2, "layer-scale gammas folded into constants of unknown kind"}},
      // Ill-conditioned in bf16 (batch norm over 4 examples, dilated depthwise convolutions):
      // PyTorch's own bf16 and f32 runs differ by 2.6e-2 here; f32 matches to 1.2e-6.
      {"efficientnet/ts18", {1e-4, 2e-2, "bf16 ill-conditioned: PyTorch's bf16 and f32 differ by 2.6e-2"}},
      {"efficientnet/noopt", {1e-4, 2e-2, "bf16 ill-conditioned: PyTorch's bf16 and f32 differ by 2.6e-2"}},
      {"efficientnet/ts18fn", {1e-4, 2e-2, "bf16 ill-conditioned: PyTorch's bf16 and f32 differ by 2.6e-2"}},
      {"vit/dynamo", {1.5e-2, 2e-2, "cls_token folded into a per-example constant of unknown kind"}},
      {"vit/dynamo23", {1.5e-2, 2e-2, "cls_token folded into a per-example constant of unknown kind"}},
  };
  return *diverging;
}

std::string CorpusDir() { return testing::SourcePath("tests/golden/corpus"); }

std::vector<CorpusRun> DiscoverRuns() {
  std::vector<CorpusRun> runs;
  std::error_code ec;
  for (const auto& model : fs::directory_iterator(CorpusDir(), ec)) {
    if (!model.is_directory()) continue;
    for (const auto& file : fs::directory_iterator(model.path(), ec)) {
      const std::string name = file.path().filename().string();
      if (file.path().extension() != ".spec") continue;
      const std::string stem = file.path().stem().string();  // <exporter>_<run>
      const size_t cut = stem.find('_');
      if (cut == std::string::npos) continue;
      runs.push_back({model.path().filename().string(), stem.substr(0, cut), stem.substr(cut + 1)});
    }
  }
  std::sort(runs.begin(), runs.end(), [](const CorpusRun& a, const CorpusRun& b) {
    return std::tie(a.model, a.exporter, a.run) < std::tie(b.model, b.exporter, b.run);
  });
  return runs;
}

// Trains the run 20 steps and holds it to PyTorch's losses (the bounds above). With
// fused_attention, attention runs as FusedAttention ops (the graph a GPU with fused
// attention runs): `fused_calls_per_step` of them each step.
void TrainAndCompare(const CorpusRun& c, bool fused_attention, int fused_calls_per_step) {
  const std::string dir = absl::StrCat(CorpusDir(), "/", c.model);
  const std::string key = absl::StrCat(c.model, "/", c.exporter);
  EngineOptions options;
  options.spec_path = absl::StrCat(dir, "/", c.exporter, "_", c.run, ".spec");
  options.device = "cpu";
  options.fused_attention = fused_attention;
  options.profile = fused_attention;
  auto engine = Engine::Create(options);
  const auto refused = Refused().find(key);
  if (refused != Refused().end()) {
    ASSERT_FALSE(engine.ok()) << key << " is expected to be refused (" << refused->second << ") but compiled";
    EXPECT_TRUE(absl::StrContains(engine.status().message(), refused->second)) << engine.status();
    std::printf("%s %s: refused as expected: %s\n", key.c_str(), c.run.c_str(),
                std::string(engine.status().message()).c_str());
    return;
  }
  ASSERT_TRUE(engine.ok()) << key << " " << c.run << ": " << engine.status();
  const std::vector<double> expected = testing::ReadLosses(absl::StrCat(dir, "/", c.run, "_losses.txt"));
  ASSERT_EQ(expected.size(), 20u);
  double diff2 = 0, ref2 = 0, worst = 0;
  const bool f32 = absl::StartsWith(c.run, "f32");
  const auto diverging = Diverging().find(key);
  const bool known = diverging != Diverging().end();
  const double f32_bound = known ? diverging->second.f32_worst_step : 1e-4;
  const double bf16_bound = known ? diverging->second.bf16_norm : 1e-2;
  if (known) std::printf("%s: a known divergence: %s\n", key.c_str(), diverging->second.why);
  for (size_t i = 0; i < expected.size(); ++i) {
    auto step = (*engine)->Step();
    ASSERT_TRUE(step.ok()) << key << " " << c.run << " step " << i + 1 << ": " << step.status();
    const double rel = std::abs(step->loss - expected[i]) / std::abs(expected[i]);
    worst = std::max(worst, rel);
    diff2 += (step->loss - expected[i]) * (step->loss - expected[i]);
    ref2 += expected[i] * expected[i];
    if (f32) EXPECT_LT(rel, f32_bound) << key << " " << c.run << " step " << i + 1 << ": mpc " << step->loss
                                       << " torch " << expected[i];
  }
  const double norm_rel = std::sqrt(diff2 / ref2);
  std::printf("corpus %s %s%s: worst step rel %.2e, ||mpc-torch||/||torch|| %.2e\n", key.c_str(), c.run.c_str(),
              fused_attention ? " (fused attention)" : "", worst, norm_rel);
  if (!f32) EXPECT_LT(norm_rel, bf16_bound) << key << " bf16 trajectory";
  if (fused_attention) {
    int64_t calls = 0;
    for (const OpProfile& p : (*engine)->Profile()) {
      if (p.op == "FusedAttention") calls = p.calls;
    }
    EXPECT_EQ(calls, 20 * fused_calls_per_step) << key << ": FusedAttention ran " << calls << " times in 20 steps";
  }
  // Then the evaluation program on the trained weights (over the training data: the specs
  // have no eval section). It is compiled separately, and its passes may replace the
  // logits' value (fuse-epilogues on a Linear head exported as MatMul + Add: BERT's).
  auto eval = (*engine)->Evaluate();
  ASSERT_TRUE(eval.ok()) << key << " " << c.run << " evaluation: " << eval.status();
  EXPECT_TRUE(std::isfinite(eval->loss)) << key << " " << c.run << " evaluation loss " << eval->loss;
  EXPECT_GT(eval->examples, 0) << key << " " << c.run;
  std::printf("corpus %s %s: evaluation loss %.4f over %lld examples\n", key.c_str(), c.run.c_str(), eval->loss,
              static_cast<long long>(eval->examples));
}

class ExportCorpusTest : public ::testing::TestWithParam<CorpusRun> {};

TEST_P(ExportCorpusTest, TwentyStepsMatchPyTorch) { TrainAndCompare(GetParam(), false, 0); }

// The attention models with every attention as one FusedAttention (fuse-attention, forced
// on the CPU): the same bounds as above, and how many FusedAttentions run each step. An
// attention with a learned bias stays unfused (the pass says why): t5's self-attentions
// (its cross-attentions fuse), swin's windows where its relative-position table is a
// parameter (ts18, noopt); the default dynamo export folded that table into a constant,
// so there it fuses, with the table as Bias.
int FusedAttentionsPerStep(const CorpusRun& c) {
  static const auto* fused = new std::map<std::string, int>{
      {"gpt2", 2},        {"llama", 2},       {"bert_mlm", 2}, {"vit", 2},     {"encoder_layer_mask", 1},
      {"decoder_buffers", 2}, {"swin/dynamo", 2}, {"swin", 0},  {"t5", 2}};
  auto it = fused->find(absl::StrCat(c.model, "/", c.exporter));
  if (it == fused->end()) it = fused->find(c.model);
  return it == fused->end() ? -1 : it->second;
}

std::vector<CorpusRun> AttentionRuns() {
  std::vector<CorpusRun> runs;
  for (const CorpusRun& c : DiscoverRuns()) {
    if (FusedAttentionsPerStep(c) >= 0 && (c.run == "f32_adamw" || c.exporter == "dynamo")) runs.push_back(c);
  }
  return runs;
}

class FusedAttentionCorpusTest : public ::testing::TestWithParam<CorpusRun> {};

TEST_P(FusedAttentionCorpusTest, TwentyStepsMatchPyTorch) {
  TrainAndCompare(GetParam(), true, FusedAttentionsPerStep(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(CorpusFusedAttention, FusedAttentionCorpusTest, ::testing::ValuesIn(AttentionRuns()),
                         [](const ::testing::TestParamInfo<CorpusRun>& info) {
                           return absl::StrCat(info.param.model, "_", info.param.exporter, "_", info.param.run);
                         });

INSTANTIATE_TEST_SUITE_P(Corpus, ExportCorpusTest, ::testing::ValuesIn(DiscoverRuns()),
                         [](const ::testing::TestParamInfo<CorpusRun>& info) {
                           return absl::StrCat(info.param.model, "_", info.param.exporter, "_", info.param.run);
                         });

// --check-numerics on a model whose additive causal mask (0 / -inf, a constant of the
// export) reaches an Add: the infinities the mask carries are not a fault, so the run goes
// on, and its losses are still PyTorch's (before, the first step stopped at that Add).
TEST(ExportCorpus, CheckNumericsLetsTheMasksInfinitiesThrough) {
  const std::string dir = absl::StrCat(CorpusDir(), "/encoder_layer_mask");
  EngineOptions options;
  options.spec_path = dir + "/dynamo_f32_adamw.spec";
  options.device = "cpu";
  options.check_numerics = true;
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::vector<double> expected = testing::ReadLosses(dir + "/f32_adamw_losses.txt");
  for (size_t i = 0; i < expected.size(); ++i) {
    auto step = (*engine)->Step();
    ASSERT_TRUE(step.ok()) << "step " << i + 1 << ": " << step.status();
    EXPECT_LT(std::abs(step->loss - expected[i]) / std::abs(expected[i]), 1e-4) << "step " << i + 1;
  }
}

TEST(ExportCorpus, CorpusIsThere) { EXPECT_GE(DiscoverRuns().size(), 60u) << "no corpus specs under " << CorpusDir(); }

}  // namespace
}  // namespace mpc
