// Static shapes: every Value in a compiled graph has a fully known shape (a dynamic
// batch dimension is bound to the spec's batch size at import), so a shape is just
// a vector of non-negative extents. A scalar is the empty shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mpc {

using Shape = std::vector<int64_t>;

int64_t NumElements(const Shape& shape);
std::string ShapeToString(const Shape& shape);

// Numpy-style broadcasting of two shapes; an error names both shapes.
absl::StatusOr<Shape> BroadcastShapes(const Shape& a, const Shape& b);

// Row-major strides in elements.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

// Normalizes a possibly negative axis against a rank; error if out of range.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank);

}  // namespace mpc
