// Helpers shared by the tests: seeded random tensors, relative errors, paths.
#pragma once

#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "engine/executor.h"
#include "graph/graph.h"
#include "graph/tensor.h"

namespace mpc::testing {

// Uniform in [lo, hi) from a fixed seed; tests never use all-zero inputs.
Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);
// ||a - b|| / ||b|| over all elements, computed in double.
double RelativeError(const Tensor& a, const Tensor& b);
// How many nodes of `graph` run `op` (what a rewrite pass left).
int CountOps(const Graph& graph, const std::string& op);
// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name);
std::string SourcePath(const std::string& relative);
// What the configure found for the tests (cmake/test_prerequisites.cmake): Debian's
// python3 with the reference packages, and a file of the Fashion-MNIST dataset.
std::string Python();
std::string FashionMnistPath(const std::string& file);
// The numbers of a golden losses file (one per line, as the tests/golden scripts write them).
std::vector<double> ReadLosses(const std::string& path);
// Every parameter and state tensor of `graph` as `executor` holds it now, by name.
absl::StatusOr<std::map<std::string, Tensor>> ReadPersistentTensors(const Graph& graph, const Executor& executor);
// "" when `got` holds the same names as `want` with bit-identical tensors; otherwise what
// differs first (for the tests that train twice and expect the same bits).
std::string FirstDifference(const std::map<std::string, Tensor>& want, const std::map<std::string, Tensor>& got);
// One CPU backend shared by a test binary (its kernel registry is built once).
Backend& CpuBackend();
// An executor for a hand-built graph: its topological order and memory plan, as the
// memory-plan pass would make them.
absl::StatusOr<std::unique_ptr<Executor>> ExecutorFor(const Graph& graph, Backend& backend);
// Runs a hand-built graph once on `backend`: feeds the graph's inputs from `feeds` (entries
// it has no input for are skipped) and returns `outputs` by name.
absl::StatusOr<std::vector<Tensor>> RunOnce(const Graph& graph, Backend& backend,
                                            const std::map<std::string, Tensor>& feeds,
                                            const std::vector<std::string>& outputs);
// Adds loss = sum(outputs[0] * r) (r fixed random data of its shape) and the loss's
// gradients for the values named in `wrt`; makes them the graph's outputs and returns their
// names: {loss, d wrt[0], ...}. What the fusion tests compare with and without a rewrite.
absl::StatusOr<std::vector<std::string>> AddLossAndGradients(Graph& graph, const std::vector<std::string>& wrt);

}  // namespace mpc::testing
