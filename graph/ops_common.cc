// Shared inference helpers for the op registry.
#include "graph/ops_common.h"

#include <cmath>

#include "base/status_macros.h"

namespace mpc::ops {

absl::StatusOr<const Value*> RequiredInput(const Node& node, int i) {
  if (i >= static_cast<int>(node.inputs.size()) || node.inputs[i] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("input ", i, " is required"));
  }
  return node.inputs[i];
}

absl::Status CheckSameDType(const Node& node, int first, int last) {
  const Value* ref = nullptr;
  for (int i = first; i < last && i < static_cast<int>(node.inputs.size()); ++i) {
    const Value* v = node.inputs[i];
    if (!v) continue;
    if (ref && v->dtype != ref->dtype) {
      return absl::InvalidArgumentError(absl::StrCat("inputs '", ref->name, "' (", DTypeName(ref->dtype), ") and '",
                                                     v->name, "' (", DTypeName(v->dtype),
                                                     ") must have the same dtype; insert a Cast"));
    }
    ref = v;
  }
  return absl::OkStatus();
}

absl::Status CheckFloating(const Node& node, int i) {
  MPC_ASSIGN_OR_RETURN(const Value* v, RequiredInput(node, i));
  if (!IsFloating(v->dtype)) {
    // Unimplemented, not invalid: ONNX allows integer tensors for several of these ops
    // (MaxPool on uint8, Pow on int32); mpc computes them in floating point only.
    return absl::UnimplementedError(absl::StrCat("input '", v->name, "' has dtype ", DTypeName(v->dtype),
                                                 "; mpc supports only float types (f32, f64, bf16, f16) here"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int64_t>> ConstantInts(const Node& node, int i) {
  MPC_ASSIGN_OR_RETURN(const Value* v, RequiredInput(node, i));
  if (v->kind != ValueKind::kConstant || v->data.empty()) {
    return absl::UnimplementedError(absl::StrCat("input '", v->name,
                                                 "' must be a constant (an initializer or Constant node); mpc compiles "
                                                 "static shapes, so computed shapes are not supported"));
  }
  std::vector<int64_t> out(v->data.num_elements());
  for (size_t k = 0; k < out.size(); ++k) out[k] = static_cast<int64_t>(v->data.GetAsDouble(k));
  return out;
}

absl::StatusOr<double> ConstantScalar(const Node& node, int i, double fallback) {
  if (i >= static_cast<int>(node.inputs.size()) || node.inputs[i] == nullptr) return fallback;
  const Value* v = node.inputs[i];
  if (v->kind != ValueKind::kConstant || v->data.num_elements() != 1) {
    return absl::UnimplementedError(absl::StrCat("input '", v->name, "' must be a constant scalar"));
  }
  return v->data.GetAsDouble(0);
}

absl::StatusOr<std::vector<TensorType>> SameAsInput(const Node& node, int i) {
  MPC_ASSIGN_OR_RETURN(const Value* v, RequiredInput(node, i));
  return std::vector<TensorType>{{v->dtype, v->shape}};
}

absl::StatusOr<std::vector<TensorType>> BroadcastBinary(const Node& node) {
  MPC_RETURN_IF_ERROR(CheckSameDType(node, 0, 2));
  MPC_ASSIGN_OR_RETURN(const Value* a, RequiredInput(node, 0));
  MPC_ASSIGN_OR_RETURN(const Value* b, RequiredInput(node, 1));
  MPC_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(a->shape, b->shape));
  return std::vector<TensorType>{{a->dtype, shape}};
}

std::vector<int64_t> SwapLastTwo(int rank) {
  std::vector<int64_t> perm(rank);
  for (int i = 0; i < rank; ++i) perm[i] = i;
  if (rank >= 2) std::swap(perm[rank - 1], perm[rank - 2]);
  return perm;
}

}  // namespace mpc::ops
