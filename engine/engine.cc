// Engine: the implementation behind mpc.h. It owns the training state for a run: the
// compiled training and evaluation programs and their executors (sharing parameter
// buffers), the data, the position in the run, metrics and checkpoints.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/dataset.h"
#include "engine/executor.h"
#include "engine/index_check.h"
#include "engine/lr_schedule.h"
#include "engine/metrics.h"
#include "engine/mpc.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "passes/autocast.h"
#include "passes/loss_scaling.h"

namespace mpc {

struct Engine::Impl {
  EngineOptions options;
  TrainSpec spec;
  std::string spec_dir;
  std::string model_path;
  std::string checkpoint_dir;
  std::unique_ptr<Backend> backend;
  Program train_program, eval_program;
  std::unique_ptr<Executor> train_exec, eval_exec;
  Dataset train_data, eval_data;
  bool has_eval_data = false;
  std::unique_ptr<BatchIterator> batches;
  Tensor feature_batch, label_batch;
  int64_t step = 0;
  int64_t last_epoch = 0;
  int64_t skipped_steps = 0;  // this process's count (not checkpointed)  // epoch of the most recent step (the iterator may have rolled over)
  int64_t total_steps = 0;
  int64_t eval_batch_size = 0;
  std::string fingerprint;
  std::unique_ptr<MetricsWriter> metrics;
  std::vector<std::string> fp8_reported;  // FP8 tensors matching fp8.report_tensor

