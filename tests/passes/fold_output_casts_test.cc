// fold-output-casts: a bf16 Gemm read only by a Cast to f32 (directly or through a Reshape)
// writes f32 itself, which is the f32 accumulation without the bf16 rounding in between; a
// product with other readers keeps its Cast.
#include "passes/fold_output_casts.h"

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// y = Cast(Gemm(a, b) in bf16, f32); with `second_reader`, the bf16 product is also an output;
// with `reshaped`, the Cast reads the product reshaped to [2, 4, 16] (fold-transposes' rows).
std::unique_ptr<Graph> CastGemm(bool second_reader, bool reshaped = false) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* a = g->AddInput("a", DType::kBF16, {8, 64});
  Value* w = g->AddConstant("w", testing::RandomTensor(DType::kF32, {64, 16}, 2).CastTo(DType::kBF16));
  Value* p = b.Op("Gemm", {a, w});
  Value* y = b.Cast(reshaped ? b.Reshape(p, {2, 4, 16}) : p, DType::kF32);
  EXPECT_TRUE(b.status().ok()) << b.status();
  if (second_reader) {
    g->SetOutputs({y, p});
  } else {
    g->SetOutputs({y});
  }
  return g;
}

Tensor RunOnCpu(const Graph& g, const Tensor& a) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("a", a).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(g.outputs()[0]->name);
}

TEST(FoldOutputCastsTest, Bf16GemmReadOnlyByACastWritesF32) {
  std::unique_ptr<Graph> before = CastGemm(false);
  std::unique_ptr<Graph> after = CastGemm(false);
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(after->nodes().size(), 1u);
  const Node& gemm = *after->nodes().front();
  EXPECT_EQ(gemm.op, "Gemm");
  EXPECT_EQ(gemm.attrs.GetInt("mpc_output_dtype", 0), 1);
  EXPECT_EQ(gemm.outputs[0]->dtype, DType::kF32);
  EXPECT_EQ(after->outputs()[0], gemm.outputs[0]);

  // Reference: the same bf16 operands multiplied in double.
  const Tensor a = testing::RandomTensor(DType::kF32, {8, 64}, 1).CastTo(DType::kBF16);
  const Tensor w = after->ValuesOfKind(ValueKind::kConstant)[0]->data;
  std::vector<double> ref(8 * 16, 0.0);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 16; ++j) {
      for (int k = 0; k < 64; ++k) ref[i * 16 + j] += a.GetAsDouble(i * 64 + k) * w.GetAsDouble(k * 16 + j);
    }
  }
  const Tensor expected = Tensor::FromVector<double>({8, 16}, ref);
  const double folded = testing::RelativeError(RunOnCpu(*after, a).CastTo(DType::kF64), expected);
  const double rounded = testing::RelativeError(RunOnCpu(*before, a).CastTo(DType::kF64), expected);
  EXPECT_LT(folded, 1e-5);   // the f32 accumulation itself
  EXPECT_GT(rounded, 1e-4);  // rounded to bf16 on the way
}

// The same through the Reshape between them: the Gemm writes f32 and the Reshape carries it.
TEST(FoldOutputCastsTest, CastThroughAReshapeFoldsIntoTheGemm) {
  std::unique_ptr<Graph> g = CastGemm(false, /*reshaped=*/true);
  std::unique_ptr<Graph> plain = CastGemm(false);
  ASSERT_TRUE(FoldOutputCastsPass().Run(*plain).ok());
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  int casts = 0;
  for (const auto& n : g->nodes()) {
    casts += n->op == "Cast";
    if (n->op == "Gemm") EXPECT_EQ(n->attrs.GetInt("mpc_output_dtype", 0), 1);
  }
  EXPECT_EQ(casts, 0);
  const Value* y = g->outputs()[0];
  EXPECT_EQ(y->dtype, DType::kF32);
  EXPECT_EQ(y->shape, (Shape{2, 4, 16}));
  ASSERT_NE(y->producer, nullptr);
  EXPECT_EQ(y->producer->op, "Reshape");
  // The values are the unreshaped fold's f32 accumulation, element for element.
  const Tensor a = testing::RandomTensor(DType::kF32, {8, 64}, 1).CastTo(DType::kBF16);
  const Tensor got = RunOnCpu(*g, a), want = RunOnCpu(*plain, a);
  ASSERT_EQ(got.num_elements(), want.num_elements());
  for (int64_t i = 0; i < got.num_elements(); ++i) EXPECT_EQ(got.GetAsDouble(i), want.GetAsDouble(i)) << i;
}

TEST(FoldOutputCastsTest, ProductWithAnotherReaderKeepsItsCast) {
  std::unique_ptr<Graph> g = CastGemm(true);
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(g->nodes().size(), 2u);
}

}  // namespace
}  // namespace mpc
