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

DeviceBuffers::~DeviceBuffers() {
  for (void* p : owned_) backend_.Free(p);
}

void* DeviceBuffers::Upload(const void* host, size_t bytes) {
  auto p = backend_.Allocate(bytes);
  if (!p.ok()) {
    ADD_FAILURE() << p.status();
    return nullptr;
  }
  owned_.push_back(*p);
  std::vector<unsigned char> zeros;
  if (!host) {
    zeros.assign(bytes, 0);
    host = zeros.data();
  }
  if (absl::Status st = backend_.CopyToDevice(*p, host, bytes); !st.ok()) {
    ADD_FAILURE() << st;
    return nullptr;
  }
  return *p;
}

std::vector<unsigned char> DeviceBuffers::Download(const void* device, size_t bytes) {
  std::vector<unsigned char> host(bytes);
  if (absl::Status st = backend_.Synchronize(); !st.ok()) ADD_FAILURE() << st;
  if (absl::Status st = backend_.CopyToHost(host.data(), device, bytes); !st.ok()) ADD_FAILURE() << st;
  return host;
}

Tensor DeviceBuffers::Download(const void* device, DType dtype, const Shape& shape) {
  Tensor t(dtype, shape);
  if (absl::Status st = backend_.Synchronize(); !st.ok()) ADD_FAILURE() << st;
  if (absl::Status st = backend_.CopyToHost(t.raw(), device, t.bytes()); !st.ok()) ADD_FAILURE() << st;
  return t;
}

}  // namespace mpc::testing
