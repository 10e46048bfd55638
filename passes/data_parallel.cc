// The data-parallel pass (see data_parallel.h).
#include "passes/data_parallel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"

namespace mpc {
namespace {

// ZeRO-2/3 with gradient accumulation: each accumulator (accumulate-gradients made it
// whole) becomes this rank's slice and sums the reduce-scattered slices of the
// micro-batches' gradients, so no rank keeps a whole gradient between micro-batches. The
// accumulator is marked sharded like ZeRO-1's optimizer state, so a checkpoint holds it
// whole. `result.param_grads` holds the scattered slices on entry and the sums on return.
absl::Status SliceAccumulators(Graph& g, const GradAccumulationResult& accumulation, DataParallelResult& result) {
  for (size_t i = 0; i < result.param_grads.size(); ++i) {
    Value* param = accumulation.param_grads[i].first;
    Node* sum = accumulation.param_grads[i].second->producer;
    Value* scattered = result.param_grads[i].second;
    if (result.param_grads[i].first != param) {
      return absl::InternalError(absl::StrCat("data-parallel: gradient ", i, " is of '", result.param_grads[i].first->name,
                                              "', its accumulator of '", param->name, "'"));
    }
    Value* acc = sum->inputs[0];
    if (acc->logical_shape.empty()) acc->logical_shape = param->shape;
    acc->sharded_from = acc->shape;
    acc->shape = scattered->shape;
    acc->data = Tensor(DType::kF32, acc->shape);
    std::fill_n(acc->data.data<float>(), acc->data.num_elements(), 0.0f);
    g.SetNodeInput(sum, 1, scattered);
    sum->outputs[0]->shape = scattered->shape;
    sum->schedule_rank = scattered->producer->schedule_rank;  // right after the scatter
    result.param_grads[i].second = sum->outputs[0];
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> DataParallelPass::Run(Graph& g) {
  DataParallelResult& result = *result_;
  result = DataParallelResult{};
  result.world_size = options_.world_size;
  if (options_.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("world size ", options_.world_size, " must be >= 1"));
  }
  if (options_.zero_stage < 0 || options_.zero_stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("spec field distributed.zero_stage: ", options_.zero_stage,
                                                   " is not supported; use 0, 1, 2 or 3"));
  }
  if (options_.world_size == 1) return false;
  result.zero_stage = options_.zero_stage;
  if (options_.bucket_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec field distributed.bucket_mb: the bucket size (",
                                                   options_.bucket_bytes, " bytes) must be > 0"));
  }
  if (!loss_->loss) return absl::FailedPreconditionError("no loss; attach-loss must run first");
  const bool accumulating = accumulation_ && !accumulation_->param_grads.empty();
  const bool sliced = options_.zero_stage >= 1;
  // ZeRO-2/3 with accumulation: each micro-batch's gradients are scattered as they are
  // produced (never held) and each rank sums its slices (SliceAccumulators below).
  const bool scatter_each_micro_batch = accumulating && options_.zero_stage >= 2;
  Value* hold = accumulating && !scatter_each_micro_batch ? accumulation_->hold : nullptr;
  ParamGrads grads = LatestGradients(*autodiff_, accumulation_, nullptr);
  if (grads.empty()) return absl::FailedPreconditionError("no gradients; autodiff must run first");
  if (scatter_each_micro_batch) {
    for (auto& [param, sum] : grads) {
      if (!sum->producer || sum->producer->op != "AccumulateGradient") {
        return absl::FailedPreconditionError(absl::StrCat("the accumulated gradient of '", param->name,
                                                          "' is not an AccumulateGradient's output"));
      }
      sum = sum->producer->inputs[1];  // this micro-batch's gradient
    }
  }

