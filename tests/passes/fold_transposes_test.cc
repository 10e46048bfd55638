// fold-transposes on the backward GEMMs autodiff writes for a batched MatMul with a 2-D
// weight: Transposes, per-batch partial products and their sum become two Gemms with
// transposed operands and the same values; MatMul operands that are swaps of the last two
// axes (attention) read in place (mpc_trans_a/b) with the unfolded graph's values in f32,
// bf16, f16 and f64, and the transposes that must stay. And the memory plan's views: a
// Reshape of an activation shares its bytes.
#include "passes/fold_transposes.h"

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

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
  EXPECT_EQ(testing::CountOps(*after, "Transpose"), 0);
  EXPECT_EQ(testing::CountOps(*after, "MatMul"), 0);
  EXPECT_EQ(testing::CountOps(*after, "ReduceSumTo"), 0);
  ASSERT_EQ(testing::CountOps(*after, "Gemm"), 2);
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

// ---- MatMul operands read transposed in place (mpc_trans_a / mpc_trans_b) ----------------

// The attention GEMMs' patterns, each operand a Transpose of its last two axes:
//   s  = q · k^T                  (forward scores: trans_b, equal batch)
//   g  = p^T · k                  (backward dV-like: trans_a)
//   pr = p^T · r^T                (both; p^T is read by two MatMuls)
//   bc = q · w^T, w [3,6,4]       (a broadcast batch: the loop kernels)
//   xw = x^T · v, v [4,6] 2-D     (a transposed batched A with a single B: the loop too)
constexpr const char* kOperandInputs[] = {"q", "k", "p", "r", "w", "x", "v"};

std::unique_ptr<Graph> AttentionLikeGraph(DType dtype) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* q = g->AddInput("q", dtype, {2, 3, 5, 4});
  Value* k = g->AddInput("k", dtype, {2, 3, 6, 4});
  Value* p = g->AddInput("p", dtype, {2, 3, 6, 5});
  Value* r = g->AddInput("r", dtype, {2, 3, 4, 6});
  Value* w = g->AddInput("w", dtype, {3, 6, 4});
  Value* x = g->AddInput("x", dtype, {2, 4, 5});
  Value* v = g->AddInput("v", dtype, {4, 6});
  const std::vector<int64_t> swap4 = {0, 1, 3, 2}, swap3 = {0, 2, 1};
  Value* pt = b.Transpose(p, swap4);
  Value* s = b.Op("MatMul", {q, b.Transpose(k, swap4)});
  Value* gv = b.Op("MatMul", {pt, k});
  Value* pr = b.Op("MatMul", {pt, b.Transpose(r, swap4)});
  Value* bc = b.Op("MatMul", {q, b.Transpose(w, swap3)});
  Value* xw = b.Op("MatMul", {b.Transpose(x, swap3), v});
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({s, gv, pr, bc, xw});
  return g;
}

// The graph's inputs: random values rounded to `dtype` (all of them exact in f64).
std::vector<Tensor> OperandValues(const Graph& g, DType dtype) {
  std::vector<Tensor> values;
  uint64_t seed = 40;
  for (const char* name : kOperandInputs) {
    for (const Value* in : g.inputs()) {
      if (in->name == name) values.push_back(testing::RandomTensor(dtype, in->shape, seed++));
    }
  }
  return values;
}

std::vector<Tensor> RunWith(const Graph& g, const std::vector<Tensor>& values) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return {};
  for (size_t i = 0; i < values.size(); ++i) EXPECT_TRUE((*ex)->SetInput(kOperandInputs[i], values[i]).ok()) << i;
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  std::vector<Tensor> out;
  for (const Value* v : g.outputs()) out.push_back(*(*ex)->Fetch(v->name));
  return out;
}

std::vector<Tensor> CastAll(const std::vector<Tensor>& ts, DType dtype) {
  std::vector<Tensor> out;
  for (const Tensor& t : ts) out.push_back(t.CastTo(dtype));
  return out;
}

