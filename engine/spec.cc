// TrainSpec text parsing with located errors, and value validation by field path.
#include "engine/spec.h"

#include <cmath>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace mpc {
namespace {

// Keeps the first parse error with its location and the offending line's text, so a
// mistyped value ("Expected integer") still names the field it belongs to.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  explicit FirstErrorCollector(const std::string& text) : lines_(absl::StrSplit(text, '\n')) {}
  void AddError(int line, int column, const std::string& message) override {
    if (!message_.empty()) return;
    std::string context;
    if (line >= 0 && line < static_cast<int>(lines_.size())) {
      context = absl::StrCat(" (`", absl::StripAsciiWhitespace(lines_[line]), "`)");
    }
    message_ = absl::StrCat("line ", line + 1, ", column ", column + 1, context, ": ", message);
  }
  const std::string& message() const { return message_; }

 private:
  std::vector<std::string> lines_;
  std::string message_;
};

absl::Status FieldError(const std::string& path, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("spec field ", path, ": ", what));
}

absl::Status ValidateData(const DataSource& d, const std::string& path) {
  if (d.source_case() == DataSource::SOURCE_NOT_SET) {
    return FieldError(path, "no data source set; set one of idx, npy, synthetic");
  }
  if (d.limit() < 0) return FieldError(path + ".limit", absl::StrCat(d.limit(), " must be >= 0"));
  if (d.has_idx() && (d.idx().images().empty() || d.idx().labels().empty())) {
    return FieldError(path + ".idx", "both images and labels must be set");
  }
  if (d.has_npy() && (d.npy().features().empty() || d.npy().labels().empty())) {
    return FieldError(path + ".npy", "both features and labels must be set");
  }
  if (d.has_synthetic()) {
    if (d.synthetic().num_examples() <= 0) return FieldError(path + ".synthetic.num_examples", "must be > 0");
    if (d.synthetic().num_classes() < 2) return FieldError(path + ".synthetic.num_classes", "must be >= 2");
    for (int64_t dim : d.synthetic().feature_shape()) {
      if (dim <= 0) return FieldError(path + ".synthetic.feature_shape", "dimensions must be > 0");
    }
  }
  return absl::OkStatus();
}

// A full-match regex over parameter names, compiled once here so a bad one is a spec error.
absl::Status ValidateNamePattern(const std::string& pattern, const std::string& path) {
  if (pattern.empty()) return FieldError(path, "is empty; give a regex over parameter names, e.g. \".*bias\"");
  // libstdc++'s std::regex compiles recursively, several stack frames per character of
  // the pattern: ~20,000 characters overflow the stack (found fuzzing ParseTrainSpec, see
  // tests/fuzz_regressions/train_spec/). Parameter names are short; so are their patterns.
  constexpr size_t kMaxPatternLength = 1024;
  if (pattern.size() > kMaxPatternLength) {
    return FieldError(path, absl::StrCat("is ", pattern.size(), " characters long; a name pattern may have at most ",
                                         kMaxPatternLength));
  }
  // libstdc++ 12 reads a repetition count ("{n,m}") or a back-reference ("\\n") into a long
  // without an overflow check: 20 digits are signed overflow (UB; found by tools/fuzz/
  // train_spec_fuzzer, tests/fuzz_regressions/train_spec/crash-31295ca2...). Bound them.
  for (size_t i = 0; i < pattern.size();) {
    size_t end = i;
    while (end < pattern.size() && absl::ascii_isdigit(static_cast<unsigned char>(pattern[end]))) ++end;
    if (end - i > 9 && i > 0 && (pattern[i - 1] == '{' || pattern[i - 1] == ',' || pattern[i - 1] == '\\')) {
      return FieldError(path, absl::StrCat("has a repetition count or back-reference of ", end - i,
                                           " digits; at most 9 are allowed"));
    }
    i = end > i ? end : i + 1;
  }
  try {
    std::regex re(pattern);
  } catch (const std::regex_error& e) {
    return FieldError(path, absl::StrCat("'", pattern, "' is not a valid regex: ", e.what()));
  }
  return absl::OkStatus();
}

