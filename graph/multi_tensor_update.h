// The input layouts of the optimizer updates, shared by their shape inference, the
// fuse-updates pass that turns single updates into multi-tensor ones, and the kernels.
//   SgdUpdate(param, grad, lr[, momentum_buf][, lowp_copy][, found_nonfinite])
//   AdamWUpdate(param, grad, lr, m, v, step[, lowp_copy][, found_nonfinite])
//   MultiSgdUpdate(lr[, found_nonfinite], {param, grad[, momentum_buf][, lowp_copy]} x N)
//   MultiAdamWUpdate(lr[, found_nonfinite], {param, grad, m, v, step[, lowp_copy]} x N)
// Attributes are those of SgdUpdate / AdamWUpdate (one set for all N tensors: gated,
// momentum, nesterov, betas...) plus lowp_copies, N ints: 1 where that tensor's group
// ends with its bf16/f16 copy. An SGD group carries a momentum buffer exactly when
// momentum != 0 (what the optimizer pass creates). One node updates N parameters, so a
// backend can launch one kernel for all of them instead of one per parameter.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc {

// Where one parameter's inputs are. Every index is into Node::inputs; -1 when absent.
struct UpdateTensorInputs {
  int param = -1;
  int grad = -1;
  int momentum_buf = -1;          // SGD with momentum
  int m = -1, v = -1, step = -1;  // AdamW
  int lowp_copy = -1;
};

struct MultiUpdateLayout {
  bool adamw = false;
  int lr = 0;
  int found_nonfinite = -1;  // gated=1
  std::vector<UpdateTensorInputs> tensors;
};

// Where the parameter's inputs of a single SgdUpdate / AdamWUpdate are (lr is input 2,
// found_nonfinite the last with gated=1); an error naming the node when its input count
// does not fit its attributes.
absl::StatusOr<UpdateTensorInputs> SingleUpdateInputsOf(const Node& node);

// True for MultiSgdUpdate and MultiAdamWUpdate.
bool IsMultiTensorUpdate(const Node& node);

// The layout of a MultiSgdUpdate / MultiAdamWUpdate node; an error naming the node when
// its input count does not match its attributes.
absl::StatusOr<MultiUpdateLayout> MultiUpdateLayoutOf(const Node& node);

}  // namespace mpc
