// batch-norm-stats: makes a training program keep BatchNormalization's running
// statistics. Every training-mode BatchNormalization (after set-mode) whose running mean
// and variance are persistent state gets a BatchNormStatsUpdate(running_mean,
// running_var, node:1, node:2) that writes the updated statistics back into that state in
// place, after every reader of it. The ONNX importer makes initializers used only as a
// BatchNormalization's input_mean/input_var state. Statistics fed as inputs or baked in as
// constants are left alone; trainable-parameter statistics are an error naming the node.
#pragma once

#include "passes/pass.h"

namespace mpc {

class BatchNormStatsPass : public Pass {
 public:
  std::string_view name() const override { return "batch-norm-stats"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
