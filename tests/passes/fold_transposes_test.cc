// fold-transposes on the backward GEMMs autodiff writes for a batched MatMul with a 2-D
// weight: Transposes, per-batch partial products and their sum become two Gemms with
// transposed operands and the same values; a MatMul of two batched operands (attention)
// is left alone. And the memory plan's views: a Reshape of an activation shares its bytes.
#include "passes/fold_transposes.h"

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

int CountOps(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

// dX = MatMul(dY, Transpose(W)), dW = ReduceSumTo(MatMul(Transpose(X), dY), W's shape), as
// autodiff builds them for Y[2,3,5] = MatMul(X[2,3,4], W[4,5]).
std::unique_ptr<Graph> BackwardOfBatchedMatMul() {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, {2, 3, 4});
  Value* dy = g->AddInput("dy", DType::kF32, {2, 3, 5});
  Value* w = g->AddParameter("w", testing::RandomTensor(DType::kF32, {4, 5}, 3));
  Value* dx = b.Op("MatMul", {dy, b.Transpose(w, {1, 0})});
  Value* dw = b.ReduceSumTo(b.Op("MatMul", {b.Transpose(x, {0, 2, 1}), dy}), {4, 5});
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({dx, dw});
  return g;
}

std::vector<Tensor> RunOnCpu(const Graph& g, const Tensor& x, const Tensor& dy) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", x).ok());
  EXPECT_TRUE((*ex)->SetInput("dy", dy).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  std::vector<Tensor> out;
  for (const Value* v : g.outputs()) out.push_back(*(*ex)->Fetch(v->name));
  return out;
}

TEST(FoldTransposesTest, BatchedMatMulGradientsBecomeTwoTransposedGemms) {
  std::unique_ptr<Graph> before = BackwardOfBatchedMatMul();
  std::unique_ptr<Graph> after = BackwardOfBatchedMatMul();
  absl::StatusOr<bool> changed = FoldTransposesPass().Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(CountOps(*after, "Transpose"), 0);
  EXPECT_EQ(CountOps(*after, "MatMul"), 0);
  EXPECT_EQ(CountOps(*after, "ReduceSumTo"), 0);
  ASSERT_EQ(CountOps(*after, "Gemm"), 2);
  const Node* dw = after->outputs()[1]->producer;
  ASSERT_EQ(dw->op, "Gemm");
  EXPECT_EQ(dw->attrs.GetInt("transA", 0), 1);
  EXPECT_EQ(dw->outputs[0]->shape, (Shape{4, 5}));
  EXPECT_EQ(dw->inputs[0]->shape, (Shape{6, 4}));  // the batch folded into the rows
  EXPECT_EQ(after->outputs()[0]->shape, (Shape{2, 3, 4}));

  const Tensor x = testing::RandomTensor(DType::kF32, {2, 3, 4}, 11);
  const Tensor dy = testing::RandomTensor(DType::kF32, {2, 3, 5}, 12);
  const std::vector<Tensor> want = RunOnCpu(*before, x, dy);
  const std::vector<Tensor> got = RunOnCpu(*after, x, dy);
  for (int i = 0; i < 2; ++i) EXPECT_LT(testing::RelativeError(got[i], want[i]), 1e-6) << i;
}

TEST(FoldTransposesTest, MatMulOfTwoBatchedOperandsIsLeftAlone) {
  Graph g;
  GraphBuilder b(&g);
  Value* q = g.AddInput("q", DType::kF32, {2, 3, 4});
  Value* k = g.AddInput("k", DType::kF32, {2, 5, 4});
  g.SetOutputs({b.Op("MatMul", {q, b.Transpose(k, {0, 2, 1})})});
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<bool> changed = FoldTransposesPass().Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(CountOps(g, "MatMul"), 1);
  EXPECT_EQ(CountOps(g, "Transpose"), 1);
}

TEST(MemoryPlanTest, ReshapeOfAnActivationSharesItsBytes) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4, 6});
  Value* h = b.Op("Relu", {x});
  Value* r = b.Reshape(h, {2, 12});
  Value* y = b.Op("Relu", {r});
  Value* z = b.Add(y, b.Reshape(h, {2, 12}));  // h's bytes must outlive the first reader of r
  g.SetOutputs({z});
  ASSERT_TRUE(b.status().ok()) << b.status();
  MemoryPlanResult result;
  ASSERT_TRUE(MemoryPlanPass(&result).Run(g).ok());
  const MemoryPlan& plan = result.plan;
  EXPECT_EQ(plan.offsets.at(r), plan.offsets.at(h));
  // y and z are alive while h's bytes are (z reads a view of h): neither may sit on them.
  EXPECT_NE(plan.offsets.at(y), plan.offsets.at(h));
  EXPECT_NE(plan.offsets.at(z), plan.offsets.at(h));

  const Tensor xv = testing::RandomTensor(DType::kF32, {4, 6}, 5, -1.0, 1.0);
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE((*ex)->SetInput("x", xv).ok());
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  const Tensor out = *(*ex)->Fetch(z->name);
  for (int64_t i = 0; i < 24; ++i) {
    const float relu = std::max(xv.data<float>()[i], 0.0f);
    EXPECT_FLOAT_EQ(out.data<float>()[i], 2 * relu) << i;
  }
}

}  // namespace
}  // namespace mpc
