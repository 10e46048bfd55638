// Floating-point operations of one node, estimated from its shapes: what recomputation
// adds to a step (passes/recompute.h) and what a step costs in all. Contractions (GEMMs,
// convolutions and their gradients, attention) count 2 per multiply-add; every other op
// counts one per output element, which is what it costs to within a small factor and
// keeps the total honest about where the work is.
#pragma once

#include "graph/graph.h"

namespace mpc {

// True for the ops whose cost grows with a contracted axis (Gemm, MatMul, Conv and its
// gradients, FP8 GEMMs, fused attention): the work recomputation would rather not redo.
bool IsContraction(const Node& node);

double EstimateFlops(const Node& node);

}  // namespace mpc
