// fuse-layer-norm-edges on a pre-norm residual block's forward and backward forms: the
// Cast after an f32 LayerNormalization becomes its output dtype and the Adds of
// LayerNormGrad results become the gradients' addend inputs, with the unfused graph's
// values bit for bit on the CPU; near misses and backends without the capability keep them.
#include "passes/fuse_layer_norm_edges.h"

#include <cstring>
#include <string>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// 40 values a row: not a whole number of 16-lane vectors, so the row loops' tails run.
const Shape kX = {4, 6, 40};
const Shape kNorm = {40};

struct Block {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Value* x = nullptr;
  Value* scale = nullptr;
};

// LayerNormalization(x) -> (Y, mean, inv_std).
std::vector<Value*> Norm(GraphBuilder& b, const Block& blk) {
  return b.OpN("LayerNormalization", {blk.x, blk.scale, blk.scale}, {});
}

Value* Grad(GraphBuilder& b, const Block& blk, const std::vector<Value*>& norm, Value* dy) {
  AttrMap attrs;
  attrs.Set("axis", int64_t{-1});
  return b.OpN("LayerNormGrad", {dy, blk.x, blk.scale, norm[1], norm[2]}, std::move(attrs))[0];
}

Block NewBlock() {
  Block blk;
  blk.x = blk.graph->AddInput("x", DType::kF32, kX);
  blk.scale = blk.graph->AddInput("scale", DType::kF32, kNorm);
  for (const char* dy : {"dy1", "dy2", "dy3"}) blk.graph->AddInput(dy, DType::kF32, kX);
  return blk;
}

// Y in bf16 and in f16 (two normalisations, as autocast writes them), and the residual
// stream's gradient summed over three LayerNormGrads in autodiff's order:
// (g1 + g2) + g3, with g3 on the right; the partial sum also reduced and narrowed.
Block PreNormBlock() {
  Block blk = NewBlock();
  Graph& g = *blk.graph;
  GraphBuilder b(&g);
  const std::vector<Value*> n1 = Norm(b, blk), n2 = Norm(b, blk);
  Value* y16 = b.Cast(n1[0], DType::kBF16);
  Value* h16 = b.Cast(n2[0], DType::kF16);
  Value* g1 = Grad(b, blk, n1, g.FindValue("dy1"));
  Value* g2 = Grad(b, blk, n1, g.FindValue("dy2"));
  Value* g3 = Grad(b, blk, n2, g.FindValue("dy3"));
  Value* partial = b.Op("Add", {g1, g2});
  // What the layer before reads of the partial sum: its bias gradient and a bf16 copy.
  Value* bias_grad = b.ReduceSumTo(partial, kNorm);
  Value* partial16 = b.Cast(partial, DType::kBF16);
  Value* sum = b.Op("Add", {partial, g3});
  // Ordered after g2's gradient, as an in-place update of the scale it reads would be.
  Value* after_g2 = b.Op("Relu", {g.FindValue("dy1")});
  EXPECT_TRUE(b.status().ok()) << b.status();
  after_g2->producer->control_deps.push_back(g2->producer);
  g.SetOutputs({y16, h16, sum, bias_grad, partial16, after_g2});
  return blk;
}

std::vector<Tensor> RunOnCpu(const Graph& g) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return {};
  uint64_t seed = 11;
  for (const Value* in : g.inputs()) {
    const double lo = in->name == "scale" ? 0.5 : -2, hi = in->name == "scale" ? 1.5 : 2;
    EXPECT_TRUE((*ex)->SetInput(in->name, testing::RandomTensor(DType::kF32, in->shape, seed++, lo, hi)).ok());
  }
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  std::vector<Tensor> out;
  for (const Value* o : g.outputs()) out.push_back(*(*ex)->Fetch(o->name));
  return out;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

