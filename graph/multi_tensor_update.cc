// SingleUpdateInputsOf and MultiUpdateLayoutOf: where an update's inputs are.
#include "graph/multi_tensor_update.h"

#include "absl/strings/str_cat.h"

namespace mpc {

absl::StatusOr<UpdateTensorInputs> SingleUpdateInputsOf(const Node& node) {
  const bool adamw = node.op == "AdamWUpdate";
  const int gated = node.attrs.GetInt("gated", 0) != 0 ? 1 : 0;
  const int copy = node.attrs.GetInt("lowp_copy", 0) != 0 ? 1 : 0;
  const int state_end = static_cast<int>(node.inputs.size()) - gated - copy;
  if (adamw ? state_end != 6 : (state_end != 3 && state_end != 4)) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op, " node '", node.name, "' has ", node.inputs.size(),
                     " inputs, which does not fit its attributes (", "lowp_copy=", copy, ", gated=", gated,
                     "); expected ", adamw ? "param, grad, lr, m, v, step" : "param, grad, lr[, momentum_buf]",
                     copy ? ", the low-precision copy" : "", gated ? ", found_nonfinite" : ""));
  }
  UpdateTensorInputs in;
  in.param = 0;
  in.grad = 1;
  if (adamw) {
    in.m = 3;
    in.v = 4;
    in.step = 5;
  } else if (state_end == 4) {
    in.momentum_buf = 3;
  }
  if (copy) in.lowp_copy = state_end;
  return in;
}

bool IsMultiTensorUpdate(const Node& node) { return node.op == "MultiSgdUpdate" || node.op == "MultiAdamWUpdate"; }

absl::StatusOr<MultiUpdateLayout> MultiUpdateLayoutOf(const Node& node) {
  if (!IsMultiTensorUpdate(node)) {
    return absl::InvalidArgumentError(
        absl::StrCat("node '", node.name, "' (", node.op, ") is not a multi-tensor update"));
  }
  MultiUpdateLayout layout;
  layout.adamw = node.op == "MultiAdamWUpdate";
  const bool gated = node.attrs.GetInt("gated", 0) != 0;
  const bool momentum = !layout.adamw && node.attrs.GetFloat("momentum", 0.0f) != 0.0f;
  const std::vector<int64_t> copies = node.attrs.GetInts("lowp_copies", {});
  int next = 0;
  layout.lr = next++;
  if (gated) layout.found_nonfinite = next++;
  const int total = static_cast<int>(node.inputs.size());
  for (size_t t = 0; t < copies.size(); ++t) {
    UpdateTensorInputs in;
    in.param = next++;
    in.grad = next++;
    if (layout.adamw) {
      in.m = next++;
      in.v = next++;
      in.step = next++;
    } else if (momentum) {
      in.momentum_buf = next++;
    }
    if (copies[t] != 0) in.lowp_copy = next++;
    layout.tensors.push_back(in);
  }
  if (copies.empty() || next != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        node.op, " node '", node.name, "' has ", total, " inputs but its attributes (", copies.size(),
        " entries in lowp_copies", gated ? ", gated=1" : "", momentum ? ", momentum buffers" : "", ") describe ", next,
        "; each parameter needs ",
        layout.adamw ? "param, grad, m, v, step" : (momentum ? "param, grad, momentum_buf" : "param, grad"),
        " and its copy where lowp_copies is 1"));
  }
  return layout;
}

}  // namespace mpc
