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
#include "absl/strings/str_cat.h"
#include "graph/op_registry.h"
#include "graph/ops_common.h"

namespace mpc {

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
    const bool held = n.attrs.GetInt("held", 0) != 0;
    const size_t tensors = n.inputs.size() - (held ? 1 : 0);
    if (tensors < 1) return absl::InvalidArgumentError("needs at least one tensor to reduce");
    std::vector<TensorType> out;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      const Value* v = n.inputs[i];
      if (v->dtype != DType::kF32) {
        return absl::InvalidArgumentError(absl::StrCat("input '", v->name, "' is ", DTypeName(v->dtype),
                                                       "; collectives reduce f32 (cast before reducing)"));
      }
      if (i < tensors) {
        out.push_back({DType::kF32, v->shape});
      } else if (NumElements(v->shape) != 1) {
        return absl::InvalidArgumentError(absl::StrCat("hold flag '", v->name, "' must be a scalar"));
      }
    }
    return out;
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
}

}  // namespace mpc
