// ZeRO-1 (distributed.zero_stage 1), in one process: the training pipeline compiled for a
// job of 3 ranks reduce-scatters the gradients, updates each weight's slice with
// optimizer state that holds only the slice (a third of its elements, rounded up: counts
// 3 does not divide work), gathers the updated weights once per bucket after every
// reader, keeps the bf16 weight copies as casts of the gathered weights, and clips with the
// ranks' summed norm; the CPU kernels of ReduceScatter, Shard and AllGatherInPlace move
// the right slices for a rank that is neither first nor last (a fake Communicator plays
// the others).
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "distributed/communicator.h"
#include "graph/graph_builder.h"
#include "graph/sharding.h"
#include "gtest/gtest.h"
#include "passes/pipelines.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int kRanks = 3;

// x [4, 7] -> Gemm(7 -> 5) -> Relu -> Gemm(5 -> 3): weights of 35, 5, 15 and 3 floats,
// none a multiple of 3 but 15.
std::unique_ptr<Graph> SmallMlp() {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* x = g->AddInput("x", DType::kF32, {4, 7});
  Value* w1 = g->AddParameter("w1", testing::RandomTensor(DType::kF32, {7, 5}, 1));
  Value* b1 = g->AddParameter("b1", testing::RandomTensor(DType::kF32, {5}, 2));
  Value* w2 = g->AddParameter("w2", testing::RandomTensor(DType::kF32, {5, 3}, 3));
  Value* b2 = g->AddParameter("b2", testing::RandomTensor(DType::kF32, {3}, 4));
  Value* h = b.Op("Relu", {b.Op("Gemm", {x, w1, b1})});
  Value* logits = b.Op("Gemm", {h, w2, b2});
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({logits});
  return g;
}

struct Compiled {
  std::unique_ptr<Graph> graph;
  CompileResults results;
};

Compiled CompileZero(Precision precision, int64_t bucket_bytes, int stage = 1) {
  Compiled c;
  c.graph = SmallMlp();
  CompileOptions o;
  o.loss.logits = c.graph->outputs()[0]->name;
  o.loss.batch_size = 4;
  o.autocast.precision = precision;
  o.optimizer.kind = OptimizerOptions::Kind::kAdamW;
  o.loss_scaling.clip_grad_norm = 1.0f;
  o.data_parallel.world_size = kRanks;
  o.data_parallel.zero_stage = stage;
  o.data_parallel.bucket_bytes = bucket_bytes;
  PassPipeline p = MakeTrainingPipeline(o, testing::CpuBackend().capabilities(), &c.results);
  auto report = p.Run(*c.graph);
  EXPECT_TRUE(report.ok()) << report.status();
  return c;
}

std::vector<const Node*> NodesOf(const Graph& g, const std::string& op) {
  std::vector<const Node*> out;
  for (const auto& n : g.nodes()) {
    if (n->op == op) out.push_back(n.get());
  }
  return out;
}