TEST(FoldTransposesTest, MatMulOperandTransposesAreReadInPlace) {
  std::unique_ptr<Graph> g = AttentionLikeGraph(DType::kF32);
  absl::StatusOr<bool> changed = FoldTransposesPass().Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(testing::CountOps(*g, "Transpose"), 0);
  EXPECT_EQ(testing::CountOps(*g, "MatMul"), 5);
  EXPECT_EQ(testing::CountOps(*g, "Gemm"), 0);
  const int64_t want[5][2] = {{0, 1}, {1, 0}, {1, 1}, {0, 1}, {1, 0}};
  const Shape shapes[5] = {{2, 3, 5, 6}, {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 6}, {2, 5, 6}};
  for (int i = 0; i < 5; ++i) {
    const Node* mm = g->outputs()[i]->producer;
    ASSERT_EQ(mm->op, "MatMul") << i;
    EXPECT_EQ(mm->attrs.GetInt("mpc_trans_a", 0), want[i][0]) << i;
    EXPECT_EQ(mm->attrs.GetInt("mpc_trans_b", 0), want[i][1]) << i;
    EXPECT_EQ(mm->outputs[0]->shape, shapes[i]) << i;
    EXPECT_EQ(mm->inputs[0]->producer, nullptr) << i;  // the graph inputs themselves
    EXPECT_EQ(mm->inputs[1]->producer, nullptr) << i;
  }
}

// The folded graph computes the unfolded graph's values, on every CPU MatMul path
// (oneDNN batched, the loop for broadcasts, the f64 reference loop, f16's staging),
// and both stay as close to the float64 values.
void ExpectFoldedMatchesUnfolded(DType dtype, double vs_unfolded, double vs_f64) {
  std::unique_ptr<Graph> before = AttentionLikeGraph(dtype);
  std::unique_ptr<Graph> after = AttentionLikeGraph(dtype);
  ASSERT_TRUE(FoldTransposesPass().Run(*after).ok());
  ASSERT_EQ(testing::CountOps(*after, "Transpose"), 0);
  std::unique_ptr<Graph> ref = AttentionLikeGraph(DType::kF64);
  const std::vector<Tensor> values = OperandValues(*before, dtype);
  const std::vector<Tensor> want64 = RunWith(*ref, CastAll(values, DType::kF64));
  const std::vector<Tensor> unfolded = RunWith(*before, values);
  const std::vector<Tensor> folded = RunWith(*after, values);
  ASSERT_EQ(folded.size(), 5u);
  ASSERT_EQ(unfolded.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(folded[i].dtype(), dtype) << i;
    EXPECT_EQ(folded[i].shape(), unfolded[i].shape()) << i;
    EXPECT_LE(testing::RelativeError(folded[i], unfolded[i]), vs_unfolded) << DTypeName(dtype) << " output " << i;
    const double err_folded = testing::RelativeError(folded[i].CastTo(DType::kF64), want64[i]);
    const double err_unfolded = testing::RelativeError(unfolded[i].CastTo(DType::kF64), want64[i]);
    EXPECT_LE(err_folded, vs_f64) << DTypeName(dtype) << " output " << i;
    // No worse than the materialised transposes (up to one rounding of the output).
    EXPECT_LE(err_folded, err_unfolded + vs_unfolded) << DTypeName(dtype) << " output " << i;
  }
}

TEST(FoldTransposesTest, FoldedMatMulsMatchUnfoldedF32) { ExpectFoldedMatchesUnfolded(DType::kF32, 1e-6, 1e-6); }
TEST(FoldTransposesTest, FoldedMatMulsMatchUnfoldedBF16) { ExpectFoldedMatchesUnfolded(DType::kBF16, 8e-3, 8e-3); }
TEST(FoldTransposesTest, FoldedMatMulsMatchUnfoldedF16) { ExpectFoldedMatchesUnfolded(DType::kF16, 1e-3, 1e-3); }
TEST(FoldTransposesTest, FoldedMatMulsMatchUnfoldedF64) { ExpectFoldedMatchesUnfolded(DType::kF64, 1e-14, 1e-14); }

