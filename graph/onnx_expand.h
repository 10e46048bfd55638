// ONNX ops that mpc imports as a small graph of ops it already has, like the function
// bodies the ONNX spec gives some ops (HardSwish is defined as x * HardSigmoid(x)) and
// XLA's op expanders: each expansion gets its gradient, its precision (autocast), every
// backend's kernels and the fusions of those ops for free.
//   Clip(x, min?, max?)      Where(x < min, min, Where(x > max, max, x)): saturates exactly
//                            and lets NaN through; the gradient is dY where x is inside.
//                            min and max must be constants (ReLU6 exports: 0 and 6).
//   HardSigmoid(x)           Clip(alpha * x + beta, 0, 1), attributes alpha (0.2), beta (0.5).
//   HardSwish(x)             x * HardSigmoid(x) with alpha 1/6, beta 0.5 (ONNX's definition).
//   Pad(x, pads, value?)     mode "constant" only: blocks of the constant value concatenated
//                            before and after x along each padded axis (the gradient of
//                            Concat slices them off again). pads must be constant and >= 0.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/attributes.h"
#include "graph/graph.h"

namespace mpc {

// The ops (default ONNX domain) imported by expansion, and whether `op` is one.
const std::vector<std::string>& OnnxExpansionOps();
bool HasOnnxExpansion(const std::string& op);

// Adds the expansion of one node to `graph` (node names start with `name`) and returns its
// outputs; an error names the node and what it cannot take.
absl::StatusOr<std::vector<Value*>> ExpandOnnxNode(Graph& graph, const std::string& op, const std::string& name,
                                                   const std::vector<Value*>& inputs, const AttrMap& attrs);

}  // namespace mpc
