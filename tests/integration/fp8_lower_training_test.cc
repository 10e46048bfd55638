// FP8 training with the fp8-lower pass forced on the CPU (a capability set claiming FP8
// tensor cores) against the emulated program, through the real pipelines
// (CompileProgram: autocast, pad-dims, autodiff, fp8, fp8-lower, loss scaling, AdamW,
// simplify, fusion, memory plan). First the golden MLP in FP8 with every eligible GEMM in FP8
// and a short amax history, 20 AdamW steps on the golden data, then the evaluation
// program on the trained state. Per-step losses must agree to 1e-6 relative (the
// lowered GEMMs multiply the very f32 values the emulation does; only summation order
// may differ), the FP8 meta (scales, amax histories) must be identical, and so must the
// evaluation logits to bf16 precision. The FP8 losses also follow the golden f32 run's.
// Then the same for the Fashion-MNIST MLP (when the dataset is installed), 60 steps.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

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
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> meta;
  Tensor logits;
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
};

// Trains `steps` steps on the CPU (batch i: examples [i * batch, (i + 1) * batch) mod N)
// and evaluates the first batch; `lower` claims FP8 tensor cores, which makes the
// pipeline lower the emulated GEMMs.
Result TrainOnCpu(const TrainSetup& setup, bool lower, int steps) {
  Result r;
  const TrainSpec& spec = setup.spec;
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  Capabilities caps = cpu->capabilities();
  caps.fp8 = lower;
  ProgramOptions options;
  options.model_path = setup.model_path;
  options.batch_size = spec.batch_size();
  options.training = true;
  auto train = CompileProgram(spec, caps, options);
  EXPECT_TRUE(train.ok()) << train.status();
  options.training = false;
  auto eval = CompileProgram(spec, caps, options);
  EXPECT_TRUE(eval.ok()) << eval.status();
  r.fp8_gemm_nodes = Count(*train->graph, "Fp8Gemm") + Count(*eval->graph, "Fp8Gemm");
  r.fp8_quantize_nodes = Count(*train->graph, "Fp8Quantize") + Count(*eval->graph, "Fp8Quantize");
  r.emulated_fp8_gemms = CountEmulatedFp8Gemms(*train->graph) + CountEmulatedFp8Gemms(*eval->graph);

  auto ex = Executor::Create(*train->graph, train->results.memory_plan, *cpu);
  EXPECT_TRUE(ex.ok()) << ex.status();
  auto eval_ex = Executor::Create(*eval->graph, eval->results.memory_plan, *cpu, ex->get());
  EXPECT_TRUE(eval_ex.ok()) << eval_ex.status();
  const Dataset* data = &setup.data;
  const int64_t batch = spec.batch_size(), n = data->size(), row = data->features.num_elements() / n;
  auto batch_of = [&](int64_t first, Tensor* x, Tensor* y) {
    *x = Tensor(DType::kF32, {batch, row});
    *y = Tensor(DType::kI64, {batch});
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t src = (first + i) % n;
      for (int64_t j = 0; j < row; ++j) x->data<float>()[i * row + j] = data->features.data<float>()[src * row + j];
      y->data<int64_t>()[i] = data->labels.data<int64_t>()[src];
    }
  };
  for (int step = 0; step < steps; ++step) {
    Tensor x, y;
    batch_of(step * batch, &x, &y);
    EXPECT_TRUE((*ex)->SetInput(train->features_input, x).ok());
    EXPECT_TRUE((*ex)->SetInput(train->labels_input, y).ok());
    EXPECT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(setup.lr)).ok());
    EXPECT_TRUE((*ex)->Run(spec.seed(), step).ok());
    r.losses.push_back((*ex)->Fetch(train->loss_output)->GetAsDouble(0));
  }
  for (const std::string& t : train->results.fp8.tensors) {
    for (const char* suffix : {".fp8_scale", ".fp8_scale_inv", ".fp8_amax_history", ".fp8_last_amax"}) {
      const Tensor v = *(*ex)->ReadPersistent(t + suffix);
      r.meta[t + suffix] = std::vector<float>(v.data<float>(), v.data<float>() + v.num_elements());
    }
  }
  Tensor x, y;
  batch_of(0, &x, &y);
  EXPECT_TRUE((*eval_ex)->SetInput(eval->features_input, x).ok());
  EXPECT_TRUE((*eval_ex)->Run(spec.seed(), 0).ok());
  r.logits = (*eval_ex)->Fetch(eval->logits_output)->CastTo(DType::kF64);
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
  const Result emulated = TrainOnCpu(setup, false, steps), lowered = TrainOnCpu(setup, true, steps);
  EXPECT_EQ(emulated.fp8_gemm_nodes, 0);
  EXPECT_GT(emulated.fp8_quantize_nodes, 0);
  // Every emulated FP8 GEMM became one Fp8Gemm: two forward GEMMs (the first layer has
  // K=20, the last K=8) and their four backward GEMMs in training, two in evaluation.
  EXPECT_EQ(emulated.emulated_fp8_gemms, 8);
  EXPECT_EQ(lowered.fp8_gemm_nodes, emulated.emulated_fp8_gemms);
  EXPECT_EQ(lowered.emulated_fp8_gemms, 0);
  EXPECT_EQ(lowered.fp8_quantize_nodes, 0);
  ASSERT_EQ(lowered.losses.size(), emulated.losses.size());
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    const double rel = std::fabs(lowered.losses[i] - emulated.losses[i]) / std::fabs(emulated.losses[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-6) << "step " << i + 1 << ": lowered " << lowered.losses[i] << ", emulated "
                         << emulated.losses[i];
  }
  double logit_diff = 0;
  ASSERT_EQ(lowered.logits.num_elements(), emulated.logits.num_elements());
  for (int64_t i = 0; i < emulated.logits.num_elements(); ++i) {
    logit_diff = std::max(logit_diff, std::fabs(lowered.logits.GetAsDouble(i) - emulated.logits.GetAsDouble(i)));
  }
  std::printf(
      "losses step 1 %.6f, step %d %.6f; lowered vs emulated: worst loss rel diff %.3g over %d steps, "
      "max eval logit diff %.3g, %d Fp8Gemm nodes\n",
      emulated.losses.front(), steps, emulated.losses.back(), worst, steps, logit_diff, lowered.fp8_gemm_nodes);
  // Sanity of the FP8 run itself: it follows the golden f32 run (PyTorch) closely.
  std::ifstream golden_losses(testing::SourcePath("tests/golden/mlp/adamw_losses.txt"));
  double want = 0, worst_vs_f32 = 0;
  for (int i = 0; i < steps && golden_losses >> want; ++i) {
    worst_vs_f32 = std::max(worst_vs_f32, std::fabs(emulated.losses[i] - want) / want);
  }
  std::printf("FP8 losses vs the golden f32 run: worst rel diff %.3g\n", worst_vs_f32);
  EXPECT_LE(worst_vs_f32, 0.03);
  EXPECT_EQ(lowered.meta, emulated.meta) << "the FP8 meta (scales, amax histories) must be identical";
  EXPECT_FALSE(lowered.meta.empty());
  EXPECT_LE(logit_diff, 1e-2);
}

