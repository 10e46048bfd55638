// set-mode: puts every Dropout and BatchNormalization in the program's mode, whatever
// training_mode the model was exported with. In a training program Dropout drops and
// BatchNormalization normalises with the batch's statistics; in an evaluation program
// Dropout is the identity and BatchNormalization uses its running statistics. The mode is
// the attribute mpc_training (0 or 1) that those ops' definitions read.
#pragma once

#include "passes/pass.h"

namespace mpc {

class SetModePass : public Pass {
 public:
  explicit SetModePass(bool training) : training_(training) {}
  std::string_view name() const override { return "set-mode"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  bool training_;
};

}  // namespace mpc
