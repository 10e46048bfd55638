// The global op registry, filled once from every op family's registration function.
#include "graph/op_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mpc {

const OpRegistry& OpRegistry::Global() {
  static const OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    RegisterElementwiseOps(*r);
    RegisterNnOps(*r);
    RegisterShapeOps(*r);
    RegisterLossOps(*r);
    RegisterTrainingOps(*r);
    RegisterLossScalingOps(*r);
    RegisterFp8Ops(*r);
    RegisterFp8GemmOps(*r);
    RegisterConvOps(*r);
    RegisterNormOps(*r);
    RegisterRmsNormOps(*r);
    RegisterAttentionOps(*r);
    RegisterTensorOps(*r);
    RegisterCollectiveOps(*r);
    return r;
  }();
  return *registry;
}

void OpRegistry::Register(OpDef def) {
  std::string name = def.name;
  ops_[name] = std::move(def);
}

const OpDef* OpRegistry::Find(const std::string& op) const {
  auto it = ops_.find(op);
  return it == ops_.end() ? nullptr : &it->second;
}

absl::StatusOr<const OpDef*> OpRegistry::FindOrError(const std::string& op, const std::string& node_name) const {
  if (const OpDef* def = Find(op)) return def;
  return absl::UnimplementedError(absl::StrCat("unsupported op '", op, "' at node '", node_name,
                                               "'; supported ops: ", absl::StrJoin(OpNames(), " ")));
}

std::vector<std::string> OpRegistry::OpNames() const {
  std::vector<std::string> names;
  for (const auto& [name, def] : ops_) {
    if (def.domain.empty()) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace mpc