  GraphBuilder b(&g, "data_parallel/");
  // The backward seed becomes seed / N, so each rank's gradients are its examples' share
  // of the global batch's mean loss (a gradient of the same size as one process computes
  // for those examples, which is what FP8 scaling and fp16 loss scaling see), and the
  // ranks' sum is the global batch's gradient.
  Value* seed = autodiff_->loss_seed;
  if (!seed) return absl::FailedPreconditionError("autodiff recorded no loss seed");
  Value* share = b.Op("Mul", {seed, b.ScalarConstant(1.0 / options_.world_size, seed->dtype)});
  MPC_RETURN_IF_ERROR(b.status());
  const std::vector<Node*> readers = seed->consumers;
  for (Node* reader : readers) {
    if (reader == share->producer) continue;
    for (int i = 0; i < static_cast<int>(reader->inputs.size()); ++i) {
      if (reader->inputs[i] == seed) g.SetNodeInput(reader, i, share);
    }
  }
  result.param_grads = grads;
  // Buckets in the reverse of parameter order: the backward pass produces the last
  // layer's gradients first, so a bucket's inputs are ready together.
  std::vector<int> bucket;  // indices into grads
  int64_t bucket_bytes = 0;
  auto flush = [&]() -> absl::Status {
    if (bucket.empty()) return absl::OkStatus();
    std::vector<Value*> inputs;
    DataParallelResult::Bucket made;
    for (int i : bucket) {
      inputs.push_back(grads[i].second);
      made.params.push_back(grads[i].first->name);
    }
    if (hold) inputs.push_back(hold);
    AttrMap attrs;
    attrs.Set("held", static_cast<int64_t>(hold != nullptr));
    if (sliced) attrs.Set("world_size", static_cast<int64_t>(options_.world_size));
    if (!sliced) attrs.Set("reduce", std::string("sum"));
    std::vector<Value*> outs = b.OpN(sliced ? "ReduceScatter" : "AllReduce", inputs, std::move(attrs));
    MPC_RETURN_IF_ERROR(b.status());
    if (options_.zero_stage >= 2) {
      // ZeRO-2: the bucket is reduce-scattered as soon as its last gradient exists, so the
      // whole gradients die there and the plan reuses their bytes for the rest of the
      // backward; each rank keeps only its slices until the update.
      Node* scatter = b.last_node();
      int ready = 0;
      for (const Value* in : scatter->inputs) {
        if (in->producer) ready = std::max(ready, in->producer->schedule_rank);
      }
      scatter->schedule_rank = ready;
    }
    for (size_t k = 0; k < bucket.size(); ++k) result.param_grads[bucket[k]].second = outs[k];
    made.node = b.last_node()->name;
    made.bytes = bucket_bytes;
    result.buckets.push_back(std::move(made));
    bucket.clear();
    bucket_bytes = 0;
    return absl::OkStatus();
  };
  for (int i = static_cast<int>(grads.size()) - 1; i >= 0; --i) {
    Value* grad = grads[i].second;
    if (grad->dtype != DType::kF32) {
      return absl::FailedPreconditionError(absl::StrCat("gradient '", grad->name, "' of '", grads[i].first->name,
                                                        "' is ", DTypeName(grad->dtype),
                                                        "; data-parallel averages f32 gradients"));
    }
    bucket.push_back(i);
    bucket_bytes += NumElements(grad->shape) * static_cast<int64_t>(sizeof(float));
    if (bucket_bytes >= options_.bucket_bytes) MPC_RETURN_IF_ERROR(flush());
  }
  MPC_RETURN_IF_ERROR(flush());
  if (scatter_each_micro_batch) MPC_RETURN_IF_ERROR(SliceAccumulators(g, *accumulation_, result));

  // FP8: each rank's amaxes are of its own share; the largest over the ranks, written
  // back into every amax history before the scales are updated, gives every rank the
  // same scales (Transformer Engine reduces amaxes across the data-parallel group too).
  std::vector<Node*> updates;
  for (const auto& n : g.nodes()) {
    if (n->op == "Fp8UpdateScales") updates.push_back(n.get());
  }
  for (Node* update : updates) {
    std::vector<Value*> histories;
    for (size_t i = 2; i < update->inputs.size(); i += 4) histories.push_back(update->inputs[i]);
    AttrMap attrs;
    attrs.Set("reduce", std::string("max"));
    MPC_ASSIGN_OR_RETURN(Node * reduce, g.AddNode("AllReduceInPlace", histories, std::move(attrs),
                                                  g.UniqueName("data_parallel/fp8_amax")));
    reduce->control_deps = update->control_deps;  // after every quantization of the step
    update->control_deps.push_back(reduce);
    result.fp8_amax_node = reduce->name;
  }

  AttrMap attrs;
  attrs.Set("reduce", std::string("mean"));
  result.mean_loss = b.Op("AllReduce", {loss_->loss}, std::move(attrs));
  MPC_RETURN_IF_ERROR(b.status());
  g.AddOutput(result.mean_loss);
  return true;
}

}  // namespace mpc