TEST(ZeroPipelineTest, ShardsTheGradientsTheStateAndTheUpdates) {
  // 64-byte buckets, filled from the last parameter: b2 + w2 (72 B), then b1 + w1 (160 B).
  const Compiled c = CompileZero(Precision::kBF16, 64);
  const Graph& g = *c.graph;
  EXPECT_EQ(c.results.data_parallel.zero_stage, 1);
  const size_t buckets = c.results.data_parallel.buckets.size();
  ASSERT_EQ(buckets, 2u);
  EXPECT_EQ(NodesOf(g, "ReduceScatter").size(), buckets);
  // The only AllReduces left: the loss mean and the non-finite flag (the clip's norm is in its kernel).
  for (const Node* n : NodesOf(g, "AllReduce")) {
    EXPECT_EQ(NumElements(n->inputs[0]->shape), 1) << n->name << ": a gradient is all-reduced";
  }
  for (const auto& [param, grad] : c.results.data_parallel.param_grads) {
    EXPECT_EQ(grad->shape, Shape{ShardLength(NumElements(param->shape), kRanks)}) << param->name;
    EXPECT_EQ(grad->producer->op, "ReduceScatter") << param->name;
  }
  // Each parameter: one Shard, state of the slice's length marked with the weight's shape.
  int states = 0;
  for (const char* name : {"w1", "b1", "w2", "b2"}) {
    const Value* param = g.FindValue(name);
    ASSERT_NE(param, nullptr);
    const int64_t slice = ShardLength(NumElements(param->shape), kRanks);
    int shards = 0;
    for (const Node* reader : param->consumers) shards += reader->op == "Shard";
    EXPECT_EQ(shards, 1) << name;
    for (const char* suffix : {".adam_m", ".adam_v"}) {
      const Value* state = g.FindValue(std::string(name) + suffix);
      ASSERT_NE(state, nullptr) << name << suffix;
      EXPECT_EQ(state->shape, Shape{slice}) << name << suffix;
      EXPECT_EQ(state->sharded_from, param->shape) << name << suffix;
      EXPECT_EQ(state->logical_shape, param->shape) << name << suffix << ": checkpoints hold the model shape";
      ++states;
    }
    const Value* step = g.FindValue(std::string(name) + ".adam_step");
    ASSERT_NE(step, nullptr);
    EXPECT_TRUE(step->sharded_from.empty()) << "the step counter is one number, the same on every rank";
    EXPECT_EQ(g.FindValue(std::string(name) + ".lowp"), nullptr)
        << "a bf16 copy written by the update would hold only this rank's slice";
  }
  EXPECT_EQ(states, 8);
  // One gather per bucket, writing each trained weight once, after every update and after
  // every other reader of the weights it writes.
  const std::vector<const Node*> gathers = NodesOf(g, "AllGatherInPlace");
  ASSERT_EQ(gathers.size(), buckets);
  std::vector<std::string> written;
  for (const Node* gather : gathers) {
    EXPECT_EQ(gather->attrs.GetInt("world_size", 0), kRanks);
    const size_t tensors = gather->inputs.size() / 2;
    for (size_t i = 0; i < tensors; ++i) {
      const Value* param = gather->inputs[tensors + i];
      written.push_back(param->name);
      EXPECT_EQ(gather->inputs[i]->producer->op, "Shard") << param->name;
      for (const Node* reader : param->consumers) {
        if (reader == gather) continue;
        const bool ordered =
            std::find(gather->control_deps.begin(), gather->control_deps.end(), reader) != gather->control_deps.end();
        EXPECT_TRUE(ordered) << gather->name << " may overwrite '" << param->name << "' before " << reader->name << " ("
                             << reader->op << ") reads it";
      }
    }
    bool after_update = false;
    for (const Node* dep : gather->control_deps) {
      after_update |= dep->op == "MultiAdamWUpdate" || dep->op == "AdamWUpdate";
    }
    EXPECT_TRUE(after_update) << gather->name;
  }
  std::sort(written.begin(), written.end());
  EXPECT_EQ(written, (std::vector<std::string>{"b1", "b2", "w1", "w2"}));
  const std::vector<const Node*> clips = NodesOf(g, "ClipByGlobalNorm");
  ASSERT_EQ(clips.size(), 1u);
  EXPECT_EQ(clips[0]->attrs.GetInt("sharded", 0), 1);
}

