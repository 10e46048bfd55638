// autocast: decides the precision of every forward op and inserts the casts, in the
// spirit of TensorFlow's auto_mixed_precision pass. It runs before autodiff, so the
// backward pass inherits the forward pass's choices (the gradient of a Cast is a Cast),
// parameters stay FP32 master weights and their gradients arrive in f32.
//
// Phases (each decision is recorded with its reason in CompileInfo::paint):
//   1. allow-list ops (GEMMs) are painted low precision.
//   2. deny propagates forward: infer and clear ops fed by a deny op are denied.
//   3. infer and clear ops on a path between two allow ops are painted low precision,
//      so no casts separate a GEMM from the elementwise work around it.
//   4. allow propagates through clear ops (forward from an allow producer, backward to
//      a clear op all of whose consumers are allow).
//   5. nodes the backend cannot run in the target dtype, or with non-f32 float
//      operands, are removed from allow.
//   6. user node overrides (spec precision.node_override) win.
//   7. casts are inserted: one per (value, dtype) crossing, shared by every consumer
//      on that side; casts already in the model are reused, and a cast of a cast's
//      output goes back to the cast's input instead of chaining.
// The TENSOR_CORES_ONLY level runs phases 1, 5, 6 and 7 only.
#pragma once

#include "passes/pass.h"

namespace mpc {

class AutocastPass : public Pass {
 public:
  std::string_view name() const override { return "autocast"; }
  absl::StatusOr<bool> Run(Graph& graph, const PassContext& ctx) override;
};

// "f32" | "tf32" | "bf16" | "fp16" (also "f16") -> the spec enum; error otherwise.
absl::StatusOr<PrecisionSpec::Compute> ParsePrecision(const std::string& name);

}  // namespace mpc