// The Fashion-MNIST MLP (784-256-128-10, the FP8 accuracy test's model) with every GEMM in
// FP8, batch 128 (a multiple of 16, so every GEMM lowers; the shipped spec's 100 would
// leave them all emulated), 60 AdamW steps.
TEST(Fp8LowerTrainingTest, FashionMlpLoweredMatchesTheEmulation) {
  const std::string spec_path = testing::SourcePath("models/fashion_mlp/fashion_mlp.spec");
  auto spec = LoadTrainSpec(spec_path);
  ASSERT_TRUE(spec.ok()) << spec.status();
  auto data = LoadDataSource(spec->train_data(), testing::SourcePath("models/fashion_mlp"), "train_data");
  ASSERT_TRUE(data.ok()) << data.status();
  TrainSetup setup;
  setup.spec = *spec;
  setup.spec.set_batch_size(128);
  setup.spec.mutable_precision()->set_compute(PrecisionSpec::FP8);
  setup.spec.mutable_padding()->set_multiple(16);
  setup.spec.mutable_fp8()->set_include_first_last(true);
  setup.model_path = testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx");
  setup.data = *data;
  setup.lr = 0.001f;
  const int steps = 60;
  const Result emulated = TrainOnCpu(setup, false, steps), lowered = TrainOnCpu(setup, true, steps);
  EXPECT_EQ(emulated.emulated_fp8_gemms, 3 * 3 - 1 + 3);  // no dX of the first layer; eval: 3
  EXPECT_EQ(lowered.fp8_gemm_nodes, emulated.emulated_fp8_gemms);
  EXPECT_EQ(lowered.emulated_fp8_gemms, 0);
  double worst = 0;
  for (int i = 0; i < steps; ++i) {
    const double rel = std::fabs(lowered.losses[i] - emulated.losses[i]) / std::fabs(emulated.losses[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-6) << "step " << i + 1;
  }
  double logit_diff = 0;
  for (int64_t i = 0; i < emulated.logits.num_elements(); ++i) {
    logit_diff = std::max(logit_diff, std::fabs(lowered.logits.GetAsDouble(i) - emulated.logits.GetAsDouble(i)));
  }
  std::printf(
      "fashion: loss step 1 %.6f, step %d %.6f; lowered vs emulated: worst loss rel diff %.3g, max eval "
      "logit diff %.3g, %d Fp8Gemm nodes\n",
      emulated.losses.front(), steps, emulated.losses.back(), worst, logit_diff, lowered.fp8_gemm_nodes);
  EXPECT_LT(emulated.losses.back(), 0.8 * emulated.losses.front()) << "it trains";
  EXPECT_EQ(lowered.meta, emulated.meta);
  EXPECT_LE(logit_diff, 1e-2);
}

}  // namespace
}  // namespace mpc
