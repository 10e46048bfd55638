// CreateBackend (see device.h).
#include "engine/device.h"

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#ifdef MPC_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace mpc {

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const std::string& device) {
  if (device == "cpu") return CreateCpuBackend();
  if (device == "auto") {
    // The GPU when this build has a CUDA backend and a device answers; else the CPU.
    auto cuda = CreateBackend("cuda");
    if (cuda.ok()) return cuda;
    return CreateCpuBackend();
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
#ifdef MPC_WITH_CUDA
    int index = 0;
    if (device != "cuda") {
      const std::string n = device.substr(5);
      if (n.empty() || n.size() > 4 || n.find_first_not_of("0123456789") != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat("unknown device '", device, "'; expected cuda or cuda:N"));
      }
      index = std::stoi(n);
    }
    return CreateCudaBackend(index);
#else
    return absl::UnavailableError(
        "device 'cuda': this build has no CUDA backend (configure with -DMPC_WITH_CUDA=ON on a "
        "machine with the CUDA toolkit); use --device cpu");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown device '", device, "'; expected cpu, cuda or auto"));
}

}  // namespace mpc
