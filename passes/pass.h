// The pass interface (after XLA's HloPassInterface): a pass has a kebab-case name and
// rewrites a Graph, returning whether it changed anything. Everything else a pass works
// with is given to it when it is made: its options (its own struct, declared in its
// header; engine/compile_options.cc builds them from a TrainSpec), the device's
// Capabilities when it depends on the device, the results of earlier passes it reads
// (const) and the one result struct it writes (passes/compile_results.h). So a pass is
// tested from its options alone, and the data flow between passes is visible in the
// pipelines that wire them (passes/pipelines.cc).
#pragma once

#include <string_view>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc {

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<bool> Run(Graph& graph) = 0;
};

}  // namespace mpc
