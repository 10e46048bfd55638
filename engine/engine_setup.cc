// Engine::Create: from options to a run ready to step. The spec (with the command
// line's overrides), the data, the compiled training and evaluation programs, their
// executors, the batch iterator, and the checkpoint to resume from, each in its own step.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
absl::Status MatchInputDType(Tensor& values, const Value& input, const std::string& what) {
  const DType have = values.dtype();
  if (have == input.dtype) return absl::OkStatus();
  if (IsFloating(input.dtype)) {
    values = values.CastTo(DType::kF32);
    if (input.dtype != DType::kF32) values = values.CastTo(input.dtype);
    return absl::OkStatus();
  }
  if (!IsFloating(have)) {
    values = values.CastTo(input.dtype);
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("the ", what, " are ", DTypeName(have), " but model input '",
                                                 input.name, "' takes ", DTypeName(input.dtype),
                                                 " (integer ids, e.g. for an embedding); save them as an integer .npy "
                                                 "array (and do not set scale/shift for the features)"));
}

// The features and every more input converted to the dtype of the model input they feed.
absl::Status MatchFeatureDType(Dataset& data, const Program& program, const std::string& what) {
  const Graph& g = *program.graph;
  MPC_RETURN_IF_ERROR(MatchInputDType(data.features, *g.FindValue(program.features_input), what + " features"));
  for (NamedArray& more : data.more_inputs) {
    const Value* input = g.FindValue(more.input);
    if (!input || input->kind != ValueKind::kInput) continue;  // reported by CheckDataMatchesModel
    MPC_RETURN_IF_ERROR(MatchInputDType(more.values, *input, absl::StrCat(what, " input '", more.input, "' values")));
  }
  return absl::OkStatus();
}

// What a checkpoint must match: the optimizer and every persistent value's name, dtype
// and model shape; and, apart, the precision (compute dtype, loss scaling, FP8).
CheckpointIdentity Identity(const Program& program, const TrainSpec& spec) {
  const std::string optimizer =
      spec.optimizer().has_adamw() ? "adamw" : (spec.optimizer().sgd().momentum() != 0 ? "sgd momentum" : "sgd");
  bool dynamic = false;
  for (const auto& node : program.graph->nodes()) dynamic = dynamic || node->op == "UpdateLossScale";
  const LossScalingResult& scaling = program.results.loss_scaling;
  std::string precision =
      absl::StrCat("precision ", absl::AsciiStrToLower(PrecisionSpec::Compute_Name(spec.precision().compute())),
                   ", loss scaling ", scaling.loss_scale ? (dynamic ? "dynamic" : "static") : "off");
  // Another FP8 recipe is another precision: a resume says what it carried and reset. The
  // delayed recipe (the only one before recipes existed) adds nothing, so its checkpoints
  // keep their identity.
  if (spec.precision().compute() == PrecisionSpec::FP8 && spec.fp8().recipe() != Fp8Spec::DELAYED) {
    absl::StrAppend(&precision, ", fp8 recipe ", absl::AsciiStrToLower(Fp8Spec::Recipe_Name(spec.fp8().recipe())),
                    spec.fp8().power_of_two_scales() ? " (power-of-two scales)" : "");
  }
  std::vector<const Value*> persistent;
  for (const auto& v : program.graph->values()) {
    if (v->persistent()) persistent.push_back(v.get());
  }
  return MakeCheckpointIdentity(persistent, optimizer, precision);
}

