// Helpers for integration tests that train the golden MLP (tests/golden/mlp) through
// the engine with extra spec fields, and compare whole training states.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/mpc.h"

namespace mpc::testing {

// Writes DIR/FILE_NAME: the golden RUN spec (sgd, adamw, ...) with absolute paths, plus
// `extra` spec text appended; returns its path. `model` replaces the golden model path.
std::string WriteGoldenSpec(const std::string& run, const std::string& extra, const std::string& dir,
                            const std::string& file_name, const std::string& model = "");

// Every parameter and state tensor of an engine, by name (model shaped).
std::map<std::string, std::vector<float>> SnapshotState(const Engine& engine);

}  // namespace mpc::testing
