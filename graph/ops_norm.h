// Helpers of the normalisation / math / reduction op family (graph/ops_norm.cc) that the
// kernels and the compiler share.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc::ops {

// ReduceSum / ReduceMean: the sorted, normalised axes the node reduces over (from the
// `axes` input when present, else the `axes` attribute; none given or empty: all axes,
// or none with noop_with_empty_axes = 1). Shared by inference, gradients and kernels.
absl::StatusOr<std::vector<int>> ReduceAxes(const Node& node);

// BatchNormalization's mode: attribute mpc_training (set by the compiler) when present,
// else ONNX's training_mode attribute (default 0).
bool BatchNormTraining(const Node& node);

// LayerNormalization / LayerNormGrad and RmsNorm / RmsNormGrad (graph/ops_rms_norm.cc):
// the normalised first axis (attribute axis, default -1) against X's rank.
absl::StatusOr<int> LayerNormAxis(const Node& node);

}  // namespace mpc::ops
