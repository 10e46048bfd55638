// What every GPU test file needs: the process's one CUDA backend (or why there is none)
// and the CPU backend it is compared against. There is no GPU in CI or on the development
// machines, so a test that needs the device skips with the reason via MPC_GPU_OR_SKIP;
// these tests really run on the H100 (ctest -L gpu, scripts/gpu/verify.sh).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "graph/tensor.h"
#include "gtest/gtest.h"

namespace mpc::testing {

// The CUDA backend on device 0, created on first use and kept for the whole process.
absl::StatusOr<Backend*> SharedGpu();
// The CPU backend, likewise shared.
Backend& SharedCpu();

// Device buffers for tests that call a kernel wrapper directly, freed with the test.
// Failures are reported with ADD_FAILURE and give nullptr / what was read.
class DeviceBuffers {
 public:
  explicit DeviceBuffers(Backend& backend) : backend_(backend) {}
  ~DeviceBuffers();
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;

  // A device copy of `bytes` host bytes (zeros when host is null).
  void* Upload(const void* host, size_t bytes);
  void* Upload(const Tensor& t) { return Upload(t.raw(), t.bytes()); }
  void* Zeros(DType dtype, int64_t count) { return Upload(nullptr, static_cast<size_t>(count) * DTypeSize(dtype)); }
  // What is at `device` (synchronises first), as bytes or as a tensor.
  std::vector<unsigned char> Download(const void* device, size_t bytes);
  Tensor Download(const void* device, DType dtype, const Shape& shape);

 private:
  Backend& backend_;
  std::vector<void*> owned_;
};

}  // namespace mpc::testing

// Binds `var` (Backend&) to the shared GPU backend, or skips the test with the reason.
#define MPC_GPU_OR_SKIP(var)                                       \
  auto var##_or = ::mpc::testing::SharedGpu();                     \
  if (!var##_or.ok()) GTEST_SKIP() << var##_or.status().message(); \
  ::mpc::Backend& var = **var##_or
