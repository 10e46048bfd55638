// pad-dims on convolutions: output channels padded to the multiple, the next Conv's input
// channels following them, and the padding carried through BatchNormalization (scale, bias
// and running statistics padded with zeros), ReLU, pools, a residual Add and the Flatten
// after GlobalAveragePool into the classifier's contraction. Padded and unpadded programs
// train to the same losses, running statistics and weights, and padded regions stay zero.
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "base/status_macros.h"
#include "engine/executor.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autodiff.h"
#include "passes/batch_norm_stats.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/pad_dims.h"
#include "passes/simplify.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kBatch = 4;
constexpr int64_t kClasses = 5;

struct Cnn {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Value* loss = nullptr;
};

Value* Conv(GraphBuilder& b, Graph& g, Value* x, const std::string& name, int64_t out, int64_t in, uint64_t seed) {
  Value* w = g.AddParameter(name + ".weight", testing::RandomTensor(DType::kF32, {out, in, 3, 3}, seed, -0.3, 0.3));
  Value* bias = g.AddParameter(name + ".bias", testing::RandomTensor(DType::kF32, {out}, seed + 1, -0.1, 0.1));
  AttrMap attrs;
  attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value* y = b.Op("Conv", {x, w, bias}, std::move(attrs));
  b.last_node()->name = name;
  return y;
}

// x[4, 3, 8, 8] -> Conv(6) -> BatchNormalization -> Relu -> MaxPool 2x2
//   -> Conv(6) + residual -> Relu -> Conv(10) -> Relu -> GlobalAveragePool -> Flatten
//   -> Gemm(5) -> SoftmaxCrossEntropyLoss. Channel counts 6, 10 and 5 are all unaligned.
Cnn SmallResidualCnn() {
  Cnn m;
  Graph& g = *m.g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {kBatch, 3, 8, 8});
  Value* labels = g.AddInput("labels", DType::kI64, {kBatch});
  Value* h = Conv(b, g, x, "conv0", 6, 3, 10);
  Value* scale = g.AddParameter("bn.scale", testing::RandomTensor(DType::kF32, {6}, 20, 0.5, 1.5));
  Value* shift = g.AddParameter("bn.bias", testing::RandomTensor(DType::kF32, {6}, 21, -0.2, 0.2));
  Value* mean = g.AddState("bn.running_mean", testing::RandomTensor(DType::kF32, {6}, 22, -0.1, 0.1));
  Value* var = g.AddState("bn.running_var", testing::RandomTensor(DType::kF32, {6}, 23, 0.8, 1.2));
  AttrMap bn_attrs;
  bn_attrs.Set("mpc_training", int64_t{1});
  h = b.Op("BatchNormalization", {h, scale, shift, mean, var}, std::move(bn_attrs));
  b.last_node()->name = "bn";
  h = b.Op("Relu", {h});
  AttrMap pool;
  pool.Set("kernel_shape", std::vector<int64_t>{2, 2});
  pool.Set("strides", std::vector<int64_t>{2, 2});
  h = b.Op("MaxPool", {h}, std::move(pool));
  b.last_node()->name = "pool";
  h = b.Op("Relu", {b.Op("Add", {Conv(b, g, h, "conv_res", 6, 6, 30), h})});
  b.last_node()->name = "relu_res";
  h = b.Op("Relu", {Conv(b, g, h, "conv2", 10, 6, 40)});
  h = b.Op("Flatten", {b.Op("GlobalAveragePool", {h})});
  b.last_node()->name = "flatten";
  Value* w = g.AddParameter("fc.weight", testing::RandomTensor(DType::kF32, {kClasses, 10}, 50, -0.3, 0.3));
  Value* c = g.AddParameter("fc.bias", testing::RandomTensor(DType::kF32, {kClasses}, 51, -0.1, 0.1));
  AttrMap gemm;
  gemm.Set("transB", int64_t{1});
  h = b.Op("Gemm", {h, w, c}, std::move(gemm));
  b.last_node()->name = "fc";
  m.loss = b.Op("SoftmaxCrossEntropyLoss", {h, labels});
  g.SetOutputs({m.loss});
  EXPECT_TRUE(b.status().ok()) << b.status();
  return m;
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

