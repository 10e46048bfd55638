// Validation of integer inputs that index a table (Gather's indices: token ids into an
// embedding), before anything runs. On the CPU an out-of-range index stops the step with
// the kernel's error, but the CUDA Gather reads a zero row instead (checking in the kernel
// would cost a host synchronisation per step), so the engine checks the data once, on
// every backend, and names what is wrong.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace mpc {

// For every Gather that reads `input` as its indices: each element of `values` (the data
// fed to `input`, [N, ...]) lies in [-rows, rows) of the table's model shape. `what` names
// the data in the error ("the training data"); errors give the example and the position
// in it.
absl::Status CheckGatherIndices(const Value& input, const Tensor& values, const std::string& what);

}  // namespace mpc