  absl::Status CheckDataMatchesModel(const Dataset& data, const Program& program, const std::string& what) const;
  absl::StatusOr<EvalMetrics> RunEval();
  // A parameter or state tensor as the model shapes it (padding removed).
  absl::StatusOr<Tensor> ReadModelShaped(const std::string& name) const {
    MPC_ASSIGN_OR_RETURN(Tensor t, train_exec->ReadPersistent(name));
    const Value* v = train_program.graph->FindValue(name);
    if (v && !v->logical_shape.empty()) return t.SlicedTo(v->logical_shape);
    return t;
  }
};

namespace {

Shape RowShape(const Tensor& t) { return Shape(t.shape().begin() + 1, t.shape().end()); }

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
  return absl::InvalidArgumentError(absl::StrCat(
      "the ", what, " features are ", DTypeName(have), " but model input '", input.name, "' takes ",
      DTypeName(input.dtype), " (integer ids, e.g. for an embedding); save the features as an integer .npy "
      "array and do not set scale/shift"));
}

std::string Fingerprint(const Program& program, const TrainSpec& spec) {
  std::string key = spec.optimizer().has_adamw() ? "adamw" : absl::StrCat("sgd", spec.optimizer().sgd().momentum() != 0);
  std::vector<const Value*> persistent;
  for (const auto& v : program.graph->values()) {
    // Model shapes, so a padded and an unpadded run can share checkpoints.
    const Shape& shape = v->logical_shape.empty() ? v->shape : v->logical_shape;
    if (v->persistent()) key += absl::StrCat("|", v->name, ":", DTypeName(v->dtype), ShapeToString(shape));
  }
  return absl::StrFormat("%016x", std::hash<std::string>()(key));
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
      return absl::InvalidArgumentError(absl::StrCat("the ", what, " targets are ", DTypeName(data.labels.dtype()),
                                                     ShapeToString(data.labels.shape()), "; mean squared error needs f32 ",
                                                     "targets with ", NumElements(logit_row), " values per example"));
    }
  }
  return absl::OkStatus();
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options) {
  std::string device = options.device;
  if (device.empty()) {
    auto spec = LoadTrainSpec(options.spec_path);
    if (spec.ok()) device = spec->device();
  }
  if (device == "auto") {
    // The GPU when there is one and the CUDA backend can run this program (it does not
    // cover every op yet); otherwise the CPU. Errors unrelated to the device (bad spec,
    // bad model) come back from the CPU attempt unchanged.
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
  impl->options = options;
  if (options.spec_path.empty()) return absl::InvalidArgumentError("no training spec given (--spec FILE)");
  MPC_ASSIGN_OR_RETURN(impl->spec, LoadTrainSpec(options.spec_path));
  TrainSpec& spec = impl->spec;
  if (!options.precision.empty()) {
    MPC_ASSIGN_OR_RETURN(PrecisionSpec::Compute compute, ParsePrecision(options.precision));
    spec.mutable_precision()->set_compute(compute);
  }
  if (options.pad_multiple > 0) spec.mutable_padding()->set_multiple(options.pad_multiple);
  if (!options.loss_scaling.empty()) {
    MPC_RETURN_IF_ERROR(ParseLossScalingFlag(options.loss_scaling, spec.mutable_loss_scaling()));
  }
  impl->spec_dir = std::filesystem::path(options.spec_path).parent_path().string();
  impl->model_path = !options.model_path.empty() ? options.model_path : ResolvePath(impl->spec_dir, spec.model());
  if (impl->model_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(options.spec_path, ": no model: set `model` in the spec or pass --model"));
  }
  impl->checkpoint_dir = !options.checkpoint_dir.empty() ? options.checkpoint_dir
                                                         : ResolvePath(impl->spec_dir, spec.checkpoint().dir());
  MPC_ASSIGN_OR_RETURN(impl->backend, CreateBackend(options.device.empty() ? spec.device() : options.device));

  MPC_ASSIGN_OR_RETURN(impl->train_data, LoadDataSource(spec.train_data(), impl->spec_dir, "train_data"));
  if (spec.has_eval() && spec.eval().has_data()) {
    MPC_ASSIGN_OR_RETURN(impl->eval_data, LoadDataSource(spec.eval().data(), impl->spec_dir, "eval.data"));
    impl->has_eval_data = true;
  }
  const int64_t batch = spec.batch_size();
  if (impl->train_data.size() < batch) {
    return absl::InvalidArgumentError(absl::StrCat("spec field batch_size: ", batch, " is larger than the ",
                                                   impl->train_data.size(), " training examples"));
  }
  impl->eval_batch_size = spec.eval().has_batch_size() ? spec.eval().batch_size() : batch;

  ProgramOptions popts;
  popts.model_path = impl->model_path;
  popts.batch_size = batch;
  if (spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) popts.label_row = RowShape(impl->train_data.labels);
  popts.training = true;
  MPC_ASSIGN_OR_RETURN(impl->train_program, CompileProgram(spec, impl->backend->capabilities(), popts));
  popts.batch_size = impl->eval_batch_size;
  popts.training = false;
  MPC_ASSIGN_OR_RETURN(impl->eval_program, CompileProgram(spec, impl->backend->capabilities(), popts));
  const Value* features_input = impl->train_program.graph->FindValue(impl->train_program.features_input);
  MPC_RETURN_IF_ERROR(MatchFeatureDType(impl->train_data, *features_input, "training data"));
  if (impl->has_eval_data) {
    MPC_RETURN_IF_ERROR(MatchFeatureDType(impl->eval_data, *features_input, "evaluation data"));
    if (RowShape(impl->eval_data.labels) != popts.label_row &&
        spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the evaluation labels have shape ", ShapeToString(RowShape(impl->eval_data.labels)),
          " per example but the training labels ", ShapeToString(popts.label_row), "; they must agree"));
    }
  }
  MPC_RETURN_IF_ERROR(impl->CheckDataMatchesModel(impl->train_data, impl->train_program, "training data"));
  if (impl->has_eval_data) {
    MPC_RETURN_IF_ERROR(impl->CheckDataMatchesModel(impl->eval_data, impl->train_program, "evaluation data"));
  }

  MPC_ASSIGN_OR_RETURN(impl->train_exec, Executor::Create(*impl->train_program.graph, impl->train_program.info,
                                                          *impl->backend));
  MPC_ASSIGN_OR_RETURN(impl->eval_exec, Executor::Create(*impl->eval_program.graph, impl->eval_program.info,
                                                         *impl->backend, impl->train_exec.get()));
  impl->train_exec->EnableProfiling(options.profile);
  impl->eval_exec->EnableProfiling(options.profile);

  impl->batches = std::make_unique<BatchIterator>(&impl->train_data, batch, spec.train_data().shuffle(), spec.seed());
  const int64_t per_epoch = impl->batches->batches_per_epoch();
  impl->total_steps = spec.has_steps() ? spec.steps() : per_epoch * (spec.has_epochs() ? spec.epochs() : 1);
  Shape fshape{batch};
  for (int64_t d : RowShape(impl->train_data.features)) fshape.push_back(d);
  Shape lshape{batch};
  for (int64_t d : RowShape(impl->train_data.labels)) lshape.push_back(d);
  impl->feature_batch = Tensor(impl->train_data.features.dtype(), fshape);
  impl->label_batch = Tensor(impl->train_data.labels.dtype(), lshape);
  impl->fingerprint = Fingerprint(impl->train_program, spec);
  if (spec.fp8().has_report_tensor()) {
    std::regex re;
    try {
      re = std::regex(spec.fp8().report_tensor());
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("spec field fp8.report_tensor: '", spec.fp8().report_tensor(),
                                                     "' is not a valid regex: ", e.what()));
    }
    for (const std::string& t : impl->train_program.info.fp8_tensors) {
      if (std::regex_match(t, re)) impl->fp8_reported.push_back(t);
    }
  }

  bool resumed = false;
  if (options.resume && !impl->checkpoint_dir.empty() && CheckpointExists(impl->checkpoint_dir)) {
    MPC_ASSIGN_OR_RETURN(TrainingPosition pos,
                         mpc::LoadCheckpoint(impl->checkpoint_dir, *impl->train_exec, impl->fingerprint));
    impl->step = pos.step;
    impl->batches->Seek(pos.epoch, pos.batch_in_epoch);
    resumed = true;
  }
  MPC_ASSIGN_OR_RETURN(impl->metrics, MetricsWriter::Open(options.metrics_path, resumed));
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

