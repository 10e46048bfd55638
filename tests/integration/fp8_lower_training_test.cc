// FP8 training with the fp8-lower pass forced on the CPU (a capability set claiming FP8
// tensor cores) against the emulated program, through the real pipelines
// (CompileProgram: autocast, pad-dims, autodiff, fp8, fp8-lower, loss scaling, AdamW,
// simplify, fusion, memory plan), in lockstep: before every step the lowered program takes
// the emulated one's whole state (weights, optimizer moments, FP8 scales and histories),
// then both run the same batch. The step's loss must agree to 1e-6 relative and every
// state tensor after it (bf16 weight copies aside) to 1e-5 (relative Frobenius): the lowered GEMMs multiply the very
// f32 values the emulation does, and only the summation order of a GEMM whose operand
// layout the TN form changed (dW, dX) may differ. Free-running, those last-bit
// differences are not an error but do not stay small: an FP8 rounding that flips makes the
// two trajectories drift apart over tens of steps (seen on AVX2 machines, where oneDNN's
// summation order depends on the layout), so each step is compared from a common state.
// Then the evaluation program on the trained state (logits to bf16 precision). First the
// golden MLP (20 AdamW steps, its FP8 losses also following the golden f32 run's), then the
// Fashion-MNIST MLP, delayed scaling and each just-in-time recipe.
#include <cmath>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/dataset.h"
#include "engine/executor.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

struct Result {
  int fp8_gemm_nodes = 0;      // Fp8Gemm (lowered), training + evaluation program
  int emulated_fp8_gemms = 0;  // Gemm/MatMul with mpc_fp8 (emulated)
  int fp8_quantize_nodes = 0;
  std::vector<double> losses;  // the emulated run's
  double worst_loss_diff = 0;  // relative, lowered vs emulated from the same state
  double worst_state_diff = 0;  // relative Frobenius, over every state tensor after a step
  std::string worst_state;
  int fp8_meta_tensors = 0;  // scales and histories among the state
  double logit_diff = 0;     // evaluation, the trained state
};

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

int CountEmulatedFp8Gemms(const Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) n += (node->op == "Gemm" || node->op == "MatMul") && node->attrs.Has("mpc_fp8");
  return n;
}

// A training configuration: the spec (FP8 set by the caller), its model and its data.
struct TrainSetup {
  TrainSpec spec;
  std::string model_path;
  Dataset data;
  float lr = 0.01f;
  Shape label_row;  // one example's labels past the batch axis ([T]: a class per token)
};

// One configuration compiled for the CPU (training and evaluation programs) with its
// executors; `lower` claims FP8 tensor cores, which makes the pipeline lower the emulated
// GEMMs.
struct CpuRun {
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  absl::StatusOr<Program> train, eval;
  std::unique_ptr<Executor> ex, eval_ex;

  CpuRun(const TrainSpec& spec, const std::string& model_path, bool lower, const Shape& label_row) {
    Capabilities caps = cpu->capabilities();
    caps.fp8 = lower;
    caps.fp8_group_scales = lower;
    ProgramOptions options;
    options.model_path = model_path;
    options.label_row = label_row;
    options.batch_size = spec.batch_size();
    options.training = true;
    train = CompileProgram(spec, caps, options);
    EXPECT_TRUE(train.ok()) << train.status();
    options.training = false;
    eval = CompileProgram(spec, caps, options);
    EXPECT_TRUE(eval.ok()) << eval.status();
    if (!train.ok() || !eval.ok()) return;
    auto e = Executor::Create(*train->graph, train->results.memory_plan, *cpu);
    EXPECT_TRUE(e.ok()) << e.status();
    if (e.ok()) ex = std::move(*e);
    auto v = Executor::Create(*eval->graph, eval->results.memory_plan, *cpu, ex.get());
    EXPECT_TRUE(v.ok()) << v.status();
    if (v.ok()) eval_ex = std::move(*v);
  }
  bool ok() const { return ex && eval_ex; }
  int Nodes(const std::string& op) const { return Count(*train->graph, op) + Count(*eval->graph, op); }
  int EmulatedFp8Gemms() const { return CountEmulatedFp8Gemms(*train->graph) + CountEmulatedFp8Gemms(*eval->graph); }
};

