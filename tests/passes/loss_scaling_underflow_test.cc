// The failure mode loss scaling exists for, reproduced: a model whose gradients fall
// below the f16 range. Trained in fp16 without loss scaling, most weight-gradient
// elements flush to zero; with dynamic scaling (initial scale 2^16) they match the f32
// gradients within docs/numerics.md's f16 tolerance.
#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/loss_scaling.h"
#include "passes/memory_plan.h"
#include "passes/simplify.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// y = x W with small x and W (|.| < 0.01), loss = mean((y - t)^2) over 64x64 values:
// dL/dy ~ 1e-7 and dL/dW ~ 5e-9, below f16's smallest subnormal (6e-8).
Tensor WeightGradient(Precision compute, LossScalingOptions::Mode mode) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {64, 32});
  Value* t = g.AddInput("t", DType::kF32, {64, 64});
  Value* w = g.AddParameter("w", testing::RandomTensor(DType::kF32, {32, 64}, 7, -0.01, 0.01));
  Value* y = b.Op("Gemm", {x, w});
  Value* loss = b.Op("MeanSquaredError", {y, t});
  g.SetOutputs({loss});
  EXPECT_TRUE(b.status().ok()) << b.status();

  AutocastOptions autocast;
  autocast.precision = compute;
  LossScalingOptions scaling;
  scaling.mode = mode;
  CompileResults r;
  r.loss.loss = loss;
  auto backend = CreateCpuBackend();
  Capabilities caps = backend->capabilities();
  EXPECT_TRUE(AutocastPass(autocast, caps, &r.autocast).Run(g).ok());
  EXPECT_TRUE(AutodiffPass(&r.loss, &r.autodiff).Run(g).ok());
  auto ls = LossScalingPass(scaling, &r.autocast, &r.autodiff, &r.loss_scaling).Run(g);
  EXPECT_TRUE(ls.ok()) << ls.status();
  const ParamGrads& applied = r.loss_scaling.param_grads.empty() ? r.autodiff.param_grads : r.loss_scaling.param_grads;
  Value* grad = applied.at(0).second;
  g.AddOutput(grad);
  EXPECT_TRUE(SimplifyPass().Run(g).ok());
  EXPECT_TRUE(MemoryPlanPass(&r.memory_plan).Run(g).ok());
  auto ex = Executor::Create(g, r.memory_plan, *backend);
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", testing::RandomTensor(DType::kF32, {64, 32}, 8, -0.01, 0.01)).ok());
  EXPECT_TRUE((*ex)->SetInput("t", testing::RandomTensor(DType::kF32, {64, 64}, 9, -1e-4, 1e-4)).ok());
  auto st = (*ex)->Run(0, 0);
  EXPECT_TRUE(st.ok()) << st;
  return *(*ex)->Fetch(grad->name);
}

double ZeroFraction(const Tensor& t) {
  int64_t zeros = 0;
  for (int64_t i = 0; i < t.num_elements(); ++i) zeros += t.GetAsDouble(i) == 0.0;
  return static_cast<double>(zeros) / t.num_elements();
}

TEST(LossScalingUnderflowTest, Fp16GradientsVanishWithoutScalingAndSurviveWithIt) {
  const Tensor f32 = WeightGradient(Precision::kF32, LossScalingOptions::Mode::kOff);
  const Tensor unscaled = WeightGradient(Precision::kFP16, LossScalingOptions::Mode::kOff);
  const Tensor scaled = WeightGradient(Precision::kFP16, LossScalingOptions::Mode::kDynamic);
  double max_abs = 0;
  for (int64_t i = 0; i < f32.num_elements(); ++i) max_abs = std::max(max_abs, std::abs(f32.GetAsDouble(i)));
  EXPECT_LT(max_abs, 6e-8) << "the reference gradients must lie below f16's smallest subnormal";
  EXPECT_EQ(ZeroFraction(f32), 0.0);
  const double lost = ZeroFraction(unscaled);
  std::printf("fp16 without loss scaling: %.1f%% of weight-gradient elements are zero\n", 100 * lost);
  EXPECT_GT(lost, 0.5);
  const double err = testing::RelativeError(scaled, f32);
  std::printf("fp16 with dynamic loss scaling: relative error %.2e vs f32\n", err);
  EXPECT_EQ(ZeroFraction(scaled), 0.0);
  EXPECT_LT(err, 2e-3);
}

}  // namespace
}  // namespace mpc
