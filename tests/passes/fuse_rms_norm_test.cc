// fuse-rms-norm on the spellings exporters write for an RMSNorm layer (Pow or Mul for the
// square, axes as attribute or input, eps on either side of the Add, Reciprocal, Div(1, .)
// or Div(x, .), with and without the weight): one RmsNorm node with the chain's values on
// the CPU, forward and (through autodiff) backward for x and the weight. Reductions that
// are not trailing or drop the axes, an intermediate read elsewhere, a product with
// another tensor, and a backend without the kernels leave the chain as it is.
#include "passes/fuse_rms_norm.h"

#include <functional>
#include <map>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

const Shape kShape = {4, 3, 8};

using Chain = std::function<std::vector<Value*>(GraphBuilder&, Graph&, Value* x, Value* w)>;

// Builds chain(x, w) (x [4, 3, 8], w [8]) into a fresh graph.
std::unique_ptr<Graph> Build(const Chain& chain) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, kShape);
  Value* w = g->AddInput("w", DType::kF32, {8});
  std::vector<Value*> outputs = chain(b, *g, x, w);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs(outputs);
  return g;
}

AttrMap MeanOver(std::vector<int64_t> axes, int64_t keepdims = 1) {
  AttrMap attrs;
  attrs.Set("axes", std::move(axes));
  attrs.Set("keepdims", keepdims);
  return attrs;
}

// The mean square of x over the last axis, the ways exporters write it.
Value* MeanSquare(GraphBuilder& b, Graph& g, Value* x, bool pow, bool axes_input) {
  Value* sq = pow ? b.Op("Pow", {x, b.ScalarConstant(2.0, DType::kF32)}) : b.Mul(x, x);
  if (!axes_input) return b.Op("ReduceMean", {sq}, MeanOver({-1}));
  Value* axes = g.AddConstant("mean_axes", Tensor::FromVector<int64_t>({1}, {-1}));
  AttrMap keep;
  keep.Set("keepdims", int64_t{1});
  return b.Op("ReduceMean", {sq, axes}, std::move(keep));
}

std::map<std::string, Tensor> Feeds() {
  return {{"x", testing::RandomTensor(DType::kF32, kShape, 7, -3.0, 3.0)},
          {"w", testing::RandomTensor(DType::kF32, {8}, 11, 0.5, 1.5)}};
}