absl::StatusOr<StepMetrics> Engine::Step() {
  Impl& m = *impl_;
  StepMetrics out;
  out.epoch = m.last_epoch = m.batches->epoch();
  m.batches->Next(&m.feature_batch, &m.label_batch);
  out.lr = LearningRateAt(m.spec, m.step, m.total_steps);
  const Program& p = m.train_program;
  MPC_RETURN_IF_ERROR(m.train_exec->SetInput(p.features_input, m.feature_batch));
  MPC_RETURN_IF_ERROR(m.train_exec->SetInput(p.labels_input, m.label_batch));
  MPC_RETURN_IF_ERROR(m.train_exec->SetInput("lr", Tensor::Scalar(static_cast<float>(out.lr))));
  const CompileInfo& info = p.info;
  if (info.loss_scale) {
    MPC_ASSIGN_OR_RETURN(Tensor scale, m.train_exec->ReadPersistent(info.loss_scale->name));
    out.loss_scale = scale.GetAsDouble(0);
  }
  MPC_RETURN_IF_ERROR(m.train_exec->Run(m.spec.seed(), m.step));
  MPC_ASSIGN_OR_RETURN(Tensor loss, m.train_exec->Fetch(p.loss_output));
  out.loss = loss.GetAsDouble(0);
  if (info.found_nonfinite) {
    MPC_ASSIGN_OR_RETURN(Tensor found, m.train_exec->Fetch(info.found_nonfinite->name));
    out.skipped = found.GetAsDouble(0) != 0.0;
    m.skipped_steps += out.skipped;
  }
  if (info.grad_norm) {
    MPC_ASSIGN_OR_RETURN(Tensor norm, m.train_exec->Fetch(info.grad_norm->name));
    out.grad_norm = norm.GetAsDouble(0);
  }
  for (const std::string& t : m.fp8_reported) {
    MPC_ASSIGN_OR_RETURN(Tensor amax, m.train_exec->ReadPersistent(t + ".fp8_last_amax"));
    MPC_ASSIGN_OR_RETURN(Tensor scale, m.train_exec->ReadPersistent(t + ".fp8_scale"));
    out.fp8[t + ".amax"] = amax.GetAsDouble(0);
    out.fp8[t + ".scale"] = scale.GetAsDouble(0);
  }
  out.step = ++m.step;
  return out;
}