// ZeRO-2: the first bucket (the last layer's gradients) is reduce-scattered before the
// backward reaches the first layer, where ZeRO-1 waits for the whole backward; the
// program is otherwise ZeRO-1's (same collectives, same updates).
TEST(ZeroPipelineTest, Zero2ScattersEachBucketAsSoonAsItsGradientsExist) {
  const Compiled one = CompileZero(Precision::kF32, 64, 1);
  const Compiled two = CompileZero(Precision::kF32, 64, 2);
  EXPECT_EQ(two.results.data_parallel.zero_stage, 2);
  ASSERT_EQ(two.results.data_parallel.buckets.size(), 2u);
  EXPECT_EQ(NodesOf(*two.graph, "ReduceScatter").size(), NodesOf(*one.graph, "ReduceScatter").size());
  EXPECT_EQ(NodesOf(*two.graph, "AdamWUpdate").size() + NodesOf(*two.graph, "MultiTensorAdamW").size(),
            NodesOf(*one.graph, "AdamWUpdate").size() + NodesOf(*one.graph, "MultiTensorAdamW").size());
  // Where, in each program's order, the first ReduceScatter and the gradient of w1 (the
  // first layer's weight: the backward's last GEMM) run.
  auto positions = [](const Compiled& c) {
    const std::vector<Node*>& order = c.results.memory_plan.order;
    int scatter = -1, last_gemm = -1;
    const std::string w1_grad = c.results.autodiff.param_grads.front().second->producer->name;
    for (size_t i = 0; i < order.size(); ++i) {
      if (order[i]->op == "ReduceScatter" && scatter < 0) scatter = static_cast<int>(i);
      if (order[i]->name == w1_grad) last_gemm = static_cast<int>(i);
    }
    return std::make_pair(scatter, last_gemm);
  };
  const auto [scatter_two, w1_two] = positions(two);
  const auto [scatter_one, w1_one] = positions(one);
  ASSERT_GE(w1_two, 0);
  EXPECT_LT(scatter_two, w1_two) << "ZeRO-2: the last layer's bucket is scattered before w1's gradient";
  EXPECT_GT(scatter_one, w1_one) << "ZeRO-1: after the whole backward";
}

// ZeRO-3 (passes/shard_parameters.h), compiled as rank 1 of 3 in bf16: every parameter is
// its slice (rank 1's initial values), read only through AllGathers of its bf16 cast
// slice, one before the forward and, where the backward reads it, one before the backward;
// the updates write the slices after every gather; ZeRO-1's Shard and all-gather are gone.
// The evaluation program gathers each parameter once.
TEST(ZeroPipelineTest, Zero3HoldsSlicesOfTheParametersAndGathersThemWhereRead) {
  for (const bool training : {true, false}) {
    SCOPED_TRACE(training ? "training" : "evaluation");
    auto g = SmallMlp();
    const Tensor w2_initial = g->FindValue("w2")->data;
    CompileOptions o;
    o.loss.logits = g->outputs()[0]->name;
    o.loss.batch_size = 4;
    o.autocast.precision = Precision::kBF16;
    o.optimizer.kind = OptimizerOptions::Kind::kAdamW;
    o.data_parallel.world_size = training ? kRanks : 1;
    o.data_parallel.zero_stage = 3;
    o.job_ranks = kRanks;
    o.job_rank = 1;
    CompileResults results;
    PassPipeline p = training ? MakeTrainingPipeline(o, testing::CpuBackend().capabilities(), &results)
                              : MakeEvaluationPipeline(o, testing::CpuBackend().capabilities(), &results);
    auto report = p.Run(*g);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(results.shard_parameters.sharded.size(), 4u);
    EXPECT_TRUE(NodesOf(*g, "Shard").empty());
    EXPECT_TRUE(NodesOf(*g, "AllGatherInPlace").empty());
    for (const char* name : {"w1", "b1", "w2", "b2"}) {
      const Value* param = g->FindValue(name);
      ASSERT_NE(param, nullptr);
      ASSERT_FALSE(param->sharded_from.empty()) << name;
      EXPECT_EQ(param->shape, Shape{ShardLength(NumElements(param->sharded_from), kRanks)}) << name;
      EXPECT_EQ(param->logical_shape, param->sharded_from) << name;
      for (const Node* reader : param->consumers) {
        // (simplify merges the forward's and the backward's casts of the slice: one small
        // bf16 slice read by both gathers)
        const bool gathered_cast =
            reader->op == "Cast" && std::all_of(reader->outputs[0]->consumers.begin(),
                                                reader->outputs[0]->consumers.end(),
                                                [](const Node* c) { return c->op == "AllGather"; });
        EXPECT_TRUE(gathered_cast || reader->op == "AdamWUpdate" || reader->op == "MultiAdamWUpdate" ||
                    reader->op == "FindNonFinite" || reader->op == "ClipByGlobalNorm")
            << name << " read by " << reader->name << " (" << reader->op << ")";
      }
    }
    // w2 [5, 3], rank 1 of 3: elements [5, 10) of the flattened weight.
    const Value* w2 = g->FindValue("w2");
    for (int i = 0; i < 5; ++i) EXPECT_EQ(w2->data.data<float>()[i], w2_initial.data<float>()[5 + i]);
    std::map<std::string, int> gathers;
    for (const Node* n : NodesOf(*g, "AllGather")) {
      EXPECT_EQ(n->inputs[0]->dtype, DType::kBF16) << n->name << ": the bf16 copy travels, not the f32 weight";
      ++gathers[n->inputs[0]->producer->inputs[0]->name];
    }
    // Training: w2 also for the backward's dX = dY w2; w1 (the input needs no gradient) and
    // the biases only in the forward.
    EXPECT_EQ(gathers["w2"], training ? 2 : 1);
    EXPECT_EQ(gathers["w1"], 1);
    EXPECT_EQ(gathers["b1"], 1);
  }
}

