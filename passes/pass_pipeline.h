// PassPipeline (after XLA's HloPassPipeline): runs passes in order, verifies the graph
// after every pass that changed it, times each pass, dumps the graph after passes whose
// name matches a regex, skips disabled passes, prefixes errors with the pass name, and
// remembers which pass created each node (what numerics diagnostics report).
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "passes/pass.h"

namespace mpc {

struct PassReport {
  std::string name;
  bool changed = false;
  bool skipped = false;
  double ms = 0;
  int64_t nodes_after = 0;
};

struct PipelineOptions {
  std::set<std::string> disabled;  // pass names to skip
  std::string dump_after;          // ECMAScript regex over pass names; empty: no dumps
  std::string dump_dir;            // where dumps go (NN-<pass>.txt and .dot)
};

class PassPipeline {
 public:
  explicit PassPipeline(PipelineOptions options = {}) : options_(std::move(options)) {}
  void Add(std::unique_ptr<Pass> pass) { passes_.push_back(std::move(pass)); }
  std::vector<std::string> PassNames() const;

  absl::StatusOr<std::vector<PassReport>> Run(Graph& graph);
  // After Run: for every node of the graph (by Node::id), the pass that created it, or
  // "model" for the nodes of the graph the pipeline started from.
  const std::map<int, std::string>& node_origins() const { return origins_; }

 private:
  absl::Status Dump(const Graph& graph, int index, std::string_view pass_name) const;

  PipelineOptions options_;
  std::map<int, std::string> origins_;
  std::vector<std::unique_ptr<Pass>> passes_;
};

}  // namespace mpc