TEST(FoldTransposesTest, FoldKeepsTheOutputDTypeAndTogglesAnExistingFlag) {
  Graph g;
  GraphBuilder b(&g);
  Value* q = g.AddInput("q", DType::kBF16, {2, 3, 5, 4});
  Value* k = g.AddInput("k", DType::kBF16, {2, 3, 4, 6});
  AttrMap attrs;
  attrs.Set("mpc_output_dtype", static_cast<int64_t>(DTypeToOnnx(DType::kF32)));
  attrs.Set("mpc_trans_b", static_cast<int64_t>(1));  // k stored [.., 6, 4] after the Transpose
  Value* y = b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})}, attrs);
  ASSERT_TRUE(b.status().ok()) << b.status();
  ASSERT_EQ(y->shape, (Shape{2, 3, 5, 6}));
  g.SetOutputs({y});
  absl::StatusOr<bool> changed = FoldTransposesPass().Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  const Node* mm = g.outputs()[0]->producer;
  EXPECT_EQ(mm->attrs.GetInt("mpc_trans_b", 1), 0);
  EXPECT_EQ(mm->attrs.GetInt("mpc_trans_a", 1), 0);
  EXPECT_EQ(mm->inputs[1], k);
  EXPECT_EQ(g.outputs()[0]->dtype, DType::kF32);
  EXPECT_EQ(g.outputs()[0]->shape, (Shape{2, 3, 5, 6}));
  EXPECT_EQ(testing::CountOps(g, "Transpose"), 0);
}

// Left alone: a permutation other than a swap of the last two axes (attention's head
// transpose), a swap also read by another op or kept as an output (it is materialised
// anyway), and a MatMul with an FP8 conversion.
TEST(FoldTransposesTest, OtherTransposesAreLeftAlone) {
  Graph g;
  GraphBuilder b(&g);
  Value* q = g.AddInput("q", DType::kF32, {2, 5, 3, 4});
  Value* k = g.AddInput("k", DType::kF32, {2, 3, 6, 4});
  Value* k2 = g.AddInput("k2", DType::kF32, {2, 3, 6, 4});
  Value* k3 = g.AddInput("k3", DType::kF32, {2, 3, 6, 4});
  Value* qh = b.Transpose(q, {0, 2, 1, 3});                           // [2,3,5,4]
  Value* heads = b.Op("MatMul", {qh, b.Transpose(k, {0, 1, 3, 2})});  // k's swap folds; qh does not
  Value* k2t = b.Transpose(k2, {0, 1, 3, 2});
  Value* shared = b.Op("MatMul", {qh, k2t});
  Value* k2t_relu = b.Op("Relu", {k2t});
  Value* k3t = b.Transpose(k3, {0, 1, 3, 2});
  Value* as_output = b.Op("MatMul", {qh, k3t});
  ASSERT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({heads, shared, k2t_relu, as_output, k3t});
  absl::StatusOr<bool> changed = FoldTransposesPass().Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  // qh, k2t and k3t stay; k's swap is gone.
  EXPECT_EQ(testing::CountOps(g, "Transpose"), 3);
  const Node* mm0 = g.outputs()[0]->producer;
  EXPECT_EQ(mm0->inputs[0], qh);
  EXPECT_EQ(mm0->inputs[1], k);
  EXPECT_EQ(mm0->attrs.GetInt("mpc_trans_a", 0), 0);
  EXPECT_EQ(mm0->attrs.GetInt("mpc_trans_b", 0), 1);
  for (int i : {1, 3}) {
    const Node* mm = g.outputs()[i]->producer;
    EXPECT_EQ(mm->attrs.GetInt("mpc_trans_b", 0), 0) << i;
    EXPECT_EQ(mm->inputs[1]->producer->op, "Transpose") << i;
  }
}

TEST(FoldTransposesTest, Fp8MatMulIsLeftAlone) {
  Graph g;
  GraphBuilder b(&g);
  Value* q = g.AddInput("q", DType::kF32, {2, 3, 5, 4});
  Value* k = g.AddInput("k", DType::kF32, {2, 3, 6, 4});
  AttrMap attrs;
  attrs.Set("mpc_fp8", static_cast<int64_t>(1));
  g.SetOutputs({b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})}, attrs)});
  ASSERT_TRUE(b.status().ok()) << b.status();
  absl::StatusOr<bool> changed = FoldTransposesPass().Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(testing::CountOps(g, "Transpose"), 1);
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