// ZeRO-2 and 3 with gradient accumulation: every micro-batch's gradients are scattered
// (never held), and each accumulator is this rank's slice, summing the scattered slices;
// the loss scaling and the updates are still held to the step's last micro-batch.
TEST(ZeroPipelineTest, Zero2And3WithAccumulationSumSlicesOfTheScatteredGradients) {
  for (const int stage : {2, 3}) {
    SCOPED_TRACE(absl::StrCat("stage ", stage));
    auto g = SmallMlp();
    CompileOptions o;
    o.loss.logits = g->outputs()[0]->name;
    o.loss.batch_size = 4;
    o.accumulate_steps = 2;
    o.optimizer.kind = OptimizerOptions::Kind::kAdamW;
    o.data_parallel.world_size = kRanks;
    o.data_parallel.zero_stage = stage;
    o.data_parallel.bucket_bytes = 64;
    o.job_ranks = kRanks;
    CompileResults results;
    PassPipeline p = MakeTrainingPipeline(o, testing::CpuBackend().capabilities(), &results);
    auto report = p.Run(*g);
    ASSERT_TRUE(report.ok()) << report.status();
    const std::vector<const Node*> scatters = NodesOf(*g, "ReduceScatter");
    ASSERT_EQ(scatters.size(), 2u);
    for (const Node* scatter : scatters) {
      EXPECT_EQ(scatter->attrs.GetInt("held", 0), 0) << scatter->name << ": scattered every micro-batch";
      EXPECT_NE(scatter->inputs.back(), results.grad_accumulation.hold) << scatter->name;
      for (const Value* in : scatter->inputs) {
        ASSERT_NE(in->producer, nullptr);
        EXPECT_NE(in->producer->op, "AccumulateGradient") << "a micro-batch's gradient, not a sum";
      }
    }
    for (const char* name : {"w1", "b1", "w2", "b2"}) {
      const Value* acc = g->FindValue(std::string(name) + ".grad_accum");
      ASSERT_NE(acc, nullptr) << name;
      const Shape whole = stage == 3 ? g->FindValue(name)->sharded_from : g->FindValue(name)->shape;
      EXPECT_EQ(acc->sharded_from, whole) << name;
      EXPECT_EQ(acc->shape, Shape{ShardLength(NumElements(whole), kRanks)}) << name;
      ASSERT_EQ(acc->consumers.size(), 1u) << name;
      const Node* sum = acc->consumers[0];
      EXPECT_EQ(sum->op, "AccumulateGradient");
      EXPECT_EQ(sum->inputs[1]->producer->op, "ReduceScatter") << name;
    }
    // The updates still wait for the step's last micro-batch.
    EXPECT_NE(results.grad_accumulation.hold, nullptr);
    EXPECT_FALSE(results.grad_accumulation.hold->consumers.empty());
  }
}

TEST(ZeroPipelineTest, RefusesStagesItDoesNotHave) {
  auto g = SmallMlp();
  CompileOptions o;
  o.loss.logits = g->outputs()[0]->name;
  o.loss.batch_size = 4;
  o.data_parallel.world_size = 2;
  o.data_parallel.zero_stage = 4;
  CompileResults results;
  PassPipeline p = MakeTrainingPipeline(o, testing::CpuBackend().capabilities(), &results);
  auto report = p.Run(*g);
  ASSERT_FALSE(report.ok());
  EXPECT_NE(report.status().message().find("distributed.zero_stage: 4 is not supported; use 0, 1, 2 or 3"), std::string::npos)
      << report.status();
}

