// Resolution helpers shared by the indexing ops' inference (graph/ops_tensor.cc) and
// their CPU kernels (backends/cpu/kernels_slice.cc): a Slice node's starts/ends/axes/
// steps (attributes before opset 10, constant inputs from 10) resolved to one clamped
// start and step per axis of the input.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc::tensor_ops {

struct SliceSpec {
  Shape in;                    // the data input's shape
  Shape out;                   // the slice's shape
  std::vector<int64_t> start;  // per input axis: first element taken (valid when out[d] > 0)
  std::vector<int64_t> step;   // per input axis: stride between taken elements (never 0)
};

// Slice(data, starts, ends[, axes[, steps]]) or Slice(data) with attributes starts/ends/axes.
absl::StatusOr<SliceSpec> ResolveSlice(const Node& node);

}  // namespace mpc::tensor_ops

namespace mpc::tensor_ops {

// Evaluates a node of this family whose result is static, for the ONNX importer:
// Shape always (shapes are static), and Gather, Squeeze, Unsqueeze, Concat, Slice,
// Expand, Where, the comparison/logic ops, ConstantOfShape and Range when every input
// is a constant (and Reshape, Flatten, Identity, Cast, and integer Add/Sub/Mul/Div,
// which exported shape arithmetic interleaves with them). This is how exported shape arithmetic (Shape -> Gather ->
// Unsqueeze -> Concat -> Reshape) reaches the ops that need constant inputs. `node`
// needs op, inputs and attrs (it is not in a graph). Returns one tensor per output, or
// an empty vector when the node is not folded (other op, non-constant input, invalid
// node: AddNode then reports the error with the node's name).
std::vector<Tensor> FoldStatic(const Node& node);

}  // namespace mpc::tensor_ops