// The spec from EngineOptions::spec_path or spec_text (exactly one), not yet overridden.
absl::StatusOr<TrainSpec> ReadSpec(const EngineOptions& options) {
  const bool require_train_data = !options.external_batches;
  if (!options.spec_path.empty() && !options.spec_text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("EngineOptions: both spec_path (", options.spec_path, ") and spec_text are set; set exactly one"));
  }
  if (!options.spec_text.empty()) return ParseTrainSpec(options.spec_text, "spec_text", require_train_data);
  if (options.spec_path.empty()) {
    return absl::InvalidArgumentError(
        "no training spec given: set EngineOptions::spec_path (--spec FILE) or EngineOptions::spec_text");
  }
  return LoadTrainSpec(options.spec_path, require_train_data);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  std::string device = options.device;
  if (device.empty()) {
    auto spec = ReadSpec(options);
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
  MPC_RETURN_IF_ERROR(impl->JoinJob());
  MPC_RETURN_IF_ERROR(impl->LoadData());
  MPC_RETURN_IF_ERROR(impl->CompilePrograms());
  MPC_RETURN_IF_ERROR(impl->CreateExecutors());
  MPC_RETURN_IF_ERROR(impl->CheckSameProgramOnAllRanks());
  MPC_RETURN_IF_ERROR(impl->PrepareBatches());
  impl->PrepareRankBatches();
  impl->PrepareBatchTransfer();
  MPC_RETURN_IF_ERROR(impl->SelectFp8Reports());
  impl->SetUpNumerics();
  MPC_RETURN_IF_ERROR(impl->ResumeAndOpenMetrics());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

// The spec with the command line's overrides, the paths it names, and the backend.
absl::Status Engine::Impl::ResolveSpec(const EngineOptions& opts) {
  options = opts;
  MPC_ASSIGN_OR_RETURN(spec, ReadSpec(options));
  MPC_RETURN_IF_ERROR(ApplySpecOverrides({options.precision, options.loss_scaling, options.pad_multiple,
                                          options.check_numerics, options.tensor_stats_every_n_steps,
                                          options.fp8_recipe, options.recompute},
                                         &spec));
  // A spec file's relative paths are relative to its directory; spec text's to base_dir
  // (empty: the current directory).
  spec_dir =
      !options.spec_text.empty() ? options.base_dir : std::filesystem::path(options.spec_path).parent_path().string();
  const std::string spec_name = !options.spec_text.empty() ? "spec_text" : options.spec_path;
  model_bytes = options.model_bytes;
  model_path = !model_bytes.empty()          ? std::string("(EngineOptions::model_bytes)")
               : !options.model_path.empty() ? options.model_path
                                             : ResolvePath(spec_dir, spec.model());
  if (model_path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(spec_name, ": no model: set `model` in the spec, pass --model or set EngineOptions::model_bytes"));
  }
  checkpoint_dir = !options.use_checkpoint_dir       ? std::string()
                   : !options.checkpoint_dir.empty() ? options.checkpoint_dir
                                                     : ResolvePath(spec_dir, spec.checkpoint().dir());
  MPC_ASSIGN_OR_RETURN(backend, CreateBackend(options.device.empty() ? spec.device() : options.device));
  return absl::OkStatus();
}

