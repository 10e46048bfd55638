// Kernel registry lookups and backend selection.
#include "backends/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/cpu_backend.h"
#include "base/status_macros.h"
#ifdef MPC_WITH_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace mpc {

bool Capabilities::Native(DType d) const {
  return std::find(native_compute.begin(), native_compute.end(), d) != native_compute.end();
}

int Capabilities::PadMultiple(DType d) const {
  auto it = pad_multiple.find(d);
  return it == pad_multiple.end() ? 1 : it->second;
}

DType KernelDType(const Node& node) {
  for (const Value* in : node.inputs) {
    if (in) return in->dtype;
  }
  return node.outputs.empty() ? DType::kF32 : node.outputs[0]->dtype;
}

static std::string Key(const std::string& op, const std::string& backend, DType dtype) {
  return absl::StrCat(op, "|", backend, "|", DTypeName(dtype));
}

void KernelRegistry::Register(const std::string& op, const std::string& backend, DType dtype,
                              KernelFactory factory) {
  factories_[Key(op, backend, dtype)] = std::move(factory);
}

bool KernelRegistry::Has(const std::string& op, const std::string& backend, DType dtype) const {
  return factories_.contains(Key(op, backend, dtype));
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::Entries(const std::string& backend) const {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [key, factory] : factories_) {
    const size_t a = key.find('|'), b = key.rfind('|');
    if (key.substr(a + 1, b - a - 1) == backend) out.emplace_back(key.substr(0, a), key.substr(b + 1));
  }
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<const KernelFactory*> KernelRegistry::Find(const std::string& op, const std::string& backend,
                                                          DType dtype) const {
  auto it = factories_.find(Key(op, backend, dtype));
  if (it != factories_.end()) return &it->second;
  std::vector<std::string> available;
  const std::string prefix = absl::StrCat(op, "|", backend, "|");
  for (const auto& [key, factory] : factories_) {
    if (key.rfind(prefix, 0) == 0) available.push_back(key.substr(prefix.size()));
  }
  std::sort(available.begin(), available.end());
  return absl::UnimplementedError(absl::StrCat(
      "no kernel for op '", op, "' on backend '", backend, "' with dtype ", DTypeName(dtype),
      available.empty() ? std::string("; this backend has no kernel for the op at all")
                        : absl::StrCat("; available dtypes: ", absl::StrJoin(available, " "))));
}

absl::StatusOr<std::unique_ptr<Kernel>> Backend::CreateKernel(const Node& node) {
  MPC_ASSIGN_OR_RETURN(const KernelFactory* factory, kernels().Find(node.op, name(), KernelDType(node)));
  auto kernel = (*factory)(node, *this);
  if (!kernel.ok()) {
    return absl::Status(kernel.status().code(), absl::StrCat("node '", node.name, "' (", node.op, ", ",
                                                             name(), "): ", kernel.status().message()));
  }
  return kernel;
}

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
