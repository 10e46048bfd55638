// attach-loss's composed losses (label-smoothed softmax cross-entropy, binary
// cross-entropy with logits) run on the CPU backend through autodiff: the loss and the
// weight gradient against float64 references written out here from PyTorch's
// definitions, with logits large enough that a naive log(1+exp(x)) overflows; and under
// bf16 autocast every node of the loss stays f32 (the loss ops are deny ops or fed by one).
#include "passes/attach_loss.h"

#include <cmath>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/simplify.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kRows = 12, kIn = 8, kClasses = 5;

struct Result {
  double loss = 0;
  Tensor weight_grad;                // d(loss)/dW, W [classes, in]
  std::vector<std::string> non_f32;  // loss nodes whose float outputs are not f32
};

// x [rows, in] -> Gemm(transB) with W [classes, in] -> logits -> the loss of `o`, compiled
// with `precision` and run once on the CPU backend.
Result CompileAndRun(AttachLossOptions o, Precision precision, const Tensor& x, const Tensor& w, const Tensor& labels) {
  Result out;
  Graph g;
  GraphBuilder b(&g);
  Value* xv = g.AddInput("x", DType::kF32, {kRows, kIn});
  Value* wv = g.AddParameter("w", w);
  AttrMap attrs;
  attrs.Set("transB", int64_t{1});
  Value* logits = b.Op("Gemm", {xv, wv}, std::move(attrs));
  EXPECT_TRUE(b.status().ok()) << b.status();
  EXPECT_TRUE(g.RenameValue(logits, "logits").ok());
  g.SetOutputs({logits});
  o.logits = "logits";
  o.batch_size = kRows;
  CompileResults r;
  auto backend = CreateCpuBackend();
  AutocastOptions autocast;
  autocast.precision = precision;
  auto attached = AttachLossPass(o, &r.loss).Run(g);
  EXPECT_TRUE(attached.ok()) << attached.status();
  if (!attached.ok()) return out;
  auto ac = AutocastPass(autocast, backend->capabilities(), &r.autocast).Run(g);
  EXPECT_TRUE(ac.ok()) << ac.status();
  for (const auto& n : g.nodes()) {
    if (n->name.rfind("loss/", 0) != 0) continue;
    for (const Value* v : n->outputs) {
      if (IsFloating(v->dtype) && v->dtype != DType::kF32) out.non_f32.push_back(n->name + " (" + n->op + ")");
    }
  }
  auto ad = AutodiffPass(&r.loss, &r.autodiff).Run(g);
  EXPECT_TRUE(ad.ok()) << ad.status();
  if (!ad.ok()) return out;
  Value* grad = r.autodiff.param_grads.at(0).second;
  g.AddOutput(grad);
  EXPECT_TRUE(SimplifyPass().Run(g).ok());
  EXPECT_TRUE(MemoryPlanPass(&r.memory_plan).Run(g).ok());
  auto ex = Executor::Create(g, r.memory_plan, *backend);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return out;
  EXPECT_TRUE((*ex)->SetInput("x", x).ok());
  EXPECT_TRUE((*ex)->SetInput(r.loss.labels->name, labels).ok());
  auto st = (*ex)->Run(0, 0);
  EXPECT_TRUE(st.ok()) << st;
  out.loss = (*ex)->Fetch(r.loss.loss->name)->GetAsDouble(0);
  out.weight_grad = *(*ex)->Fetch(grad->name);
  return out;
}

// logits = x W^T in float64.
std::vector<double> Logits(const Tensor& x, const Tensor& w) {
  std::vector<double> z(kRows * kClasses, 0.0);
  for (int64_t i = 0; i < kRows; ++i) {
    for (int64_t c = 0; c < kClasses; ++c) {
      for (int64_t k = 0; k < kIn; ++k) z[i * kClasses + c] += x.GetAsDouble(i * kIn + k) * w.GetAsDouble(c * kIn + k);
    }
  }
  return z;
}

// dW = G^T x for G = d(loss)/d(logits).
Tensor WeightGrad(const std::vector<double>& g, const Tensor& x) {
  std::vector<float> dw(kClasses * kIn, 0.0f);
  for (int64_t c = 0; c < kClasses; ++c) {
    for (int64_t k = 0; k < kIn; ++k) {
      double s = 0;
      for (int64_t i = 0; i < kRows; ++i) s += g[i * kClasses + c] * x.GetAsDouble(i * kIn + k);
      dw[c * kIn + k] = static_cast<float>(s);
    }
  }
  return Tensor::FromVector<float>({kClasses, kIn}, dw);
}

class LabelSmoothingTest : public ::testing::TestWithParam<double> {};