// Plays a job of 3 ranks as rank 1. Every rank holds the same tensors, so a reduce-scatter
// gives 3 x this rank's chunk; an all-gather gives rank r's floats times r + 1, so each
// slice shows which rank it came from.
class MiddleRank : public Communicator {
 public:
  int rank() const override { return 1; }
  int size() const override { return kRanks; }
  absl::Status AllReduce(float*, int64_t, ReduceOp, const std::string&) override {
    return absl::UnimplementedError("not used here");
  }
  absl::Status ReduceScatter(const float* send, float* recv, int64_t count, const std::string&) override {
    last_count = count;
    for (int64_t i = 0; i < count; ++i) recv[i] = kRanks * send[rank() * count + i];
    return absl::OkStatus();
  }
  absl::Status AllGatherFloats(const float* mine, float* all, int64_t count, const std::string&) override {
    last_count = count;
    for (int r = 0; r < kRanks; ++r) {
      for (int64_t i = 0; i < count; ++i) all[r * count + i] = (r + 1) * mine[i];
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string&, const std::string&) override {
    return absl::UnimplementedError("not used here");
  }
  void Abort(int) override { std::abort(); }
  int64_t last_count = 0;
};

// ZeRO-3's AllGather on the CPU: f32 slices with the ranks' chunks told apart, and bf16
// slices of an odd length (3 bf16 = 6 bytes travel as 2 float-sized words) with every rank
// holding the same slice: the whole tensor is the slices end to end, the padding dropped.
class SameSliceEverywhere : public MiddleRank {
 public:
  absl::Status AllGatherFloats(const float* mine, float* all, int64_t count, const std::string&) override {
    last_count = count;
    for (int r = 0; r < kRanks; ++r) std::copy_n(mine, count, all + r * count);
    return absl::OkStatus();
  }
};

TEST(ZeroKernelTest, AllGatherLaysTheSlicesEndToEnd) {
  for (const DType dtype : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Graph g;
    AttrMap attrs;
    attrs.Set("world_size", int64_t{kRanks});
    attrs.Set("shape", std::vector<int64_t>{7});
    Value* slice = g.AddInput("slice", dtype, {3});
    auto gather = g.AddNode("AllGather", {slice}, attrs, "gather");
    ASSERT_TRUE(gather.ok()) << gather.status();
    EXPECT_EQ((*gather)->outputs[0]->shape, Shape{7});
    EXPECT_EQ((*gather)->outputs[0]->dtype, dtype);
    g.SetOutputs({(*gather)->outputs[0]});
    std::unique_ptr<MiddleRank> world = dtype == DType::kF32 ? std::make_unique<MiddleRank>()
                                                             : std::make_unique<SameSliceEverywhere>();
    auto backend = CreateCpuBackend();
    backend->set_communicator(world.get());
    auto ex = testing::ExecutorFor(g, *backend);
    ASSERT_TRUE(ex.ok()) << ex.status();
    const Tensor sv = testing::RandomTensor(dtype, {3}, 11);
    ASSERT_TRUE((*ex)->SetInput("slice", sv).ok());
    ASSERT_TRUE((*ex)->Run(0, 0).ok());
    const Tensor whole = (*(*ex)->Fetch((*gather)->outputs[0]->name)).CastTo(DType::kF32);
    const Tensor mine = sv.CastTo(DType::kF32);
    for (int i = 0; i < 7; ++i) {
      const float factor = dtype == DType::kF32 ? static_cast<float>(i / 3 + 1) : 1.0f;
      EXPECT_EQ(whole.data<float>()[i], factor * mine.data<float>()[i % 3]) << i;
    }
    EXPECT_EQ(world->last_count, dtype == DType::kF32 ? 3 : 2);
  }
  // A slice of the wrong length for the whole shape is refused at compile time.
  Graph g;
  AttrMap attrs;
  attrs.Set("world_size", int64_t{kRanks});
  attrs.Set("shape", std::vector<int64_t>{7});
  auto bad = g.AddNode("AllGather", {g.AddInput("slice", DType::kF32, {4})}, attrs, "gather");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("over 3 ranks needs [3]"), std::string::npos) << bad.status();
}

