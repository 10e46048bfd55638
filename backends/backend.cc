// Kernel registry lookups and kernel creation.
#include "backends/backend.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace mpc {

DType KernelDType(const Node& node) {
  for (const Value* in : node.inputs) {
    if (in) return in->dtype;
  }
  return node.outputs.empty() ? DType::kF32 : node.outputs[0]->dtype;
}

static std::string Key(const std::string& op, const std::string& backend, DType dtype) {
  return absl::StrCat(op, "|", backend, "|", DTypeName(dtype));
}

void KernelRegistry::Register(const std::string& op, const std::string& backend, DType dtype, KernelFactory factory) {
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
  return absl::UnimplementedError(
      absl::StrCat("no kernel for op '", op, "' on backend '", backend, "' with dtype ", DTypeName(dtype),
                   available.empty() ? std::string("; this backend has no kernel for the op at all")
                                     : absl::StrCat("; available dtypes: ", absl::StrJoin(available, " "))));
}

absl::StatusOr<std::unique_ptr<Kernel>> Backend::CreateKernel(const Node& node) {
  auto factory = kernels().Find(node.op, name(), KernelDType(node));
  if (!factory.ok()) {
    // Name the node, so the user finds it in the model, and how to get past it.
    return absl::Status(factory.status().code(),
                        absl::StrCat("node '", node.name, "' (", node.op, "): ", factory.status().message(),
                                     ". Cast the node's inputs to one of those dtypes in the model, or run it on "
                                     "a backend that has the kernel"));
  }
  auto kernel = (**factory)(node, *this);
  if (!kernel.ok()) {
    return absl::Status(kernel.status().code(), absl::StrCat("node '", node.name, "' (", node.op, ", ", name(),
                                                             "): ", kernel.status().message()));
  }
  return kernel;
}

}  // namespace mpc
