// shard-parameters: ZeRO-3 (spec `distributed { zero_stage: 3 }`; docs/memory.md). Each
// trained parameter is held as this rank's slice (graph/sharding.h): the persistent value
// keeps its name, takes the slice's shape [ceil(n/W)] and records the whole (padded) shape
// in `sharded_from`, so checkpoints gather it whole and slice it again on load, as they do
// ZeRO-1's optimizer state, and resume at any world size and stage.
//
// Where the parameter is read it is gathered whole (AllGather, an activation): once for its
// forward readers, scheduled right before the first of them, and again for its backward
// readers, right before the first of those; each gather dies with its last reader, so a
// rank holds the whole weights of the layers it is working on and its slices of the rest.
// A parameter read through a Cast to bf16/fp16 (autocast) is cast as a slice and gathered in
// 16 bits: half the traffic. The optimizer's update (ZeRO-1's, on the slice) then writes the
// parameter itself, after every gather of it; ZeRO-1's Shard and all-gather of the updated
// weights go.
//
// Training: after the optimizer pass (its Shard nodes say which parameters are trained),
// before simplify (the gathers are stochastic ops, never merged). Evaluation: every
// parameter not frozen, read in the forward only, so the two programs share the slices.
// With EMA each rank averages its slice (passes/ema.cc marks the average sharded). With
// FP8 the whole f32 weight is gathered and quantized as without ZeRO (same scales and
// amaxes on every rank); gathering the quantized slice in 8 bits is not done yet. Delayed
// scaling's backward GEMMs reuse the forward's quantized weight, so that whole quantized
// copy (f32 in the CPU emulation, 1 byte per element when lowered) lives from the forward
// to the backward: for FP8 layers ZeRO-3 saves the master weights, not that copy.
#pragma once

#include <string>
#include <vector>

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct ShardParametersOptions {
  int zero_stage = 0;  // the pass acts at 3
  int world_size = 1;
  int rank = 0;        // whose slice the initial values hold
  bool training = true;
  std::vector<std::string> freeze;  // evaluation: parameters not sharded (full-match regexes)
};

class ShardParametersPass : public Pass {
 public:
  ShardParametersPass(ShardParametersOptions options, const LossResult* loss, ShardParametersResult* result)
      : options_(std::move(options)), loss_(loss), result_(result) {}
  std::string_view name() const override { return "shard-parameters"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  ShardParametersOptions options_;
  const LossResult* loss_;
  ShardParametersResult* result_;
};

}  // namespace mpc
