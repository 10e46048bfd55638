// fuse-epilogues, MatMul + bias: a transformer-style linear layer (3-D activations times a
// 2-D weight, then Add of a per-column bias) becomes one Gemm with the bias as C between
// Reshape views, computing the same values (checked against float64), also when autocast
// widened a 16-bit product to add an f32 bias; the patterns it must leave alone stay.
#include <memory>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/fuse_epilogues.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

struct Linear {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Value* y = nullptr;
};

// y = Add(bias, MatMul(x[2, 5, 8], w[8, 6])) in `dtype`; bias of shape `bias_shape`.
Linear Build(DType dtype, const Shape& bias_shape, bool bias_first = true) {
  Linear l;
  GraphBuilder b(l.g.get());
  Value* x = l.g->AddInput("x", dtype, {2, 5, 8});
  Value* w = l.g->AddConstant("w", testing::RandomTensor(DType::kF32, {8, 6}, 11).CastTo(dtype));
  Value* bias = l.g->AddConstant("bias", testing::RandomTensor(DType::kF32, bias_shape, 12).CastTo(dtype));
  Value* mm = b.Op("MatMul", {x, w});
  l.y = bias_first ? b.Op("Add", {bias, mm}) : b.Op("Add", {mm, bias});
  EXPECT_TRUE(b.status().ok()) << b.status();
  l.g->SetOutputs({l.y});
  return l;
}

Tensor RunOnCpu(const Graph& g, const Tensor& x) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", x).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(g.outputs()[0]->name);
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

TEST(FuseMatMulBiasTest, LinearLayerBecomesOneGemmWithTheSameValues) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (bool bias_first : {true, false}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (bias_first ? " bias first" : " bias second"));
      Linear l = Build(dtype, {6}, bias_first);
      const Tensor x = testing::RandomTensor(DType::kF32, {2, 5, 8}, 13).CastTo(dtype);
      const Tensor unfused = RunOnCpu(*l.g, x);
      auto changed = FuseEpiloguesPass().Run(*l.g);
      ASSERT_TRUE(changed.ok()) << changed.status();
      EXPECT_TRUE(*changed);
      EXPECT_EQ(Count(*l.g, "MatMul"), 0);
      EXPECT_EQ(Count(*l.g, "Add"), 0);
      EXPECT_EQ(Count(*l.g, "Gemm"), 1);
      EXPECT_EQ(l.g->outputs()[0]->shape, (Shape{2, 5, 6}));
      const Tensor fused = RunOnCpu(*l.g, x);

      // float64 reference over the same (rounded) operands.
      const Value* w = nullptr;
      const Value* bias = nullptr;
      for (const Value* c : l.g->ValuesOfKind(ValueKind::kConstant)) {
        if (c->name == "w") w = c;
        if (c->name == "bias") bias = c;
      }
      ASSERT_TRUE(w && bias);
      std::vector<double> ref(10 * 6);
      for (int r = 0; r < 10; ++r) {
        for (int j = 0; j < 6; ++j) {
          double s = bias->data.GetAsDouble(j);
          for (int k = 0; k < 8; ++k) s += x.GetAsDouble(r * 8 + k) * w->data.GetAsDouble(k * 6 + j);
          ref[r * 6 + j] = s;
        }
      }
      const Tensor expected = Tensor::FromVector<double>({2, 5, 6}, ref);
      const double tol = dtype == DType::kF32 ? 1e-5 : 1e-2;
      EXPECT_LT(testing::RelativeError(fused.CastTo(DType::kF64), expected), tol);
      EXPECT_LT(testing::RelativeError(unfused.CastTo(DType::kF64), expected), tol);
    }
  }
}

