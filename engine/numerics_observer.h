// The numerics diagnostics of a compiled program, as an Executor::StepObserver: it sees
// every node's outputs right after the node ran.
//
//   check      the first node whose outputs hold a NaN or an infinity stops the step with
//              an error naming it: the step, the node, its op and dtype, whether it is
//              forward, backward or an update, which pass created it, and statistics of
//              its inputs. Nodes run in a topological order, so every input of that node
//              was checked (or is a parameter, state or fed input, reported as such): the
//              node named is where the values went bad, not one that passed them on.
//              Under loss scaling an overflow in the scaled backward pass is expected: it
//              is recorded (overflow_node) rather than an error, and the rest of that
//              step's backward and update nodes are not checked (the step is skipped).
//   stats      on the steps asked for, TensorStats of every forward and backward output
//              (update nodes write state in place and have none).
//
// Phases: a node is "update" when its op writes state in place, "backward" when autodiff
// created it or it reads a backward value, "forward" otherwise.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "engine/executor.h"
#include "engine/mpc.h"

namespace mpc {

class NumericsObserver : public StepObserver {
 public:
  // `order`: the program's execution order; `origins`: node id -> the pass that created it
  // (PassPipeline::node_origins); `loss_scaled`: the backward pass is scaled (overflows
  // there are expected).
  NumericsObserver(const std::vector<Node*>& order, const std::map<int, std::string>& origins, bool loss_scaled);

  // Sets what the next step does: check its values, collect statistics, or both.
  void BeginStep(int64_t step, bool check, bool stats);
  absl::Status AfterNode(const Node& node, const KernelContext& ctx, Backend& backend) override;

  const std::string& overflow_node() const { return overflow_node_; }
  std::vector<TensorStats> TakeStats() { return std::move(stats_); }
  // "forward", "backward" or "update".
  const char* PhaseOf(const Node& node) const;

 private:
  enum class Phase { kForward, kBackward, kUpdate };
  absl::Status Check(const Node& node, const KernelContext& ctx, Backend& backend);
  absl::Status Collect(const Node& node, const KernelContext& ctx, Backend& backend);
  std::string Origin(const Node& node) const;

  absl::flat_hash_map<const Node*, Phase> phase_;
  std::map<int, std::string> origins_;
  bool loss_scaled_;
  int64_t step_ = 0;
  bool check_ = false, stats_on_ = false;
  std::string overflow_node_;
  std::vector<TensorStats> stats_;
};

}  // namespace mpc
