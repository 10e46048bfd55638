// Engine::Create: from options to a run ready to step. The spec (with the command
// line's overrides), the data, the compiled training and evaluation programs, their
// executors, the batch iterator, and the checkpoint to resume from, each in its own step.
#include <filesystem>
#include <functional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/device.h"
#include "engine/engine_impl.h"
#include "engine/index_check.h"
#include "engine/spec.h"

namespace mpc {
namespace {

// Gives the features the model input's dtype: integer data feeds a float input as
// values (IDX bytes, .npy ints); a float file cannot feed integer ids (embeddings).
absl::Status MatchFeatureDType(Dataset& data, const Value& input, const std::string& what) {
  const DType have = data.features.dtype();
  if (have == input.dtype) return absl::OkStatus();
  if (IsFloating(input.dtype)) {
    data.features = data.features.CastTo(DType::kF32);
    if (input.dtype != DType::kF32) data.features = data.features.CastTo(input.dtype);
    return absl::OkStatus();
  }
  if (!IsFloating(have)) {
    data.features = data.features.CastTo(input.dtype);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the ", what, " features are ", DTypeName(have), " but model input '", input.name, "' takes ",
                   DTypeName(input.dtype),
                   " (integer ids, e.g. for an embedding); save the features as an integer .npy "
                   "array and do not set scale/shift"));
}

// What a checkpoint must match: the optimizer and every persistent value's name, dtype
// and model shape.
std::string Fingerprint(const Program& program, const TrainSpec& spec) {
  std::string key =
      spec.optimizer().has_adamw() ? "adamw" : absl::StrCat("sgd", spec.optimizer().sgd().momentum() != 0);
  for (const auto& v : program.graph->values()) {
    // Model shapes, so a padded and an unpadded run can share checkpoints.
    const Shape& shape = v->logical_shape.empty() ? v->shape : v->logical_shape;
    if (v->persistent()) key += absl::StrCat("|", v->name, ":", DTypeName(v->dtype), ShapeToString(shape));
  }
  return absl::StrFormat("%016x", std::hash<std::string>()(key));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  std::string device = options.device;
  if (device.empty()) {
    auto spec = LoadTrainSpec(options.spec_path);
    if (spec.ok()) device = spec->device();
  }
  if (device == "auto") {
    // The GPU when there is one and the CUDA backend can run this program; otherwise the
    // CPU. Errors unrelated to the device (bad spec, bad model) come back from the CPU
    // attempt unchanged.
    EngineOptions attempt = options;
    attempt.device = "cuda";
    auto on_gpu = CreateForDevice(attempt);
    if (on_gpu.ok()) return on_gpu;
    attempt.device = "cpu";
    return CreateForDevice(attempt);
  }
  return CreateForDevice(options);
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::CreateForDevice(const EngineOptions& options) {
  auto impl = std::make_unique<Impl>();
  MPC_RETURN_IF_ERROR(impl->ResolveSpec(options));
  MPC_RETURN_IF_ERROR(impl->LoadData());
  MPC_RETURN_IF_ERROR(impl->CompilePrograms());
  MPC_RETURN_IF_ERROR(impl->CreateExecutors());
  MPC_RETURN_IF_ERROR(impl->PrepareBatches());
  MPC_RETURN_IF_ERROR(impl->SelectFp8Reports());
  impl->SetUpNumerics();
  MPC_RETURN_IF_ERROR(impl->ResumeAndOpenMetrics());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

// The spec with the command line's overrides, the paths it names, and the backend.
absl::Status Engine::Impl::ResolveSpec(const EngineOptions& opts) {
  options = opts;
  if (options.spec_path.empty()) return absl::InvalidArgumentError("no training spec given (--spec FILE)");
  MPC_ASSIGN_OR_RETURN(spec, LoadTrainSpec(options.spec_path));
  MPC_RETURN_IF_ERROR(ApplySpecOverrides({options.precision, options.loss_scaling, options.pad_multiple,
                                          options.check_numerics, options.tensor_stats_every_n_steps},
                                         &spec));
  spec_dir = std::filesystem::path(options.spec_path).parent_path().string();
  model_path = !options.model_path.empty() ? options.model_path : ResolvePath(spec_dir, spec.model());
  if (model_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.spec_path, ": no model: set `model` in the spec or pass --model"));
  }
  checkpoint_dir =
      !options.checkpoint_dir.empty() ? options.checkpoint_dir : ResolvePath(spec_dir, spec.checkpoint().dir());
  MPC_ASSIGN_OR_RETURN(backend, CreateBackend(options.device.empty() ? spec.device() : options.device));
  return absl::OkStatus();
}

absl::Status Engine::Impl::LoadData() {
  MPC_ASSIGN_OR_RETURN(train_data, LoadDataSource(spec.train_data(), spec_dir, "train_data"));
  if (spec.has_eval() && spec.eval().has_data()) {
    MPC_ASSIGN_OR_RETURN(eval_data, LoadDataSource(spec.eval().data(), spec_dir, "eval.data"));
    has_eval_data = true;
  }
  const int64_t batch = spec.batch_size();
  if (train_data.size() < batch) {
    return absl::InvalidArgumentError(absl::StrCat("spec field batch_size: ", batch, " is larger than the ",
                                                   train_data.size(), " training examples"));
  }
  eval_batch_size = spec.eval().has_batch_size() ? spec.eval().batch_size() : batch;
  return absl::OkStatus();
}

// Both programs, and the data checked against them (dtypes, shapes, labels, ids).
absl::Status Engine::Impl::CompilePrograms() {
  ProgramOptions popts;
  popts.model_path = model_path;
  popts.batch_size = spec.batch_size();
  if (spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) popts.label_row = RowShape(train_data.labels);
  popts.training = true;
  MPC_ASSIGN_OR_RETURN(train_program, CompileProgram(spec, backend->capabilities(), popts));
  popts.batch_size = eval_batch_size;
  popts.training = false;
  MPC_ASSIGN_OR_RETURN(eval_program, CompileProgram(spec, backend->capabilities(), popts));
  const Value* features_input = train_program.graph->FindValue(train_program.features_input);
  MPC_RETURN_IF_ERROR(MatchFeatureDType(train_data, *features_input, "training data"));
  if (has_eval_data) {
    MPC_RETURN_IF_ERROR(MatchFeatureDType(eval_data, *features_input, "evaluation data"));
    if (RowShape(eval_data.labels) != popts.label_row && spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
      return absl::InvalidArgumentError(
          absl::StrCat("the evaluation labels have shape ", ShapeToString(RowShape(eval_data.labels)),
                       " per example but the training labels ", ShapeToString(popts.label_row), "; they must agree"));
    }
  }
  MPC_RETURN_IF_ERROR(CheckDataMatchesModel(train_data, train_program, "training data"));
  if (has_eval_data) MPC_RETURN_IF_ERROR(CheckDataMatchesModel(eval_data, train_program, "evaluation data"));
  return absl::OkStatus();
}

// The evaluation executor shares the training executor's parameters and state.
absl::Status Engine::Impl::CreateExecutors() {
  MPC_ASSIGN_OR_RETURN(train_exec, Executor::Create(*train_program.graph, train_program.results.memory_plan, *backend));
  MPC_ASSIGN_OR_RETURN(
      eval_exec, Executor::Create(*eval_program.graph, eval_program.results.memory_plan, *backend, train_exec.get()));
  train_exec->EnableProfiling(options.profile);
  eval_exec->EnableProfiling(options.profile);
  return absl::OkStatus();
}

// The batch iterator, the run's length and the batch buffers.
absl::Status Engine::Impl::PrepareBatches() {
  const int64_t batch = spec.batch_size();
  batches = std::make_unique<BatchIterator>(&train_data, batch, spec.train_data().shuffle(), spec.seed());
  const int64_t per_epoch = batches->batches_per_epoch();
  total_steps = spec.has_steps() ? spec.steps() : per_epoch * (spec.has_epochs() ? spec.epochs() : 1);
  Shape fshape{batch};
  for (int64_t d : RowShape(train_data.features)) fshape.push_back(d);
  Shape lshape{batch};
  for (int64_t d : RowShape(train_data.labels)) lshape.push_back(d);
  feature_batch = Tensor(train_data.features.dtype(), fshape);
  label_batch = Tensor(train_data.labels.dtype(), lshape);
  fingerprint = Fingerprint(train_program, spec);
  return absl::OkStatus();
}

// The FP8 tensors whose amax and scale each step's metrics report (fp8.report_tensor).
absl::Status Engine::Impl::SelectFp8Reports() {
  if (!spec.fp8().has_report_tensor()) return absl::OkStatus();
  std::regex re;
  try {
    re = std::regex(spec.fp8().report_tensor());
  } catch (const std::regex_error& e) {
    return absl::InvalidArgumentError(absl::StrCat("spec field fp8.report_tensor: '", spec.fp8().report_tensor(),
                                                   "' is not a valid regex: ", e.what()));
  }
  for (const std::string& t : train_program.results.fp8.tensors) {
    if (std::regex_match(t, re)) fp8_reported.push_back(t);
  }
  return absl::OkStatus();
}

// The stop policy, and the observer of --check-numerics / --tensor-stats when asked for.
void Engine::Impl::SetUpNumerics() {
  const NumericsSpec& n = spec.numerics();
  const LossScalingResult& scaling = train_program.results.loss_scaling;
  // A scale that the program updates (UpdateLossScale) is dynamic.
  bool dynamic = false;
  for (const auto& node : train_program.graph->nodes()) dynamic = dynamic || node->op == "UpdateLossScale";
  guard = NumericsGuard(n, dynamic, n.check_every_op());
  if (n.check_every_op() || n.tensor_stats_every_n_steps() > 0) {
    numerics = std::make_unique<NumericsObserver>(train_program.results.memory_plan.order, train_program.node_origin,
                                                  scaling.loss_scale != nullptr);
  }
}

absl::Status Engine::Impl::ResumeAndOpenMetrics() {
  bool resumed = false;
  if (options.resume && !checkpoint_dir.empty() && CheckpointExists(checkpoint_dir)) {
    MPC_ASSIGN_OR_RETURN(TrainingPosition pos, mpc::LoadCheckpoint(checkpoint_dir, *train_exec, fingerprint));
    step = pos.step;
    batches->Seek(pos.epoch, pos.batch_in_epoch);
    resumed = true;
  }
  MPC_ASSIGN_OR_RETURN(metrics, MetricsWriter::Open(options.metrics_path, resumed));
  return absl::OkStatus();
}

absl::Status Engine::Impl::CheckDataMatchesModel(const Dataset& data, const Program& program,
                                                 const std::string& what) const {
  const Value* features = program.graph->FindValue(program.features_input);
  const Shape model_row(features->shape.begin() + 1, features->shape.end());
  const Shape data_row = RowShape(data.features);
  if (NumElements(model_row) != NumElements(data_row)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "shape mismatch: the ", what, " has examples of shape ", ShapeToString(data_row), " (", NumElements(data_row),
        " values) but model input '", features->name, "' takes ", ShapeToString(model_row), " (",
        NumElements(model_row), " values) per example; check the data files and the model"));
  }
  MPC_RETURN_IF_ERROR(CheckGatherIndices(*features, data.features, absl::StrCat("the ", what, " features")));
  const Value* logits = program.graph->FindValue(program.logits_output);
  if (spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
    if (data.labels.dtype() != DType::kI64 || data.labels.shape().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " labels are ", DTypeName(data.labels.dtype()),
                                                     ShapeToString(data.labels.shape()),
                                                     "; softmax cross-entropy needs integer class indices [N] "
                                                     "(or [N, T] for one class per position)"));
    }
    const int64_t classes = logits->shape.back();
    for (int64_t i = 0; i < data.labels.num_elements(); ++i) {
      const int64_t label = data.labels.data<int64_t>()[i];
      if (label < 0 || label >= classes) {
        return absl::InvalidArgumentError(absl::StrCat("the ", what, " label at example ", i, " is ", label,
                                                       ", outside the model's ", classes, " classes (output '",
                                                       logits->name, "' ", ShapeToString(logits->shape), ")"));
      }
    }
  } else {
    const Shape logit_row(logits->shape.begin() + 1, logits->shape.end());
    if (data.labels.dtype() != DType::kF32 || NumElements(RowShape(data.labels)) != NumElements(logit_row)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", what, " targets are ", DTypeName(data.labels.dtype()), ShapeToString(data.labels.shape()),
          "; mean squared error needs f32 ", "targets with ", NumElements(logit_row), " values per example"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mpc
