// fuse-epilogues: folds a ReLU that is the only consumer of a Gemm into the Gemm as an
// epilogue (attribute mpc_activation=Relu), so the backend's GEMM applies it while the
// tile is still in registers (oneDNN post-op on the CPU, cuBLASLt epilogue on CUDA).
// The backward pass keeps working unchanged: ReluGrad reads the fused output, which
// holds the same values the Relu produced.
#pragma once

#include "passes/pass.h"

namespace mpc {

class FuseEpiloguesPass : public Pass {
 public:
  std::string_view name() const override { return "fuse-epilogues"; }
  absl::StatusOr<bool> Run(Graph& graph) override;
};

}  // namespace mpc
