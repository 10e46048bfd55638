// CheckGatherIndices (see index_check.h).
#include "engine/index_check.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mpc {

absl::Status CheckGatherIndices(const Value& input, const Tensor& values, const std::string& what) {
  if (IsFloating(values.dtype())) return absl::OkStatus();
  const Shape& shape_of_values = values.shape();
  int64_t per_example = 1;
  for (size_t d = 1; d < shape_of_values.size(); ++d) per_example *= shape_of_values[d];
  per_example = std::max<int64_t>(per_example, 1);
  for (const Node* reader : input.consumers) {
    if (reader->op != "Gather" || reader->inputs.size() < 2 || reader->inputs[1] != &input) continue;
    const Value* table = reader->inputs[0];
    const Shape& shape = table->logical_shape.empty() ? table->shape : table->logical_shape;
    int64_t axis = reader->attrs.GetInt("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(shape.size());
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size())) continue;  // the op's own check reports it
    const int64_t rows = shape[axis];
    for (int64_t i = 0; i < values.num_elements(); ++i) {
      const int64_t id = static_cast<int64_t>(values.GetAsDouble(i));
      if (id < -rows || id >= rows) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": example ", i / per_example, " (value ", i % per_example, " of the example) is ", id,
                         ", but model input '", input.name, "' indexes '", table->name, "' (", rows,
                         " entries along axis ", axis, ", node '", reader->name, "'), so it must lie in [", -rows, ", ",
                         rows, "); check the data and the model's vocabulary size"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mpc
