// The loss-scaling pass (see loss_scaling.h).
#include "passes/loss_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"

namespace mpc {

LossScalingSpec::Mode EffectiveLossScalingMode(const LossScalingSpec& spec, DType compute_dtype) {
  if (spec.mode() != LossScalingSpec::AUTO) return spec.mode();
  return compute_dtype == DType::kF16 ? LossScalingSpec::DYNAMIC : LossScalingSpec::OFF;
}

absl::Status ParseLossScalingFlag(const std::string& flag, LossScalingSpec* spec) {
  if (flag == "off") {
    spec->set_mode(LossScalingSpec::OFF);
  } else if (flag == "dynamic") {
    spec->set_mode(LossScalingSpec::DYNAMIC);
  } else if (flag.rfind("static:", 0) == 0) {
    float scale = 0;
    if (!absl::SimpleAtof(flag.substr(7), &scale) || !(scale > 0) || !std::isfinite(scale)) {
      return absl::InvalidArgumentError(absl::StrCat("--loss-scaling ", flag, ": the scale must be a positive number"));
    }
    spec->set_mode(LossScalingSpec::STATIC);
    spec->set_static_scale(scale);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--loss-scaling '", flag, "': expected off, dynamic or static:S"));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> LossScalingPass::Run(Graph& g, const PassContext& ctx) {
  CompileInfo& info = *ctx.info;
  const TrainSpec& spec = *ctx.spec;
  const LossScalingSpec& ls = spec.loss_scaling();
  const LossScalingSpec::Mode mode = EffectiveLossScalingMode(ls, info.compute_dtype);
  const float clip = spec.optimizer().clip_grad_norm();
  const auto& faults = spec.debug().inject_nonfinite();
  if (mode == LossScalingSpec::OFF && clip <= 0 && faults.empty()) return false;
  if (info.param_grads.empty()) return absl::FailedPreconditionError("no gradients; autodiff must run first");
  GraphBuilder b(&g, "loss_scaling/");

  // Test hook: a non-finite value in one parameter's gradient at one step.
  for (int i = 0; i < faults.size(); ++i) {
    const auto& f = faults[i];
    if (f.value() != "inf" && f.value() != "nan") {
      return absl::InvalidArgumentError(absl::StrCat("spec field debug.inject_nonfinite[", i, "].value: '", f.value(),
                                                     "' must be inf or nan"));
    }
    auto it = std::find_if(info.param_grads.begin(), info.param_grads.end(),
                           [&](const auto& pg) { return pg.first->name == f.parameter(); });
    if (it == info.param_grads.end()) {
      std::vector<std::string> names;
      for (const auto& pg : info.param_grads) names.push_back(pg.first->name);
      return absl::InvalidArgumentError(absl::StrCat("spec field debug.inject_nonfinite[", i, "].parameter: no parameter '",
                                                     f.parameter(), "'; parameters: ", absl::StrJoin(names, ", ")));
    }
    AttrMap attrs;
    attrs.Set("step", static_cast<int64_t>(f.step()));
    attrs.Set("value", f.value());
    it->second = b.Op("InjectNonFinite", {it->second}, std::move(attrs));
  }

  std::vector<Value*> grads;
  for (const auto& pg : info.param_grads) grads.push_back(pg.second);
  auto replace_grads = [&](const std::vector<Value*>& outs) {
    for (size_t i = 0; i < info.param_grads.size(); ++i) info.param_grads[i].second = outs[i];
    grads.assign(outs.begin(), outs.begin() + info.param_grads.size());
  };

  if (mode != LossScalingSpec::OFF) {
    if (!info.loss_seed) return absl::FailedPreconditionError("autodiff recorded no loss seed");
    const float initial = mode == LossScalingSpec::STATIC ? ls.static_scale() : ls.init_scale();
    if (!(initial > 0) || !std::isfinite(initial)) {
      return absl::InvalidArgumentError("spec field loss_scaling: the scale must be a positive finite number");
    }
    info.loss_scale = g.AddState("loss_scale", Tensor::Scalar(initial));
    g.ReplaceAllUsesWith(info.loss_seed, info.loss_scale);
    std::vector<Value*> inputs{info.loss_scale};
    inputs.insert(inputs.end(), grads.begin(), grads.end());
    std::vector<Value*> outs = b.OpN("UnscaleGradients", inputs);
    MPC_RETURN_IF_ERROR(b.status());
    info.found_nonfinite = outs.back();
    replace_grads(outs);
  } else if (!faults.empty()) {
    // No scaling, but the injected fault must still be detected and the step skipped.
    std::vector<Value*> inputs{b.ScalarConstant(1.0, DType::kF32)};
    inputs.insert(inputs.end(), grads.begin(), grads.end());
    std::vector<Value*> outs = b.OpN("UnscaleGradients", inputs);
    MPC_RETURN_IF_ERROR(b.status());
    info.found_nonfinite = outs.back();
    replace_grads(outs);
  }
  if (clip > 0) {
    AttrMap attrs;
    attrs.Set("max_norm", clip);
    std::vector<Value*> outs = b.OpN("ClipByGlobalNorm", grads, std::move(attrs));
    MPC_RETURN_IF_ERROR(b.status());
    info.grad_norm = outs.back();
    replace_grads(outs);
    g.AddOutput(info.grad_norm);
  }
  if (info.found_nonfinite) g.AddOutput(info.found_nonfinite);
  if (mode == LossScalingSpec::DYNAMIC) {
    if (ls.growth_interval() <= 0) return absl::InvalidArgumentError("spec field loss_scaling.growth_interval: must be > 0");
    if (!(ls.growth_factor() > 1)) return absl::InvalidArgumentError("spec field loss_scaling.growth_factor: must be > 1");
    if (!(ls.backoff_factor() > 0 && ls.backoff_factor() < 1)) {
      return absl::InvalidArgumentError("spec field loss_scaling.backoff_factor: must be in (0, 1)");
    }
    Value* tracker = g.AddState("loss_scale_growth_tracker", Tensor::Scalar(0.0f));
    AttrMap attrs;
    attrs.Set("growth_factor", ls.growth_factor());
    attrs.Set("backoff_factor", ls.backoff_factor());
    attrs.Set("growth_interval", static_cast<int64_t>(ls.growth_interval()));
    attrs.Set("min_scale", ls.min_scale());
    attrs.Set("max_scale", ls.max_scale());
    MPC_ASSIGN_OR_RETURN(Node * update, g.AddNode("UpdateLossScale", {info.loss_scale, tracker, info.found_nonfinite},
                                                  std::move(attrs), g.UniqueName("loss_scaling/update_scale")));
    // The new scale applies from the next step: every reader of this step's scale runs first.
    for (Node* reader : info.loss_scale->consumers) {
      if (reader != update) update->control_deps.push_back(reader);
    }
  }
  return true;
}

}  // namespace mpc