absl::Status Engine::Impl::LoadData() {
  // Without train_data (EngineOptions::external_batches) every batch comes from the caller.
  has_train_data = spec.has_train_data();
  if (has_train_data) {
    MPC_ASSIGN_OR_RETURN(train_data, LoadDataSource(spec.train_data(), spec_dir, "train_data"));
  }
  if (spec.has_eval() && spec.eval().has_data()) {
    MPC_ASSIGN_OR_RETURN(eval_data, LoadDataSource(spec.eval().data(), spec_dir, "eval.data"));
    has_eval_data = true;
  }
  const int64_t batch = spec.batch_size();
  if (has_train_data && train_data.size() < batch) {
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
  popts.model_bytes = model_bytes;
  popts.batch_size = spec.batch_size() / world_size;  // this rank's share (JoinJob checked it divides)
  popts.world_size = world_size;
  popts.rank = rank;
  popts.pipeline.disabled.insert(options.disabled_passes.begin(), options.disabled_passes.end());
  popts.fused_attention = options.fused_attention;
  // Without training data the labels are one class per example (sequence labels need it).
  if (spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY && has_train_data) {
    popts.label_row = RowShape(train_data.labels);
  }
  label_row = popts.label_row;
  // The data's shapes bind the model's symbolic dimensions past the batch axis (a sequence
  // length exported with dynamic_axes).
  if (has_train_data) {
    input_rows[spec.features_input()] = RowShape(train_data.features);
    for (const NamedArray& more : train_data.more_inputs) input_rows[more.input] = RowShape(more.values);
  }
  popts.input_rows = input_rows;
  popts.training = true;
  MPC_ASSIGN_OR_RETURN(train_program, CompileProgram(spec, backend->capabilities(), popts));
  // Without eval.batch_size, evaluation takes the batch a rank's training program takes
  // (in a job: its share), which a model exported with a fixed batch also accepts.
  if (!spec.eval().has_batch_size()) eval_batch_size = spec.batch_size() / world_size;
  popts.batch_size = eval_batch_size;
  popts.training = false;
  MPC_ASSIGN_OR_RETURN(eval_program, CompileProgram(spec, backend->capabilities(), popts));
  if (spec.ema().evaluate()) {
    MPC_ASSIGN_OR_RETURN(ema_eval_program, CompileProgram(spec, backend->capabilities(), popts));
    std::map<std::string, std::string> averaged(train_program.results.ema.averaged.begin(),
                                                train_program.results.ema.averaged.end());
    for (Value* p : ema_eval_program.graph->ValuesOfKind(ValueKind::kParameter)) {
      auto it = averaged.find(p->name);
      if (it != averaged.end()) MPC_RETURN_IF_ERROR(ema_eval_program.graph->RenameValue(p, it->second));
    }
  }
  if (has_train_data) MPC_RETURN_IF_ERROR(MatchFeatureDType(train_data, train_program, "training data"));
  if (has_eval_data) {
    MPC_RETURN_IF_ERROR(MatchFeatureDType(eval_data, train_program, "evaluation data"));
    if (has_train_data && RowShape(eval_data.labels) != popts.label_row &&
        spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
      return absl::InvalidArgumentError(
          absl::StrCat("the evaluation labels have shape ", ShapeToString(RowShape(eval_data.labels)),
                       " per example but the training labels ", ShapeToString(popts.label_row), "; they must agree"));
    }
  }
  if (has_train_data) MPC_RETURN_IF_ERROR(CheckDataMatchesModel(train_data, train_program, "training data"));
  if (has_eval_data) MPC_RETURN_IF_ERROR(CheckDataMatchesModel(eval_data, train_program, "evaluation data"));
  return absl::OkStatus();
}

// The evaluation executor shares the training executor's parameters and state.
absl::Status Engine::Impl::CreateExecutors() {
  MPC_ASSIGN_OR_RETURN(train_exec, Executor::Create(*train_program.graph, train_program.results.memory_plan, *backend));
  MPC_ASSIGN_OR_RETURN(
      eval_exec, Executor::Create(*eval_program.graph, eval_program.results.memory_plan, *backend, train_exec.get()));
  if (ema_eval_program.graph) {
    MPC_ASSIGN_OR_RETURN(ema_eval_exec, Executor::Create(*ema_eval_program.graph, ema_eval_program.results.memory_plan,
                                                         *backend, train_exec.get()));
  }
  train_exec->EnableProfiling(options.profile);
  eval_exec->EnableProfiling(options.profile);
  return absl::OkStatus();
}

// The batch iterator, the run's length and the batch buffers.
absl::Status Engine::Impl::PrepareBatches() {
  const int64_t batch = spec.batch_size();
  batches = std::make_unique<BatchIterator>(&train_data, batch, spec.train_data().shuffle(), spec.seed());
  const int64_t micro_batches = MicroBatchesPerStep();
  checkpoint_identity = Identity(train_program, spec);
  if (!has_train_data) {
    // The caller's batches: no data to count epochs in, so the run's length is `steps`.
    if (spec.has_epochs()) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec field epochs: ", spec.epochs(),
                       " epochs need train_data to count them in; with batches from the caller set steps: N instead"));
    }
    if (!spec.has_steps()) {
      return absl::InvalidArgumentError(
          "spec field steps: required when the batches come from the caller (no train_data); set steps: N, the "
          "number of Step(batch) calls the learning-rate schedule spans");
    }
    total_steps = spec.steps();
    return absl::OkStatus();
  }
  const int64_t steps_per_epoch = batches->batches_per_epoch() / micro_batches;
  if (steps_per_epoch == 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec field accumulate_steps: ", micro_batches, " micro-batches of ",
                                                   batch, " examples need ", micro_batches * batch,
                                                   " training examples per step but there are ", train_data.size(),
                                                   "; lower accumulate_steps or batch_size"));
  }
  total_steps = spec.has_steps() ? spec.steps() : steps_per_epoch * (spec.has_epochs() ? spec.epochs() : 1);
  Shape fshape{batch};
  for (int64_t d : RowShape(train_data.features)) fshape.push_back(d);
  Shape lshape{batch};
  for (int64_t d : RowShape(train_data.labels)) lshape.push_back(d);
  feature_batch = Tensor(train_data.features.dtype(), fshape);
  label_batch = Tensor(train_data.labels.dtype(), lshape);
  more_input_batches.clear();
  for (const NamedArray& more : train_data.more_inputs) {
    Shape shape{batch};
    for (int64_t d : RowShape(more.values)) shape.push_back(d);
    more_input_batches.emplace_back(more.values.dtype(), shape);
  }
  return absl::OkStatus();
}

