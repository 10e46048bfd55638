// fold-gradient-casts: a bf16/f16 gradient's Cast to f32 read only by a multi-tensor
// update's gradient slot and FindNonFinite goes, on a backend whose kernels read 16-bit
// gradients; the update and the check then give bit for bit what they gave on the f32
// copy (widening is exact), and FindNonFinite still sees an infinity or a NaN in 16 bits
// (with an f32 gradient first: kernels are looked up by it). A gradient with another
// reader, a check with no f32 gradient, or a backend without the capability keeps its Cast.
#include "passes/fold_gradient_casts.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

Capabilities Reading16BitGradients(bool yes) {
  Capabilities caps;
  caps.updates_read_16bit_gradients = yes;
  return caps;
}

// g (16-bit) -> Cast f32 -> MultiSgdUpdate(lr, w, Cast(g), momentum buffer), and
// FindNonFinite(Cast(g), b) as the output, b an f32 gradient (a bias's). kAlsoRelu:
// Relu(Cast(g)) is an output too; kNoF32Check: FindNonFinite(Cast(g)) alone.
enum class Readers { kUpdateAndCheck, kAlsoRelu, kNoF32Check };

struct UpdateGraph {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Node* check = nullptr;
};

UpdateGraph Build(DType grad_dtype, Readers readers) {
  UpdateGraph u;
  Graph& g = *u.g;
  GraphBuilder b(&g);
  Value* lr = g.AddInput("lr", DType::kF32, {});
  Value* w = g.AddParameter("w", testing::RandomTensor(DType::kF32, {64}, 1));
  Value* buf = g.AddState("w.momentum", testing::RandomTensor(DType::kF32, {64}, 2));
  Value* grad = g.AddInput("g", grad_dtype, {64});
  Value* bias_grad = g.AddInput("b", DType::kF32, {8});
  Value* wide = b.Cast(grad, DType::kF32);
  AttrMap attrs;
  attrs.Set("momentum", 0.9f);
  attrs.Set("weight_decay", 0.01f);
  attrs.Set("lowp_copies", std::vector<int64_t>{0});
  b.OpN("MultiSgdUpdate", {lr, w, wide, buf}, std::move(attrs));
  std::vector<Value*> checked = {wide};
  if (readers != Readers::kNoF32Check) checked.push_back(bias_grad);
  Value* found = b.Op("FindNonFinite", checked);
  u.check = b.last_node();
  EXPECT_TRUE(b.status().ok()) << b.status();
  if (readers == Readers::kAlsoRelu) {
    g.SetOutputs({found, b.Op("Relu", {wide})});
  } else {
    g.SetOutputs({found});
  }
  return u;
}

int Casts(const Graph& g) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == "Cast";
  return n;
}

struct RunResult {
  float found = 0;
  Tensor w;
};

RunResult Step(const Graph& g, const Tensor& grad) {
  RunResult r;
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return r;
  EXPECT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(0.1f)).ok());
  EXPECT_TRUE((*ex)->SetInput("g", grad).ok());
  EXPECT_TRUE((*ex)->SetInput("b", testing::RandomTensor(DType::kF32, {8}, 4)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  r.found = static_cast<float>((*ex)->Fetch(g.outputs()[0]->name)->GetAsDouble(0));
  r.w = *(*ex)->ReadPersistent("w");
  return r;
}

TEST(FoldGradientCastsTest, UpdateAndCheckReadTheSixteenBitGradientWithTheSameResult) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(d));
    UpdateGraph before = Build(d, Readers::kUpdateAndCheck), after = Build(d, Readers::kUpdateAndCheck);
    absl::StatusOr<bool> changed = FoldGradientCastsPass(Reading16BitGradients(true)).Run(*after.g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_TRUE(*changed);
    EXPECT_EQ(Casts(*after.g), 0);
    for (const auto& node : after.g->nodes()) {
      if (node->op == "MultiSgdUpdate") EXPECT_EQ(node->inputs[2]->dtype, d);
    }
    // The check's kernel is looked up by its first input, which stays f32: the f32
    // gradient moved in front of the 16-bit one.
    ASSERT_EQ(after.check->inputs.size(), 2u);
    EXPECT_EQ(after.check->inputs[0]->name, "b");
    EXPECT_EQ(after.check->inputs[1]->dtype, d);
    const Tensor grad = testing::RandomTensor(DType::kF32, {64}, 3).CastTo(d);
    const RunResult want = Step(*before.g, grad), got = Step(*after.g, grad);
    EXPECT_EQ(got.found, 0.0f);
    EXPECT_EQ(want.found, 0.0f);
    ASSERT_EQ(got.w.bytes(), want.w.bytes());
    EXPECT_EQ(std::memcmp(got.w.raw(), want.w.raw(), want.w.bytes()), 0) << "the update must not change";
    // An infinity or a NaN in the 16-bit gradient is still found, wherever it is.
    for (double bad : {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity(),
                       std::numeric_limits<double>::quiet_NaN()}) {
      std::vector<double> values(64, 0.5);
      values[41] = bad;
      EXPECT_EQ(Step(*after.g, Tensor::FromVector<double>({64}, values).CastTo(d)).found, 1.0f) << bad;
    }
  }
}

TEST(FoldGradientCastsTest, AnotherReaderACheckWithoutF32OrNoCapabilityKeepsTheCast) {
  UpdateGraph shared = Build(DType::kBF16, Readers::kAlsoRelu);
  absl::StatusOr<bool> changed = FoldGradientCastsPass(Reading16BitGradients(true)).Run(*shared.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Casts(*shared.g), 1);

  UpdateGraph only_16bit = Build(DType::kBF16, Readers::kNoF32Check);
  changed = FoldGradientCastsPass(Reading16BitGradients(true)).Run(*only_16bit.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Casts(*only_16bit.g), 1);

  UpdateGraph cuda_like = Build(DType::kBF16, Readers::kUpdateAndCheck);
  changed = FoldGradientCastsPass(Reading16BitGradients(false)).Run(*cuda_like.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(Casts(*cuda_like.g), 1);
}

}  // namespace
}  // namespace mpc
