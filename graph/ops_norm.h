// Helpers of the normalisation / math / reduction op family (graph/ops_norm.cc) that the
// CPU kernels and the compiler share, and the compiler step that makes
// BatchNormalization's running statistics persistent: in a training program every
// BatchNormalization node gets a BatchNormStatsUpdate that writes its updated running
// mean/var back into the running-statistics state in place, ordered after every reader
// of that state.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc {

// For each training-mode BatchNormalization node (mpc_training = 1) whose running mean
// and variance are persistent state (ValueKind::kState; the ONNX importer makes
// initializers used only as BatchNormalization input_mean/input_var state), adds
// BatchNormStatsUpdate(running_mean, running_var, node:1, node:2) with control
// dependencies on every reader of the state. engine/program.cc calls it on training
// graphs before the pass pipeline. Statistics fed as inputs or baked in as constants are
// left alone; trainable-parameter statistics are an error naming the node.
absl::Status AddBatchNormStatsUpdates(Graph& graph);

}  // namespace mpc

namespace mpc::ops {

// ReduceSum / ReduceMean: the sorted, normalised axes the node reduces over (from the
// `axes` input when present, else the `axes` attribute; none given or empty: all axes,
// or none with noop_with_empty_axes = 1). Shared by inference, gradients and kernels.
absl::StatusOr<std::vector<int>> ReduceAxes(const Node& node);

// BatchNormalization's mode: attribute mpc_training (set by the compiler) when present,
// else ONNX's training_mode attribute (default 0).
bool BatchNormTraining(const Node& node);

// LayerNormalization / LayerNormGrad: the normalised first axis (attribute axis,
// default -1) against X's rank.
absl::StatusOr<int> LayerNormAxis(const Node& node);

}  // namespace mpc::ops
