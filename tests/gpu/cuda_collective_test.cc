// The CUDA AllReduce on NCCL in a job of one rank (a GPU and NCCL, no mpirun): the
// communicator is a one-rank stand-in, so NCCL's unique id travels through its AllGather
// and ncclCommInitRank makes a one-rank communicator. A reduction over one rank is the
// identity, so the outputs must equal the inputs bit for bit, for a bucket of several
// tensors and for the in-place form FP8 amax histories use; ZeRO-1's ops likewise.
// Skips without a device.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "distributed/communicator.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

class SoloWorld : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  absl::Status AllReduce(float*, int64_t, ReduceOp, const std::string&) override { return absl::OkStatus(); }
  absl::Status ReduceScatter(const float* send, float* recv, int64_t count, const std::string&) override {
    std::copy_n(send, count, recv);
    return absl::OkStatus();
  }
  absl::Status AllGatherFloats(const float* mine, float* all, int64_t count, const std::string&) override {
    std::copy_n(mine, count, all);
    return absl::OkStatus();
  }
  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine, const std::string&) override {
    return std::vector<std::string>{mine};
  }
  void Abort(int) override { std::abort(); }
};

TEST(CudaAllReduce, OneRankNcclJobReturnsItsInputs) {
  MPC_GPU_OR_SKIP(gpu);
  static SoloWorld solo;  // the shared backend keeps its NCCL communicator
  gpu.set_communicator(&solo);
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {3, 129});
  Value* y = g.AddInput("y", DType::kF32, {17});
  AttrMap attrs;
  attrs.Set("reduce", std::string("mean"));
  std::vector<Value*> outs = b.OpN("AllReduce", {x, y}, std::move(attrs));
  ASSERT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs(outs);
  auto ex = testing::ExecutorFor(g, gpu);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor xv = testing::RandomTensor(DType::kF32, {3, 129}, 1);
  const Tensor yv = testing::RandomTensor(DType::kF32, {17}, 2);
  ASSERT_TRUE((*ex)->SetInput("x", xv).ok());
  ASSERT_TRUE((*ex)->SetInput("y", yv).ok());
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  const Tensor xo = *(*ex)->Fetch(outs[0]->name);
  const Tensor yo = *(*ex)->Fetch(outs[1]->name);
  for (int64_t i = 0; i < xv.num_elements(); ++i) ASSERT_EQ(xo.data<float>()[i], xv.data<float>()[i]) << i;
  for (int64_t i = 0; i < yv.num_elements(); ++i) ASSERT_EQ(yo.data<float>()[i], yv.data<float>()[i]) << i;
}

TEST(CudaAllReduce, InPlaceOnStateKeepsIt) {
  MPC_GPU_OR_SKIP(gpu);
  static SoloWorld solo;
  if (!gpu.communicator()) gpu.set_communicator(&solo);
  Graph g;
  const Tensor initial = testing::RandomTensor(DType::kF32, {16}, 3);
  Value* history = g.AddState("h.fp8_amax_history", initial);
  AttrMap attrs;
  attrs.Set("reduce", std::string("max"));
  ASSERT_TRUE(g.AddNode("AllReduceInPlace", {history}, std::move(attrs), "amax").ok());
  auto ex = testing::ExecutorFor(g, gpu);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  const Tensor after = *(*ex)->ReadPersistent("h.fp8_amax_history");
  for (int64_t i = 0; i < initial.num_elements(); ++i) ASSERT_EQ(after.data<float>()[i], initial.data<float>()[i]);
}

