// Marks the f32 GEMMs and convolutions of a tf32 program (see tf32.h).
#include "passes/tf32.h"

#include <cstdint>

namespace mpc {

bool Tf32Pass::IsTf32Op(std::string_view op) {
  return op == "Gemm" || op == "MatMul" || op == "Conv" || op == "ConvGradInput" || op == "ConvGradWeight";
}

absl::StatusOr<bool> Tf32Pass::Run(Graph& graph) {
  result_->enabled = enabled_;
  result_->marked.clear();
  if (!enabled_) return false;
  bool changed = false;
  for (const auto& owned : graph.nodes()) {
    Node& n = *owned;
    if (!IsTf32Op(n.op) || n.inputs.size() < 2 || !n.inputs[0] || !n.inputs[1]) continue;
    if (n.inputs[0]->dtype != DType::kF32 || n.inputs[1]->dtype != DType::kF32) continue;
    if (n.attrs.GetInt("mpc_fp8", 0) != 0) continue;
    if (n.attrs.GetInt("mpc_tf32", 0) == 0) {
      n.attrs.Set("mpc_tf32", int64_t{1});
      changed = true;
    }
    result_->marked.push_back({n.name, n.op});
  }
  return changed;
}

}  // namespace mpc
