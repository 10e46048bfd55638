// Executor::UploadInputAhead / SetInputFromUpload (the engine's batches copied to the
// device during the step before them): against the CPU backend, which has no uploads
// ahead (false, nothing kept), and against a CPU backend that has them (a wrapper that
// copies into the staging buffer and out of it): the input then holds the uploaded data,
// one staging buffer per input is reused for every upload, plain SetInput still works, and
// wrong names, shapes and orders are errors. The CUDA streams and events themselves are
// tests/gpu/cuda_gemm_test.cc's; the engine on CUDA is tests/gpu/cuda_engine_upload_test.cc.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "engine/executor.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// The CPU backend plus uploads ahead, done at once with memcpy (its device memory is the
// host's), counting what it is asked.
class UploadingCpuBackend : public Backend {
 public:
  explicit UploadingCpuBackend(Backend& cpu) : cpu_(cpu) {}
  std::string name() const override { return cpu_.name(); }
  const Capabilities& capabilities() const override { return cpu_.capabilities(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    ++allocations;
    return cpu_.Allocate(bytes);
  }
  void Free(void* ptr) override { cpu_.Free(ptr); }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    return cpu_.CopyToDevice(dst, src, bytes);
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override { return cpu_.CopyToHost(dst, src, bytes); }
  absl::Status Synchronize() override { return cpu_.Synchronize(); }
  const KernelRegistry& kernels() const override { return cpu_.kernels(); }
  void BeginKernelGroup() override { cpu_.BeginKernelGroup(); }
  void EndKernelGroup() override { cpu_.EndKernelGroup(); }

  absl::StatusOr<bool> UploadAhead(void* staging, const void* src, size_t bytes) override {
    ++uploads;
    std::memcpy(staging, src, bytes);
    return true;
  }
  absl::Status CopyFromUpload(void* dst, const void* staging, size_t bytes) override {
    std::memcpy(dst, staging, bytes);
    return absl::OkStatus();
  }

  int allocations = 0;
  int uploads = 0;

 private:
  Backend& cpu_;
};

// x [4, 7] -> Relu -> y, with a second input z [3] -> Neg -> w.
std::unique_ptr<Graph> TwoInputs() {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* y = b.Op("Relu", {g->AddInput("x", DType::kF32, {4, 7})});
  Value* w = b.Op("Neg", {g->AddInput("z", DType::kF32, {3})});
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({y, w});
  return g;
}

// Runs the program and checks y == relu(x_host).
void ExpectReluOf(Executor& ex, const Graph& g, const Tensor& x_host) {
  ASSERT_TRUE(ex.Run(1, 0).ok());
  auto y = ex.Fetch(g.outputs()[0]->name);
  ASSERT_TRUE(y.ok()) << y.status();
  for (int64_t i = 0; i < x_host.num_elements(); ++i) {
    EXPECT_EQ(y->data<float>()[i], std::max(0.0f, x_host.data<float>()[i])) << "element " << i;
  }
}

TEST(ExecutorUploadTest, UploadedInputsFeedTheRunThroughOneStagingBufferEach) {
  UploadingCpuBackend backend(testing::CpuBackend());
  auto g = TwoInputs();
  auto ex = testing::ExecutorFor(*g, backend);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor z = testing::RandomTensor(DType::kF32, {3}, 9);
  ASSERT_TRUE((*ex)->SetInput("z", z).ok());

  const int allocations_before = backend.allocations;
  for (uint64_t seed : {1, 2, 3}) {
    const Tensor x = testing::RandomTensor(DType::kF32, {4, 7}, seed);
    auto uploaded = (*ex)->UploadInputAhead("x", x);
    ASSERT_TRUE(uploaded.ok()) << uploaded.status();
    EXPECT_TRUE(*uploaded);
    ASSERT_TRUE((*ex)->SetInputFromUpload("x").ok());
    ExpectReluOf(**ex, *g, x);
  }
  EXPECT_EQ(backend.uploads, 3);
  EXPECT_EQ(backend.allocations - allocations_before, 1) << "one staging buffer for x, reused";

  // Plain SetInput after uploads still feeds the input.
  const Tensor x = testing::RandomTensor(DType::kF32, {4, 7}, 4);
  ASSERT_TRUE((*ex)->SetInput("x", x).ok());
  ExpectReluOf(**ex, *g, x);
}

TEST(ExecutorUploadTest, WrongNamesShapesAndOrderAreErrors) {
  UploadingCpuBackend backend(testing::CpuBackend());
  auto g = TwoInputs();
  auto ex = testing::ExecutorFor(*g, backend);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor x = testing::RandomTensor(DType::kF32, {4, 7}, 1);
  EXPECT_EQ((*ex)->UploadInputAhead("nope", x).status().code(), absl::StatusCode::kNotFound);
  const absl::Status shape = (*ex)->UploadInputAhead("x", testing::RandomTensor(DType::kF32, {4, 6}, 1)).status();
  EXPECT_EQ(shape.code(), absl::StatusCode::kInvalidArgument) << shape;
  EXPECT_NE(shape.message().find("input 'x' expects f32[4,7]"), std::string::npos) << shape;
  ASSERT_TRUE((*ex)->UploadInputAhead("x", x).ok());
  const absl::Status never = (*ex)->SetInputFromUpload("z");
  EXPECT_EQ(never.code(), absl::StatusCode::kFailedPrecondition) << never;
  EXPECT_NE(never.message().find("input 'z' was never uploaded ahead"), std::string::npos) << never;
  EXPECT_EQ(backend.uploads, 1) << "a refused upload reaches no backend";
}

TEST(ExecutorUploadTest, TheCpuBackendHasNoUploadsAheadAndKeepsNoBuffer) {
  auto g = TwoInputs();
  auto ex = testing::ExecutorFor(*g, testing::CpuBackend());
  ASSERT_TRUE(ex.ok()) << ex.status();
  auto uploaded = (*ex)->UploadInputAhead("x", testing::RandomTensor(DType::kF32, {4, 7}, 1));
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_FALSE(*uploaded);
  EXPECT_EQ((*ex)->SetInputFromUpload("x").code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace mpc