// Accumulation, parameter groups, freezing and the weight average.
absl::Status ValidateTrainerFields(const TrainSpec& spec) {
  if (spec.accumulate_steps() < 1) {
    return FieldError("accumulate_steps", absl::StrCat(spec.accumulate_steps(), " must be >= 1 (1: no accumulation)"));
  }
  for (int i = 0; i < spec.param_groups_size(); ++i) {
    const ParamGroupSpec& g = spec.param_groups(i);
    const std::string path = absl::StrCat("param_groups[", i, "]");
    MPC_RETURN_IF_ERROR(ValidateNamePattern(g.pattern(), path + ".pattern"));
    if (g.has_weight_decay() && !(g.weight_decay() >= 0)) return FieldError(path + ".weight_decay", "must be >= 0");
    if (!(g.lr_scale() >= 0) || !std::isfinite(g.lr_scale())) {
      return FieldError(path + ".lr_scale", "must be a finite number >= 0 (0 keeps the group's weights fixed)");
    }
  }
  for (int i = 0; i < spec.freeze_size(); ++i) {
    MPC_RETURN_IF_ERROR(ValidateNamePattern(spec.freeze(i), absl::StrCat("freeze[", i, "]")));
  }
  if (spec.has_ema() && !(spec.ema().decay() > 0 && spec.ema().decay() < 1)) {
    return FieldError("ema.decay", absl::StrCat(spec.ema().decay(), " must be in (0, 1), e.g. 0.999"));
  }
  const MemorySpec& memory = spec.memory();
  if (memory.full_blocks() < 0) {
    return FieldError("memory.full_blocks", absl::StrCat(memory.full_blocks(), " must be >= 0 (0: every block)"));
  }
  if (memory.full_blocks() > 0 && memory.recompute() != MemorySpec::FULL) {
    return FieldError("memory.full_blocks", "applies to recompute: FULL (AUTO chooses the blocks itself)");
  }
  if (memory.recompute() == MemorySpec::AUTO && !(memory.limit_mb() > 0)) {
    return FieldError("memory.recompute", absl::StrCat("AUTO chooses the least recomputation that fits memory.limit_mb; "
                                                       "set limit_mb to the MiB one rank may hold (> 0; it is ",
                                                       memory.limit_mb(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateTrainSpec(const TrainSpec& spec, bool require_train_data) {
  if (spec.batch_size() <= 0) return FieldError("batch_size", absl::StrCat(spec.batch_size(), " must be > 0"));
  if (spec.has_epochs() && spec.has_steps()) return FieldError("epochs", "set either epochs or steps, not both");
  if (spec.has_epochs() && spec.epochs() <= 0) return FieldError("epochs", absl::StrCat(spec.epochs(), " must be > 0"));
  if (spec.has_steps() && spec.steps() <= 0) return FieldError("steps", absl::StrCat(spec.steps(), " must be > 0"));
  if (!spec.has_train_data() && require_train_data) {
    return FieldError("train_data",
                      "is required (a program that feeds its own batches sets EngineOptions::external_batches)");
  }
  if (spec.has_train_data()) MPC_RETURN_IF_ERROR(ValidateData(spec.train_data(), "train_data"));
  if (spec.has_eval()) {
    if (spec.eval().has_data()) MPC_RETURN_IF_ERROR(ValidateData(spec.eval().data(), "eval.data"));
    if (spec.eval().every_n_steps() < 0) return FieldError("eval.every_n_steps", "must be >= 0");
    if (spec.eval().has_batch_size() && spec.eval().batch_size() <= 0)
      return FieldError("eval.batch_size", "must be > 0");
    // The upper bound (the model's classes) is checked once the model is compiled.
    if (spec.eval().top_k() < 0) {
      return FieldError("eval.top_k", absl::StrCat(spec.eval().top_k(), " must be >= 0 (0: off)"));
    }
    if (spec.eval().top_k() > 0 && spec.loss().type() != LossSpec::SOFTMAX_CROSS_ENTROPY) {
      return FieldError("eval.top_k", "top-k accuracy needs loss.type SOFTMAX_CROSS_ENTROPY; remove eval.top_k");
    }
  }
  const float smoothing = spec.loss().label_smoothing();
  if (!(smoothing >= 0 && smoothing < 1)) {
    return FieldError("loss.label_smoothing",
                      absl::StrCat(smoothing, " must be in [0, 1) (0: off; PyTorch's usual value is 0.1)"));
  }
  if (smoothing > 0 && spec.loss().type() != LossSpec::SOFTMAX_CROSS_ENTROPY) {
    return FieldError("loss.label_smoothing",
                      "applies only to loss.type SOFTMAX_CROSS_ENTROPY; remove it or change the loss type");
  }
  if (spec.optimizer().has_sgd()) {
    const SgdSpec& s = spec.optimizer().sgd();
    if (!(s.lr() > 0)) return FieldError("optimizer.sgd.lr", absl::StrCat(s.lr(), " must be > 0"));
    if (s.momentum() < 0 || s.momentum() >= 1) return FieldError("optimizer.sgd.momentum", "must be in [0, 1)");
    if (s.nesterov() && s.momentum() == 0) return FieldError("optimizer.sgd.nesterov", "needs momentum > 0");
    if (s.weight_decay() < 0) return FieldError("optimizer.sgd.weight_decay", "must be >= 0");
  }
  if (spec.optimizer().has_adamw()) {
    const AdamWSpec& a = spec.optimizer().adamw();
    if (!(a.lr() > 0)) return FieldError("optimizer.adamw.lr", absl::StrCat(a.lr(), " must be > 0"));
    if (a.beta1() < 0 || a.beta1() >= 1) return FieldError("optimizer.adamw.beta1", "must be in [0, 1)");
    if (a.beta2() < 0 || a.beta2() >= 1) return FieldError("optimizer.adamw.beta2", "must be in [0, 1)");
    if (!(a.eps() > 0)) return FieldError("optimizer.adamw.eps", "must be > 0");
    if (a.weight_decay() < 0) return FieldError("optimizer.adamw.weight_decay", "must be >= 0");
  }
  if (spec.schedule().has_warmup_linear()) {
    const auto& w = spec.schedule().warmup_linear();
    if (w.warmup_steps() < 0) return FieldError("schedule.warmup_linear.warmup_steps", "must be >= 0");
    if (w.min_lr() < 0) return FieldError("schedule.warmup_linear.min_lr", "must be >= 0");
  }
  if (spec.schedule().has_step_decay()) {
    const auto& d = spec.schedule().step_decay();
    if (d.step_size() < 1) return FieldError("schedule.step_decay.step_size", "must be >= 1 (steps between decays)");
    if (!(d.gamma() > 0)) return FieldError("schedule.step_decay.gamma", "must be > 0 (the factor per decay)");
  }
  if (spec.schedule().has_warmup_cosine()) {
    const auto& w = spec.schedule().warmup_cosine();
    if (w.warmup_steps() < 0) return FieldError("schedule.warmup_cosine.warmup_steps", "must be >= 0");
    if (w.min_lr() < 0) return FieldError("schedule.warmup_cosine.min_lr", "must be >= 0");
  }
  if (spec.device() != "cpu" && spec.device() != "cuda" && spec.device() != "auto" &&
      spec.device().rfind("cuda:", 0) != 0) {
    return FieldError("device", absl::StrCat("'", spec.device(), "' is not a device; use cpu, cuda or auto"));
  }
  if (spec.checkpoint().every_n_steps() < 0) return FieldError("checkpoint.every_n_steps", "must be >= 0");
  if (spec.log_every_n_steps() < 0) return FieldError("log_every_n_steps", "must be >= 0");
  const NumericsSpec& n = spec.numerics();
  if (n.max_consecutive_skipped_steps() < 0) {
    return FieldError("numerics.max_consecutive_skipped_steps", "must be >= 0 (0: never stop)");
  }
  if (!(n.min_loss_scale() >= 0) || !std::isfinite(n.min_loss_scale())) {
    return FieldError("numerics.min_loss_scale", "must be a finite number >= 0 (0: never stop)");
  }
  if (n.tensor_stats_every_n_steps() < 0) return FieldError("numerics.tensor_stats_every_n_steps", "must be >= 0");
  MPC_RETURN_IF_ERROR(ValidateTrainerFields(spec));
  return absl::OkStatus();
}

absl::StatusOr<TrainSpec> ParseTrainSpec(const std::string& text, const std::string& source_name,
                                         bool require_train_data) {
  TrainSpec spec;
  google::protobuf::TextFormat::Parser parser;
  FirstErrorCollector errors(text);
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &spec)) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": invalid training spec: ", errors.message()));
  }
  if (absl::Status st = ValidateTrainSpec(spec, require_train_data); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": ", st.message()));
  }
  return spec;
}

