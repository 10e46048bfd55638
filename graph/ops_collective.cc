// The collective ops the data-parallel pass inserts (passes/data_parallel.h); their
// kernels call the backend's Communicator (distributed/communicator.h).
//
//   AllReduce(x1..xN[, hold]) -> (y1..yN)   attrs: reduce ("mean" | "sum" | "max"),
//                                            held (1: the last input is a hold flag)
// Every yi is xi reduced element-wise over the job's ranks ("mean": the sum divided by
// the world size). One node is one bucket: its inputs travel in one call. With `held`, a
// nonzero hold (a micro-batch that does not end an optimizer step, the same on every
// rank) copies xi to yi without communicating. f32 only: gradients are averaged in f32.
//
//   AllReduceInPlace(s1..sN) -> ()          attrs: reduce ("max" | "sum" | "mean")
// The same reduction written back into persistent state in place (FP8 amax histories, so
// every rank computes the same scales); it has side effects and is ordered by control
// dependencies, like the optimizer updates.
//
// ZeRO-1 (passes/data_parallel.h, zero_stage 1). A tensor of n elements is sharded over
// the W ranks as its flattened elements in W slices of s = ceil(n/W): rank r owns
// [r*s, min(n, (r+1)*s)), zero-padded to s (so counts that W does not divide work).
//
//   ReduceScatter(x1..xN[, hold]) -> (s1..sN)   attrs: world_size, held
// si is this rank's slice of the sum of every rank's xi, [ceil(ni/W)] f32. One node is one
// bucket (one collective). With `held`, a nonzero hold copies this rank's slice of xi.
//
//   Shard(x) -> s                             attr world_size
// This rank's slice of x, [ceil(n/W)] f32 (the owner's part of a master weight, updated
// in place by the optimizer).
//
//   AllGatherInPlace(s1..sN, x1..xN) -> ()    attr world_size
// Writes every rank's slice si into the persistent xi (the updated master weights back
// on every rank); side effects, ordered by control dependencies.
//
// ZeRO-3 (passes/shard_parameters.h): a parameter is held as this rank's slice and gathered
// whole where it is read.
//
//   AllGather(s) -> x                         attrs world_size, shape
// x (of `shape`, s's dtype: f32, or the bf16/fp16 copy cast from the slice, half the
// traffic) is every rank's slice s ([ceil(n/W)]) laid end to end, the padding dropped.
#include <functional>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/op_registry.h"
#include "graph/ops_common.h"
#include "graph/sharding.h"

namespace mpc {
namespace {

absl::StatusOr<int64_t> WorldSizeOf(const Node& n) {
  const int64_t world = n.attrs.GetInt("world_size", 0);
  if (world < 1) return absl::InvalidArgumentError(absl::StrCat("attribute world_size ", world, " must be >= 1"));
  return world;
}

absl::Status CheckF32(const Value* v) {
  if (v->dtype == DType::kF32) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' is ", DTypeName(v->dtype),
                                                 "; collectives reduce f32 (cast before reducing)"));
}

// A bucket x1..xN[, hold] -> y1..yN (AllReduce, ReduceScatter): f32 tensors, a scalar hold
// flag last when `held`; yi's shape is `out_shape` of xi's.
absl::StatusOr<std::vector<TensorType>> InferBucket(const Node& n,
                                                    const std::function<Shape(const Shape&)>& out_shape) {
  const bool held = n.attrs.GetInt("held", 0) != 0;
  if (n.inputs.size() < (held ? 2u : 1u)) return absl::InvalidArgumentError("needs at least one tensor to reduce");
  const size_t tensors = n.inputs.size() - (held ? 1 : 0);
  std::vector<TensorType> out;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i];
    MPC_RETURN_IF_ERROR(CheckF32(v));
    if (i < tensors) {
      out.push_back({DType::kF32, out_shape(v->shape)});
    } else if (NumElements(v->shape) != 1) {
      return absl::InvalidArgumentError(absl::StrCat("hold flag '", v->name, "' must be a scalar"));
    }
  }
  return out;
}

}  // namespace

