// The loss-scaling pass (see loss_scaling.h).
#include "passes/loss_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"

namespace mpc {

namespace {

// Dynamic mode: UpdateLossScale backs off on overflow and grows after growth_interval
// clean steps, after every reader of this step's scale (the new one applies next step).
absl::Status AddScaleUpdate(Graph& g, const LossScalingOptions& ls, const LossScalingResult& result, Value* hold) {
  if (ls.growth_interval <= 0)
    return absl::InvalidArgumentError("spec field loss_scaling.growth_interval: must be > 0");
  if (!(ls.growth_factor > 1)) return absl::InvalidArgumentError("spec field loss_scaling.growth_factor: must be > 1");
  if (!(ls.backoff_factor > 0 && ls.backoff_factor < 1)) {
    return absl::InvalidArgumentError("spec field loss_scaling.backoff_factor: must be in (0, 1)");
  }
  Value* tracker = g.AddState("loss_scale_growth_tracker", Tensor::Scalar(0.0f));
  AttrMap attrs;
  attrs.Set("growth_factor", ls.growth_factor);
  attrs.Set("backoff_factor", ls.backoff_factor);
  attrs.Set("growth_interval", static_cast<int64_t>(ls.growth_interval));
  attrs.Set("min_scale", ls.min_scale);
  attrs.Set("max_scale", ls.max_scale);
  std::vector<Value*> inputs{result.loss_scale, tracker, result.found_nonfinite};
  if (hold) inputs.push_back(hold);
  MPC_ASSIGN_OR_RETURN(Node * update, g.AddNode("UpdateLossScale", std::move(inputs), std::move(attrs),
                                                g.UniqueName("loss_scaling/update_scale")));
  for (Node* reader : result.loss_scale->consumers) {
    if (reader != update) update->control_deps.push_back(reader);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> LossScalingPass::Run(Graph& g) {
  const LossScalingOptions& ls = options_;
  LossScalingResult& result = *result_;
  result = LossScalingResult{};
  using Mode = LossScalingOptions::Mode;
  Mode mode = ls.mode;
  if (mode == Mode::kAuto) mode = autocast_->compute_dtype == DType::kF16 ? Mode::kDynamic : Mode::kOff;
  const float clip = ls.clip_grad_norm;
  const auto& faults = ls.inject_nonfinite;
  if (mode == Mode::kOff && clip <= 0 && faults.empty() && !ls.check_nonfinite) return false;
  if (autodiff_->param_grads.empty()) return absl::FailedPreconditionError("no gradients; autodiff must run first");
  GraphBuilder b(&g, "loss_scaling/");
  ParamGrads& param_grads = result.param_grads;
  const bool accumulating = accumulation_ && !accumulation_->param_grads.empty();
  param_grads = LatestGradients(*autodiff_, accumulation_, data_parallel_);
  const bool data_parallel = data_parallel_ && data_parallel_->world_size > 1;

  // Test hook: a non-finite value in one parameter's gradient at one step.
  for (int i = 0; i < static_cast<int>(faults.size()); ++i) {
    const auto& f = faults[i];
    if (f.value != "inf" && f.value != "nan") {
      return absl::InvalidArgumentError(
          absl::StrCat("spec field debug.inject_nonfinite[", i, "].value: '", f.value, "' must be inf or nan"));
    }
    auto it = std::find_if(param_grads.begin(), param_grads.end(),
                           [&](const auto& pg) { return pg.first->name == f.parameter; });
    if (it == param_grads.end()) {
      std::vector<std::string> names;
      for (const auto& pg : param_grads) names.push_back(pg.first->name);
      return absl::InvalidArgumentError(absl::StrCat("spec field debug.inject_nonfinite[", i,
                                                     "].parameter: no parameter '", f.parameter,
                                                     "'; parameters: ", absl::StrJoin(names, ", ")));
    }
    if (f.rank >= 0 && f.rank != ls.rank) continue;  // another rank's fault
    AttrMap attrs;
    attrs.Set("step", static_cast<int64_t>(f.step));
    attrs.Set("value", f.value);
    it->second = b.Op("InjectNonFinite", {it->second}, std::move(attrs));
  }

  std::vector<Value*> grads;
  for (const auto& pg : param_grads) grads.push_back(pg.second);
  auto replace_grads = [&](const std::vector<Value*>& outs) {
    for (size_t i = 0; i < param_grads.size(); ++i) param_grads[i].second = outs[i];
    grads.assign(outs.begin(), outs.begin() + param_grads.size());
  };

  if (mode != Mode::kOff) {
    Value* seed = autodiff_->loss_seed;
    if (!seed) return absl::FailedPreconditionError("autodiff recorded no loss seed");
    const float initial = mode == Mode::kStatic ? ls.static_scale : ls.init_scale;
    if (!(initial > 0) || !std::isfinite(initial)) {
      return absl::InvalidArgumentError("spec field loss_scaling: the scale must be a positive finite number");
    }
    result.loss_scale = g.AddState("loss_scale", Tensor::Scalar(initial));
    g.ReplaceAllUsesWith(seed, result.loss_scale);
    std::vector<Value*> inputs{result.loss_scale};
    inputs.insert(inputs.end(), grads.begin(), grads.end());
    std::vector<Value*> outs = b.OpN("UnscaleGradients", inputs);
    MPC_RETURN_IF_ERROR(b.status());
    result.found_nonfinite = outs.back();
    replace_grads(outs);
  } else if (ls.check_nonfinite || !faults.empty()) {
    // No scaling: the same check, reading the gradients only, so a non-finite step is
    // skipped in every precision (an injected fault always is).
    result.found_nonfinite = b.Op("FindNonFinite", grads);
    MPC_RETURN_IF_ERROR(b.status());
  }
  if (result.found_nonfinite && data_parallel) {
    // Any rank's non-finite value skips the step on every rank (the gradients agree
    // already; this covers what happens to them after the average, e.g. injected faults).
    AttrMap attrs;
    attrs.Set("reduce", std::string("max"));
    result.found_nonfinite = b.Op("AllReduce", {result.found_nonfinite}, std::move(attrs));
    MPC_RETURN_IF_ERROR(b.status());
  }
  if (clip > 0) {
    AttrMap attrs;
    attrs.Set("max_norm", clip);
    // ZeRO-1: each rank holds slices of the gradients; the kernel adds the ranks' sums of squares.
    if (data_parallel && data_parallel_->zero_stage >= 1) attrs.Set("sharded", int64_t{1});
    std::vector<Value*> outs = b.OpN("ClipByGlobalNorm", grads, std::move(attrs));
    MPC_RETURN_IF_ERROR(b.status());
    result.grad_norm = outs.back();
    replace_grads(outs);
    g.AddOutput(result.grad_norm);
  }
  if (result.found_nonfinite) g.AddOutput(result.found_nonfinite);
  if (mode == Mode::kDynamic)
    MPC_RETURN_IF_ERROR(AddScaleUpdate(g, ls, result, accumulating ? accumulation_->hold : nullptr));
  return true;
}

}  // namespace mpc