// Autocast's form of a projection back into an f32 residual stream: a 16-bit MatMul, a
// Cast of its product to f32, an f32 bias. One Gemm writing f32 with the f32 bias as C;
// the sum is then the f32 accumulation plus the bias, nearer the float64 value than the
// unfused graph's product rounded to 16 bits first.
TEST(FuseMatMulBiasTest, WidenedProductPlusAnF32BiasBecomesAGemmWritingF32) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (bool bias_first : {true, false}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (bias_first ? " bias first" : " bias second"));
      Graph g;
      GraphBuilder b(&g);
      Value* x = g.AddInput("x", dtype, {2, 5, 8});
      const Tensor w_data = testing::RandomTensor(DType::kF32, {8, 6}, 11).CastTo(dtype);
      const Tensor bias_data = testing::RandomTensor(DType::kF32, {6}, 12);
      Value* w = g.AddConstant("w", w_data);
      Value* bias = g.AddConstant("bias", bias_data);
      Value* wide = b.Cast(b.Op("MatMul", {x, w}), DType::kF32);
      Value* y = bias_first ? b.Op("Add", {bias, wide}) : b.Op("Add", {wide, bias});
      ASSERT_TRUE(b.status().ok()) << b.status();
      g.SetOutputs({y});
      const Tensor xv = testing::RandomTensor(DType::kF32, {2, 5, 8}, 13).CastTo(dtype);
      const Tensor unfused = RunOnCpu(g, xv);

      auto changed = FuseEpiloguesPass().Run(g);
      ASSERT_TRUE(changed.ok()) << changed.status();
      EXPECT_TRUE(*changed);
      EXPECT_EQ(Count(g, "MatMul"), 0);
      EXPECT_EQ(Count(g, "Cast"), 0);
      EXPECT_EQ(Count(g, "Add"), 0);
      ASSERT_EQ(Count(g, "Gemm"), 1);
      for (const auto& n : g.nodes()) {
        if (n->op == "Gemm") EXPECT_EQ(n->attrs.GetInt("mpc_output_dtype", 0), DTypeToOnnx(DType::kF32));
      }
      EXPECT_EQ(g.outputs()[0]->dtype, DType::kF32);
      EXPECT_EQ(g.outputs()[0]->shape, (Shape{2, 5, 6}));
      const Tensor fused = RunOnCpu(g, xv);

      std::vector<double> ref(10 * 6);
      for (int r = 0; r < 10; ++r) {
        for (int j = 0; j < 6; ++j) {
          double s = bias_data.GetAsDouble(j);
          for (int k = 0; k < 8; ++k) s += xv.GetAsDouble(r * 8 + k) * w_data.GetAsDouble(k * 6 + j);
          ref[r * 6 + j] = s;
        }
      }
      const Tensor expected = Tensor::FromVector<double>({2, 5, 6}, ref);
      EXPECT_LT(testing::RelativeError(fused.CastTo(DType::kF64), expected), 1e-5);
      EXPECT_LT(testing::RelativeError(unfused.CastTo(DType::kF64), expected), dtype == DType::kBF16 ? 1e-2 : 2e-3);
    }
  }
}

TEST(FuseMatMulBiasTest, WidenedProductReadElsewhereStays) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kBF16, {4, 8});
  Value* w = g.AddConstant("w", testing::RandomTensor(DType::kF32, {8, 6}, 1).CastTo(DType::kBF16));
  Value* bias = g.AddConstant("bias", testing::RandomTensor(DType::kF32, {6}, 2));
  Value* wide = b.Cast(b.Op("MatMul", {x, w}), DType::kF32);
  Value* y = b.Op("Add", {wide, bias});
  ASSERT_TRUE(b.status().ok());
  g.SetOutputs({y, wide});
  auto changed = FuseEpiloguesPass().Run(g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(FuseMatMulBiasTest, BiasOfOneByNShapeIsReshaped) {
  Linear l = Build(DType::kF32, {1, 1, 6});
  auto changed = FuseEpiloguesPass().Run(*l.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(Count(*l.g, "Gemm"), 1);
}

TEST(FuseMatMulBiasTest, NonColumnAddsAndSharedProductsStay) {
  {
    // A per-row term ([5, 1]) is not a GEMM bias.
    Linear l = Build(DType::kF32, {5, 1});
    auto changed = FuseEpiloguesPass().Run(*l.g);
    ASSERT_TRUE(changed.ok());
    EXPECT_FALSE(*changed);
  }
  {
    // The product is also read elsewhere: it must stay stored.
    Graph g;
    GraphBuilder b(&g);
    Value* x = g.AddInput("x", DType::kF32, {4, 8});
    Value* w = g.AddConstant("w", testing::RandomTensor(DType::kF32, {8, 6}, 1));
    Value* bias = g.AddConstant("bias", testing::RandomTensor(DType::kF32, {6}, 2));
    Value* mm = b.Op("MatMul", {x, w});
    Value* y = b.Op("Add", {mm, bias});
    ASSERT_TRUE(b.status().ok());
    g.SetOutputs({y, mm});
    auto changed = FuseEpiloguesPass().Run(g);
    ASSERT_TRUE(changed.ok());
    EXPECT_FALSE(*changed);
  }
}

}  // namespace
}  // namespace mpc
