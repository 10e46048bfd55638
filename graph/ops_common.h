// Helpers shared by the op families' shape/dtype inference and gradient builders.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"

namespace mpc::ops {

// Input i, or an error naming the position when an optional input is absent.
absl::StatusOr<const Value*> RequiredInput(const Node& node, int i);

// All inputs in [first, last) share one dtype (error otherwise).
absl::Status CheckSameDType(const Node& node, int first, int last);
absl::Status CheckFloating(const Node& node, int i);

// Reads a constant input as int64 values (Reshape's shape, Dropout's ratio...).
absl::StatusOr<std::vector<int64_t>> ConstantInts(const Node& node, int i);
absl::StatusOr<double> ConstantScalar(const Node& node, int i, double fallback);

// Typical inference results.
absl::StatusOr<std::vector<TensorType>> SameAsInput(const Node& node, int i);
absl::StatusOr<std::vector<TensorType>> BroadcastBinary(const Node& node);

// The perm that swaps the last two axes of a rank-r tensor.
std::vector<int64_t> SwapLastTwo(int rank);

}  // namespace mpc::ops