void RegisterCollectiveOps(OpRegistry& r) {
  constexpr int kMany = 1 << 20;
  OpDef all_reduce;
  all_reduce.name = "AllReduce";
  all_reduce.domain = "mpc";
  all_reduce.min_inputs = 1;
  all_reduce.max_inputs = kMany;
  all_reduce.min_outputs = 1;
  all_reduce.max_outputs = kMany;
  // Its peers wait for it: never removed as a duplicate, never merged.
  all_reduce.stochastic = true;
  all_reduce.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    const std::string reduce = n.attrs.GetString("reduce", "mean");
    if (reduce != "mean" && reduce != "sum" && reduce != "max") {
      return absl::InvalidArgumentError(absl::StrCat("attribute reduce '", reduce, "' must be mean, sum or max"));
    }
    return InferBucket(n, [](const Shape& x) { return x; });
  };
  r.Register(all_reduce);

  OpDef in_place;
  in_place.name = "AllReduceInPlace";
  in_place.domain = "mpc";
  in_place.min_inputs = 1;
  in_place.max_inputs = kMany;
  in_place.min_outputs = in_place.max_outputs = 0;
  in_place.has_side_effects = true;
  in_place.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    const std::string reduce = n.attrs.GetString("reduce", "max");
    if (reduce != "mean" && reduce != "sum" && reduce != "max") {
      return absl::InvalidArgumentError(absl::StrCat("attribute reduce '", reduce, "' must be mean, sum or max"));
    }
    for (const Value* v : n.inputs) {
      if (v->dtype != DType::kF32) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", v->name, "' is ", DTypeName(v->dtype), "; collectives reduce f32"));
      }
      if (!v->persistent()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", v->name, "' is not persistent state; AllReduceInPlace rewrites state"));
      }
    }
    return std::vector<TensorType>{};
  };
  r.Register(in_place);

  OpDef reduce_scatter;
  reduce_scatter.name = "ReduceScatter";
  reduce_scatter.domain = "mpc";
  reduce_scatter.min_inputs = 1;
  reduce_scatter.max_inputs = kMany;
  reduce_scatter.min_outputs = 1;
  reduce_scatter.max_outputs = kMany;
  reduce_scatter.stochastic = true;  // its peers wait for it
  reduce_scatter.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_ASSIGN_OR_RETURN(const int64_t world, WorldSizeOf(n));
    return InferBucket(n, [world](const Shape& x) { return Shape{ShardLength(NumElements(x), world)}; });
  };
  r.Register(reduce_scatter);

  OpDef shard;
  shard.name = "Shard";
  shard.domain = "mpc";
  shard.min_inputs = shard.max_inputs = 1;
  shard.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_ASSIGN_OR_RETURN(const int64_t world, WorldSizeOf(n));
    MPC_RETURN_IF_ERROR(CheckF32(n.inputs[0]));
    return std::vector<TensorType>{{DType::kF32, {ShardLength(NumElements(n.inputs[0]->shape), world)}}};
  };
  r.Register(shard);

  OpDef gather;
  gather.name = "AllGatherInPlace";
  gather.domain = "mpc";
  gather.min_inputs = 2;
  gather.max_inputs = kMany;
  gather.min_outputs = gather.max_outputs = 0;
  gather.has_side_effects = true;
  gather.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_ASSIGN_OR_RETURN(const int64_t world, WorldSizeOf(n));
    if (n.inputs.size() % 2 != 0) {
      return absl::InvalidArgumentError("takes the shards, then as many persistent tensors to write them into");
    }
    const size_t tensors = n.inputs.size() / 2;
    for (size_t i = 0; i < tensors; ++i) {
      const Value* s = n.inputs[i];
      const Value* x = n.inputs[tensors + i];
      MPC_RETURN_IF_ERROR(CheckF32(s));
      MPC_RETURN_IF_ERROR(CheckF32(x));
      if (!x->persistent()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", x->name, "' is not persistent; AllGatherInPlace rewrites parameters"));
      }
      const int64_t length = ShardLength(NumElements(x->shape), world);
      if (s->shape != Shape{length}) {
        return absl::InvalidArgumentError(absl::StrCat("shard '", s->name, "' is ", ShapeToString(s->shape), "; '",
                                                       x->name, "' over ", world, " ranks needs [", length, "]"));
      }
    }
    return std::vector<TensorType>{};
  };
  r.Register(gather);

  OpDef all_gather;
  all_gather.name = "AllGather";
  all_gather.domain = "mpc";
  all_gather.min_inputs = all_gather.max_inputs = 1;
  all_gather.stochastic = true;  // its peers wait for it: never merged with the backward's gather
  all_gather.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_ASSIGN_OR_RETURN(const int64_t world, WorldSizeOf(n));
    const Value* s = n.inputs[0];
    if (s->dtype != DType::kF32 && s->dtype != DType::kBF16 && s->dtype != DType::kF16) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", s->name, "' is ", DTypeName(s->dtype), "; AllGather moves f32, bf16 or fp16"));
    }
    const Shape whole = n.attrs.GetInts("shape", {});
    if (whole.empty()) return absl::InvalidArgumentError("attribute shape (the whole tensor's) is required");
    const int64_t length = ShardLength(NumElements(whole), world);
    if (s->shape != Shape{length}) {
      return absl::InvalidArgumentError(absl::StrCat("slice '", s->name, "' is ", ShapeToString(s->shape), "; ",
                                                     ShapeToString(whole), " over ", world, " ranks needs [", length,
                                                     "]"));
    }
    return std::vector<TensorType>{{s->dtype, whole}};
  };
  r.Register(all_gather);
}

}  // namespace mpc
