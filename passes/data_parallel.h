// data-parallel: runs after autodiff and accumulate-gradients, before loss-scaling, when
// the program is compiled for a job of N > 1 ranks (mpirun; docs/distributed.md). Each
// rank runs the forward and backward pass over its own batch/N examples; the pass
//   * scales the backward seed by 1/N (after accumulate-gradients' 1/K; loss scaling
//     later multiplies the seed by the scale), so a rank's gradients are its examples'
//     share of the global batch's mean loss: the same magnitudes one process computes for
//     those examples, which keeps FP8 amaxes and fp16 overflow behaviour as they are;
//   * puts AllReduce ops (reduce "sum") on the gradients: every rank applies the gradient
//     of the global batch, as one process would compute it.
//   * Buckets: the gradients are grouped, in the reverse of parameter order (the order
//     the backward pass produces them), into AllReduce nodes of about bucket_bytes each:
//     one collective per bucket, not per parameter.
//   * With gradient accumulation, the summed gradients are reduced, and only on a step's
//     last micro-batch (the hold flag, the same on every rank, skips the others).
//   * The loss, averaged over the ranks, becomes an output (mean_loss): what a step
//     reports is the global batch's loss.
// Everything after it (the non-finite check, clipping, the updates) sees identical
// gradients on every rank, so every rank takes the same step; loss-scaling also reduces
// its non-finite flag (max), so a non-finite value on one rank skips the step everywhere.
//
// ZeRO-1 (zero_stage 1): the buckets are ReduceScatter ops instead, so each rank receives
// only its slice (graph/sharding.h) of every averaged gradient; the optimizer pass then
// updates only that slice of each master weight, with optimizer state that holds only
// that slice, and all-gathers the updated weights (OptimizerPass). Clipping adds the
// ranks' sums of squares; the non-finite flag is reduced as above.
//
// ZeRO-2 (zero_stage 2): as ZeRO-1, and each ReduceScatter is scheduled as soon as its
// bucket's last gradient is produced (schedule_rank), not after the whole backward: the
// whole gradients die at the collective and the memory plan reuses their bytes, so a rank
// holds the whole gradients of about one bucket at a time plus its slices of the rest.
// With gradient accumulation (ZeRO-2 and 3) every micro-batch's gradients are scattered
// that way, never held, and each rank's accumulators are its slices of the sums (sharded
// state, whole in checkpoints): K times the collectives of one optimizer step, in exchange
// for no whole gradient or accumulator kept between micro-batches (DeepSpeed's ZeRO-2
// reduces every micro-batch likewise).
#pragma once

#include <cstdint>

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct DataParallelOptions {
  int world_size = 1;                        // ranks in the job; 1: the pass does nothing
  int64_t bucket_bytes = int64_t{25} << 20;  // spec distributed.bucket_mb
  int zero_stage = 0;                        // spec distributed.zero_stage: 0-3 (3: passes/shard_parameters.h)
};

class DataParallelPass : public Pass {
 public:
  DataParallelPass(DataParallelOptions options, const LossResult* loss, const AutodiffResult* autodiff,
                   const GradAccumulationResult* accumulation, DataParallelResult* result)
      : options_(options), loss_(loss), autodiff_(autodiff), accumulation_(accumulation), result_(result) {}
  std::string_view name() const override { return "data-parallel"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  DataParallelOptions options_;
  const LossResult* loss_;
  const AutodiffResult* autodiff_;
  const GradAccumulationResult* accumulation_;
  DataParallelResult* result_;
};

}  // namespace mpc
