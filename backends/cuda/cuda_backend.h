// The CUDA backend's public entry point. Deliberately free of CUDA headers: backends/
// backend.cc (compiled without the toolkit's include path) includes it under
// MPC_WITH_CUDA. The class itself and what kernels need from it are in cuda_device.h.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace mpc {

// The backend on CUDA device `device`. Unavailable ("no CUDA device: <reason>; use
// --device cpu") when the runtime reports any error or no such device: on a machine
// without a driver cudaGetDeviceCount fails rather than returning 0.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(int device);

// Kernel families (backends/cuda/*.cc) add themselves to the "cuda" registry.
void RegisterCudaGemmKernels(KernelRegistry& r);

}  // namespace mpc