TEST(FuseLayerNormEdgesTest, CastsAndGradientSumsFoldWithTheSameValues) {
  Block before = PreNormBlock(), after = PreNormBlock();
  FuseLayerNormEdgesResult result;
  absl::StatusOr<bool> changed =
      FuseLayerNormEdgesPass(testing::CpuBackend().capabilities(), &result).Run(*after.graph);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(result.narrowed_outputs, 2);
  EXPECT_EQ(result.accumulated_grads, 2);
  EXPECT_EQ(result.summed_columns, 1);
  EXPECT_EQ(result.narrowed_grads, 1);
  EXPECT_EQ(testing::CountOps(*after.graph, "Cast"), 0);
  EXPECT_EQ(testing::CountOps(*after.graph, "Add"), 0);
  EXPECT_EQ(testing::CountOps(*after.graph, "ReduceSumTo"), 0);
  // The outputs keep their names, dtypes and shapes; the sum is now written by g3's node,
  // which adds g2's, which adds g1's.
  for (size_t i = 0; i < before.graph->outputs().size(); ++i) {
    EXPECT_EQ(after.graph->outputs()[i]->name, before.graph->outputs()[i]->name);
    EXPECT_EQ(after.graph->outputs()[i]->dtype, before.graph->outputs()[i]->dtype);
  }
  const Node* last = after.graph->outputs()[2]->producer;
  ASSERT_EQ(last->op, "LayerNormGrad");
  ASSERT_EQ(last->inputs.size(), 6u);
  EXPECT_EQ(last->inputs[0]->name, "dy3");
  const Node* middle = last->inputs[5]->producer;
  ASSERT_EQ(middle->inputs.size(), 6u);
  EXPECT_EQ(middle->inputs[0]->name, "dy2");
  EXPECT_EQ(middle->inputs[5]->producer->inputs.size(), 5u);
  // The partial sum's readers are the middle gradient's epilogue outputs.
  ASSERT_EQ(middle->outputs.size(), 5u);
  EXPECT_EQ(middle->outputs[3], after.graph->outputs()[3]);
  EXPECT_EQ(middle->outputs[4], after.graph->outputs()[4]);
  EXPECT_EQ(after.graph->outputs()[5]->producer->control_deps, std::vector<Node*>{const_cast<Node*>(middle)});

  const std::vector<Tensor> want = RunOnCpu(*before.graph), got = RunOnCpu(*after.graph);
  ASSERT_EQ(got.size(), want.size());
  // Every value is the unfused graph's bit for bit but the bias gradient, which sums the
  // same f32 values in another order.
  for (size_t i = 0; i < want.size(); ++i) {
    if (i == 3) {
      EXPECT_LT(testing::RelativeError(got[i], want[i]), 1e-6);
    } else {
      EXPECT_TRUE(SameBits(got[i], want[i])) << "output " << i;
    }
  }
}

TEST(FuseLayerNormEdgesTest, BackendWithoutTheCapabilityKeepsThem) {
  Block blk = PreNormBlock();
  Capabilities caps;  // layer_norm_fused_edges = false
  FuseLayerNormEdgesResult result;
  absl::StatusOr<bool> changed = FuseLayerNormEdgesPass(caps, &result).Run(*blk.graph);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(testing::CountOps(*blk.graph, "Cast"), 3);
  EXPECT_EQ(testing::CountOps(*blk.graph, "Add"), 2);
  EXPECT_EQ(testing::CountOps(*blk.graph, "ReduceSumTo"), 1);
}

TEST(FuseLayerNormEdgesTest, NearMissesAreLeftAlone) {
  Block blk = NewBlock();
  Graph& g = *blk.graph;
  GraphBuilder b(&g);
  const std::vector<Value*> n1 = Norm(b, blk), n2 = Norm(b, blk);
  Value* shared_y = b.Cast(n1[0], DType::kBF16);  // Y also read by a Relu
  Value* relu = b.Op("Relu", {n1[0]});
  Value* wide = b.Cast(n2[0], DType::kF64);  // not a narrowing to 16 bits
  AttrMap attrs;
  attrs.Set("axis", int64_t{-1});
  std::vector<Value*> g1 = b.OpN("LayerNormGrad", {g.FindValue("dy1"), blk.x, blk.scale, n1[1], n1[2]}, attrs);
  // The other operand is g1's own dScale spread over X: it depends on the gradient.
  Value* own = b.Op("Add", {g1[0], b.Op("Expand", {g1[1], b.ShapeConstant(kX)})});
  // The other operand broadcasts ([40] against [4, 6, 40]).
  Value* g2 = b.OpN("LayerNormGrad", {g.FindValue("dy2"), blk.x, blk.scale, n1[1], n1[2]}, attrs)[0];
  Value* broadcast = b.Op("Add", {g2, blk.scale});
  // dX read twice.
  Value* g3 = b.OpN("LayerNormGrad", {g.FindValue("dy3"), blk.x, blk.scale, n2[1], n2[2]}, attrs)[0];
  Value* twice = b.Op("Add", {g3, g.FindValue("dy1")});
  Value* again = b.Op("Relu", {g3});
  // dX reduced to another shape than the normalised one, and widened rather than narrowed.
  Value* g4 = b.OpN("LayerNormGrad", {g.FindValue("dy1"), blk.x, blk.scale, n2[1], n2[2]}, attrs)[0];
  Value* rows_sum = b.ReduceSumTo(g4, {6, 40});
  Value* widened = b.Cast(g4, DType::kF64);
  ASSERT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({shared_y, relu, wide, own, broadcast, twice, again, rows_sum, widened});
  FuseLayerNormEdgesResult result;
  absl::StatusOr<bool> changed = FuseLayerNormEdgesPass(testing::CpuBackend().capabilities(), &result).Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(result.narrowed_outputs + result.accumulated_grads + result.summed_columns + result.narrowed_grads, 0);
  EXPECT_EQ(testing::CountOps(g, "Cast"), 3);
  EXPECT_EQ(testing::CountOps(g, "Add"), 3);
  EXPECT_EQ(testing::CountOps(g, "ReduceSumTo"), 1);
}

}  // namespace
}  // namespace mpc
