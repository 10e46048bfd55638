// fuse-softmax on attention's scale + mask + softmax in the forms exporters write: each
// becomes one MaskedSoftmax with the right scale and mask and the same values on the CPU
// (fully masked rows included: NaN either way); near misses are left alone.
#include "passes/fuse_softmax.h"

#include <cmath>
#include <functional>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

const Shape kScores = {2, 3, 6, 6};  // [B, H, T, T]
const Shape kMask = {1, 1, 6, 6};

// Lower-triangular (causal) keep mask, with row 5 fully masked when `empty_row`.
Tensor Causal(bool empty_row) {
  Tensor t(DType::kBool, kMask);
  for (int64_t i = 0; i < 6; ++i) {
    for (int64_t j = 0; j < 6; ++j) t.data<uint8_t>()[i * 6 + j] = j <= i && !(empty_row && i == 5);
  }
  return t;
}

Tensor Inverted(const Tensor& t) {
  Tensor u(DType::kBool, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) u.data<uint8_t>()[i] = !t.data<uint8_t>()[i];
  return u;
}

// Builds probs = chain(scores, mask) with scores an f32 input and mask a bool input
// [1, 1, 6, 6] (graph input "mask"); the chain may ignore the mask input.
using Chain = std::function<Value*(Graph&, GraphBuilder&, Value* scores, Value* mask)>;

std::unique_ptr<Graph> Build(const Chain& chain) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* scores = g->AddInput("scores", DType::kF32, kScores);
  Value* mask = g->AddInput("mask", DType::kBool, kMask);
  Value* y = chain(*g, b, scores, mask);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({y});
  return g;
}

Value* C(GraphBuilder& b, double v) { return b.ScalarConstant(v, DType::kF32); }
Value* Softmax(GraphBuilder& b, Value* x, int64_t axis = -1) {
  AttrMap a;
  a.Set("axis", axis);
  return b.Op("Softmax", {x}, std::move(a));
}
Value* Where(GraphBuilder& b, Value* c, Value* x, Value* y) { return b.Op("Where", {c, x, y}); }

Tensor RunOnCpu(const Graph& g, const Tensor& scores, const Tensor& mask) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("scores", scores).ok());
  if (g.FindValue("mask") && !g.FindValue("mask")->consumers.empty()) EXPECT_TRUE((*ex)->SetInput("mask", mask).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(g.outputs()[0]->name);
}

// Runs the pass with the CPU's capabilities; expects one MaskedSoftmax (masked or not,
// with `scale`) in place of Softmax, Where and Mul/Div, and equal values, NaN rows equal.
void ExpectFused(const Chain& chain, bool masked, double scale, const Tensor& mask = Causal(false),
                 int64_t nan_at = -1) {
  std::unique_ptr<Graph> before = Build(chain);
  std::unique_ptr<Graph> after = Build(chain);
  const Capabilities& caps = testing::CpuBackend().capabilities();
  FuseSoftmaxResult result;
  absl::StatusOr<bool> changed = FuseSoftmaxPass(caps, &result).Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(testing::CountOps(*after, "MaskedSoftmax"), 1);
  for (const char* op : {"Softmax", "Where", "Mul", "Div"}) EXPECT_EQ(testing::CountOps(*after, op), 0) << op;
  const Node* fused = after->outputs()[0]->producer;
  ASSERT_EQ(fused->op, "MaskedSoftmax");
  EXPECT_EQ(fused->inputs[0]->name, "scores");
  EXPECT_EQ(fused->inputs.size(), masked ? 2u : 1u);
  EXPECT_FLOAT_EQ(fused->attrs.GetFloat("scale", -1), static_cast<float>(scale));
  ASSERT_EQ(result.fused.size(), 1u);
  EXPECT_EQ(result.fused[0].masked, masked);

  Tensor scores = testing::RandomTensor(DType::kF32, kScores, 11, -6.0, 6.0);
  if (nan_at >= 0) scores.data<float>()[nan_at] = NAN;
  const Tensor want = RunOnCpu(*before, scores, mask);
  const Tensor got = RunOnCpu(*after, scores, mask);
  int nans = 0;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const float w = want.data<float>()[i], v = got.data<float>()[i];
    if (std::isnan(w)) {
      EXPECT_TRUE(std::isnan(v)) << "element " << i;
      ++nans;
      continue;
    }
    EXPECT_NEAR(v, w, 1e-6 * std::max(1.0f, std::abs(w))) << "element " << i;
  }
  // A fully masked row (row 5 of each [6, 6] block) is NaN in both.
  if (masked && nan_at < 0 && mask.data<uint8_t>()[30] == 0 && mask.data<uint8_t>()[35] == 0) {
    EXPECT_EQ(nans, 2 * 3 * 6);
  }
  if (nan_at >= 0) EXPECT_EQ(nans, 6);  // the NaN's whole row, its masked tail included
}

