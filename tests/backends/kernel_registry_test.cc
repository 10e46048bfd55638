// The kernel registry: lookups by (op, backend, dtype), and a missing kernel is an error
// that names all three and the dtypes that do exist.
#include "backends/backend.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/device.h"
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

TEST(KernelRegistryTest, UnknownDeviceIsAClearError) {
  auto b = CreateBackend("tpu");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(std::string(b.status().message()).find("unknown device 'tpu'"), std::string::npos);
}

}  // namespace
}  // namespace mpc
