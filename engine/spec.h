// Loading and validating an mpc.TrainSpec (protobuf text format). Parse errors name
// the file, line and column; invalid values name the field path and the allowed range.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "proto/train_spec.pb.h"

namespace mpc {

// `require_train_data` false: a spec without train_data is valid (the Engine's caller feeds
// the batches, EngineOptions::external_batches).
absl::StatusOr<TrainSpec> ParseTrainSpec(const std::string& text, const std::string& source_name,
                                         bool require_train_data = true);
absl::StatusOr<TrainSpec> LoadTrainSpec(const std::string& path, bool require_train_data = true);
// Semantic checks (ranges, exclusive fields). Called by the loaders.
absl::Status ValidateTrainSpec(const TrainSpec& spec, bool require_train_data = true);

// The command line's overrides of spec fields, shared by mpc-train, `mpc compile` and
// the Engine. Empty / 0 fields leave the spec alone.
struct SpecOverrides {
  std::string precision;               // f32, tf32, bf16, fp16 (f16), fp8 -> precision.compute
  std::string loss_scaling;            // off, dynamic, static:S -> loss_scaling
  int pad_multiple = 0;                // > 0 -> padding.multiple
  bool check_numerics = false;         // true -> numerics.check_every_op
  int tensor_stats_every_n_steps = 0;  // > 0 -> numerics.tensor_stats_every_n_steps
  std::string fp8_recipe;              // delayed, current, rowwise, block -> fp8.recipe
  std::string recompute;               // none, selective, full -> memory.recompute
};
absl::Status ApplySpecOverrides(const SpecOverrides& overrides, TrainSpec* spec);

// "f32" | "tf32" | "bf16" | "fp16" (also "f16") | "fp8" -> the spec enum; error otherwise.
absl::StatusOr<PrecisionSpec::Compute> ParsePrecision(const std::string& name);
// "delayed" | "current" | "rowwise" | "block" -> the spec enum; error otherwise.
absl::StatusOr<Fp8Spec::Recipe> ParseFp8Recipe(const std::string& name);
// "none" | "selective" | "full" -> the spec enum; error otherwise.
absl::StatusOr<MemorySpec::Recompute> ParseRecompute(const std::string& name);
// "off" | "dynamic" | "static:S" -> fields of `spec`; error otherwise.
absl::Status ParseLossScalingFlag(const std::string& flag, LossScalingSpec* spec);

}  // namespace mpc