// ZeRO-1's ops over one rank: the slice of a tensor is all of it (flattened), so
// ReduceScatter and Shard copy, and AllGatherInPlace writes its shard into the state;
// ClipByGlobalNorm over shards (its partial sums through NCCL) equals the unsharded one.
TEST(CudaZero, OneRankNcclJobShardsGathersAndClips) {
  MPC_GPU_OR_SKIP(gpu);
  static SoloWorld solo;
  if (!gpu.communicator()) gpu.set_communicator(&solo);
  Graph g;
  GraphBuilder b(&g);
  AttrMap one_rank;
  one_rank.Set("world_size", int64_t{1});
  Value* x = g.AddInput("x", DType::kF32, {3, 129});
  Value* scattered = b.OpN("ReduceScatter", {x}, one_rank)[0];
  const Tensor initial = testing::RandomTensor(DType::kF32, {17}, 4);
  Value* weight = g.AddState("w", initial);
  Value* shard = b.Op("Shard", {weight}, one_rank);
  Value* update = g.AddInput("u", DType::kF32, {17});
  AttrMap clip_attrs;
  clip_attrs.Set("max_norm", 0.5f);
  AttrMap sharded_clip = clip_attrs;
  sharded_clip.Set("sharded", int64_t{1});
  Value* clipped = b.OpN("ClipByGlobalNorm", {x}, clip_attrs)[0];
  Value* clipped_sharded = b.OpN("ClipByGlobalNorm", {x}, sharded_clip)[0];
  ASSERT_TRUE(b.status().ok()) << b.status();
  auto gather = g.AddNode("AllGatherInPlace", {update, weight}, one_rank, "gather");
  ASSERT_TRUE(gather.ok()) << gather.status();
  (*gather)->control_deps.push_back(shard->producer);
  g.SetOutputs({scattered, shard, clipped, clipped_sharded});
  auto ex = testing::ExecutorFor(g, gpu);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor xv = testing::RandomTensor(DType::kF32, {3, 129}, 5);
  const Tensor uv = testing::RandomTensor(DType::kF32, {17}, 6);
  ASSERT_TRUE((*ex)->SetInput("x", xv).ok());
  ASSERT_TRUE((*ex)->SetInput("u", uv).ok());
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  const Tensor so = *(*ex)->Fetch(scattered->name);
  const Tensor sh = *(*ex)->Fetch(shard->name);
  const Tensor c = *(*ex)->Fetch(clipped->name);
  const Tensor cs = *(*ex)->Fetch(clipped_sharded->name);
  const Tensor after = *(*ex)->ReadPersistent("w");
  for (int64_t i = 0; i < xv.num_elements(); ++i) {
    ASSERT_EQ(so.data<float>()[i], xv.data<float>()[i]) << i;
    ASSERT_EQ(cs.data<float>()[i], c.data<float>()[i]) << i;
  }
  for (int64_t i = 0; i < 17; ++i) {
    ASSERT_EQ(sh.data<float>()[i], initial.data<float>()[i]) << i;
    ASSERT_EQ(after.data<float>()[i], uv.data<float>()[i]) << i;
  }
}

// ZeRO-3's AllGather over one rank: the slice is the whole tensor, flattened; for f32 and
// the 16-bit copies ZeRO-3 gathers (ncclBfloat16, ncclFloat16), bit for bit.
TEST(CudaZero, OneRankNcclJobGathersEverySliceDtype) {
  MPC_GPU_OR_SKIP(gpu);
  static SoloWorld solo;
  if (!gpu.communicator()) gpu.set_communicator(&solo);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(dtype));
    Graph g;
    AttrMap attrs;
    attrs.Set("world_size", int64_t{1});
    attrs.Set("shape", std::vector<int64_t>{3, 43});
    Value* slice = g.AddInput("slice", dtype, {129});
    auto gather = g.AddNode("AllGather", {slice}, std::move(attrs), "gather");
    ASSERT_TRUE(gather.ok()) << gather.status();
    g.SetOutputs({(*gather)->outputs[0]});
    auto ex = testing::ExecutorFor(g, gpu);
    ASSERT_TRUE(ex.ok()) << ex.status();
    const Tensor sv = testing::RandomTensor(dtype, {129}, 7);
    ASSERT_TRUE((*ex)->SetInput("slice", sv).ok());
    ASSERT_TRUE((*ex)->Run(0, 0).ok());
    const Tensor whole = *(*ex)->Fetch((*gather)->outputs[0]->name);
    ASSERT_EQ(whole.shape(), (Shape{3, 43}));
    ASSERT_EQ(whole.bytes(), sv.bytes());
    EXPECT_EQ(std::memcmp(whole.raw(), sv.raw(), sv.bytes()), 0);
  }
}

}  // namespace
}  // namespace mpc