// PyTorch: target q = (1-eps)*onehot + eps/C, loss = mean_rows(-sum_c q_c log p_c),
// d(loss)/d(logits) = (p - q) / rows.
TEST_P(LabelSmoothingTest, LossAndGradientMatchTheSmoothedTarget) {
  const double eps = GetParam();
  const uint64_t seed = 100 + static_cast<uint64_t>(eps * 1000);
  const Tensor x = testing::RandomTensor(DType::kF32, {kRows, kIn}, seed);
  const Tensor w = testing::RandomTensor(DType::kF32, {kClasses, kIn}, seed + 1, -3, 3);
  const Tensor u = testing::RandomTensor(DType::kF32, {kRows}, seed + 2, 0, kClasses);
  std::vector<int64_t> label_values(kRows);
  for (int64_t i = 0; i < kRows; ++i) label_values[i] = static_cast<int64_t>(u.GetAsDouble(i));
  const Tensor labels = Tensor::FromVector<int64_t>({kRows}, label_values);

  const std::vector<double> z = Logits(x, w);
  double loss = 0;
  std::vector<double> g(z.size());
  for (int64_t i = 0; i < kRows; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t c = 0; c < kClasses; ++c) mx = std::max(mx, z[i * kClasses + c]);
    for (int64_t c = 0; c < kClasses; ++c) sum += std::exp(z[i * kClasses + c] - mx);
    for (int64_t c = 0; c < kClasses; ++c) {
      const double logp = z[i * kClasses + c] - mx - std::log(sum);
      const double q = (1 - eps) * (c == label_values[i]) + eps / kClasses;
      loss -= q * logp / kRows;
      g[i * kClasses + c] = (std::exp(logp) - q) / kRows;
    }
  }
  AttachLossOptions o;
  o.label_smoothing = static_cast<float>(eps);
  // The spec's float is what the pass sees: compare against the reference with that eps.
  ASSERT_EQ(static_cast<double>(static_cast<float>(eps)), eps) << "pick eps exact in f32";
  const Result f32 = CompileAndRun(o, Precision::kF32, x, w, labels);
  EXPECT_NEAR(f32.loss, loss, 1e-5 * std::abs(loss));
  EXPECT_LT(testing::RelativeError(f32.weight_grad, WeightGrad(g, x)), 1e-5);

  const Result bf16 = CompileAndRun(o, Precision::kBF16, x, w, labels);
  EXPECT_TRUE(bf16.non_f32.empty()) << "loss nodes not f32 under bf16: " << ::testing::PrintToString(bf16.non_f32);
  EXPECT_NEAR(bf16.loss, loss, 1e-2 * std::abs(loss));
  EXPECT_LT(testing::RelativeError(bf16.weight_grad, WeightGrad(g, x)), 2e-2);
}

INSTANTIATE_TEST_SUITE_P(Eps, LabelSmoothingTest, ::testing::Values(0.0, 0.125, 0.5, 0.875));

// PyTorch's BCEWithLogitsLoss: mean of max(x,0) - x*y + log1p(exp(-|x|)); gradient
// (sigmoid(x) - y) / elements. Logits up to ~|200|: log(1+exp(x)) in f32 would be inf.
TEST(BinaryCrossEntropyTest, LossAndGradientMatchPyTorchsStableForm) {
  const Tensor x = testing::RandomTensor(DType::kF32, {kRows, kIn}, 31);
  const Tensor w = testing::RandomTensor(DType::kF32, {kClasses, kIn}, 32, -80, 80);
  const Tensor y = testing::RandomTensor(DType::kF32, {kRows, kClasses}, 33, 0, 1);
  const std::vector<double> z = Logits(x, w);
  double loss = 0, amax = 0;
  std::vector<double> g(z.size());
  const double n = static_cast<double>(z.size());
  for (size_t i = 0; i < z.size(); ++i) {
    const double t = y.GetAsDouble(static_cast<int64_t>(i));
    loss += (std::max(z[i], 0.0) - z[i] * t + std::log1p(std::exp(-std::abs(z[i])))) / n;
    g[i] = (1 / (1 + std::exp(-z[i])) - t) / n;
    amax = std::max(amax, std::abs(z[i]));
  }
  ASSERT_GT(amax, 100) << "the test needs logits where exp overflows f32";
  AttachLossOptions o;
  o.kind = AttachLossOptions::Kind::kBinaryCrossEntropyWithLogits;
  const Result f32 = CompileAndRun(o, Precision::kF32, x, w, y);
  EXPECT_NEAR(f32.loss, loss, 1e-5 * std::abs(loss));
  EXPECT_LT(testing::RelativeError(f32.weight_grad, WeightGrad(g, x)), 1e-5);

  const Result bf16 = CompileAndRun(o, Precision::kBF16, x, w, y);
  EXPECT_TRUE(bf16.non_f32.empty()) << "loss nodes not f32 under bf16: " << ::testing::PrintToString(bf16.non_f32);
  EXPECT_NEAR(bf16.loss, loss, 1e-2 * std::abs(loss));
  EXPECT_LT(testing::RelativeError(bf16.weight_grad, WeightGrad(g, x)), 2e-2);
}

TEST(AttachLossTest, LabelSmoothingOutsideZeroToOneIsAnError) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4, 3});
  g.SetOutputs({b.Op("Relu", {x})});
  ASSERT_TRUE(g.RenameValue(g.outputs()[0], "logits").ok());
  AttachLossOptions o;
  o.logits = "logits";
  o.batch_size = 4;
  o.label_smoothing = 1.0f;
  LossResult r;
  auto st = AttachLossPass(o, &r).Run(g);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("loss.label_smoothing"), std::string::npos) << st.status();
}

}  // namespace
}  // namespace mpc
