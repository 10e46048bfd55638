// fuse-silu on x * Sigmoid(x) in both operand orders: one Silu node with the same values
// on the CPU, forward and (through autodiff) backward; a gate of another tensor
// (squeeze-excitation), a sigmoid read elsewhere, or a broadcasting product stay as they
// are.
#include "passes/fuse_silu.h"

#include <functional>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autodiff.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

const Shape kShape = {4, 6};

using Chain = std::function<std::vector<Value*>(GraphBuilder&, Value* x, Value* s)>;

// Builds the outputs of chain(x, s) (s: a second input, [4, 1]) into a fresh graph.
std::unique_ptr<Graph> Build(const Chain& chain) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, kShape);
  Value* s = g->AddInput("s", DType::kF32, {4, 1});
  std::vector<Value*> outputs = chain(b, x, s);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs(outputs);
  return g;
}

Tensor RunCpu(const Graph& g, const std::string& output, const Tensor& x) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", x).ok());
  EXPECT_TRUE((*ex)->SetInput("s", testing::RandomTensor(DType::kF32, {4, 1}, 3)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(output);
}

TEST(FuseSiluTest, BothOperandOrdersBecomeOneSiluWithTheSameValuesAndGradient) {
  for (bool gate_first : {false, true}) {
    SCOPED_TRACE(gate_first ? "Mul(Sigmoid(x), x)" : "Mul(x, Sigmoid(x))");
    const Chain chain = [gate_first](GraphBuilder& b, Value* x, Value*) {
      Value* gate = b.Op("Sigmoid", {x});
      return std::vector<Value*>{gate_first ? b.Mul(gate, x) : b.Mul(x, gate)};
    };
    std::unique_ptr<Graph> before = Build(chain), after = Build(chain);
    FuseSiluResult result;
    absl::StatusOr<bool> changed = FuseSiluPass(&result).Run(*after);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_TRUE(*changed);
    ASSERT_EQ(after->nodes().size(), 1u);
    EXPECT_EQ(after->nodes().front()->op, "Silu");
    ASSERT_EQ(result.fused.size(), 1u);
    EXPECT_EQ(result.fused[0], after->nodes().front()->name);

    const Tensor x = testing::RandomTensor(DType::kF32, kShape, 7, -8.0, 8.0);
    const std::string y_before = before->outputs()[0]->name, y_after = after->outputs()[0]->name;
    EXPECT_LT(testing::RelativeError(RunCpu(*after, y_after, x), RunCpu(*before, y_before, x)), 1e-6);

    // The gradient of sum(y * w) for a fixed random w: SiluGrad against the unfused chain's.
    std::string grad_name[2];
    Graph* graphs[2] = {before.get(), after.get()};
    for (int k = 0; k < 2; ++k) {
      Graph& g = *graphs[k];
      GraphBuilder b(&g);
      Value* w = g.AddConstant("w", testing::RandomTensor(DType::kF32, kShape, 9));
      AttrMap keep;
      keep.Set("keepdims", int64_t{0});
      Value* loss = b.Op("ReduceSum", {b.Mul(g.outputs()[0], w)}, std::move(keep));
      ASSERT_TRUE(b.status().ok()) << b.status();
      auto grads = BuildGradients(g, loss, {g.FindValue("x")});
      ASSERT_TRUE(grads.ok()) << grads.status();
      g.SetOutputs({loss, (*grads)[0]});
      grad_name[k] = (*grads)[0]->name;
    }
    EXPECT_EQ(testing::CountOps(*after, "SiluGrad"), 1);
    EXPECT_EQ(testing::CountOps(*after, "SigmoidGrad"), 0);
    EXPECT_LT(testing::RelativeError(RunCpu(*after, grad_name[1], x), RunCpu(*before, grad_name[0], x)), 1e-6);
  }
}

TEST(FuseSiluTest, OtherGatesAndSharedSigmoidsStay) {
  const Chain chains[] = {
      // squeeze-excitation: x * sigmoid(s), s another tensor (broadcast over columns)
      [](GraphBuilder& b, Value* x, Value* s) { return std::vector<Value*>{b.Mul(x, b.Op("Sigmoid", {s}))}; },
      // the sigmoid also an output
      [](GraphBuilder& b, Value* x, Value*) {
        Value* gate = b.Op("Sigmoid", {x});
        return std::vector<Value*>{b.Mul(x, gate), gate};
      },
      // s * sigmoid(s) is a SiLU (of s) and fuses; its product with x stays a Mul
      [](GraphBuilder& b, Value* x, Value* s) {
        return std::vector<Value*>{b.Mul(x, b.Mul(s, b.Op("Sigmoid", {s})))};
      },
  };
  for (size_t i = 0; i < 3; ++i) {
    std::unique_ptr<Graph> g = Build(chains[i]);
    FuseSiluResult result;
    absl::StatusOr<bool> changed = FuseSiluPass(&result).Run(*g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(testing::CountOps(*g, "Silu"), i == 2 ? 1 : 0) << "chain " << i;
    if (i < 2) EXPECT_FALSE(*changed) << "chain " << i;
  }
}

}  // namespace
}  // namespace mpc