std::vector<Tensor> RunCpu(const Graph& g, const std::vector<std::string>& outputs) {
  absl::StatusOr<std::vector<Tensor>> out = testing::RunOnce(g, testing::CpuBackend(), Feeds(), outputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Tensor>();
}

// loss = sum(y * r) and its gradients for x and w: {loss, dx, dw} names.
std::vector<std::string> AddLossAndGradients(Graph& g) {
  absl::StatusOr<std::vector<std::string>> names = testing::AddLossAndGradients(g, {"x", "w"});
  EXPECT_TRUE(names.ok()) << names.status();
  return names.ok() ? *names : std::vector<std::string>();
}

struct Spelling {
  const char* name;
  Chain chain;
  bool scaled;
  int chain_nodes;
};

TEST(FuseRmsNormTest, EverySpellingBecomesOneRmsNormWithTheChainsValuesAndGradients) {
  const std::vector<Spelling> spellings = {
      // PyTorch's dynamo export of Llama's RMSNorm: w * (x * Reciprocal(Sqrt(mean(x^2) + eps)))
      {"Pow_Reciprocal_Weight",
       [](GraphBuilder& b, Graph& g, Value* x, Value* w) {
         Value* ms = MeanSquare(b, g, x, /*pow=*/true, /*axes_input=*/true);
         Value* inv = b.Op("Reciprocal", {b.Op("Sqrt", {b.Add(ms, b.ScalarConstant(1e-6, DType::kF32))})});
         return std::vector<Value*>{b.Mul(w, b.Mul(x, inv))};
       },
       true, 7},
      // TorchScript's rsqrt (Div(1, Sqrt)), eps first, the weight on the right
      {"Mul_DivOne_EpsFirst_WeightRight",
       [](GraphBuilder& b, Graph& g, Value* x, Value* w) {
         Value* ms = MeanSquare(b, g, x, /*pow=*/false, /*axes_input=*/false);
         Value* root = b.Op("Sqrt", {b.Add(b.ScalarConstant(1e-5, DType::kF32), ms)});
         Value* inv = b.Op("Div", {b.ScalarConstant(1.0, DType::kF32), root});
         return std::vector<Value*>{b.Mul(b.Mul(inv, x), w)};
       },
       true, 7},
      // x / sqrt(mean(x^2) + eps), no weight (w unused: its gradient is zero both ways)
      {"DivX_NoWeight",
       [](GraphBuilder& b, Graph& g, Value* x, Value* w) {
         Value* ms = MeanSquare(b, g, x, /*pow=*/true, /*axes_input=*/false);
         Value* root = b.Op("Sqrt", {b.Add(ms, b.ScalarConstant(1e-5, DType::kF32))});
         return std::vector<Value*>{b.Add(b.Op("Div", {x, root}), b.Mul(w, b.ScalarConstant(0.0, DType::kF32)))};
       },
       false, 5},
  };
  for (const Spelling& s : spellings) {
    SCOPED_TRACE(s.name);
    std::unique_ptr<Graph> before = Build(s.chain), after = Build(s.chain);
    FuseRmsNormResult result;
    Capabilities caps;
    absl::StatusOr<bool> changed = FuseRmsNormPass(caps, &result).Run(*after);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_TRUE(*changed);
    EXPECT_EQ(testing::CountOps(*after, "RmsNorm"), 1);
    for (const char* op : {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div"}) EXPECT_EQ(testing::CountOps(*after, op), 0) << op;
    ASSERT_EQ(result.fused.size(), 1u);
    EXPECT_EQ(result.fused[0].scaled, s.scaled);
    EXPECT_EQ(result.fused[0].chain_nodes, s.chain_nodes);

    const std::string y_before = before->outputs()[0]->name, y_after = after->outputs()[0]->name;
    EXPECT_LT(testing::RelativeError(RunCpu(*after, {y_after})[0], RunCpu(*before, {y_before})[0]), 1e-6);

    const std::vector<std::string> names_before = AddLossAndGradients(*before);
    const std::vector<std::string> names_after = AddLossAndGradients(*after);
    EXPECT_EQ(testing::CountOps(*after, "RmsNormGrad"), 1);
    const std::vector<Tensor> want = RunCpu(*before, names_before), got = RunCpu(*after, names_after);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(testing::RelativeError(got[i], want[i]), 1e-5) << names_after[i];
    }
  }
}

TEST(FuseRmsNormTest, ChainsThatAreNotAnRmsNormOverTrailingAxesStay) {
  const auto inv_of = [](GraphBuilder& b, Value* ms) {
    return b.Op("Reciprocal", {b.Op("Sqrt", {b.Add(ms, b.ScalarConstant(1e-6, DType::kF32))})});
  };
  const std::vector<std::pair<const char*, Chain>> chains = {
      {"mean over axis 1 (not trailing)",
       [&](GraphBuilder& b, Graph&, Value* x, Value*) {
         Value* ms = b.Op("ReduceMean", {b.Mul(x, x)}, MeanOver({1}));
         return std::vector<Value*>{b.Mul(x, inv_of(b, ms))};
       }},
      {"keepdims 0",
       [&](GraphBuilder& b, Graph&, Value* x, Value*) {
         Value* ms = b.Op("ReduceMean", {b.Mul(x, x)}, MeanOver({0, 1, 2}, 0));
         return std::vector<Value*>{b.Mul(x, inv_of(b, ms))};
       }},
      {"the mean square also an output",
       [&](GraphBuilder& b, Graph&, Value* x, Value*) {
         Value* ms = b.Op("ReduceMean", {b.Mul(x, x)}, MeanOver({-1}));
         return std::vector<Value*>{b.Mul(x, inv_of(b, ms)), ms};
       }},
      {"the inverse scales another tensor",
       [&](GraphBuilder& b, Graph&, Value* x, Value* w) {
         Value* ms = b.Op("ReduceMean", {b.Mul(x, x)}, MeanOver({-1}));
         return std::vector<Value*>{b.Mul(b.Mul(x, w), inv_of(b, ms))};
       }},
      {"cube, not square",
       [&](GraphBuilder& b, Graph&, Value* x, Value*) {
         Value* ms = b.Op("ReduceMean", {b.Op("Pow", {x, b.ScalarConstant(3.0, DType::kF32)})}, MeanOver({-1}));
         return std::vector<Value*>{b.Mul(x, inv_of(b, ms))};
       }},
  };
  for (const auto& [what, chain] : chains) {
    std::unique_ptr<Graph> g = Build(chain);
    FuseRmsNormResult result;
    Capabilities caps;
    absl::StatusOr<bool> changed = FuseRmsNormPass(caps, &result).Run(*g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(*changed) << what;
    EXPECT_EQ(testing::CountOps(*g, "RmsNorm"), 0) << what;
  }
}

TEST(FuseRmsNormTest, ABackendWithoutTheKernelsKeepsTheChain) {
  std::unique_ptr<Graph> g = Build([](GraphBuilder& b, Graph& g, Value* x, Value* w) {
    Value* ms = MeanSquare(b, g, x, /*pow=*/true, /*axes_input=*/false);
    Value* inv = b.Op("Reciprocal", {b.Op("Sqrt", {b.Add(ms, b.ScalarConstant(1e-6, DType::kF32))})});
    return std::vector<Value*>{b.Mul(w, b.Mul(x, inv))};
  });
  Capabilities caps;
  caps.has_kernel = [](const std::string& op, DType) { return op != "RmsNormGrad"; };
  FuseRmsNormResult result;
  absl::StatusOr<bool> changed = FuseRmsNormPass(caps, &result).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(testing::CountOps(*g, "ReduceMean"), 1);
}

}  // namespace
}  // namespace mpc
