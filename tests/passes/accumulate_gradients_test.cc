// accumulate-gradients and the kernels behind it: AccumulateGradient restarts from the
// gradient when `first` is set and adds to the accumulator otherwise, its output taking
// the accumulator's bytes (no arena space); the pass scales the seed by 1/K and gives each
// parameter an accumulator; EmaUpdate averages in place and keeps still when gated.
#include "passes/accumulate_gradients.h"

#include <memory>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

TEST(AccumulateGradientTest, SumsAcrossRunsRestartsOnFirstAndUsesTheStateBytes) {
  Graph g;
  GraphBuilder b(&g);
  const Shape shape{3, 37};
  Value* acc = g.AddState("w.grad_accum", Tensor(DType::kF32, shape));
  Value* grad = g.AddInput("grad", DType::kF32, shape);
  Value* first = g.AddInput("first", DType::kF32, {});
  Value* sum = b.Op("AccumulateGradient", {acc, grad, first});
  Value* doubled = b.Op("Add", {sum, sum});  // a reader of the sum, as the optimizer would be
  ASSERT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({doubled});
  auto order = g.TopologicalOrder();
  ASSERT_TRUE(order.ok());
  auto plan = PlanMemory(g, *order);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->state_aliases.at(sum), acc);
  EXPECT_EQ(plan->offsets.count(sum), 0u) << "the sum is the accumulator's bytes, not arena space";

  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<double> expected(NumElements(shape), 0.0);
  for (int run = 0; run < 5; ++run) {
    const bool restart = run == 0 || run == 3;
    const Tensor x = testing::RandomTensor(DType::kF32, shape, 100 + run);
    for (int64_t i = 0; i < x.num_elements(); ++i) expected[i] = (restart ? 0.0 : expected[i]) + x.data<float>()[i];
    ASSERT_TRUE((*ex)->SetInput("grad", x).ok());
    ASSERT_TRUE((*ex)->SetInput("first", Tensor::Scalar(restart ? 1.0f : 0.0f)).ok());
    ASSERT_TRUE((*ex)->Run(0, run).ok());
    const Tensor out = *(*ex)->Fetch(doubled->name);
    const Tensor state = *(*ex)->ReadPersistent("w.grad_accum");
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      ASSERT_NEAR(state.data<float>()[i], expected[i], 1e-6) << "run " << run << " [" << i << "]";
      ASSERT_EQ(out.data<float>()[i], 2 * state.data<float>()[i]) << "run " << run << " [" << i << "]";
    }
  }
}

TEST(EmaUpdateTest, AveragesInPlaceAndKeepsStillWhenSkipped) {
  Graph g;
  const Shape shape{129};
  const float decay = 0.9f;
  const Tensor initial = testing::RandomTensor(DType::kF32, shape, 5);
  Value* ema = g.AddState("w.ema", initial);
  Value* w = g.AddInput("w", DType::kF32, shape);
  Value* skip = g.AddInput("skip", DType::kF32, {});
  AttrMap attrs;
  attrs.Set("decay", decay);
  attrs.Set("gated", int64_t{1});
  ASSERT_TRUE(g.AddNode("EmaUpdate", {ema, w, skip}, std::move(attrs), "ema").ok());
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  ASSERT_TRUE(ex.ok()) << ex.status();
  std::vector<double> expected(initial.data<float>(), initial.data<float>() + initial.num_elements());
  for (int run = 0; run < 6; ++run) {
    const bool skipped = run == 2;
    const Tensor x = testing::RandomTensor(DType::kF32, shape, 200 + run);
    if (!skipped) {
      for (size_t i = 0; i < expected.size(); ++i)
        expected[i] = decay * expected[i] + (1.0 - decay) * x.data<float>()[i];
    }
    ASSERT_TRUE((*ex)->SetInput("w", x).ok());
    ASSERT_TRUE((*ex)->SetInput("skip", Tensor::Scalar(skipped ? 1.0f : 0.0f)).ok());
    ASSERT_TRUE((*ex)->Run(0, run).ok());
    const Tensor state = *(*ex)->ReadPersistent("w.ema");
    for (size_t i = 0; i < expected.size(); ++i) ASSERT_NEAR(state.data<float>()[i], expected[i], 1e-6) << i;
  }
}

TEST(AccumulateGradientsPassTest, ScalesTheSeedAndAccumulatesEveryGradient) {
  Graph g;
  GraphBuilder b(&g);
  Value* w = g.AddParameter("w", testing::RandomTensor(DType::kF32, {4}, 1));
  Value* v = g.AddParameter("v", testing::RandomTensor(DType::kF32, {2, 2}, 2));
  Value* seed = g.AddConstant("seed", Tensor::Scalar(1.0f));
  Value* gw = b.Op("Mul", {seed, w});
  Value* gv = b.Op("Mul", {seed, v});
  ASSERT_TRUE(b.status().ok());
  g.SetOutputs({gw, gv});
  AutodiffResult autodiff;
  autodiff.param_grads = {{w, gw}, {v, gv}};
  autodiff.loss_seed = seed;
  GradAccumulationResult result;
  auto changed = AccumulateGradientsPass(4, &autodiff, &result).Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(result.param_grads.size(), 2u);
  for (const auto& [param, sum] : result.param_grads) {
    EXPECT_EQ(sum->producer->op, "AccumulateGradient");
    EXPECT_EQ(sum->producer->inputs[0]->name, param->name + ".grad_accum");
    EXPECT_EQ(sum->producer->inputs[2], result.first);
  }
  // The gradient nodes read seed / 4 now; only the scaling Mul reads the seed itself.
  ASSERT_EQ(seed->consumers.size(), 1u);
  Node* scale = seed->consumers[0];
  EXPECT_EQ(scale->op, "Mul");
  EXPECT_EQ(scale->inputs[1]->data.GetAsDouble(0), 0.25);
  EXPECT_EQ(gw->producer->inputs[0], scale->outputs[0]);
  ASSERT_NE(result.hold, nullptr);

  GradAccumulationResult none;
  auto unchanged = AccumulateGradientsPass(1, &autodiff, &none).Run(g);
  ASSERT_TRUE(unchanged.ok());
  EXPECT_FALSE(*unchanged);
  EXPECT_TRUE(none.param_grads.empty());
}

}  // namespace
}  // namespace mpc
