// Choosing a backend by device name. The one place that knows every backend: the CPU
// always, CUDA when this build has it (MPC_WITH_CUDA) and a device answers.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace mpc {

// "cpu", "cuda", "cuda:N", or "auto" (the GPU when there is one, else the CPU).
absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& device);

}  // namespace mpc