absl::StatusOr<TrainSpec> LoadTrainSpec(const std::string& path, bool require_train_data) {
  MPC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  return ParseTrainSpec(text, path, require_train_data);
}

absl::StatusOr<PrecisionSpec::Compute> ParsePrecision(const std::string& name) {
  if (name == "f32" || name == "fp32") return PrecisionSpec::F32;
  if (name == "tf32") return PrecisionSpec::TF32;
  if (name == "bf16") return PrecisionSpec::BF16;
  if (name == "fp16" || name == "f16") return PrecisionSpec::FP16;
  if (name == "fp8") return PrecisionSpec::FP8;
  return absl::InvalidArgumentError(absl::StrCat("--precision '", name, "': expected f32, tf32, bf16, fp16 or fp8"));
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

absl::StatusOr<Fp8Spec::Recipe> ParseFp8Recipe(const std::string& name) {
  Fp8Spec::Recipe recipe;
  if (!Fp8Spec::Recipe_Parse(absl::AsciiStrToUpper(name), &recipe)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--fp8-recipe '", name, "': expected delayed, current, rowwise or block"));
  }
  return recipe;
}

absl::StatusOr<MemorySpec::Recompute> ParseRecompute(const std::string& name) {
  MemorySpec::Recompute policy;
  if (!MemorySpec::Recompute_Parse(absl::AsciiStrToUpper(name), &policy)) {
    return absl::InvalidArgumentError(absl::StrCat("--recompute '", name, "': expected none, selective, full or auto"));
  }
  return policy;
}

absl::Status ApplySpecOverrides(const SpecOverrides& o, TrainSpec* spec) {
  if (!o.recompute.empty()) {
    MPC_ASSIGN_OR_RETURN(MemorySpec::Recompute policy, ParseRecompute(o.recompute));
    spec->mutable_memory()->set_recompute(policy);
  }
  if (!o.precision.empty()) {
    MPC_ASSIGN_OR_RETURN(PrecisionSpec::Compute compute, ParsePrecision(o.precision));
    spec->mutable_precision()->set_compute(compute);
  }
  if (!o.fp8_recipe.empty()) {
    MPC_ASSIGN_OR_RETURN(Fp8Spec::Recipe recipe, ParseFp8Recipe(o.fp8_recipe));
    spec->mutable_fp8()->set_recipe(recipe);
  }
  if (o.pad_multiple > 0) spec->mutable_padding()->set_multiple(o.pad_multiple);
  if (!o.loss_scaling.empty()) MPC_RETURN_IF_ERROR(ParseLossScalingFlag(o.loss_scaling, spec->mutable_loss_scaling()));
  if (o.check_numerics) spec->mutable_numerics()->set_check_every_op(true);
  if (o.tensor_stats_every_n_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensor-stats ", o.tensor_stats_every_n_steps, ": must be >= 0 (a number of steps)"));
  }
  if (o.tensor_stats_every_n_steps > 0) {
    spec->mutable_numerics()->set_tensor_stats_every_n_steps(o.tensor_stats_every_n_steps);
  }
  return absl::OkStatus();
}

}  // namespace mpc
