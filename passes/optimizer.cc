// Emission of optimizer updates and state (see optimizer.h).
#include "passes/optimizer.h"

#include <algorithm>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"

namespace mpc {

namespace {

// Autocast gives a parameter read in bf16/f16 one shared Cast, which runs every step.
// Instead the update writes that copy from the new master weight (lowp_copy=1): the copy
// becomes persistent state `<param>.lowp`, initialised from the initial weights, and the
// Cast goes away. Same values (the update rounds the same f32 weight), one pass fewer.
absl::Status FuseLowPrecisionCopy(Graph& graph, Value* param, Node* update) {
  Node* cast = nullptr;
  for (Node* reader : param->consumers) {
    if (reader->op != "Cast" || reader->inputs.size() != 1 || reader->outputs.size() != 1) continue;
    const DType to = reader->outputs[0]->dtype;
    if (to != DType::kBF16 && to != DType::kF16) continue;
    if (cast) return absl::OkStatus();  // two casts of one weight: leave them (autocast shares, so unusual)
    cast = reader;
  }
  if (!cast) return absl::OkStatus();
  Value* cast_out = cast->outputs[0];
  Value* copy = graph.AddState(param->name + ".lowp", param->data.CastTo(cast_out->dtype));
  graph.ReplaceAllUsesWith(cast_out, copy);
  MPC_RETURN_IF_ERROR(graph.RemoveNode(cast));
  const bool gated = update->attrs.GetInt("gated", 0) != 0;
  graph.InsertNodeInput(update, static_cast<int>(update->inputs.size()) - (gated ? 1 : 0), copy);
  update->attrs.Set("lowp_copy", int64_t{1});
  // The update rewrites the copy: every other reader goes first.
  for (Node* reader : copy->consumers) {
    if (reader != update) update->control_deps.push_back(reader);
  }
  return absl::OkStatus();
}

// ZeRO-1: a weight whose update wrote only this rank's slice (`shard`).
struct ShardedUpdate {
  Value* param;
  Value* shard;
  Node* update;
};

// One AllGatherInPlace per data-parallel bucket (the weights whose gradients travelled
// together), after the bucket's updates and after every other reader of its weights.
absl::Status GatherUpdatedWeights(Graph& graph, const DataParallelResult& data_parallel,
                                  const std::vector<ShardedUpdate>& sharded) {
  for (const DataParallelResult::Bucket& bucket : data_parallel.buckets) {
    std::vector<Value*> shards, params;
    std::vector<Node*> after;
    for (const std::string& name : bucket.params) {
      auto it =
          std::find_if(sharded.begin(), sharded.end(), [&](const ShardedUpdate& u) { return u.param->name == name; });
      if (it == sharded.end()) continue;  // frozen, or not trained
      shards.push_back(it->shard);
      params.push_back(it->param);
      after.push_back(it->update);
      for (Node* reader : it->param->consumers) after.push_back(reader);
    }
    if (shards.empty()) continue;
    std::vector<Value*> inputs = shards;
    inputs.insert(inputs.end(), params.begin(), params.end());
    AttrMap attrs;
    attrs.Set("world_size", static_cast<int64_t>(data_parallel.world_size));
    MPC_ASSIGN_OR_RETURN(Node * gather, graph.AddNode("AllGatherInPlace", std::move(inputs), std::move(attrs),
                                                      graph.UniqueName("optimizer/zero_gather")));
    for (Node* n : after) {
      if (n != gather &&
          std::find(gather->control_deps.begin(), gather->control_deps.end(), n) == gather->control_deps.end()) {
        gather->control_deps.push_back(n);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> OptimizerPass::Run(Graph& graph) {
  const OptimizerOptions& opt = options_;
  OptimizerResult& result = *result_;
  result = OptimizerResult{};
  const bool accumulating = accumulation_ && !accumulation_->param_grads.empty();
  const ParamGrads& param_grads = !loss_scaling_->param_grads.empty()
                                      ? loss_scaling_->param_grads
                                      : LatestGradients(*autodiff_, accumulation_, data_parallel_);
  if (param_grads.empty()) {
    return absl::FailedPreconditionError("no parameter gradients; the autodiff pass must run first");
  }
  GraphBuilder b(&graph, "optimizer/");
  // The gate: loss scaling's overflow flag, and while accumulating also the hold flag (the
  // two are 0 or 1, so their sum is nonzero when either is set).
  Value* skip = loss_scaling_->found_nonfinite;
  if (accumulating) skip = skip ? b.Op("Add", {skip, accumulation_->hold}) : accumulation_->hold;
  MPC_RETURN_IF_ERROR(b.status());
  result.skip = skip;
  std::vector<std::regex> patterns;
  for (const OptimizerOptions::Group& group : opt.groups) {
    try {
      patterns.emplace_back(group.pattern);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("parameter group pattern '", group.pattern, "' is not a valid regex: ", e.what()));
    }
  }
  // A group that matches no trained parameter is a typo: say so rather than ignore it.
  for (size_t i = 0; i < patterns.size(); ++i) {
    if (std::none_of(param_grads.begin(), param_grads.end(),
                     [&](const auto& pg) { return std::regex_match(pg.first->name, patterns[i]); })) {
      std::vector<std::string> names;
      for (const auto& pg : param_grads) names.push_back(pg.first->name);
      return absl::InvalidArgumentError(absl::StrCat("parameter group ", i, " pattern '", opt.groups[i].pattern,
                                                     "' matches no trained parameter (a full match of the name); "
                                                     "trained parameters: ",
                                                     absl::StrJoin(names, ", ")));
    }
  }
  // ZeRO-1: the gradients are this rank's slices; each update works on the slice of its
  // master weight (a Shard copy, updated in place) with state that holds only that slice,
  // and AllGatherInPlace writes every rank's updated slices back into the weights.
  const bool zero = data_parallel_ && data_parallel_->world_size > 1 && data_parallel_->zero_stage >= 1;
  const int64_t world = zero ? data_parallel_->world_size : 1;
  std::vector<ShardedUpdate> sharded;
  Value* lr = result.learning_rate = graph.AddInput("lr", DType::kF32, {});
  std::vector<Value*> group_lr(opt.groups.size(), nullptr);  // lr * lr_scale, one per group that scales
  for (auto& [param, grad] : param_grads) {
    OptimizerResult::ParamUpdate decided{param->name, -1, opt.weight_decay, 1.0f};
    for (size_t i = 0; i < patterns.size(); ++i) {
      if (!std::regex_match(param->name, patterns[i])) continue;
      const OptimizerOptions::Group& group = opt.groups[i];
      decided.group = static_cast<int>(i);
      if (group.has_weight_decay) decided.weight_decay = group.weight_decay;
      decided.lr_scale = group.lr_scale;
      break;
    }
    result.updates.push_back(decided);
    Value* param_lr = lr;
    if (decided.lr_scale != 1.0f) {
      Value*& scaled = group_lr[decided.group];
      if (!scaled) scaled = b.Op("Mul", {lr, b.ScalarConstant(decided.lr_scale, DType::kF32)});
      MPC_RETURN_IF_ERROR(b.status());
      param_lr = scaled;
    }
    Value* target = param;  // what the update writes: the weight, or this rank's slice of it
    if (zero) {
      AttrMap shard_attrs;
      shard_attrs.Set("world_size", world);
      target = b.Op("Shard", {param}, std::move(shard_attrs));
      MPC_RETURN_IF_ERROR(b.status());
    }
    const Tensor zeros(DType::kF32, target->shape);
    AttrMap attrs;
    std::vector<Value*> inputs{target, grad, param_lr};
    if (opt.kind == OptimizerOptions::Kind::kAdamW) {
      attrs.Set("beta1", opt.beta1);
      attrs.Set("beta2", opt.beta2);
      attrs.Set("eps", opt.eps);
      attrs.Set("weight_decay", decided.weight_decay);
      inputs.push_back(graph.AddState(param->name + ".adam_m", zeros));
      inputs.push_back(graph.AddState(param->name + ".adam_v", zeros));
      inputs.push_back(graph.AddState(param->name + ".adam_step", Tensor::Scalar(0.0f)));
    } else {
      attrs.Set("momentum", opt.momentum);
      attrs.Set("nesterov", static_cast<int64_t>(opt.nesterov));
      attrs.Set("weight_decay", decided.weight_decay);
      if (opt.momentum != 0.0f) inputs.push_back(graph.AddState(param->name + ".momentum", zeros));
    }
    if (skip) {
      attrs.Set("gated", int64_t{1});
      inputs.push_back(skip);
    }
    const char* op = opt.kind == OptimizerOptions::Kind::kAdamW ? "AdamWUpdate" : "SgdUpdate";
    MPC_ASSIGN_OR_RETURN(Node * update, graph.AddNode(op, std::move(inputs), std::move(attrs),
                                                      graph.UniqueName("update/" + param->name)));
    if (zero) {
      // The low-precision copy stays a Cast of the gathered weight: a copy written by the
      // update would hold only this rank's slice. The state is a slice of a tensor shaped
      // like the (padded) weight, and the weight's model shape is its shape in checkpoints,
      // which gather it whole (so they do not depend on the world size).
      for (Value* in : update->inputs) {
        if (in && in->kind == ValueKind::kState && in->shape == target->shape) {
          in->sharded_from = param->shape;
          in->logical_shape = param->logical_shape.empty() ? param->shape : param->logical_shape;
        }
      }
      sharded.push_back({param, target, update});
      continue;
    }
    MPC_RETURN_IF_ERROR(FuseLowPrecisionCopy(graph, param, update));
    // Optimizer state of a padded parameter is padded alike and unpadded in checkpoints.
    for (Value* in : update->inputs) {
      if (in && in->kind == ValueKind::kState && in->shape == param->shape) in->logical_shape = param->logical_shape;
    }
    for (Node* reader : param->consumers) {
      if (reader != update) update->control_deps.push_back(reader);
    }
  }
  if (zero) MPC_RETURN_IF_ERROR(GatherUpdatedWeights(graph, *data_parallel_, sharded));
  return true;
}

}  // namespace mpc