// Examples [first, first + batch) mod N of `all` (examples along axis 0; any dtype and
// shape: images, token ids, per-token labels).
Tensor Rows(const Tensor& all, int64_t batch, int64_t first) {
  Shape shape = all.shape();
  const int64_t n = shape[0];
  shape[0] = batch;
  Tensor out(all.dtype(), shape);
  const size_t row_bytes = all.bytes() / static_cast<size_t>(n);
  for (int64_t i = 0; i < batch; ++i) {
    std::memcpy(static_cast<char*>(out.raw()) + i * row_bytes,
                static_cast<const char*>(all.raw()) + ((first + i) % n) * row_bytes, row_bytes);
  }
  return out;
}

// Batch i: examples [i * batch, (i + 1) * batch) mod N.
void BatchOf(const Dataset& data, int64_t batch, int64_t first, Tensor* x, Tensor* y) {
  *x = Rows(data.features, batch, first);
  *y = Rows(data.labels, batch, first);
}

double TrainStep(CpuRun& run, const TrainSetup& setup, int step) {
  Tensor x, y;
  BatchOf(setup.data, setup.spec.batch_size(), step * setup.spec.batch_size(), &x, &y);
  EXPECT_TRUE(run.ex->SetInput(run.train->features_input, x).ok());
  EXPECT_TRUE(run.ex->SetInput(run.train->labels_input, y).ok());
  EXPECT_TRUE(run.ex->SetInput("lr", Tensor::Scalar(setup.lr)).ok());
  EXPECT_TRUE(run.ex->Run(setup.spec.seed(), step).ok());
  return run.ex->Fetch(run.train->loss_output)->GetAsDouble(0);
}

Tensor Evaluate(CpuRun& run, const TrainSetup& setup) {
  Tensor x, y;
  BatchOf(setup.data, setup.spec.batch_size(), 0, &x, &y);
  EXPECT_TRUE(run.eval_ex->SetInput(run.eval->features_input, x).ok());
  EXPECT_TRUE(run.eval_ex->Run(setup.spec.seed(), 0).ok());
  auto logits = run.eval_ex->Fetch(run.eval->logits_output);
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? logits->CastTo(DType::kF64) : Tensor();
}

