// fold-gradient-casts (the optimizer reads the bf16 convolution weight gradients instead of
// their Casts to f32) must not change a single bit of training: a small CNN trained through
// the real pipeline on the CPU in bf16, with the pass and with it disabled, under SGD with
// momentum and under AdamW. The pass must have removed every convolution gradient's Cast;
// per-step losses and every parameter and optimizer state tensor after the run must be
// identical.
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "graph/graph_builder.h"
#include "graph/onnx_export.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kBatch = 8;

// x[N, 3, 10, 10] -> Conv(8) -> Relu -> Conv(16, stride 2) -> Relu -> GlobalAveragePool
// -> Flatten -> Gemm(5).
std::string WriteCnn(const std::string& dir) {
  Graph g;
  GraphBuilder b(&g);
  Value* h = g.AddInput("x", DType::kF32, {1, 3, 10, 10});
  auto conv = [&](Value* x, const std::string& name, int64_t out, int64_t in, int64_t stride, uint64_t seed) {
    const double bound = 1.0 / std::sqrt(9.0 * in);
    Value* w =
        g.AddParameter(name + ".weight", testing::RandomTensor(DType::kF32, {out, in, 3, 3}, seed, -bound, bound));
    AttrMap attrs;
    attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
    attrs.Set("strides", std::vector<int64_t>{stride, stride});
    return b.Op("Relu", {b.Op("Conv", {x, w}, std::move(attrs))});
  };
  h = conv(h, "conv1", 8, 3, 1, 70);
  h = conv(h, "conv2", 16, 8, 2, 71);
  h = b.Op("Flatten", {b.Op("GlobalAveragePool", {h})});
  Value* w = g.AddParameter("fc.weight", testing::RandomTensor(DType::kF32, {5, 16}, 72, -0.3, 0.3));
  Value* bias = g.AddParameter("fc.bias", testing::RandomTensor(DType::kF32, {5}, 73, -0.3, 0.3));
  AttrMap attrs;
  attrs.Set("transB", int64_t{1});
  h = b.Op("Gemm", {h, w, bias}, attrs);
  EXPECT_TRUE(b.status().ok()) << b.status();
  EXPECT_TRUE(g.RenameValue(h, "logits").ok());
  g.SetOutputs({h});
  const std::string path = dir + "/cnn.onnx";
  ExportOptions options;
  options.batch_dim_param = "batch";
  EXPECT_TRUE(ExportOnnxFile(g, options, path).ok());
  return path;
}

struct TrainResult {
  int gradient_casts = 0;  // Casts of a ConvGradWeight result to f32 left in the program
  std::vector<float> losses;
  std::map<std::string, Tensor> persistent;
};

TrainResult Train(const std::string& model, const std::string& optimizer, bool fold, int steps) {
  TrainResult r;
  auto spec = ParseTrainSpec(absl::StrCat("model: \"", model,
                                          "\"\nloss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
                                          "batch_size: 8\nsteps: 6\nseed: 3\nprecision { compute: BF16 }\n",
                                          optimizer),
                             "fold_gradient_casts", /*require_train_data=*/false);
  EXPECT_TRUE(spec.ok()) << spec.status();
  if (!spec.ok()) return r;
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  ProgramOptions options;
  options.model_path = model;
  options.batch_size = kBatch;
  if (!fold) options.pipeline.disabled.insert("fold-gradient-casts");
  auto program = CompileProgram(*spec, cpu->capabilities(), options);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return r;
  for (const auto& n : program->graph->nodes()) {
    const Node* producer = n->op == "Cast" ? n->inputs[0]->producer : nullptr;
    r.gradient_casts += producer && producer->op == "ConvGradWeight";
  }
  auto ex = Executor::Create(*program->graph, program->results.memory_plan, *cpu);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return r;
  for (int step = 0; step < steps; ++step) {
    const Tensor x = testing::RandomTensor(DType::kF32, {kBatch, 3, 10, 10}, 100 + step);
    std::vector<int64_t> labels;
    for (int64_t i = 0; i < kBatch; ++i) labels.push_back((i * 7 + step) % 5);
    EXPECT_TRUE((*ex)->SetInput(program->features_input, x).ok());
    EXPECT_TRUE((*ex)->SetInput(program->labels_input, Tensor::FromVector<int64_t>({kBatch}, labels)).ok());
    EXPECT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(0.05f)).ok());
    EXPECT_TRUE((*ex)->Run(spec->seed(), step).ok());
    r.losses.push_back(static_cast<float>((*ex)->Fetch(program->loss_output)->GetAsDouble(0)));
  }
  auto persistent = testing::ReadPersistentTensors(*program->graph, **ex);
  EXPECT_TRUE(persistent.ok()) << persistent.status();
  if (persistent.ok()) r.persistent = *std::move(persistent);
  return r;
}

class FoldGradientCastsTrainingTest : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(FoldGradientCastsTrainingTest, FoldedGradientCastsTrainBitForBitLikeTheCasts) {
  const std::string model = WriteCnn(testing::MakeTempDir("fold_gradient_casts"));
  const int steps = 6;
  const TrainResult folded = Train(model, GetParam().second, true, steps);
  const TrainResult cast = Train(model, GetParam().second, false, steps);
  EXPECT_EQ(cast.gradient_casts, 2) << "one Cast per convolution weight gradient without the pass";
  EXPECT_EQ(folded.gradient_casts, 0);
  ASSERT_EQ(folded.losses.size(), static_cast<size_t>(steps));
  ASSERT_EQ(cast.losses.size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    EXPECT_EQ(std::memcmp(&folded.losses[i], &cast.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": folded " << folded.losses[i] << ", with casts " << cast.losses[i];
  }
  EXPECT_NE(folded.losses.front(), folded.losses.back()) << "training must move the loss";
  EXPECT_FALSE(cast.persistent.empty());
  EXPECT_EQ(testing::FirstDifference(cast.persistent, folded.persistent), "") << "after " << steps << " steps";
}

INSTANTIATE_TEST_SUITE_P(, FoldGradientCastsTrainingTest,
                         ::testing::Values(std::make_pair("SgdMomentum",
                                                          "optimizer { sgd { lr: 0.05 momentum: 0.9 "
                                                          "weight_decay: 0.0001 } }\n"),
                                           std::make_pair("AdamW",
                                                          "optimizer { adamw { lr: 0.01 weight_decay: 0.05 } "
                                                          "}\n")),
                         [](const auto& info) { return std::string(info.param.first); });

}  // namespace
}  // namespace mpc