void ExpectUnchanged(const Chain& chain, const Capabilities* caps = nullptr) {
  std::unique_ptr<Graph> g = Build(chain);
  const size_t nodes = g->nodes().size();
  FuseSoftmaxResult result;
  absl::StatusOr<bool> changed = FuseSoftmaxPass(caps ? *caps : testing::CpuBackend().capabilities(), &result).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(g->nodes().size(), nodes);
  EXPECT_EQ(testing::CountOps(*g, "MaskedSoftmax"), 0);
  EXPECT_TRUE(result.fused.empty());
}

TEST(FuseSoftmaxTest, PyTorchMaskedFillExportIsOneMaskedSoftmax) {
  // att * (1/sqrt(d)), masked_fill(~causal, -inf), softmax: Where(Not(keep), -inf, Mul).
  ExpectFused(
      [](Graph&, GraphBuilder& b, Value* s, Value* keep) {
        return Softmax(b, Where(b, b.Op("Not", {keep}), C(b, -INFINITY), b.Mul(s, C(b, 0.125))));
      },
      true, 0.125);
}

TEST(FuseSoftmaxTest, NaNInAKeptScoreMakesItsWholeRowNaN) {
  // Row 2 of the first [6, 6] block keeps columns 0-2: a NaN in column 1 spreads over the
  // row, the masked columns 3-5 included (the kernel skips a masked tail's exponentials).
  ExpectFused([](Graph&, GraphBuilder& b, Value* s,
                 Value* keep) { return Softmax(b, Where(b, keep, b.Mul(s, C(b, 0.125)), C(b, -INFINITY))); },
              true, 0.125, Causal(false), 2 * 6 + 1);
}

TEST(FuseSoftmaxTest, KeepBranchFirstAndDivisionAreOneMaskedSoftmax) {
  ExpectFused([](Graph&, GraphBuilder& b, Value* s,
                 Value* keep) { return Softmax(b, Where(b, keep, b.Div(s, C(b, 8.0)), C(b, -INFINITY)), 3); },
              true, 0.125);
}

TEST(FuseSoftmaxTest, ConstantMaskedOutConditionIsInverted) {
  // The condition marks what is masked and is a constant (the export folded ~causal): the
  // fused op gets its negation as a new constant. A fully masked row stays NaN.
  const Tensor keep = Causal(true);
  ExpectFused(
      [keep](Graph& g, GraphBuilder& b, Value* s, Value*) {
        Value* masked_out = g.AddConstant("masked_out", Inverted(keep));
        return Softmax(b, Where(b, masked_out, C(b, -INFINITY), b.Mul(C(b, 0.25), s)));
      },
      true, 0.25, keep);
}

TEST(FuseSoftmaxTest, MaskedOutInputGetsANot) {
  // The condition is a computed or fed tensor marking what is masked: a Not is inserted.
  const Tensor masked_out = Inverted(Causal(true));
  ExpectFused(
      [](Graph&, GraphBuilder& b, Value* s, Value* cond) { return Softmax(b, Where(b, cond, C(b, -INFINITY), s)); },
      true, 1.0, masked_out);
}

TEST(FuseSoftmaxTest, ScaleAloneIsAnUnmaskedMaskedSoftmax) {
  ExpectFused([](Graph&, GraphBuilder& b, Value* s, Value*) { return Softmax(b, b.Mul(s, C(b, 0.3))); }, false, 0.3);
}

TEST(FuseSoftmaxTest, NearMissesAreLeftAlone) {
  // A plain softmax; another axis; a finite fill; a tensor scale; a scale read elsewhere.
  ExpectUnchanged([](Graph&, GraphBuilder& b, Value* s, Value*) { return Softmax(b, s); });
  ExpectUnchanged([](Graph&, GraphBuilder& b, Value* s, Value*) { return Softmax(b, b.Mul(s, C(b, 0.5)), 2); });
  ExpectUnchanged(
      [](Graph&, GraphBuilder& b, Value* s, Value* keep) { return Softmax(b, Where(b, keep, s, C(b, -1e9))); });
  ExpectUnchanged([](Graph& g, GraphBuilder& b, Value* s, Value*) {
    Value* per_column = g.AddConstant("per_column", testing::RandomTensor(DType::kF32, {6}, 3, 0.1, 1.0));
    return Softmax(b, b.Mul(s, per_column));
  });
  ExpectUnchanged([](Graph&, GraphBuilder& b, Value* s, Value*) {
    Value* scaled = b.Mul(s, C(b, 0.5));
    return b.Add(Softmax(b, scaled), scaled);
  });
}

TEST(FuseSoftmaxTest, BackendWithoutTheKernelsKeepsTheChain) {
  Capabilities caps;
  caps.has_kernel = [](const std::string& op, DType) { return op != "MaskedSoftmaxGrad"; };
  ExpectUnchanged([](Graph&, GraphBuilder& b, Value* s,
                     Value* keep) { return Softmax(b, Where(b, keep, b.Mul(s, C(b, 0.125)), C(b, -INFINITY))); },
                  &caps);
}

}  // namespace
}  // namespace mpc
