// What every GPU test file needs: the process's one CUDA backend (or why there is none)
// and the CPU backend it is compared against. There is no GPU in CI or on the development
// machines, so a test that needs the device skips with the reason via MPC_GPU_OR_SKIP;
// these tests really run on the H100 (ctest -L gpu, scripts/gpu/verify.sh).
#pragma once

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "gtest/gtest.h"

namespace mpc::testing {

// The CUDA backend on device 0, created on first use and kept for the whole process.
absl::StatusOr<Backend*> SharedGpu();
// The CPU backend, likewise shared.
Backend& SharedCpu();

}  // namespace mpc::testing

// Binds `var` (Backend&) to the shared GPU backend, or skips the test with the reason.
#define MPC_GPU_OR_SKIP(var)                                                \
  auto var##_or = ::mpc::testing::SharedGpu();                              \
  if (!var##_or.ok()) GTEST_SKIP() << var##_or.status().message();          \
  ::mpc::Backend& var = **var##_or
