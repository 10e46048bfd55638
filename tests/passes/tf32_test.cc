// tf32: under precision tf32 every f32 GEMM and convolution of the compiled training
// program, forward and backward (autodiff's convolution gradients, the Gemms that
// fold-transposes writes), carries mpc_tf32 = 1 and is listed in Tf32Result; under f32
// and bf16 nothing is marked. The program is the real training pipeline on a small
// convolutional classifier (passes/pipelines.cc), so a pass that ran too early would
// leave the backward nodes unmarked and fail here.
#include "passes/tf32.h"

#include <map>
#include <memory>
#include <string>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/pipelines.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kBatch = 4;

// x [4,2,6,6] -> Conv(3x3, pads 1) -> Relu -> Conv(3x3) -> Relu -> Flatten -> MatMul(w3)
// -> Relu -> Gemm(w4, b4) -> logits [4, 10]. Two convolutions, so the second one's input
// gradient (ConvGradInput) is built too.
std::unique_ptr<Graph> SmallConvNet() {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, {kBatch, 2, 6, 6});
  Value* w1 = g->AddParameter("w1", testing::RandomTensor(DType::kF32, {3, 2, 3, 3}, 1, -0.3, 0.3));
  Value* b1 = g->AddParameter("b1", testing::RandomTensor(DType::kF32, {3}, 2, -0.1, 0.1));
  Value* w2 = g->AddParameter("w2", testing::RandomTensor(DType::kF32, {4, 3, 3, 3}, 3, -0.3, 0.3));
  Value* w3 = g->AddParameter("w3", testing::RandomTensor(DType::kF32, {64, 16}, 4, -0.2, 0.2));
  Value* w4 = g->AddParameter("w4", testing::RandomTensor(DType::kF32, {16, 10}, 5, -0.2, 0.2));
  Value* b4 = g->AddParameter("b4", testing::RandomTensor(DType::kF32, {10}, 6, -0.1, 0.1));
  AttrMap pads;
  pads.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  Value* h = b.Op("Relu", {b.Op("Conv", {x, w1, b1}, pads)});
  h = b.Op("Relu", {b.Op("Conv", {h, w2})});  // [4, 4, 4, 4]
  AttrMap axis;
  axis.Set("axis", int64_t{1});
  h = b.Op("Relu", {b.Op("MatMul", {b.Op("Flatten", {h}, axis), w3})});
  Value* logits = b.Op("Gemm", {h, w4, b4});
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({logits});
  return g;
}

struct Compiled {
  std::unique_ptr<Graph> graph;
  CompileResults results;
};

Compiled CompileTraining(Precision precision) {
  Compiled c;
  c.graph = SmallConvNet();
  CompileOptions o;
  o.loss.logits = c.graph->outputs()[0]->name;
  o.loss.batch_size = kBatch;
  o.autocast.precision = precision;
  PassPipeline p = MakeTrainingPipeline(o, testing::CpuBackend().capabilities(), &c.results);
  auto report = p.Run(*c.graph);
  EXPECT_TRUE(report.ok()) << report.status();
  return c;
}

bool IsF32(const Node& n) {
  return n.inputs.size() >= 2 && n.inputs[0]->dtype == DType::kF32 && n.inputs[1]->dtype == DType::kF32;
}

TEST(Tf32Test, MarksEveryF32GemmAndConvolutionForwardAndBackward) {
  const Compiled c = CompileTraining(Precision::kTF32);
  EXPECT_TRUE(c.results.tf32.enabled);
  std::map<std::string, int> marked_by_op, listed_by_op;
  for (const auto& n : c.graph->nodes()) {
    if (!Tf32Pass::IsTf32Op(n->op)) {
      EXPECT_FALSE(n->attrs.Has("mpc_tf32")) << n->name << " (" << n->op << ") is not a GEMM or convolution";
      continue;
    }
    ASSERT_TRUE(IsF32(*n)) << n->name << ": precision tf32 keeps every operand f32";
    EXPECT_EQ(n->attrs.GetInt("mpc_tf32", 0), 1) << n->name << " (" << n->op << ") is not marked";
    ++marked_by_op[n->op];
  }
  for (const Tf32Result::Marked& m : c.results.tf32.marked) {
    ASSERT_NE(c.graph->FindNode(m.node), nullptr) << m.node;
    EXPECT_EQ(c.graph->FindNode(m.node)->op, m.op);
    ++listed_by_op[m.op];
  }
  EXPECT_EQ(listed_by_op, marked_by_op) << "the result lists exactly the marked nodes";
  // Forward: 2 Conv, the MatMul (or the Gemm it became) and the Gemm. Backward: both
  // weight gradients and the second conv's input gradient, the GEMMs of both dense layers'
  // weight and input gradients.
  EXPECT_EQ(marked_by_op["Conv"], 2);
  EXPECT_EQ(marked_by_op["ConvGradWeight"], 2);
  EXPECT_EQ(marked_by_op["ConvGradInput"], 1);
  EXPECT_GE(marked_by_op["Gemm"] + marked_by_op["MatMul"], 2 + 3);
  EXPECT_EQ(static_cast<int64_t>(c.results.tf32.marked.size()), [&] {
    int total = 0;
    for (const auto& [op, count] : marked_by_op) total += count;
    return total;
  }());
}

TEST(Tf32Test, MarksNothingUnderF32OrBf16) {
  for (Precision precision : {Precision::kF32, Precision::kBF16}) {
    const Compiled c = CompileTraining(precision);
    EXPECT_FALSE(c.results.tf32.enabled);
    EXPECT_TRUE(c.results.tf32.marked.empty());
    int gemms = 0;
    for (const auto& n : c.graph->nodes()) {
      EXPECT_FALSE(n->attrs.Has("mpc_tf32")) << n->name;
      gemms += Tf32Pass::IsTf32Op(n->op);
    }
    EXPECT_GE(gemms, 10);  // the program has GEMMs and convolutions to mark
  }
}

// A bf16 (or f16) GEMM in a graph the pass is told is tf32 stays unmarked: its operands
// are TF32 values already. An f32 one beside it is marked; a second run changes nothing.
TEST(Tf32Test, OnlyF32OperandsAreMarked) {
  Graph g;
  GraphBuilder b(&g);
  Value* a = g.AddInput("a", DType::kF32, {4, 8});
  Value* w = g.AddConstant("w", testing::RandomTensor(DType::kF32, {8, 8}, 1));
  Value* f32 = b.Op("Gemm", {a, w});
  Value* lowp = b.Op("MatMul", {b.Cast(f32, DType::kBF16), b.Cast(w, DType::kBF16)});
  ASSERT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({lowp});
  Tf32Result r;
  auto changed = Tf32Pass(true, &r).Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(f32->producer->attrs.GetInt("mpc_tf32", 0), 1);
  EXPECT_FALSE(lowp->producer->attrs.Has("mpc_tf32"));
  ASSERT_EQ(r.marked.size(), 1u);
  EXPECT_EQ(r.marked[0].node, f32->producer->name);
  changed = Tf32Pass(true, &r).Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(r.marked.size(), 1u);
}

}  // namespace
}  // namespace mpc
