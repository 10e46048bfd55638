// Helpers for integration tests that train the golden MLP (tests/golden/mlp) through
// the engine with extra spec fields, and compare whole training states.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "engine/mpc.h"
#include "graph/tensor.h"

namespace mpc::testing {

// Writes DIR/FILE_NAME: the golden RUN spec (sgd, adamw, ...) with absolute paths, plus
// `extra` spec text appended; returns its path. `model` replaces the golden model path.
std::string WriteGoldenSpec(const std::string& run, const std::string& extra, const std::string& dir,
                            const std::string& file_name, const std::string& model = "");

// A spec that trains the Fashion-MNIST MLP (models/fashion_mlp) on the first 2000 training
// examples, written into a fresh temporary directory named after `name`, with `fields`
// (batch size, optimizer, steps, ...) appended; returns its path.
std::string WriteFashionMlpSpec(const std::string& name, const std::string& fields);
// An `eval` block for it: the first `examples` test images every `every_n_steps` steps.
std::string FashionMlpEvalFields(int every_n_steps, int examples);

// A trained f32 parameter against PyTorch's (a tests/golden/*_final/*.npy): each element
// within 1e-4 relative with a 1e-6 absolute floor (elements near zero differ by float
// rounding only; tests/golden/README.md). `what` names it in failures.
void ExpectMatchesGoldenF32(const std::vector<float>& got, const Tensor& want, const std::string& what);

// DIR/train.spec: the golden MLP for 12 steps of SGD with clipping and an evaluation (top-3)
// every 4 steps, `extra` appended; returns its path. The TensorBoard tests' run: every
// kind of scalar mpc-train writes.
std::string WriteTwelveStepMlpSpec(const std::string& dir, const std::string& extra);

// Every parameter and state tensor of an engine, by name (model shaped).
std::map<std::string, std::vector<float>> SnapshotState(const Engine& engine);

}  // namespace mpc::testing