void Engine::Impl::PrepareBatchTransfer() {
  if (!has_train_data) return;  // Step(batch) copies from the caller's memory
  // A job's ranks gather their share from a global batch (engine_distributed.cc): no
  // prefetch there.
  prefetch.enabled = world_size <= 1;
  if (prefetch.enabled) {
    prefetch.features = Tensor(feature_batch.dtype(), feature_batch.shape());
    prefetch.labels = Tensor(label_batch.dtype(), label_batch.shape());
    for (const Tensor& t : more_input_batches) prefetch.more_inputs.emplace_back(t.dtype(), t.shape());
  }
  auto pin_set = [&](Tensor& features, Tensor& labels, std::vector<Tensor>& more, const std::string& which) {
    pinned_batches.Pin(*backend, features, absl::StrCat("the ", which, "feature batch"));
    pinned_batches.Pin(*backend, labels, absl::StrCat("the ", which, "label batch"));
    for (size_t i = 0; i < more.size(); ++i) {
      pinned_batches.Pin(*backend, more[i], absl::StrCat("the ", which, "batch of ", train_data.more_inputs[i].input));
    }
  };
  pin_set(feature_batch, label_batch, more_input_batches, "");
  if (prefetch.enabled) pin_set(prefetch.features, prefetch.labels, prefetch.more_inputs, "prefetched ");
  for (const std::string& refusal : pinned_batches.refusals()) notices.push_back(refusal);
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
  // The metrics file is locked before anything is decided or truncated: a second run
  // writing it is refused at start, the first's records untouched. (A missing directory
  // is left to MetricsWriter::Open, whose message names the file.)
  const std::string& metrics_path = options.metrics_path;
  const std::filesystem::path metrics_dir = std::filesystem::path(metrics_path).parent_path();
  if (rank == 0 && !metrics_path.empty() && std::filesystem::is_directory(metrics_dir.empty() ? "." : metrics_dir)) {
    MPC_ASSIGN_OR_RETURN(std::unique_ptr<OutputLock> lock,
                         OutputLock::Acquire(OutputLock::ForFile(metrics_path), absl::StrCat("--metrics ", metrics_path),
                                             "pass another --metrics file"));
    output_locks.push_back(std::move(lock));
  }
  MPC_ASSIGN_OR_RETURN(const int64_t resumed_at, PrepareCheckpointDir());
  // Resumed: the metrics file keeps the records up to the checkpoint's step, then a
  // "resume" marker; the interrupted session's later steps are logged again. In a job,
  // rank 0 writes it (every rank reports the same global loss).
  MPC_ASSIGN_OR_RETURN(metrics, MetricsWriter::Open(rank == 0 ? options.metrics_path : "", resumed_at));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Engine::Impl::PrepareCheckpointDir() {
  const bool resume = options.resume || options.resume_if_present;
  if (options.overwrite_checkpoints && resume) {
    return absl::InvalidArgumentError(
        "--overwrite_checkpoints (start over) contradicts --resume / --resume_if_present (continue); pass one");
  }
  const CheckpointSpec& cs = spec.checkpoint();
  if (cs.keep_last() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("spec field checkpoint.keep_last: ", cs.keep_last(),
                                                   " is negative; keep the newest N checkpoints (N >= 1), 0 for all"));
  }
  if (checkpoint_dir.empty()) {
    if (options.resume) {
      return absl::InvalidArgumentError(
          "--resume: no checkpoint directory to resume from; pass --checkpoint_dir DIR or set checkpoint.dir in the "
          "spec");
    }
    return -1;
  }
  CheckpointDirContents contents = InspectCheckpointDir(checkpoint_dir);
  if (options.resume && !contents.HoldsCheckpoint()) {
    return absl::NotFoundError(absl::StrCat(
        "--resume: ", contents.exists ? "there is no checkpoint in " : "the checkpoint directory ", checkpoint_dir,
        contents.exists ? "" : " does not exist",
        " (mistyped?); to start a new run drop --resume, or pass --resume_if_present to resume only when a checkpoint "
        "exists"));
  }
  int64_t resumed_at = -1;
  const bool writes = cs.every_n_steps() > 0 || cs.at_end();
  if (rank == 0 && (writes || options.overwrite_checkpoints)) {
    // One writer per directory, from before its contents decide anything (what to resume,
    // what to remove) to the end of the run; then the contents again, as they are now
    // that no other run writes them.
    std::error_code ec;
    std::filesystem::create_directories(checkpoint_dir, ec);
    if (ec || !std::filesystem::is_directory(checkpoint_dir)) {
      return absl::InvalidArgumentError(absl::StrCat("checkpoint directory ", checkpoint_dir, ": cannot create it: ",
                                                     ec ? ec.message() : "a file of that name exists",
                                                     "; pass a directory that can be created or written"));
    }
    MPC_ASSIGN_OR_RETURN(std::unique_ptr<OutputLock> lock,
                         OutputLock::Acquire(OutputLock::ForDirectory(checkpoint_dir),
                                             absl::StrCat("checkpoint directory ", checkpoint_dir),
                                             "choose another --checkpoint_dir (checkpoint.dir in the spec)"));
    output_locks.push_back(std::move(lock));
    contents = InspectCheckpointDir(checkpoint_dir);
  }
  if (resume && contents.HoldsCheckpoint()) {
    const SlicedState place = SlicePlace();
    MPC_ASSIGN_OR_RETURN(TrainingPosition pos,
                         mpc::LoadCheckpoint(checkpoint_dir, *train_exec, checkpoint_identity, &notices, &place));
    step = pos.step;
    batches->Seek(pos.epoch, pos.batch_in_epoch);
    resumed_at = pos.step;
  } else if (contents.HoldsCheckpoint() && options.overwrite_checkpoints) {
    // In a job only rank 0 writes to the directory (the others read the same decisions).
    if (rank == 0) MPC_RETURN_IF_ERROR(RemoveCheckpoints(checkpoint_dir, &notices));
  } else if (contents.HoldsCheckpoint() && writes) {
    std::vector<std::string> names;
    for (const auto& [s, name] : contents.steps) names.push_back(name);
    if (contents.old_format) names.push_back(kOldCheckpointFile);
    if (names.empty()) names.push_back(kLatestFile);
    return absl::FailedPreconditionError(
        absl::StrCat(checkpoint_dir, " already holds checkpoints of a run (", absl::StrJoin(names, ", "),
                     "); this run would overwrite them: pass --resume to continue that run, --overwrite_checkpoints ",
                     "to start over (removes them), or choose another --checkpoint_dir"));
  } else if (options.resume_if_present) {
    notices.push_back(
        absl::StrCat("--resume_if_present: no checkpoint in ", checkpoint_dir, " yet; starting at step 0"));
  }
  if (contents.exists && rank == 0) MPC_RETURN_IF_ERROR(RemoveStaleTemporaries(checkpoint_dir, &notices));
  return resumed_at;
}

