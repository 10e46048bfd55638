// pad-dims pass tests: where padding goes, where slices go, what stays untouched, and
// that padded parameter regions stay exactly zero through AdamW with weight decay.
#include "passes/pad_dims.h"

#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autodiff.h"
#include "passes/loss_scaling.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/simplify.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// x[B,in] -> (Gemm -> Relu)* -> Gemm -> SoftmaxCrossEntropyLoss, widths given.
struct Model {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Value* loss = nullptr;
};

Model Mlp(const std::vector<int64_t>& widths, int64_t batch = 4) {
  Model m;
  GraphBuilder b(m.g.get());
  Value* h = m.g->AddInput("x", DType::kF32, {batch, widths[0]});
  Value* labels = m.g->AddInput("labels", DType::kI64, {batch});
  for (size_t i = 0; i + 1 < widths.size(); ++i) {
    Value* w = m.g->AddParameter("w" + std::to_string(i),
                                 testing::RandomTensor(DType::kF32, {widths[i + 1], widths[i]}, 10 + i, -0.3, 0.3));
    Value* bias =
        m.g->AddParameter("b" + std::to_string(i), testing::RandomTensor(DType::kF32, {widths[i + 1]}, 20 + i));
    AttrMap attrs;
    attrs.Set("transB", int64_t{1});
    h = b.Op("Gemm", {h, w, bias}, attrs);
    b.last_node()->name = "gemm" + std::to_string(i);
    if (i + 2 < widths.size()) {
      h = b.Op("Relu", {h});
      b.last_node()->name = "relu" + std::to_string(i);
    }
  }
  m.loss = b.Op("SoftmaxCrossEntropyLoss", {h, labels});
  m.g->SetOutputs({m.loss});
  EXPECT_TRUE(b.status().ok()) << b.status();
  return m;
}

// Options and results for running single passes by hand, as the training pipeline would.
struct PassRun {
  PadDimsOptions pad;
  OptimizerOptions optimizer;
  CompileResults results;
  Capabilities caps;
  PadDimsPass PadDims() { return PadDimsPass(pad, caps, &results.pad_dims); }
};

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

TEST(PadDimsTest, HiddenAndClassDimsArePaddedWithOneSliceBeforeTheLoss) {
  Model m = Mlp({784, 700, 300, 10});
  PassRun r;
  r.pad.multiple = 8;
  r.results.loss.loss = m.loss;
  auto changed = r.PadDims().Run(*m.g);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_EQ(m.g->FindValue("w0")->shape, (Shape{704, 784}));  // 784 is already a multiple
  EXPECT_EQ(m.g->FindValue("w0")->logical_shape, (Shape{700, 784}));
  EXPECT_EQ(m.g->FindValue("w1")->shape, (Shape{304, 704}));  // N padded, K follows the input
  EXPECT_EQ(m.g->FindValue("w2")->shape, (Shape{16, 304}));
  EXPECT_EQ(m.g->FindValue("b2")->shape, (Shape{16}));
  // The only slice sits between the last Gemm and the loss; relus carry the padding.
  EXPECT_EQ(Count(*m.g, "SliceTo"), 1);
  const Node* loss = m.loss->producer;
  EXPECT_EQ(loss->inputs[0]->producer->op, "SliceTo");
  EXPECT_EQ(loss->inputs[0]->shape, (Shape{4, 10}));
  EXPECT_EQ(m.g->FindNode("relu0")->inputs[0]->producer->op, "Gemm");
  EXPECT_EQ(m.g->FindNode("gemm1")->inputs[0]->producer->name, "relu0");
  // Padded parameter regions are zero.
  const Tensor& w1 = m.g->FindValue("w1")->data;
  for (int64_t i = 0; i < 304; ++i) {
    for (int64_t j = 0; j < 704; ++j) {
      if (i >= 300 || j >= 700) ASSERT_EQ(w1.data<float>()[i * 704 + j], 0.0f) << i << "," << j;
    }
  }
}

TEST(PadDimsTest, AlignedDimsAreUntouchedAndThePassIsIdempotent) {
  Model m = Mlp({64, 32, 16});
  PassRun r;
  r.pad.multiple = 8;
  auto changed = r.PadDims().Run(*m.g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Count(*m.g, "SliceTo"), 0);

  Model p = Mlp({20, 30, 5});
  ASSERT_TRUE(*r.PadDims().Run(*p.g));
  const size_t nodes = p.g->nodes().size();
  auto again = r.PadDims().Run(*p.g);
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(p.g->nodes().size(), nodes);
}

