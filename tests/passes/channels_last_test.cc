// channels-last: a residual block (Conv, BatchNormalization, ReLU, Add, MaxPool, Conv) runs
// channels-last from its first convolution to its channels-first reader, with one
// Transpose at each end (plus one for a graph output read in between), computes what the
// channels-first graph computes, and is left alone where the backend asks for nothing.
#include "passes/channels_last.h"

#include <map>

#include "graph/graph_builder.h"
#include "graph/ops_conv_util.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// x [2, 8, 8, 8] -> conv1 -> bn1 -> relu1 -> conv2 -> bn2 -> + relu1 -> relu2 -> maxpool 2x2
// -> conv3 [2, 16, 4, 4] -> GlobalAveragePool. Outputs: the pool, and relu1 when
// `relu1_output`.
std::unique_ptr<Graph> ResidualBlock(bool relu1_output) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, {2, 8, 8, 8});
  AttrMap same;
  same.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  auto conv = [&](Value* in, int64_t c, uint64_t seed) {
    Value* w =
        g->AddConstant(absl::StrCat("w", seed), testing::RandomTensor(DType::kF32, {16, c, 3, 3}, seed, -0.3, 0.3));
    return b.Op("Conv", {in, w}, same);
  };
  auto bn = [&](Value* in, uint64_t seed) {
    std::vector<Value*> ins{in};
    for (int i = 0; i < 4; ++i) {
      const double lo = i == 3 ? 0.5 : -1.0;  // the variance positive
      ins.push_back(g->AddConstant(absl::StrCat("bn", seed, "_", i),
                                   testing::RandomTensor(DType::kF32, {16}, seed * 10 + i, lo, 1.0)));
    }
    return b.Op("BatchNormalization", ins);
  };
  Value* relu1 = b.Op("Relu", {bn(conv(x, 8, 1), 1)});
  Value* sum = b.Add(bn(conv(relu1, 16, 2), 2), relu1);
  AttrMap pool;
  pool.Set("kernel_shape", std::vector<int64_t>{2, 2});
  pool.Set("strides", std::vector<int64_t>{2, 2});
  Value* pooled = b.Op("MaxPool", {b.Op("Relu", {sum})}, pool);
  Value* out = b.Op("GlobalAveragePool", {conv(pooled, 16, 3)});
  EXPECT_TRUE(b.status().ok()) << b.status();
  if (relu1_output) {
    g->SetOutputs({out, relu1});
  } else {
    g->SetOutputs({out});
  }
  return g;
}

Capabilities WithMinPlane(int64_t min_plane) {
  Capabilities caps;
  caps.channels_last_min_plane = {{DType::kF32, min_plane}};
  return caps;
}

std::vector<Tensor> RunOnCpu(const Graph& g, const Tensor& x) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", x).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  std::vector<Tensor> out;
  for (const Value* v : g.outputs()) out.push_back(*(*ex)->Fetch(v->name));
  return out;
}

std::map<std::string, int> OpCounts(const Graph& g) {
  std::map<std::string, int> counts;
  for (const auto& n : g.nodes()) ++counts[n->op];
  return counts;
}

TEST(ChannelsLastTest, ResidualBlockRunsChannelsLastBetweenTwoTransposes) {
  std::unique_ptr<Graph> before = ResidualBlock(false);
  std::unique_ptr<Graph> after = ResidualBlock(false);
  ChannelsLastResult result;
  absl::StatusOr<bool> changed = ChannelsLastPass(WithMinPlane(16), &result).Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  // conv3's 4x4 plane reaches the threshold of 16: every layout-sensitive op converts.
  EXPECT_EQ(result.converted.size(), 6u);  // 3 Conv, 2 BatchNormalization, MaxPool
  EXPECT_EQ(result.transposes, 2);
  std::map<std::string, int> counts = OpCounts(*after);
  EXPECT_EQ(counts["Transpose"], 2);
  for (const auto& n : after->nodes()) {
    if (n->op == "Conv" || n->op == "BatchNormalization" || n->op == "MaxPool") {
      EXPECT_TRUE(conv::ChannelsLast(*n)) << n->name;
    }
    if (n->op == "Relu" || n->op == "Add") {
      EXPECT_EQ(n->outputs[0]->shape.back(), 16) << n->name << " is not channels-last";
    }
  }
  // The model's names survive: the converted nodes keep theirs.
  std::map<std::string, int> names;
  for (const auto& n : before->nodes()) ++names[n->name];
  for (const auto& n : after->nodes()) {
    if (n->op != "Transpose") EXPECT_EQ(names.count(n->name), 1u) << n->name;
  }

  const Tensor x = testing::RandomTensor(DType::kF32, {2, 8, 8, 8}, 7);
  const Tensor want = RunOnCpu(*before, x)[0];
  const Tensor got = RunOnCpu(*after, x)[0];
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_LT(testing::RelativeError(got.CastTo(DType::kF64), want.CastTo(DType::kF64)), 1e-5);
}

// A value the graph outputs keeps its channels-first form (a third Transpose writes it),
// and a threshold above conv3's plane leaves conv3 channels-first (its input transposed
// back after the pool).
TEST(ChannelsLastTest, OutputsStayChannelsFirstAndSmallPlanesStayOut) {
  std::unique_ptr<Graph> before = ResidualBlock(true);
  std::unique_ptr<Graph> after = ResidualBlock(true);
  ChannelsLastResult result;
  ASSERT_TRUE(ChannelsLastPass(WithMinPlane(64), &result).Run(*after).ok());
  EXPECT_EQ(result.converted.size(), 5u);  // conv3 (4x4 = 16 < 64) stays
  EXPECT_EQ(result.transposes, 3);         // x in, relu1 out (a graph output), the pool out
  EXPECT_EQ(after->outputs()[1]->shape, (Shape{2, 16, 8, 8}));
  const Tensor x = testing::RandomTensor(DType::kF32, {2, 8, 8, 8}, 8);
  const std::vector<Tensor> want = RunOnCpu(*before, x);
  const std::vector<Tensor> got = RunOnCpu(*after, x);
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_LT(testing::RelativeError(got[i].CastTo(DType::kF64), want[i].CastTo(DType::kF64)), 1e-5) << i;
  }
}

TEST(ChannelsLastTest, NothingChangesWithoutAThresholdForTheDtype) {
  for (const Capabilities& caps : {Capabilities(), WithMinPlane(1000)}) {
    std::unique_ptr<Graph> g = ResidualBlock(false);
    const size_t nodes = g->nodes().size();
    ChannelsLastResult result;
    absl::StatusOr<bool> changed = ChannelsLastPass(caps, &result).Run(*g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(*changed);
    EXPECT_EQ(g->nodes().size(), nodes);
    EXPECT_TRUE(result.converted.empty());
  }
}

}  // namespace
}  // namespace mpc