// Every model input is fed: the features, and each other one by exactly one npy.inputs
// array with as many values per example as the input takes (ids within their tables).
namespace {

absl::Status CheckMoreInputs(const Dataset& data, const Program& program, const std::string& what) {
  for (const std::string& name : program.model_inputs) {
    if (name == program.features_input) continue;
    const bool fed = std::any_of(data.more_inputs.begin(), data.more_inputs.end(),
                                 [&](const NamedArray& a) { return a.input == name; });
    if (!fed) {
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " feeds nothing to model input '", name,
                                                     "'; add npy { inputs { input: \"", name,
                                                     "\" file: \"....npy\" } } to its data source"));
    }
  }
  for (const NamedArray& more : data.more_inputs) {
    const Value* input = program.graph->FindValue(more.input);
    const bool is_model_input =
        std::find(program.model_inputs.begin(), program.model_inputs.end(), more.input) != program.model_inputs.end();
    if (!input || !is_model_input || more.input == program.features_input) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", what, " feeds model input '", more.input, "' through npy.inputs, but ",
          more.input == program.features_input
              ? "that is features_input, fed by npy.features"
              : "the model has no such input; its inputs are: " + absl::StrJoin(program.model_inputs, ", ")));
    }
    const Shape model_row(input->shape.begin() + 1, input->shape.end());
    const Shape data_row = RowShape(more.values);
    if (NumElements(model_row) != NumElements(data_row)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape mismatch: the ", what, " input '", more.input, "' has rows of shape ",
                       ShapeToString(data_row), " (", NumElements(data_row), " values) but the model input takes ",
                       ShapeToString(model_row), " (", NumElements(model_row), " values) per example"));
    }
    MPC_RETURN_IF_ERROR(
        CheckGatherIndices(*input, more.values, absl::StrCat("the ", what, " input '", more.input, "'")));
  }
  return absl::OkStatus();
}

}  // namespace

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
  MPC_RETURN_IF_ERROR(CheckMoreInputs(data, program, what));
  const Shape& logits_shape = program.logits_shape;
  const std::string& logits_name = program.logits_output;
  if (spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
    if (data.labels.dtype() != DType::kI64 || data.labels.shape().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " labels are ", DTypeName(data.labels.dtype()),
                                                     ShapeToString(data.labels.shape()),
                                                     "; softmax cross-entropy needs integer class indices [N] "
                                                     "(or [N, T] for one class per position)"));
    }
    const int64_t classes = program.classes;
    if (spec.eval().top_k() > classes) {
      return absl::InvalidArgumentError(absl::StrCat("spec field eval.top_k: ", spec.eval().top_k(),
                                                     " is more than the model's ", classes, " classes (output '",
                                                     logits_name, "'); use 1..", classes, " or 0 for off"));
    }
    for (int64_t i = 0; i < data.labels.num_elements(); ++i) {
      const int64_t label = data.labels.data<int64_t>()[i];
      if (label < 0 || label >= classes) {
        return absl::InvalidArgumentError(absl::StrCat("the ", what, " label at example ", i, " is ", label,
                                                       ", outside the model's ", classes, " classes (output '",
                                                       logits_name, "' ", ShapeToString(logits_shape), ")"));
      }
    }
  } else {
    const Shape logit_row(logits_shape.begin() + 1, logits_shape.end());
    if (data.labels.dtype() != DType::kF32 || NumElements(RowShape(data.labels)) != NumElements(logit_row)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the ", what, " targets are ", DTypeName(data.labels.dtype()), ShapeToString(data.labels.shape()), "; ",
          spec.loss().type() == LossSpec::MEAN_SQUARED_ERROR ? "mean squared error" : "binary cross-entropy",
          " needs f32 targets with ", NumElements(logit_row), " values per example"));
    }
  }
  return absl::OkStatus();
}

}  // namespace mpc