TEST(ZeroKernelTest, ReduceScatterShardAndGatherMoveTheRightSlices) {
  // x: 10 floats (slices of 4: rank 1 owns [4, 8)); y: 2 floats (slices of 1: rank 1 owns [1, 2)).
  Graph g;
  GraphBuilder b(&g);
  AttrMap ranks;
  ranks.Set("world_size", int64_t{kRanks});
  Value* x = g.AddInput("x", DType::kF32, {2, 5});
  Value* y = g.AddInput("y", DType::kF32, {2});
  std::vector<Value*> scattered = b.OpN("ReduceScatter", {x, y}, ranks);
  const Tensor wv = testing::RandomTensor(DType::kF32, {10}, 7);
  Value* w = g.AddState("w", wv);
  Value* shard = b.Op("Shard", {w}, ranks);
  ASSERT_TRUE(b.status().ok()) << b.status();
  Value* update = g.AddInput("u", DType::kF32, {4});
  auto gather = g.AddNode("AllGatherInPlace", {update, w}, ranks, "gather");
  ASSERT_TRUE(gather.ok()) << gather.status();
  (*gather)->control_deps.push_back(shard->producer);
  g.SetOutputs({scattered[0], scattered[1], shard});
  EXPECT_EQ(scattered[0]->shape, Shape{4});
  EXPECT_EQ(scattered[1]->shape, Shape{1});

  MiddleRank world;
  auto backend = CreateCpuBackend();
  backend->set_communicator(&world);
  auto ex = testing::ExecutorFor(g, *backend);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor xv = testing::RandomTensor(DType::kF32, {2, 5}, 8);
  const Tensor yv = testing::RandomTensor(DType::kF32, {2}, 9);
  const Tensor uv = testing::RandomTensor(DType::kF32, {4}, 10);
  ASSERT_TRUE((*ex)->SetInput("x", xv).ok());
  ASSERT_TRUE((*ex)->SetInput("y", yv).ok());
  ASSERT_TRUE((*ex)->SetInput("u", uv).ok());
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  const Tensor xs = *(*ex)->Fetch(scattered[0]->name);
  const Tensor ys = *(*ex)->Fetch(scattered[1]->name);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(xs.data<float>()[i], 3 * xv.data<float>()[4 + i]) << i;
  EXPECT_FLOAT_EQ(ys.data<float>()[0], 3 * yv.data<float>()[1]);
  const Tensor sv = *(*ex)->Fetch(shard->name);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(sv.data<float>()[i], wv.data<float>()[4 + i]) << i;
  // Rank r's slice of w is rank r's update: (r + 1) * u here; rank 2's is 2 long.
  const Tensor after = *(*ex)->ReadPersistent("w");
  for (int i = 0; i < 10; ++i) {
    const int r = i / 4;
    EXPECT_FLOAT_EQ(after.data<float>()[i], (r + 1) * uv.data<float>()[i % 4]) << i;
  }
  EXPECT_EQ(world.last_count, 4) << "one rank's chunk of the gather";
}

TEST(ZeroKernelTest, AProgramForAnotherWorldSizeIsRefused) {
  Graph g;
  GraphBuilder b(&g);
  AttrMap ranks;
  ranks.Set("world_size", int64_t{4});
  Value* s = b.Op("Shard", {g.AddInput("x", DType::kF32, {8})}, ranks);
  ASSERT_TRUE(b.status().ok());
  g.SetOutputs({s});
  MiddleRank world;
  auto backend = CreateCpuBackend();
  backend->set_communicator(&world);
  auto ex = testing::ExecutorFor(g, *backend);
  ASSERT_FALSE(ex.ok());
  EXPECT_NE(ex.status().message().find("compiled for 4 ranks; this job has 3"), std::string::npos) << ex.status();
}

}  // namespace
}  // namespace mpc
