// fuse-gelu on GELU chains in the orders exporters write them: each becomes one Gelu
// node with the right approximation and the same values on the CPU; near misses (another
// coefficient, an intermediate used elsewhere, a different input) are left alone.
#include "passes/fuse_gelu.h"

#include <cmath>
#include <functional>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr double kSqrt2 = 1.4142135623730951;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kTanhCubic = 0.044715;
const Shape kShape = {4, 6};

// Builds y = chain(x) into a fresh graph whose only output is y.
using Chain = std::function<Value*(GraphBuilder&, Value* x)>;

std::unique_ptr<Graph> Build(const Chain& chain) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, kShape);
  Value* y = chain(b, x);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({y});
  return g;
}

Value* C(GraphBuilder& b, double v) { return b.ScalarConstant(v, DType::kF32); }

Tensor RunOnCpu(const Graph& g, const Tensor& x) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", x).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(g.outputs()[0]->name);
}

// Runs the pass; expects exactly one Gelu with `approximate` and nothing else left, and
// the fused graph's values equal to the chain's (x in [-4, 4]: both tails and the middle).
void ExpectFused(const Chain& chain, const std::string& approximate) {
  std::unique_ptr<Graph> before = Build(chain);
  std::unique_ptr<Graph> after = Build(chain);
  FuseGeluResult result;
  absl::StatusOr<bool> changed = FuseGeluPass(&result).Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(after->nodes().size(), 1u);
  const Node& gelu = *after->nodes().front();
  EXPECT_EQ(gelu.op, "Gelu");
  EXPECT_EQ(gelu.inputs[0]->name, "x");
  EXPECT_EQ(gelu.attrs.GetString("approximate", "?"), approximate);
  ASSERT_EQ(result.fused.size(), 1u);
  EXPECT_EQ(result.fused[0].node, gelu.name);
  EXPECT_EQ(result.fused[0].nodes_replaced, static_cast<int>(before->nodes().size()));
  EXPECT_TRUE(after->ValuesOfKind(ValueKind::kConstant).empty());

  const Tensor x = testing::RandomTensor(DType::kF32, kShape, 7, -4.0, 4.0);
  EXPECT_LT(testing::RelativeError(RunOnCpu(*after, x), RunOnCpu(*before, x)), 1e-6);
}

void ExpectUnchanged(const Chain& chain) {
  std::unique_ptr<Graph> g = Build(chain);
  const size_t nodes = g->nodes().size();
  FuseGeluResult result;
  absl::StatusOr<bool> changed = FuseGeluPass(&result).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(g->nodes().size(), nodes);
  EXPECT_EQ(testing::CountOps(*g, "Gelu"), 0);
  EXPECT_TRUE(result.fused.empty());
}

TEST(FuseGeluTest, PyTorchErfExportIsOneGelu) {
  // torch.onnx (opset 13-17) for nn.GELU(): Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5).
  ExpectFused(
      [](GraphBuilder& b, Value* x) {
        Value* erf = b.Op("Erf", {b.Div(x, C(b, kSqrt2))});
        return b.Mul(b.Mul(x, b.Add(erf, C(b, 1.0))), C(b, 0.5));
      },
      "none");
}

TEST(FuseGeluTest, ErfFormInAnotherOrderIsOneGelu) {
  // 0.5 * x first, the reciprocal as a product, constants on the left.
  ExpectFused(
      [](GraphBuilder& b, Value* x) {
        Value* half_x = b.Mul(C(b, 0.5), x);
        Value* erf = b.Op("Erf", {b.Mul(C(b, 1.0 / kSqrt2), x)});
        return b.Mul(b.Add(C(b, 1.0), erf), half_x);
      },
      "none");
}

TEST(FuseGeluTest, TanhFormWithProductsIsOneGelu) {
  // torch.onnx for GELU(approximate="tanh"): 0.5 * (x * (1 + tanh(beta * (x + kappa * x*x*x)))).
  ExpectFused(
      [](GraphBuilder& b, Value* x) {
        Value* cube = b.Mul(x, b.Mul(x, x));
        Value* inner = b.Mul(C(b, kSqrt2OverPi), b.Add(x, b.Mul(C(b, kTanhCubic), cube)));
        Value* one_plus = b.Add(C(b, 1.0), b.Op("Tanh", {inner}));
        return b.Mul(C(b, 0.5), b.Mul(x, one_plus));
      },
      "tanh");
}

TEST(FuseGeluTest, TanhFormWithPowIsOneGelu) {
  ExpectFused(
      [](GraphBuilder& b, Value* x) {
        Value* cube = b.Op("Pow", {x, C(b, 3.0)});
        Value* inner = b.Mul(b.Add(b.Mul(cube, C(b, kTanhCubic)), x), C(b, kSqrt2OverPi));
        Value* one_plus = b.Add(b.Op("Tanh", {inner}), C(b, 1.0));
        return b.Mul(b.Mul(x, C(b, 0.5)), one_plus);
      },
      "tanh");
}

TEST(FuseGeluTest, AnotherCoefficientIsNotGelu) {
  ExpectUnchanged([](GraphBuilder& b, Value* x) {
    Value* erf = b.Op("Erf", {b.Div(x, C(b, kSqrt2))});
    return b.Mul(b.Mul(x, b.Add(erf, C(b, 1.0))), C(b, 0.6));
  });
  ExpectUnchanged([](GraphBuilder& b, Value* x) {
    Value* erf = b.Op("Erf", {b.Div(x, C(b, 1.5))});
    return b.Mul(b.Mul(x, b.Add(erf, C(b, 1.0))), C(b, 0.5));
  });
}

TEST(FuseGeluTest, IntermediateUsedElsewhereIsLeftAlone) {
  // The Erf's output also feeds another product: fusing would lose it.
  ExpectUnchanged([](GraphBuilder& b, Value* x) {
    Value* erf = b.Op("Erf", {b.Div(x, C(b, kSqrt2))});
    Value* gelu = b.Mul(b.Mul(x, b.Add(erf, C(b, 1.0))), C(b, 0.5));
    return b.Add(gelu, erf);
  });
}

TEST(FuseGeluTest, ProductOfAnotherInputIsNotGelu) {
  // y * 0.5 * (1 + erf(x / sqrt 2)) with y = 2x: a different value, not GELU of x.
  ExpectUnchanged([](GraphBuilder& b, Value* x) {
    Value* y = b.Mul(x, C(b, 2.0));
    Value* erf = b.Op("Erf", {b.Div(x, C(b, kSqrt2))});
    Value* sum = b.Add(erf, C(b, 1.0));
    return b.Mul(b.Mul(b.Add(y, x), sum), C(b, 0.5));
  });
}

}  // namespace
}  // namespace mpc
