// recompute: trades compute for activation memory (spec `memory { recompute }`;
// docs/memory.md). Runs last before memory-plan, on the graph that will run, so nothing
// after it merges the copies back (simplify's CSE would) and the plan sees the lifetimes
// it makes. Training only.
//
// The forward pass is every node the loss depends on; a "saved" activation is one the
// forward produces and a backward node reads, which the plan must keep alive from its
// forward producer to its last backward reader. Recomputing a saved activation means
// cloning the forward nodes that make it from values still alive, scheduled right before
// its first backward reader (schedule_rank), and pointing the backward readers at the
// clone: the original dies with its last forward reader. The clones compute the same op
// on the same bytes, so the values (and the losses) are bit for bit those without it.
//
//   NONE:      nothing recomputed.
//   SELECTIVE: what is cheap to redo: every op but the weight GEMMs and convolutions
//              (elementwise ops, casts, normalizations, attention's scores, mask and
//              softmax: the activation x activation MatMuls count as cheap, as in Megatron's
//              selective recomputation), and only where the chain starts from activations the
//              backward keeps anyway, so no new value is kept in exchange.
//   FULL:      only the block inputs are kept, and each block's forward runs again before
//              its backward. Blocks are found from the graph: a cut point is a moment in the
//              forward order where one batch-dependent activation alone carries everything
//              on; the cut points that fork (read by two forward nodes: the residual stream
//              of a transformer or a ResNet) are the block inputs; a graph without such forks
//              (a plain MLP) is cut every sqrt(C)-th of its C cut points. `boundaries` (a
//              full-match regex over value names) names them instead. The segment after the
//              last block input (the head and the loss) is kept: its backward runs at once.
//              `blocks` = N runs only the segments up to the N-th block input again and
//              treats everything after it (the later blocks and the head) as SELECTIVE
//              does (Megatron's recompute-num-layers, with selective recomputation for the
//              rest): the dial the spec's AUTO turns to fit a memory limit
//              (engine/memory_budget.h).
//
// Never cloned: ops with side effects, random draws (Dropout), collectives (but ZeRO-3's
// parameter AllGather, which a recomputed layer runs again), nodes that wait on control
// dependencies, graph outputs. A clone that reads persistent state is ordered
// before whatever the original was ordered before (the optimizer update rewriting a weight).
#pragma once

#include <string>

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct RecomputeOptions {
  enum class Policy { kNone, kSelective, kFull };
  Policy policy = Policy::kNone;
  std::string boundaries;  // FULL: a full-match regex over value names; "" = found from the graph
  int blocks = 0;          // FULL: only the first N blocks run again, the later ones keep theirs; 0 = all
};

const char* RecomputePolicyName(RecomputeOptions::Policy policy);

class RecomputePass : public Pass {
 public:
  RecomputePass(RecomputeOptions options, const LossResult* loss, RecomputeResult* result)
      : options_(std::move(options)), loss_(loss), result_(result) {}
  std::string_view name() const override { return "recompute"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  RecomputeOptions options_;
  const LossResult* loss_;
  RecomputeResult* result_;
};

}  // namespace mpc
