// The one place a TrainSpec becomes the passes' options: each field of the spec that
// configures the compiler is read here and handed to the pass that needs it
// (passes/pipelines.h), so no pass sees the spec.
#pragma once

#include "absl/status/statusor.h"
#include "passes/pipelines.h"
#include "proto/train_spec.pb.h"

namespace mpc {

// Everything but what depends on the model and the data (the loss's logits, batch size
// and label shape), which CompileProgram adds.
CompileOptions CompileOptionsFromSpec(const TrainSpec& spec);

// The spec's precision.compute as autocast's enum.
Precision PrecisionFromSpec(PrecisionSpec::Compute compute);

}  // namespace mpc