absl::StatusOr<bool> PadChannels(Graph& g, int multiple, CompileResults& results) {
  MPC_RETURN_IF_ERROR(BatchNormStatsPass().Run(g).status());  // as the pipeline: before pad-dims
  Capabilities caps = CreateCpuBackend()->capabilities();
  PadDimsOptions options;
  options.multiple = multiple;
  return PadDimsPass(options, caps, &results.pad_dims).Run(g);
}

TEST(PadChannelsTest, ChannelsArePaddedThroughNormPoolResidualAndFlatten) {
  Cnn m = SmallResidualCnn();
  CompileResults results;
  results.loss.loss = m.loss;
  auto changed = PadChannels(*m.g, 8, results);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  const Graph& g = *m.g;
  // The image's 3 channels are an input: not padded. Output channels 6 -> 8, 10 -> 16.
  EXPECT_EQ(g.FindValue("conv0.weight")->shape, (Shape{8, 3, 3, 3}));
  EXPECT_EQ(g.FindValue("conv0.weight")->logical_shape, (Shape{6, 3, 3, 3}));
  EXPECT_EQ(g.FindValue("conv0.bias")->shape, (Shape{8}));
  for (const char* name : {"bn.scale", "bn.bias", "bn.running_mean", "bn.running_var"}) {
    EXPECT_EQ(g.FindValue(name)->shape, (Shape{8})) << name;
    EXPECT_EQ(g.FindValue(name)->logical_shape, (Shape{6})) << name;
  }
  EXPECT_EQ(g.FindValue("conv_res.weight")->shape, (Shape{8, 8, 3, 3}));  // input channels follow
  EXPECT_EQ(g.FindValue("conv2.weight")->shape, (Shape{16, 8, 3, 3}));
  EXPECT_EQ(g.FindValue("conv2.weight")->logical_shape, (Shape{10, 6, 3, 3}));
  EXPECT_EQ(g.FindValue("fc.weight")->shape, (Shape{8, 16}));  // K follows the flattened channels
  EXPECT_EQ(g.FindNode("relu_res")->outputs[0]->shape, (Shape{kBatch, 8, 4, 4}));
  EXPECT_EQ(g.FindNode("flatten")->outputs[0]->shape, (Shape{kBatch, 16}));
  // The padding ends once, before the loss (the class dimension 5 -> 8).
  EXPECT_EQ(Count(g, "SliceTo"), 1);
  EXPECT_EQ(m.loss->producer->inputs[0]->producer->op, "SliceTo");
  EXPECT_EQ(m.loss->producer->inputs[0]->shape, (Shape{kBatch, kClasses}));
  // Padded weight regions are zero; the model region is the initial value.
  const Tensor& w = g.FindValue("conv2.weight")->data;
  const auto strides = RowMajorStrides(w.shape());
  for (int64_t i = 0; i < w.num_elements(); ++i) {
    if (i / strides[0] >= 10 || (i / strides[1]) % 8 >= 6) ASSERT_EQ(w.data<float>()[i], 0.0f) << i;
  }
  EXPECT_GT(results.pad_dims.extra_flops_pct, 0);
}

// A grouped Conv is not padded; a Conv whose weight is not a parameter cannot follow a
// padded input, which is sliced back to the model's channels in front of it.
TEST(PadChannelsTest, GroupedConvolutionsAndNonParameterWeightsAreLeftAlone) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {2, 4, 6, 6});
  Value* grouped_w = g.AddParameter("grouped_w", testing::RandomTensor(DType::kF32, {6, 2, 3, 3}, 1));
  AttrMap grouped;
  grouped.Set("group", int64_t{2});
  Value* y = b.Op("Conv", {x, grouped_w}, std::move(grouped));
  Value* w = g.AddParameter("w", testing::RandomTensor(DType::kF32, {6, 6, 3, 3}, 2));
  Value* z = b.Op("Conv", {y, w});
  Value* fed = g.AddInput("fed_weight", DType::kF32, {5, 6, 1, 1});
  Value* out = b.Op("Conv", {z, fed});
  Node* last = b.last_node();
  g.SetOutputs({out});
  ASSERT_TRUE(b.status().ok()) << b.status();
  CompileResults results;
  auto changed = PadChannels(g, 8, results);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_EQ(grouped_w->shape, (Shape{6, 2, 3, 3}));
  EXPECT_EQ(y->shape, (Shape{2, 6, 4, 4}));
  EXPECT_EQ(w->shape, (Shape{8, 6, 3, 3}));
  EXPECT_EQ(Count(g, "SliceTo"), 1);
  EXPECT_EQ(last->inputs[0]->producer->op, "SliceTo");
  EXPECT_EQ(last->inputs[0]->shape, (Shape{2, 6, 2, 2}));
  EXPECT_EQ(out->shape, (Shape{2, 5, 2, 2}));
}

