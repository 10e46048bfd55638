// data-parallel and the AllReduce kernel, in one process: the pass does nothing for a job
// of one, buckets the gradients in the reverse of parameter order by size, gates them on
// the hold flag when accumulating and averages the loss; loss-scaling reduces its
// non-finite flag (max) and injects a rank's fault only into that rank's program; the
// CPU kernel packs a bucket, reduces it through the backend's Communicator (here a fake
// one that plays the other ranks), averages, and copies without communicating when held.
#include "passes/data_parallel.h"

#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "distributed/communicator.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/loss_scaling.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// A graph with three parameters of 10, 1000 and 100 floats, their gradients as inputs,
// and a scalar loss; the results autodiff and attach-loss would have left.
struct GradGraph {
  Graph g;
  LossResult loss;
  AutodiffResult autodiff;
  GradAccumulationResult accumulation;
  Node* seed_reader = nullptr;  // where the backward pass would read the seed
  GradGraph() {
    const std::vector<Shape> shapes{{10}, {10, 100}, {100}};
    for (size_t i = 0; i < shapes.size(); ++i) {
      Value* p = g.AddParameter("p" + std::to_string(i), Tensor(DType::kF32, shapes[i]));
      Value* grad = g.AddInput("grad_p" + std::to_string(i), DType::kF32, shapes[i]);
      autodiff.param_grads.emplace_back(p, grad);
    }
    loss.loss = g.AddInput("loss", DType::kF32, {});
    g.AddOutput(loss.loss);
    autodiff.loss_seed = g.AddInput("seed", DType::kF32, {});
    GraphBuilder b(&g);
    Value* backward = b.Op("Neg", {autodiff.loss_seed});
    g.AddOutput(backward);
    seed_reader = backward->producer;
  }
};

std::vector<const Node*> AllReduces(const Graph& g) {
  std::vector<const Node*> out;
  for (const auto& n : g.nodes()) {
    if (n->op == "AllReduce") out.push_back(n.get());
  }
  return out;
}

