// The kernel registry: lookups by (op, backend, dtype), and a missing kernel is an error
// that names all three and the dtypes that do exist.
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/device.h"
#include "graph/graph.h"
#include "gtest/gtest.h"

namespace mpc {
namespace {

TEST(KernelRegistryTest, MissingKernelNamesOpBackendAndDtype) {
  auto backend = CreateCpuBackend();
  const KernelRegistry& r = backend->kernels();
  EXPECT_TRUE(r.Find("Gemm", "cpu", DType::kF32).ok());
  auto missing = r.Find("AdamWUpdate", "cpu", DType::kBF16);
  ASSERT_FALSE(missing.ok());
  const std::string message(missing.status().message());
  EXPECT_NE(message.find("'AdamWUpdate'"), std::string::npos) << message;
  EXPECT_NE(message.find("'cpu'"), std::string::npos) << message;
  EXPECT_NE(message.find("bf16"), std::string::npos) << message;
  EXPECT_NE(message.find("available dtypes: f32"), std::string::npos) << message;
  auto unknown = r.Find("NoSuchOp", "cpu", DType::kF32);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(std::string(unknown.status().message()).find("no kernel for the op at all"), std::string::npos);
  EXPECT_FALSE(backend->capabilities().HasKernel("AdamWUpdate", DType::kBF16));
  EXPECT_TRUE(backend->capabilities().HasKernel("Gemm", DType::kBF16));
}

// A node whose dtype has no kernel: the error names the node as well, so the user can find
// it in the model (an Add over uint8 inputs, as a conformance run met it).
TEST(KernelRegistryTest, MissingKernelForANodeNamesTheNode) {
  auto backend = CreateCpuBackend();
  Graph g;
  Value* a = g.AddInput("a", DType::kU8, {4});
  Value* b = g.AddInput("b", DType::kU8, {4});
  auto node = g.AddNode("Add", {a, b}, {}, "pixels_plus_offset");
  ASSERT_TRUE(node.ok()) << node.status();
  auto kernel = backend->CreateKernel(**node);
  ASSERT_FALSE(kernel.ok());
  const std::string message(kernel.status().message());
  EXPECT_NE(message.find("node 'pixels_plus_offset' (Add)"), std::string::npos) << message;
  EXPECT_NE(message.find("u8"), std::string::npos) << message;
  EXPECT_NE(message.find("available dtypes:"), std::string::npos) << message;
  EXPECT_NE(message.find("Cast the node's inputs"), std::string::npos) << message;
}

// The passes keep copies of a backend's capabilities, sometimes past the backend's life
// (`caps = CreateCpuBackend()->capabilities()`); has_kernel must not reach into the
// destroyed backend (a heap-use-after-free the sanitized tests found in fp8_test.cc).
TEST(KernelRegistryTest, CopiedCapabilitiesOutliveTheBackend) {
  const Capabilities caps = CreateCpuBackend()->capabilities();
  EXPECT_TRUE(caps.HasKernel("Gemm", DType::kF32));
  EXPECT_FALSE(caps.HasKernel("AdamWUpdate", DType::kBF16));
}

TEST(KernelRegistryTest, UnknownDeviceIsAClearError) {
  auto b = CreateBackend("tpu");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("unknown device 'tpu'"), std::string::npos);
}

}  // namespace
}  // namespace mpc
