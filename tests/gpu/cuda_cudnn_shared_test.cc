// The cuDNN state every convolution kernel shares (backends/cuda/cuda_device.h): one
// handle per backend, and one workspace that only grows, keeping the buffers it replaced
// (a captured CUDA graph may still point into them).
#include "backends/cuda/cuda_device.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

namespace mpc {
namespace {

TEST(CudaCudnnShared, OneHandleAndAWorkspaceThatOnlyGrows) {
  MPC_GPU_OR_SKIP(gpu);
  auto cuda = cuda::AsCuda(gpu);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  auto first = (*cuda)->Cudnn();
  auto second = (*cuda)->Cudnn();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(*first, *second);

  // The process's backend may already hold a workspace from earlier tests: grow past it.
  const size_t base = (*cuda)->conv_workspace_bytes();
  ASSERT_TRUE((*cuda)->ReserveConvWorkspace(base + (1 << 20)).ok());
  void* grown = (*cuda)->conv_workspace();
  ASSERT_NE(grown, nullptr);
  EXPECT_EQ((*cuda)->conv_workspace_bytes(), base + (1 << 20));
  ASSERT_TRUE((*cuda)->ReserveConvWorkspace(base + 4096).ok());  // smaller: nothing changes
  EXPECT_EQ((*cuda)->conv_workspace(), grown);
  EXPECT_EQ((*cuda)->conv_workspace_bytes(), base + (1 << 20));
  ASSERT_TRUE((*cuda)->ReserveConvWorkspace(base + (3 << 20)).ok());
  EXPECT_NE((*cuda)->conv_workspace(), grown);
  EXPECT_EQ((*cuda)->conv_workspace_bytes(), base + (3 << 20));
  // The replaced buffer is still allocated: writing it is not an error.
  EXPECT_EQ(cudaMemsetAsync(grown, 0, 1 << 20, (*cuda)->stream()), cudaSuccess);
  EXPECT_TRUE(gpu.Synchronize().ok());
}

}  // namespace
}  // namespace mpc