TEST(PadDimsTest, SliceBeforeSoftmaxButNotBetweenTransparentOps) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4, 16});
  Value* w = g.AddParameter("w", testing::RandomTensor(DType::kF32, {16, 12}, 1));
  Value* y = b.Op("Gemm", {x, w});
  Value* t = b.Op("Tanh", {b.Op("Relu", {y})});
  Value* s = b.Op("Softmax", {t});
  g.SetOutputs({s});
  PassRun r;
  r.pad.multiple = 8;
  ASSERT_TRUE(*r.PadDims().Run(g));
  EXPECT_EQ(y->shape, (Shape{4, 16}));
  EXPECT_EQ(t->shape, (Shape{4, 16}));  // Relu and Tanh keep zeros: no slice between them
  EXPECT_EQ(Count(g, "SliceTo"), 1);
  EXPECT_EQ(s->producer->inputs[0]->producer->op, "SliceTo");
  EXPECT_EQ(s->shape, (Shape{4, 12}));
}

TEST(PadDimsTest, PaddedRegionsStayZeroAfterAdamWStepsWithWeightDecay) {
  Model m = Mlp({24, 30, 5}, 8);
  PassRun r;
  r.pad.multiple = 8;
  r.optimizer.kind = OptimizerOptions::Kind::kAdamW;  // lr 0.05, fed below
  r.optimizer.weight_decay = 0.1f;
  CompileResults& res = r.results;
  res.loss.loss = m.loss;
  r.caps = CreateCpuBackend()->capabilities();
  ASSERT_TRUE(r.PadDims().Run(*m.g).ok());
  ASSERT_TRUE(AutodiffPass(&res.loss, &res.autodiff).Run(*m.g).ok());
  ASSERT_TRUE(OptimizerPass(r.optimizer, &res.autodiff, &res.loss_scaling, &res.optimizer).Run(*m.g).ok());
  ASSERT_TRUE(SimplifyPass().Run(*m.g).ok());
  ASSERT_TRUE(MemoryPlanPass(&res.memory_plan).Run(*m.g).ok());
  auto backend = CreateCpuBackend();
  auto ex = Executor::Create(*m.g, res.memory_plan, *backend);
  ASSERT_TRUE(ex.ok()) << ex.status();
  for (int step = 0; step < 6; ++step) {
    ASSERT_TRUE((*ex)->SetInput("x", testing::RandomTensor(DType::kF32, {8, 24}, 100 + step)).ok());
    std::vector<int64_t> labels(8);
    for (int i = 0; i < 8; ++i) labels[i] = (i + step) % 5;
    ASSERT_TRUE((*ex)->SetInput("labels", Tensor::FromVector<int64_t>({8}, labels)).ok());
    ASSERT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(0.05f)).ok());
    ASSERT_TRUE((*ex)->Run(0, step).ok());
  }
  int checked = 0;
  for (const Value* v : (*ex)->PersistentValues()) {
    if (v->logical_shape.empty()) continue;
    Tensor t = *(*ex)->ReadPersistent(v->name);
    const Shape& logical = v->logical_shape;
    const auto strides = RowMajorStrides(t.shape());
    bool moved = false;
    for (int64_t i = 0; i < t.num_elements(); ++i) {
      bool outside = false;
      for (size_t d = 0; d < logical.size(); ++d) outside |= (i / strides[d]) % t.shape()[d] >= logical[d];
      if (outside)
        ASSERT_EQ(t.data<float>()[i], 0.0f) << v->name << "[" << i << "]";
      else
        moved |= t.data<float>()[i] != 0.0f;
    }
    EXPECT_TRUE(moved) << v->name;  // the real region did train
    ++checked;
  }
  EXPECT_GE(checked, 6);  // w0, b0, w1, b1 and their Adam moments
}

// A transformer-style block: x[B, T, D] -> MatMul + bias -> Gelu -> MatMul + bias -> Reshape
// -> loss. pad-dims pads MatMuls with 2-D weights like Gemms: the hidden width and the
// class width (13 -> 16, 7 -> 8), the second weight's K following the padded hidden
// activation, and one slice where the padding must end.
Model MatMulBlock(int64_t batch = 2, int64_t seq = 3) {
  Model m;
  GraphBuilder b(m.g.get());
  Value* x = m.g->AddInput("x", DType::kF32, {batch, seq, 10});
  Value* labels = m.g->AddInput("labels", DType::kI64, {batch * seq});
  Value* w1 = m.g->AddParameter("w1", testing::RandomTensor(DType::kF32, {10, 13}, 31, -0.4, 0.4));
  Value* b1 = m.g->AddParameter("b1", testing::RandomTensor(DType::kF32, {13}, 32));
  Value* w2 = m.g->AddParameter("w2", testing::RandomTensor(DType::kF32, {13, 7}, 33, -0.4, 0.4));
  Value* b2 = m.g->AddParameter("b2", testing::RandomTensor(DType::kF32, {7}, 34));
  Value* h = b.Op("Gelu", {b.Op("Add", {b.Op("MatMul", {x, w1}), b1})});
  Value* logits = b.Op("Add", {b.Op("MatMul", {h, w2}), b2});
  m.loss = b.Op("SoftmaxCrossEntropyLoss", {b.Reshape(logits, {batch * seq, 7}), labels});
  m.g->SetOutputs({m.loss});
  EXPECT_TRUE(b.status().ok()) << b.status();
  return m;
}