absl::StatusOr<EvalMetrics> Engine::Impl::RunEval() {
  const Dataset& data = has_eval_data ? eval_data : train_data;
  const int64_t n = data.size(), b = eval_batch_size;
  const bool classify = spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY;
  const Shape row = RowShape(data.features);
  const int64_t row_elems = NumElements(row);
  const size_t row_bytes = static_cast<size_t>(row_elems) * DTypeSize(data.features.dtype());
  Tensor features(data.features.dtype(), {b, row_elems});
  // Class labels: one per example, or one per position (a language model's tokens);
  // loss and accuracy are means over every labelled position.
  const int64_t positions = classify ? NumElements(RowShape(data.labels)) : 1;
  double loss_sum = 0;
  int64_t correct = 0;
  for (int64_t start = 0; start < n; start += b) {
    const int64_t valid = std::min(b, n - start);
    // A last partial batch is padded with its first row; only `valid` rows count.
    for (int64_t i = 0; i < b; ++i) {
      const int64_t src = start + (i < valid ? i : 0);
      std::memcpy(static_cast<char*>(features.raw()) + i * row_bytes,
                  static_cast<const char*>(data.features.raw()) + src * row_bytes, row_bytes);
    }
    MPC_RETURN_IF_ERROR(eval_exec->SetInput(eval_program.features_input, features));
    MPC_RETURN_IF_ERROR(eval_exec->Run(spec.seed(), step));
    MPC_ASSIGN_OR_RETURN(Tensor logits, eval_exec->Fetch(eval_program.logits_output));
    const int64_t width = logits.num_elements() / (b * positions);
    for (int64_t i = 0; i < valid * positions; ++i) {
      if (classify) {
        const int64_t label = data.labels.data<int64_t>()[start * positions + i];
        double mx = -INFINITY;
        int64_t arg = 0;
        for (int64_t j = 0; j < width; ++j) {
          const double v = logits.GetAsDouble(i * width + j);
          if (v > mx) {
            mx = v;
            arg = j;
          }
        }
        double sum = 0;
        for (int64_t j = 0; j < width; ++j) sum += std::exp(logits.GetAsDouble(i * width + j) - mx);
        loss_sum += mx + std::log(sum) - logits.GetAsDouble(i * width + label);
        correct += arg == label;
      } else {
        const float* target = data.labels.data<float>() + (start + i) * width;
        for (int64_t j = 0; j < width; ++j) {
          const double d = logits.GetAsDouble(i * width + j) - target[j];
          loss_sum += d * d / width;
        }
      }
    }
  }
  EvalMetrics out;
  out.step = step;
  out.epoch = last_epoch;
  out.examples = n;
  out.loss = loss_sum / (n * positions);
  out.accuracy = classify ? static_cast<double>(correct) / (n * positions) : 0.0;
  return out;
}

absl::StatusOr<EvalMetrics> Engine::Evaluate() { return impl_->RunEval(); }

absl::StatusOr<TrainSummary> Engine::Train(const TrainCallbacks& callbacks) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  TrainSummary summary;
  summary.planned_peak_bytes = planned_peak_bytes();
  const EvalSpec& eval = m.spec.eval();
  const bool eval_enabled = m.spec.has_eval();
  auto evaluate = [&]() -> absl::Status {
    MPC_ASSIGN_OR_RETURN(EvalMetrics e, m.RunEval());
    summary.last_eval = e;
    summary.evaluated = true;
    m.metrics->WriteEval(e);
    if (callbacks.on_eval) callbacks.on_eval(e);
    return absl::OkStatus();
  };
  const int64_t per_epoch = m.batches->batches_per_epoch();
  const int64_t total_epochs = per_epoch ? (m.total_steps + per_epoch - 1) / per_epoch : 0;
  while (m.step < m.total_steps) {
    MPC_ASSIGN_OR_RETURN(StepMetrics s, Step());
    m.metrics->WriteTrain(s);
    if (callbacks.on_step) callbacks.on_step(s);
    const bool epoch_end = m.batches->batch_in_epoch() == 0;
    if (eval_enabled && eval.every_n_steps() > 0 && m.step % eval.every_n_steps() == 0) {
      MPC_RETURN_IF_ERROR(evaluate());
    } else if (eval_enabled && epoch_end && eval.at_epoch_end()) {
      MPC_RETURN_IF_ERROR(evaluate());
    }
    if (epoch_end && callbacks.on_epoch_end) callbacks.on_epoch_end(s.epoch, total_epochs);
    if (!m.checkpoint_dir.empty() && m.spec.checkpoint().every_n_steps() > 0 &&
        m.step % m.spec.checkpoint().every_n_steps() == 0 && m.step < m.total_steps) {
      MPC_RETURN_IF_ERROR(SaveCheckpoint(m.checkpoint_dir));
    }
  }
  if (!m.checkpoint_dir.empty() && m.spec.checkpoint().at_end()) MPC_RETURN_IF_ERROR(SaveCheckpoint(m.checkpoint_dir));
  summary.steps = m.step;
  summary.skipped_steps = m.skipped_steps;
  summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  m.metrics->WriteSummary(summary);
  return summary;
}