struct Trained {
  std::vector<float> losses;
  std::map<std::string, Tensor> state;  // model shaped
};

// Trains the CNN for 6 AdamW steps (weight decay on) with the given pad multiple.
Trained Train(int multiple) {
  Cnn m = SmallResidualCnn();
  CompileResults res;
  res.loss.loss = m.loss;
  EXPECT_TRUE(PadChannels(*m.g, multiple, res).ok());
  OptimizerOptions optimizer;
  optimizer.kind = OptimizerOptions::Kind::kAdamW;
  optimizer.weight_decay = 0.05f;
  EXPECT_TRUE(AutodiffPass(&res.loss, &res.autodiff).Run(*m.g).ok());
  EXPECT_TRUE(OptimizerPass(optimizer, &res.autodiff, &res.loss_scaling, &res.optimizer).Run(*m.g).ok());
  EXPECT_TRUE(SimplifyPass().Run(*m.g).ok());
  EXPECT_TRUE(MemoryPlanPass(&res.memory_plan).Run(*m.g).ok());
  auto backend = CreateCpuBackend();
  auto ex = Executor::Create(*m.g, res.memory_plan, *backend);
  EXPECT_TRUE(ex.ok()) << ex.status();
  Trained t;
  if (!ex.ok()) return t;
  for (int step = 0; step < 6; ++step) {
    EXPECT_TRUE((*ex)->SetInput("x", testing::RandomTensor(DType::kF32, {kBatch, 3, 8, 8}, 300 + step)).ok());
    std::vector<int64_t> labels(kBatch);
    for (int i = 0; i < kBatch; ++i) labels[i] = (i * 2 + step) % kClasses;
    EXPECT_TRUE((*ex)->SetInput("labels", Tensor::FromVector<int64_t>({kBatch}, labels)).ok());
    EXPECT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(0.01f)).ok());
    EXPECT_TRUE((*ex)->Run(0, step).ok());
    t.losses.push_back((*ex)->Fetch(m.loss->name)->data<float>()[0]);
  }
  for (const Value* v : (*ex)->PersistentValues()) {
    Tensor value = *(*ex)->ReadPersistent(v->name);
    if (v->logical_shape.empty()) {
      t.state[v->name] = value;
      continue;
    }
    // Everything outside the model's region is still exactly zero.
    const auto strides = RowMajorStrides(value.shape());
    for (int64_t i = 0; i < value.num_elements(); ++i) {
      bool outside = false;
      for (size_t d = 0; d < v->logical_shape.size(); ++d) {
        outside |= (i / strides[d]) % value.shape()[d] >= v->logical_shape[d];
      }
      if (outside) EXPECT_EQ(value.data<float>()[i], 0.0f) << v->name << "[" << i << "]";
    }
    t.state[v->name] = value.SlicedTo(v->logical_shape);
  }
  return t;
}

TEST(PadChannelsTest, PaddedCnnTrainsToTheUnpaddedLossesStatisticsAndWeights) {
  const Trained plain = Train(1);
  const Trained padded = Train(8);
  ASSERT_EQ(plain.losses.size(), 6u);
  ASSERT_EQ(padded.losses.size(), plain.losses.size());
  for (size_t i = 0; i < plain.losses.size(); ++i) {
    EXPECT_NEAR(padded.losses[i], plain.losses[i], 1e-5 * std::abs(plain.losses[i])) << "step " << i;
  }
  EXPECT_NE(plain.losses.front(), plain.losses.back());  // it did train
  int compared = 0;
  for (const auto& [name, tensor] : plain.state) {
    auto it = padded.state.find(name);
    ASSERT_NE(it, padded.state.end()) << name;
    ASSERT_EQ(it->second.shape(), tensor.shape()) << name;
    if (tensor.dtype() != DType::kF32) continue;
    EXPECT_LT(testing::RelativeError(it->second, tensor), 1e-5) << name;
    ++compared;
  }
  // Weights, biases, BN scale/shift/running statistics and their Adam moments.
  EXPECT_GE(compared, 30);
  EXPECT_NE(plain.state.at("bn.running_mean").data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace mpc
