// autocast: decides the precision of every forward op and inserts the casts, in the
// spirit of TensorFlow's auto_mixed_precision pass. It runs before autodiff, so the
// backward pass inherits the forward pass's choices (the gradient of a Cast is a Cast),
// parameters stay FP32 master weights and their gradients arrive in f32.
//
// Phases, one function each in autocast.cc (every decision is recorded with its reason in
// AutocastResult::paint):
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

#include <string>
#include <vector>

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

// The precision a program computes in (the spec's precision.compute).
enum class Precision { kF32, kTF32, kBF16, kFP16, kFP8 };

struct AutocastOptions {
  Precision precision = Precision::kF32;  // FP8 paints like BF16; F32 and TF32 convert nothing
  bool tensor_cores_only = false;         // precision.level TENSOR_CORES_ONLY: phases 1, 5, 6, 7
  // Op types moved into a list (precision.add_allow ...), or out of every list (remove).
  std::vector<std::string> add_allow, add_deny, add_infer, add_clear, remove;
  // precision.node_override, in order: nodes whose whole name matches `pattern` (an
  // ECMAScript regex) run in `dtype` ("f32", "bf16", "f16"); the last match wins.
  struct NodeOverride {
    std::string pattern;
    std::string dtype;
  };
  std::vector<NodeOverride> node_overrides;
};

class AutocastPass : public Pass {
 public:
  AutocastPass(AutocastOptions options, const Capabilities& caps, AutocastResult* result)
      : options_(std::move(options)), caps_(caps), result_(result) {}
  std::string_view name() const override { return "autocast"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  AutocastOptions options_;
  const Capabilities& caps_;
  AutocastResult* result_;
};

}  // namespace mpc
