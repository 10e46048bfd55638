// Loading and validating an mpc.TrainSpec (protobuf text format). Parse errors name
// the file, line and column; invalid values name the field path and the allowed range.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/train_spec.pb.h"

namespace mpc {

absl::StatusOr<TrainSpec> ParseTrainSpec(const std::string& text, const std::string& source_name);
absl::StatusOr<TrainSpec> LoadTrainSpec(const std::string& path);
// Semantic checks (ranges, exclusive fields). Called by the loaders.
absl::Status ValidateTrainSpec(const TrainSpec& spec);

}  // namespace mpc
