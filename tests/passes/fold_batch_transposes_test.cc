// fold-batch-transposes on attention's head transposes, forward and backward forms: every
// Transpose that only feeds batched MatMuls, or is the only reader of one, disappears into
// the MatMuls' mpc_perm_* views, with the unfolded graph's values on the CPU (whose MatMuls
// read and write those views); near misses and backends without the capability keep them.
#include "passes/fold_batch_transposes.h"

#include <string>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

const Shape kHeadsLast = {2, 5, 3, 4};  // [B, T, H, D]

Value* MatMul(GraphBuilder& b, Value* x, Value* y, bool ta = false, bool tb = false) {
  AttrMap attrs;
  if (ta) attrs.Set("mpc_trans_a", int64_t{1});
  if (tb) attrs.Set("mpc_trans_b", int64_t{1});
  return b.Op("MatMul", {x, y}, std::move(attrs));
}

// Attention on q, k, v stored [B, T, H, D]: y = softmax-free P·V with P = Q·K^T, stored
// back heads-last, and two backward-style products: dK^T = Q^T·P (trans flag, result
// permuted [0, 3, 1, 2]: the transposed product is computed) and P·V read through a flag.
std::unique_ptr<Graph> Attention() {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* q = g->AddInput("q", DType::kF32, kHeadsLast);
  Value* k = g->AddInput("k", DType::kF32, kHeadsLast);
  Value* v = g->AddInput("v", DType::kF32, kHeadsLast);
  Value* qh = b.Transpose(q, {0, 2, 1, 3});
  Value* kt = b.Transpose(k, {0, 2, 3, 1});
  Value* vh = b.Transpose(v, {0, 2, 1, 3});
  Value* p = MatMul(b, qh, kt);                                    // [2, 3, 5, 5]
  Value* y = b.Transpose(MatMul(b, p, vh), {0, 2, 1, 3});          // [2, 5, 3, 4]
  Value* dkt = b.Transpose(MatMul(b, qh, p, true), {0, 3, 1, 2});  // [2, 3, 4, 5] -> [2, 5, 3, 4]
  Value* pt_v = MatMul(b, p, vh, true);                            // P^T·V, [2, 3, 5, 4]
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({y, dkt, pt_v});
  return g;
}

std::vector<Tensor> RunOnCpu(const Graph& g) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  uint64_t seed = 5;
  for (const char* name : {"q", "k", "v"}) {
    EXPECT_TRUE((*ex)->SetInput(name, testing::RandomTensor(DType::kF32, kHeadsLast, seed++)).ok());
  }
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  std::vector<Tensor> out;
  for (const Value* o : g.outputs()) out.push_back(*(*ex)->Fetch(o->name));
  return out;
}

TEST(FoldBatchTransposesTest, AttentionHeadTransposesAreReadAndWrittenInPlace) {
  std::unique_ptr<Graph> before = Attention();
  std::unique_ptr<Graph> after = Attention();
  FoldBatchTransposesResult result;
  absl::StatusOr<bool> changed = FoldBatchTransposesPass(testing::CpuBackend().capabilities(), &result).Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(testing::CountOps(*after, "Transpose"), 0);
  EXPECT_EQ(testing::CountOps(*after, "MatMul"), 4);
  EXPECT_EQ(result.operand_transposes, 3);
  EXPECT_EQ(result.result_transposes, 2);
  // Outputs keep their names and shapes; every MatMul reads a stored input directly.
  for (size_t i = 0; i < before->outputs().size(); ++i) {
    EXPECT_EQ(after->outputs()[i]->name, before->outputs()[i]->name);
    EXPECT_EQ(after->outputs()[i]->shape, before->outputs()[i]->shape);
  }
  // dK^T's column-major result became the product of the swapped operands.
  const Node* dkt = after->outputs()[1]->producer;
  EXPECT_EQ(dkt->inputs[1]->name, "q");
  EXPECT_EQ(dkt->attrs.GetInts("mpc_perm_y", {}), (std::vector<int64_t>{0, 2, 1, 3}));
  EXPECT_FALSE(dkt->attrs.Has("mpc_trans_a"));

  const std::vector<Tensor> want = RunOnCpu(*before), got = RunOnCpu(*after);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LT(testing::RelativeError(got[i], want[i]), 1e-6) << "output " << i;
  }
}

TEST(FoldBatchTransposesTest, BackendWithoutTheCapabilityKeepsTheTransposes) {
  std::unique_ptr<Graph> g = Attention();
  Capabilities caps;  // matmul_permuted_operands = false
  absl::StatusOr<bool> changed = FoldBatchTransposesPass(caps, nullptr).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(testing::CountOps(*g, "Transpose"), 5);
}

TEST(FoldBatchTransposesTest, NearMissesAreLeftAlone) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* q = g->AddInput("q", DType::kF32, kHeadsLast);
  Value* w = g->AddInput("w", DType::kF32, {1, 3, 4, 5});
  Value* shared = b.Transpose(q, {0, 2, 1, 3});     // also read by a Relu
  Value* broadcast = b.Transpose(q, {0, 2, 1, 3});  // the MatMul broadcasts its batch
  Value* p = MatMul(b, shared, b.Transpose(q, {0, 2, 3, 1}));
  Value* r = b.Op("Relu", {shared});
  Value* bw = MatMul(b, broadcast, w);
  Value* read_twice = MatMul(b, q, q, false, true);  // [2, 5, 3, 3], read by two ops
  Value* t1 = b.Transpose(read_twice, {0, 2, 1, 3});
  Value* t2 = b.Op("Relu", {read_twice});
  ASSERT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({p, r, bw, t1, t2});
  FoldBatchTransposesResult result;
  absl::StatusOr<bool> changed = FoldBatchTransposesPass(testing::CpuBackend().capabilities(), &result).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  // Only K^T (read by one MatMul alone) folds.
  EXPECT_TRUE(*changed);
  EXPECT_EQ(result.operand_transposes, 1);
  EXPECT_EQ(result.result_transposes, 0);
  EXPECT_EQ(testing::CountOps(*g, "Transpose"), 3);
}

}  // namespace
}  // namespace mpc