// ||a - b|| / ||b|| (0 for two zero tensors).
double RelativeFrobenius(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double d = a.GetAsDouble(i) - b.GetAsDouble(i);
    diff += d * d;
    norm += b.GetAsDouble(i) * b.GetAsDouble(i);
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The emulated and lowered programs of `setup` trained `steps` steps in lockstep (the file
// comment), then evaluated on the last common state.
Result TrainInLockstep(const TrainSetup& setup, int steps) {
  Result r;
  CpuRun emulated(setup.spec, setup.model_path, false, setup.label_row),
      lowered(setup.spec, setup.model_path, true, setup.label_row);
  if (!emulated.ok() || !lowered.ok()) return r;
  r.fp8_gemm_nodes = lowered.Nodes("Fp8Gemm");
  r.fp8_quantize_nodes = lowered.Nodes("Fp8Quantize") + lowered.Nodes("Fp8QuantizeDynamic");
  r.emulated_fp8_gemms = lowered.EmulatedFp8Gemms();
  EXPECT_EQ(emulated.Nodes("Fp8Gemm"), 0);
  const int emulated_gemms = emulated.EmulatedFp8Gemms();
  EXPECT_EQ(r.fp8_gemm_nodes, emulated_gemms) << "every emulated FP8 GEMM became one Fp8Gemm";
  std::vector<std::string> state;
  for (const Value* v : emulated.ex->PersistentValues()) state.push_back(v->name);
  auto share_state = [&] {
    for (const std::string& name : state) {
      auto value = emulated.ex->ReadPersistent(name);
      EXPECT_TRUE(value.ok()) << value.status();
      EXPECT_TRUE(lowered.ex->WritePersistent(name, *value).ok()) << name << " is not state of the lowered program";
    }
  };
  for (const std::string& name : state) r.fp8_meta_tensors += name.find(".fp8_") != std::string::npos;
  for (int step = 0; step < steps; ++step) {
    share_state();
    const double want = TrainStep(emulated, setup, step), got = TrainStep(lowered, setup, step);
    r.losses.push_back(want);
    const double rel = std::fabs(got - want) / std::fabs(want);
    r.worst_loss_diff = std::max(r.worst_loss_diff, rel);
    EXPECT_LE(rel, 1e-6) << "step " << step + 1 << ": lowered " << got << ", emulated " << want;
    for (const std::string& name : state) {
      // A bf16 copy of a weight follows its f32 master (compared): one element's last-bit
      // difference there may round to a bf16 ulp, 4e-3 of that element.
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".lowp") == 0) continue;
      const double d = RelativeFrobenius(*lowered.ex->ReadPersistent(name), *emulated.ex->ReadPersistent(name));
      if (d > r.worst_state_diff) {
        r.worst_state_diff = d;
        r.worst_state = absl::StrCat(name, " after step ", step + 1);
      }
    }
  }
  EXPECT_LE(r.worst_state_diff, 1e-5) << r.worst_state;
  share_state();
  const Tensor want = Evaluate(emulated, setup), got = Evaluate(lowered, setup);
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    r.logit_diff = std::max(r.logit_diff, std::fabs(got.GetAsDouble(i) - want.GetAsDouble(i)));
  }
  EXPECT_LE(r.logit_diff, 1e-2);
  return r;
}