TEST(DataParallelPassTest, OneRankChangesNothing) {
  GradGraph gg;
  DataParallelResult result;
  DataParallelPass pass({/*world_size=*/1}, &gg.loss, &gg.autodiff, &gg.accumulation, &result);
  auto changed = pass.Run(gg.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_TRUE(AllReduces(gg.g).empty());
  EXPECT_TRUE(result.param_grads.empty());
  EXPECT_EQ(result.mean_loss, nullptr);
}

TEST(DataParallelPassTest, BucketsInReverseParameterOrderBySize) {
  GradGraph gg;
  DataParallelResult result;
  // 4000-byte buckets: p2 (400 B) + p1 (4000 B) fill the first; p0 (40 B) is the second.
  DataParallelPass pass({/*world_size=*/2, /*bucket_bytes=*/4000}, &gg.loss, &gg.autodiff, &gg.accumulation, &result);
  auto changed = pass.Run(gg.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(result.buckets.size(), 2u);
  EXPECT_EQ(result.buckets[0].params, (std::vector<std::string>{"p2", "p1"}));
  EXPECT_EQ(result.buckets[0].bytes, 4400);
  EXPECT_EQ(result.buckets[1].params, (std::vector<std::string>{"p0"}));
  ASSERT_EQ(result.param_grads.size(), 3u);
  for (const auto& [param, grad] : result.param_grads) {
    ASSERT_NE(grad->producer, nullptr) << param->name;
    EXPECT_EQ(grad->producer->op, "AllReduce") << param->name;
    EXPECT_EQ(grad->producer->attrs.GetString("reduce", ""), "sum");
    EXPECT_EQ(grad->shape, param->shape);
  }
  // Two buckets and the loss.
  EXPECT_EQ(AllReduces(gg.g).size(), 3u);
  ASSERT_NE(result.mean_loss, nullptr);
  EXPECT_EQ(result.mean_loss->producer->inputs[0], gg.loss.loss);
  EXPECT_EQ(LatestGradients(gg.autodiff, &gg.accumulation, &result)[1].second, result.param_grads[1].second);
  // The backward pass reads seed / 2: each rank's share of the global batch's mean loss.
  const Node* share = gg.seed_reader->inputs[0]->producer;
  ASSERT_NE(share, nullptr);
  EXPECT_EQ(share->op, "Mul");
  EXPECT_EQ(share->inputs[0], gg.autodiff.loss_seed);
  EXPECT_FLOAT_EQ(share->inputs[1]->data.GetAsDouble(0), 0.5);
}

TEST(DataParallelPassTest, AccumulatedGradientsAreReducedOnlyWhenNotHeld) {
  GradGraph gg;
  gg.accumulation.steps = 2;
  gg.accumulation.hold = gg.g.AddInput("grad_accum/hold", DType::kF32, {});
  gg.accumulation.param_grads = gg.autodiff.param_grads;  // stand-ins for the sums
  DataParallelResult result;
  DataParallelPass pass({/*world_size=*/4}, &gg.loss, &gg.autodiff, &gg.accumulation, &result);
  ASSERT_TRUE(pass.Run(gg.g).ok());
  ASSERT_EQ(result.buckets.size(), 1u) << "25 MiB holds all three";
  const Node* bucket = result.param_grads[0].second->producer;
  EXPECT_EQ(bucket->attrs.GetInt("held", 0), 1);
  EXPECT_EQ(bucket->inputs.back(), gg.accumulation.hold);
  EXPECT_EQ(bucket->outputs.size(), 3u);
}

TEST(DataParallelPassTest, RefusesBadOptions) {
  GradGraph gg;
  DataParallelResult result;
  EXPECT_FALSE(DataParallelPass({0}, &gg.loss, &gg.autodiff, &gg.accumulation, &result).Run(gg.g).ok());
  auto zero_bucket = DataParallelPass({2, 0}, &gg.loss, &gg.autodiff, &gg.accumulation, &result).Run(gg.g);
  ASSERT_FALSE(zero_bucket.ok());
  EXPECT_NE(zero_bucket.status().message().find("distributed.bucket_mb"), std::string::npos) << zero_bucket.status();
}

TEST(DataParallelPassTest, LossScalingReducesTheFlagAndInjectsOnlyItsRanksFault) {
  for (int rank : {0, 1}) {
    GradGraph gg;
    DataParallelResult dp;
    ASSERT_TRUE(DataParallelPass({2}, &gg.loss, &gg.autodiff, &gg.accumulation, &dp).Run(gg.g).ok());
    LossScalingOptions options;
    options.mode = LossScalingOptions::Mode::kDynamic;
    options.rank = rank;
    options.inject_nonfinite.push_back({3, "p1", "inf", /*rank=*/1});
    AutocastResult autocast;
    LossScalingResult scaling;
    LossScalingPass pass(options, &autocast, &gg.autodiff, &scaling, &gg.accumulation, &dp);
    auto changed = pass.Run(gg.g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    int injects = 0;
    for (const auto& n : gg.g.nodes()) injects += n->op == "InjectNonFinite";
    EXPECT_EQ(injects, rank == 1 ? 1 : 0) << "rank " << rank;
    ASSERT_NE(scaling.found_nonfinite, nullptr);
    const Node* flag = scaling.found_nonfinite->producer;
    EXPECT_EQ(flag->op, "AllReduce");
    EXPECT_EQ(flag->attrs.GetString("reduce", ""), "max");
    // The unscaled gradients are those of the average.
    const Node* unscale = scaling.param_grads[0].second->producer;
    EXPECT_EQ(unscale->op, "UnscaleGradients");
    EXPECT_EQ(unscale->inputs[1]->producer->op, "AllReduce");
  }
}

// Plays `ranks` - 1 other ranks whose tensors are this rank's times 2, 3, ...: a sum is
// then x * (1 + 2 + ... + ranks), a max x * ranks for positive x.
class FakeWorld : public Communicator {
 public:
  explicit FakeWorld(int ranks) : ranks_(ranks) {}
  int rank() const override { return 0; }
  int size() const override { return ranks_; }
  absl::Status AllReduce(float* data, int64_t count, ReduceOp op, const std::string& what) override {
    ++calls;
    last_count = count;
    last_what = what;
    const float factor = op == ReduceOp::kSum ? ranks_ * (ranks_ + 1) / 2.0f : static_cast<float>(ranks_);
    for (int64_t i = 0; i < count; ++i) data[i] *= factor;
    return absl::OkStatus();
  }
  absl::Status ReduceScatter(const float*, float*, int64_t, const std::string&) override {
    return absl::UnimplementedError("not used here (tests/passes/zero_test.cc)");
  }
  absl::Status AllGatherFloats(const float*, float*, int64_t, const std::string&) override {
    return absl::UnimplementedError("not used here (tests/passes/zero_test.cc)");
  }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine, const std::string&) override {
    return std::vector<std::string>(ranks_, mine);
  }
  void Abort(int) override { std::abort(); }

  int calls = 0;
  int64_t last_count = 0;
  std::string last_what;

 private:
  int ranks_;
};

TEST(AllReduceKernelTest, PacksReducesAveragesAndCopiesWhenHeld) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {3, 7});
  Value* y = g.AddInput("y", DType::kF32, {5});
  Value* hold = g.AddInput("hold", DType::kF32, {});
  AttrMap attrs;
  attrs.Set("reduce", std::string("mean"));
  attrs.Set("held", int64_t{1});
  std::vector<Value*> outs = b.OpN("AllReduce", {x, y, hold}, std::move(attrs));
  ASSERT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs(outs);

  FakeWorld world(3);
  auto backend = CreateCpuBackend();
  backend->set_communicator(&world);
  auto ex = testing::ExecutorFor(g, *backend);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor xv = testing::RandomTensor(DType::kF32, {3, 7}, 11);
  const Tensor yv = testing::RandomTensor(DType::kF32, {5}, 12);
  ASSERT_TRUE((*ex)->SetInput("x", xv).ok());
  ASSERT_TRUE((*ex)->SetInput("y", yv).ok());
  for (float held : {0.0f, 1.0f}) {
    ASSERT_TRUE((*ex)->SetInput("hold", Tensor::Scalar(held)).ok());
    world.calls = 0;
    ASSERT_TRUE((*ex)->Run(0, 4).ok());
    // Mean over 3 ranks holding x, 2x, 3x: 2x. Held: x itself, and no call.
    const float factor = held != 0 ? 1.0f : 2.0f;
    EXPECT_EQ(world.calls, held != 0 ? 0 : 1);
    const Tensor xo = *(*ex)->Fetch(outs[0]->name);
    const Tensor yo = *(*ex)->Fetch(outs[1]->name);
    for (int64_t i = 0; i < xv.num_elements(); ++i) ASSERT_FLOAT_EQ(xo.data<float>()[i], factor * xv.data<float>()[i]);
    for (int64_t i = 0; i < yv.num_elements(); ++i) ASSERT_FLOAT_EQ(yo.data<float>()[i], factor * yv.data<float>()[i]);
  }
  EXPECT_EQ(world.last_count, 26) << "one call for the whole bucket";
  EXPECT_NE(world.last_what.find("at step 5"), std::string::npos) << world.last_what;
}

TEST(AllReduceKernelTest, WithoutAJobTheKernelSaysHowToStartOne) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4});
  Value* out = b.Op("AllReduce", {x});
  ASSERT_TRUE(b.status().ok());
  g.SetOutputs({out});
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("mpirun -np N"), std::string::npos) << ex.status();
}

TEST(AllReduceOpTest, RefusesLowPrecisionInputsAndUnknownReductions) {
  Graph g;
  GraphBuilder b(&g);
  Value* h = g.AddInput("h", DType::kBF16, {4});
  b.Op("AllReduce", {h});
  ASSERT_FALSE(b.status().ok());
  EXPECT_NE(b.status().message().find("collectives reduce f32"), std::string::npos) << b.status();
  Graph g2;
  GraphBuilder b2(&g2);
  AttrMap attrs;
  attrs.Set("reduce", std::string("min"));
  b2.Op("AllReduce", {g2.AddInput("x", DType::kF32, {4})}, std::move(attrs));
  EXPECT_FALSE(b2.status().ok());
}

}  // namespace
}  // namespace mpc