absl::Status Engine::SaveCheckpoint(const std::string& dir) {
  Impl& m = *impl_;
  TrainingPosition pos{m.step, m.batches->epoch(), m.batches->batch_in_epoch(), m.spec.seed()};
  return mpc::SaveCheckpoint(dir, *m.train_exec, pos, m.fingerprint);
}

absl::Status Engine::LoadCheckpoint(const std::string& dir) {
  Impl& m = *impl_;
  MPC_ASSIGN_OR_RETURN(TrainingPosition pos, mpc::LoadCheckpoint(dir, *m.train_exec, m.fingerprint));
  m.step = pos.step;
  m.batches->Seek(pos.epoch, pos.batch_in_epoch);
  return absl::OkStatus();
}

absl::Status Engine::ExportOnnx(const std::string& path) {
  Impl& m = *impl_;
  // A fresh forward graph from the model file, with the trained weights and the
  // model's own state (batch-norm running statistics) swapped in.
  ImportOptions import;
  import.batch_size = m.spec.batch_size();
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, ImportOnnxFile(m.model_path, import));
  for (ValueKind kind : {ValueKind::kParameter, ValueKind::kState}) {
    for (Value* p : graph->ValuesOfKind(kind)) {
      MPC_ASSIGN_OR_RETURN(p->data, m.ReadModelShaped(p->name));
    }
  }
  ExportOptions options;
  options.metadata["mpc.trained_steps"] = absl::StrCat(m.step);
  options.batch_dim_param = "batch";  // loads again with any batch size
  return ExportOnnxFile(*graph, options, path);
}

std::vector<std::string> Engine::ParameterNames() const {
  std::vector<std::string> names;
  for (const Value* v : impl_->train_exec->PersistentValues()) {
    if (v->kind == ValueKind::kParameter) names.push_back(v->name);
  }
  return names;
}

std::vector<std::string> Engine::StateNames() const {
  std::vector<std::string> names;
  for (const Value* v : impl_->train_exec->PersistentValues()) {
    if (v->kind == ValueKind::kState) names.push_back(v->name);
  }
  return names;
}

absl::StatusOr<std::vector<float>> Engine::GetParameter(const std::string& name) const {
  MPC_ASSIGN_OR_RETURN(Tensor t, impl_->ReadModelShaped(name));
  const Tensor f = t.dtype() == DType::kF32 ? t : t.CastTo(DType::kF32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.num_elements());
}

int64_t Engine::step() const { return impl_->step; }
int64_t Engine::total_steps() const { return impl_->total_steps; }
int64_t Engine::planned_peak_bytes() const { return impl_->train_program.info.plan.peak_bytes; }

std::vector<OpProfile> Engine::Profile() const {
  std::map<std::string, OpTiming> merged = impl_->train_exec->profile();
  for (const auto& [op, t] : impl_->eval_exec->profile()) {
    merged[op].calls += t.calls;
    merged[op].total_ms += t.total_ms;
  }
  std::vector<OpProfile> out;
  for (const auto& [op, t] : merged) out.push_back({op, t.calls, t.total_ms});
  std::sort(out.begin(), out.end(), [](const OpProfile& a, const OpProfile& b) { return a.total_ms > b.total_ms; });
  return out;
}

}  // namespace mpc
