// TrainSpec -> CompileOptions (see compile_options.h).
#include "engine/compile_options.h"

namespace mpc {
namespace {

std::vector<std::string> Strings(const google::protobuf::RepeatedPtrField<std::string>& field) {
  return std::vector<std::string>(field.begin(), field.end());
}

AutocastOptions Autocast(const PrecisionSpec& p) {
  AutocastOptions o;
  o.precision = PrecisionFromSpec(p.compute());
  o.tensor_cores_only = p.level() == PrecisionSpec::TENSOR_CORES_ONLY;
  o.add_allow = Strings(p.add_allow());
  o.add_deny = Strings(p.add_deny());
  o.add_infer = Strings(p.add_infer());
  o.add_clear = Strings(p.add_clear());
  o.remove = Strings(p.remove());
  for (const NodeOverride& n : p.node_override()) o.node_overrides.push_back({n.pattern(), n.dtype()});
  return o;
}

Fp8Options Fp8(const TrainSpec& spec) {
  const Fp8Spec& f = spec.fp8();
  Fp8Options o;
  o.enabled = spec.precision().compute() == PrecisionSpec::FP8;
  switch (f.recipe()) {
    case Fp8Spec::CURRENT:
      o.recipe = Fp8Recipe::kCurrent;
      break;
    case Fp8Spec::ROWWISE:
      o.recipe = Fp8Recipe::kRowwise;
      break;
    case Fp8Spec::BLOCK:
      o.recipe = Fp8Recipe::kBlock;
      break;
    case Fp8Spec::DELAYED:
      o.recipe = Fp8Recipe::kDelayed;
      break;
  }
  o.power_of_two_scales = f.power_of_two_scales();
  o.fast_accumulation_forward = f.fast_accumulation_forward();
  // The block recipe is E4M3 everywhere (DeepSeek-V3, TE's Float8BlockScaling) unless the
  // spec names a format.
  o.e4m3_gradients = f.has_format() ? f.format() == Fp8Spec::E4M3 : o.recipe == Fp8Recipe::kBlock;
  o.margin = f.margin();
  o.amax_history_len = f.amax_history_len();
  o.most_recent = f.amax_compute_algo() == Fp8Spec::MOST_RECENT;
  o.amax_floor = f.amax_floor();
  o.exclude = Strings(f.exclude());
  o.include_first_last = f.include_first_last();
  o.fallback_to_bf16 = f.fallback_to_bf16();
  return o;
}

LossScalingOptions LossScaling(const TrainSpec& spec) {
  const LossScalingSpec& ls = spec.loss_scaling();
  LossScalingOptions o;
  switch (ls.mode()) {
    case LossScalingSpec::AUTO:
      o.mode = LossScalingOptions::Mode::kAuto;
      break;
    case LossScalingSpec::OFF:
      o.mode = LossScalingOptions::Mode::kOff;
      break;
    case LossScalingSpec::STATIC:
      o.mode = LossScalingOptions::Mode::kStatic;
      break;
    case LossScalingSpec::DYNAMIC:
      o.mode = LossScalingOptions::Mode::kDynamic;
      break;
  }
  o.static_scale = ls.static_scale();
  o.init_scale = ls.init_scale();
  o.growth_factor = ls.growth_factor();
  o.backoff_factor = ls.backoff_factor();
  o.growth_interval = ls.growth_interval();
  o.min_scale = ls.min_scale();
  o.max_scale = ls.max_scale();
  o.clip_grad_norm = spec.optimizer().clip_grad_norm();
  for (const auto& f : spec.debug().inject_nonfinite())
    o.inject_nonfinite.push_back({f.step(), f.parameter(), f.value(), f.rank()});
  return o;
}

OptimizerOptions Optimizer(const OptimizerSpec& opt) {
  OptimizerOptions o;
  if (opt.has_adamw()) {
    const AdamWSpec& a = opt.adamw();
    o.kind = OptimizerOptions::Kind::kAdamW;
    o.beta1 = a.beta1();
    o.beta2 = a.beta2();
    o.eps = a.eps();
    o.weight_decay = a.weight_decay();
  } else {
    const SgdSpec& s = opt.sgd();  // the default optimizer when none is set
    o.kind = OptimizerOptions::Kind::kSgd;
    o.momentum = s.momentum();
    o.nesterov = s.nesterov();
    o.weight_decay = s.weight_decay();
  }
  return o;
}

}  // namespace

Precision PrecisionFromSpec(PrecisionSpec::Compute compute) {
  switch (compute) {
    case PrecisionSpec::F32:
      return Precision::kF32;
    case PrecisionSpec::TF32:
      return Precision::kTF32;
    case PrecisionSpec::BF16:
      return Precision::kBF16;
    case PrecisionSpec::FP16:
      return Precision::kFP16;
    case PrecisionSpec::FP8:
      return Precision::kFP8;
  }
  return Precision::kF32;
}

CompileOptions CompileOptionsFromSpec(const TrainSpec& spec) {
  CompileOptions o;
  switch (spec.loss().type()) {
    case LossSpec::SOFTMAX_CROSS_ENTROPY:
      o.loss.kind = AttachLossOptions::Kind::kSoftmaxCrossEntropy;
      break;
    case LossSpec::MEAN_SQUARED_ERROR:
      o.loss.kind = AttachLossOptions::Kind::kMeanSquaredError;
      break;
    case LossSpec::BINARY_CROSS_ENTROPY_WITH_LOGITS:
      o.loss.kind = AttachLossOptions::Kind::kBinaryCrossEntropyWithLogits;
      break;
  }
  o.loss.label_smoothing = spec.loss().label_smoothing();
  o.loss.labels = spec.labels_input();
  o.loss.batch_size = spec.batch_size();
  o.autocast = Autocast(spec.precision());
  o.pad_dims.multiple = spec.padding().multiple();
  o.fp8 = Fp8(spec);
  o.loss_scaling = LossScaling(spec);
  o.optimizer = Optimizer(spec.optimizer());
  for (const ParamGroupSpec& g : spec.param_groups()) {
    o.optimizer.groups.push_back({g.pattern(), g.has_weight_decay(), g.weight_decay(), g.lr_scale()});
  }
  o.accumulate_steps = spec.accumulate_steps();
  o.data_parallel.bucket_bytes = static_cast<int64_t>(static_cast<double>(spec.distributed().bucket_mb()) * (1 << 20));
  o.data_parallel.zero_stage = spec.distributed().zero_stage();
  o.freeze.assign(spec.freeze().begin(), spec.freeze().end());
  o.ema.enabled = spec.has_ema();
  switch (spec.memory().recompute()) {
    case MemorySpec::NONE:
      o.recompute.policy = RecomputeOptions::Policy::kNone;
      break;
    case MemorySpec::SELECTIVE:
      o.recompute.policy = RecomputeOptions::Policy::kSelective;
      break;
    case MemorySpec::FULL:
      o.recompute.policy = RecomputeOptions::Policy::kFull;
      break;
    case MemorySpec::AUTO:  // CompileProgram picks a policy for the limit and compiles that
      o.recompute.policy = RecomputeOptions::Policy::kNone;
      break;
  }
  o.recompute.boundaries = spec.memory().boundaries();
  o.recompute.blocks = spec.memory().full_blocks();
  o.ema.decay = spec.ema().decay();
  return o;
}

}  // namespace mpc
