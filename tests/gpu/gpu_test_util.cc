// The shared backends of tests/gpu (see gpu_test_util.h).
#include "tests/gpu/gpu_test_util.h"

#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"

namespace mpc::testing {

absl::StatusOr<Backend*> SharedGpu() {
  // Leaked on purpose: kernels of static test fixtures may outlive main's locals.
  static absl::StatusOr<Backend*>* gpu = [] {
    auto b = CreateCudaBackend(0);
    if (!b.ok()) return new absl::StatusOr<Backend*>(b.status());
    return new absl::StatusOr<Backend*>(b->release());
  }();
  return *gpu;
}

Backend& SharedCpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

}  // namespace mpc::testing