TEST(Fp8LowerTrainingTest, LoweredTrainingMatchesTheEmulationOnTheCpu) {
  const std::string dir = testing::MakeTempDir("fp8_lower");
  const std::string path = testing::WriteGoldenSpec(
      "adamw", "fp8 { include_first_last: true amax_history_len: 4 margin: 1 }", dir, "fp8.spec");
  TrainSetup setup;
  auto spec = LoadTrainSpec(path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  setup.spec = *spec;
  setup.spec.mutable_precision()->set_compute(PrecisionSpec::FP8);
  setup.spec.mutable_padding()->set_multiple(16);
  const std::string golden = testing::SourcePath("tests/golden/mlp");
  setup.model_path = golden + "/model.onnx";
  auto data = LoadNpy(golden + "/features.npy", golden + "/labels.npy");
  ASSERT_TRUE(data.ok()) << data.status();
  setup.data = *data;
  const int steps = 20;
  const Result r = TrainInLockstep(setup, steps);
  // Every emulated FP8 GEMM became one Fp8Gemm: two forward GEMMs (the first layer has
  // K=20, the last K=8) and their four backward GEMMs in training, two in evaluation.
  EXPECT_EQ(r.fp8_gemm_nodes, 8);
  EXPECT_EQ(r.emulated_fp8_gemms, 0);
  EXPECT_EQ(r.fp8_quantize_nodes, 0);
  EXPECT_GT(r.fp8_meta_tensors, 0) << "the delayed recipe's scales and histories are compared too";
  std::printf(
      "losses step 1 %.6f, step %d %.6f; lowered vs emulated from the same state: worst loss rel diff %.3g, worst "
      "state rel diff %.3g (%s), max eval logit diff %.3g, %d Fp8Gemm nodes\n",
      r.losses.front(), steps, r.losses.back(), r.worst_loss_diff, r.worst_state_diff, r.worst_state.c_str(),
      r.logit_diff, r.fp8_gemm_nodes);
  // Sanity of the FP8 run itself: it follows the golden f32 run (PyTorch) closely.
  std::ifstream golden_losses(testing::SourcePath("tests/golden/mlp/adamw_losses.txt"));
  double want = 0, worst_vs_f32 = 0;
  for (int i = 0; i < steps && golden_losses >> want; ++i) {
    worst_vs_f32 = std::max(worst_vs_f32, std::fabs(r.losses[i] - want) / want);
  }
  std::printf("FP8 losses vs the golden f32 run: worst rel diff %.3g\n", worst_vs_f32);
  EXPECT_LE(worst_vs_f32, 0.03);
}

// The Fashion-MNIST MLP (784-256-128-10, the FP8 accuracy test's model) with every GEMM in
// FP8, batch 128 (a multiple of 16, so every GEMM lowers; the shipped spec's 100 would
// leave them all emulated), AdamW: `recipe`'s lowered and emulated programs trained
// `steps` steps in lockstep (the file comment). Every GEMM lowers (no dX of the first
// layer; evaluation: 3) and nothing stays emulated.
Result FashionMlpLoweredAndEmulated(Fp8Spec::Recipe recipe, int steps) {
  const std::string spec_path = testing::SourcePath("models/fashion_mlp/fashion_mlp.spec");
  auto spec = LoadTrainSpec(spec_path);
  EXPECT_TRUE(spec.ok()) << spec.status();
  auto data = LoadDataSource(spec->train_data(), testing::SourcePath("models/fashion_mlp"), "train_data");
  EXPECT_TRUE(data.ok()) << data.status();
  if (!spec.ok() || !data.ok()) return Result{};
  TrainSetup setup;
  setup.spec = *spec;
  setup.spec.set_batch_size(128);
  setup.spec.mutable_precision()->set_compute(PrecisionSpec::FP8);
  setup.spec.mutable_padding()->set_multiple(16);
  setup.spec.mutable_fp8()->set_include_first_last(true);
  setup.spec.mutable_fp8()->set_recipe(recipe);
  setup.model_path = testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx");
  setup.data = *data;
  setup.lr = 0.001f;
  const Result r = TrainInLockstep(setup, steps);
  EXPECT_EQ(r.fp8_gemm_nodes, 3 * 3 - 1 + 3);  // no dX of the first layer; evaluation: 3
  EXPECT_EQ(r.emulated_fp8_gemms, 0);
  std::printf(
      "fashion, %s: loss step 1 %.6f, step %d %.6f; lowered vs emulated from the same state: worst loss rel diff "
      "%.3g, worst state rel diff %.3g (%s), max eval logit diff %.3g, %d Fp8Gemm nodes\n",
      Fp8Spec::Recipe_Name(recipe).c_str(), r.losses.front(), steps, r.losses.back(), r.worst_loss_diff,
      r.worst_state_diff, r.worst_state.c_str(), r.logit_diff, r.fp8_gemm_nodes);
  EXPECT_LT(r.losses.back(), 0.8 * r.losses.front()) << "it trains";
  return r;
}

TEST(Fp8LowerTrainingTest, FashionMlpLoweredMatchesTheEmulation) {
  const Result r = FashionMlpLoweredAndEmulated(Fp8Spec::DELAYED, 60);
  EXPECT_EQ(r.fp8_meta_tensors, 4 * 3 * 3) << "scale, scale_inv, history, last amax of each GEMM's x, w and dy";
}

// The just-in-time recipes lowered (Fp8CastDynamic + Fp8Gemm with group scales, cuBLASLt's
// scale modes on Hopper) against their emulation (Fp8QuantizeDynamic + f32 GEMM), 30 steps:
// the block recipe's forward and dX as 1x128 tiles x 128x128 blocks, its dW as tiles x tiles.
class Fp8LowerRecipeTest : public ::testing::TestWithParam<Fp8Spec::Recipe> {};

TEST_P(Fp8LowerRecipeTest, FashionMlpLoweredMatchesTheEmulation) {
  const Result r = FashionMlpLoweredAndEmulated(GetParam(), 30);
  EXPECT_EQ(r.fp8_meta_tensors, 0) << "the just-in-time recipes keep no FP8 state";
}

// Transformers as PyTorch exports them (tests/golden/corpus: Hugging Face's LLaMA through
// torch.export, BERT and T5 through the TorchScript exporter; batch 4 x 16 tokens, so 64
// rows): every Linear layer is a MatMul of a [4, 16, K] activation, which the fp8 pass
// folds into rows (passes/fp8_batch_rows.h), so every FP8 GEMM lowers (none stays emulated
// as a batched MatMul) and the lowered steps follow the emulated ones from the same state.
struct ExportCase {
  const char* model;
  const char* run;  // the corpus spec: <run>_bf16_adamw.spec
  Fp8Spec::Recipe recipe;
};

class Fp8LowerExportTest : public ::testing::TestWithParam<ExportCase> {};

TEST_P(Fp8LowerExportTest, EveryLinearLayerLowersAndFollowsTheEmulation) {
  const ExportCase& c = GetParam();
  const std::string dir = testing::SourcePath(absl::StrCat("tests/golden/corpus/", c.model));
  auto spec = LoadTrainSpec(absl::StrCat(dir, "/", c.run, "_bf16_adamw.spec"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto data = LoadDataSource(spec->train_data(), dir, "train_data");
  ASSERT_TRUE(data.ok()) << data.status();
  TrainSetup setup;
  setup.spec = *spec;
  setup.spec.mutable_precision()->set_compute(PrecisionSpec::FP8);
  setup.spec.mutable_fp8()->set_recipe(c.recipe);
  setup.model_path = absl::StrCat(dir, "/", spec->model());
  setup.data = *data;
  setup.lr = 0.001f;
  setup.label_row.assign(data->labels.shape().begin() + 1, data->labels.shape().end());
  const Result r = TrainInLockstep(setup, 5);
  EXPECT_GT(r.fp8_gemm_nodes, 0);
  EXPECT_EQ(r.emulated_fp8_gemms, 0) << "a batched Linear layer left emulated";
  EXPECT_EQ(r.fp8_quantize_nodes, 0);
  std::printf("%s/%s, %s: %d Fp8Gemm nodes, loss step 1 %.6f, step 5 %.6f; worst loss rel diff %.3g, worst state "
              "rel diff %.3g (%s), max eval logit diff %.3g\n",
              c.model, c.run, Fp8Spec::Recipe_Name(c.recipe).c_str(), r.fp8_gemm_nodes, r.losses.front(),
              r.losses.back(), r.worst_loss_diff, r.worst_state_diff, r.worst_state.c_str(), r.logit_diff);
}

INSTANTIATE_TEST_SUITE_P(Corpus, Fp8LowerExportTest,
                         ::testing::Values(ExportCase{"llama", "dynamo23", Fp8Spec::DELAYED},
                                           ExportCase{"llama", "dynamo23", Fp8Spec::BLOCK},
                                           ExportCase{"bert_mlm", "ts18", Fp8Spec::ROWWISE},
                                           ExportCase{"t5", "ts18", Fp8Spec::CURRENT}),
                         [](const ::testing::TestParamInfo<ExportCase>& info) {
                           return absl::StrCat(info.param.model, "_", info.param.run, "_",
                                               Fp8Spec::Recipe_Name(info.param.recipe));
                         });

INSTANTIATE_TEST_SUITE_P(JustInTime, Fp8LowerRecipeTest,
                         ::testing::Values(Fp8Spec::CURRENT, Fp8Spec::ROWWISE, Fp8Spec::BLOCK),
                         [](const ::testing::TestParamInfo<Fp8Spec::Recipe>& info) {
                           return Fp8Spec::Recipe_Name(info.param);
                         });

}  // namespace
}  // namespace mpc