TEST(PadDimsTest, MatMulWithTwoDimensionalWeightIsPaddedLikeAGemm) {
  Model m = MatMulBlock();
  PassRun r;
  r.pad.multiple = 8;
  r.results.loss.loss = m.loss;
  auto changed = r.PadDims().Run(*m.g);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_EQ(m.g->FindValue("w1")->shape, (Shape{10, 16}));
  EXPECT_EQ(m.g->FindValue("b1")->shape, (Shape{16}));
  EXPECT_EQ(m.g->FindValue("w2")->shape, (Shape{16, 8}));  // K follows the padded hidden width
  EXPECT_EQ(m.g->FindValue("w2")->logical_shape, (Shape{13, 7}));
  EXPECT_EQ(m.g->FindValue("b2")->shape, (Shape{8}));
  EXPECT_EQ(Count(*m.g, "SliceTo"), 1);  // before the Reshape to the loss, nowhere else
}

// Trains the block for a few SGD steps with and without padding: the losses agree (the
// padded rows and columns are zeros that add nothing), and so do the trained weights.
TEST(PadDimsTest, MatMulBlockTrainsToTheSameLossesPaddedOrNot) {
  auto train = [](int multiple) {
    Model m = MatMulBlock(4, 5);
    PassRun r;
    r.pad.multiple = multiple;
    r.optimizer.kind = OptimizerOptions::Kind::kSgd;
    CompileResults& res = r.results;
    res.loss.loss = m.loss;
    r.caps = CreateCpuBackend()->capabilities();
    EXPECT_TRUE(r.PadDims().Run(*m.g).ok());
    EXPECT_TRUE(AutodiffPass(&res.loss, &res.autodiff).Run(*m.g).ok());
    EXPECT_TRUE(OptimizerPass(r.optimizer, &res.autodiff, &res.loss_scaling, &res.optimizer).Run(*m.g).ok());
    EXPECT_TRUE(SimplifyPass().Run(*m.g).ok());
    EXPECT_TRUE(MemoryPlanPass(&res.memory_plan).Run(*m.g).ok());
    auto backend = CreateCpuBackend();
    auto ex = Executor::Create(*m.g, res.memory_plan, *backend);
    EXPECT_TRUE(ex.ok()) << ex.status();
    std::vector<float> losses;
    for (int step = 0; step < 5; ++step) {
      EXPECT_TRUE((*ex)->SetInput("x", testing::RandomTensor(DType::kF32, {4, 5, 10}, 200 + step)).ok());
      std::vector<int64_t> labels(20);
      for (int i = 0; i < 20; ++i) labels[i] = (i * 3 + step) % 7;
      EXPECT_TRUE((*ex)->SetInput("labels", Tensor::FromVector<int64_t>({20}, labels)).ok());
      EXPECT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(0.1f)).ok());
      EXPECT_TRUE((*ex)->Run(0, step).ok());
      losses.push_back((*ex)->Fetch(m.loss->name)->data<float>()[0]);
    }
    Tensor w2 = *(*ex)->ReadPersistent("w2");
    return std::make_pair(losses, w2);
  };
  const auto [plain_losses, plain_w2] = train(1);
  const auto [padded_losses, padded_w2] = train(8);
  ASSERT_EQ(plain_losses.size(), padded_losses.size());
  for (size_t i = 0; i < plain_losses.size(); ++i) {
    EXPECT_NEAR(padded_losses[i], plain_losses[i], 1e-6 * std::abs(plain_losses[i])) << "step " << i;
  }
  EXPECT_NE(plain_losses.front(), plain_losses.back());  // it did train
  // The stored weight is the padded one: its logical region matches, the rest is zero.
  ASSERT_EQ(padded_w2.shape(), (Shape{16, 8}));
  std::vector<float> region(13 * 7);
  for (int64_t i = 0; i < 16; ++i) {
    for (int64_t j = 0; j < 8; ++j) {
      const float v = padded_w2.data<float>()[i * 8 + j];
      if (i < 13 && j < 7) {
        region[i * 7 + j] = v;
      } else {
        ASSERT_EQ(v, 0.0f) << i << "," << j;
      }
    }
  }
  EXPECT_LT(testing::RelativeError(Tensor::FromVector<float>({13, 7}, region), plain_w2), 1e-6);
}

}  // namespace
}  // namespace mpc
