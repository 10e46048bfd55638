// Engine: the implementation behind mpc.h. It owns the training state for a run (the
// compiled training and evaluation programs and their executors, sharing parameter
// buffers; the data, the position in the run, metrics and checkpoints). This file runs
// it: steps, the spec's schedule, checkpoints, export. Setting it up is in
// engine_setup.cc, evaluation in evaluation.cc.
#include <algorithm>
#include <chrono>
#include <functional>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/engine_impl.h"
#include "engine/lr_schedule.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"

namespace mpc {

absl::StatusOr<Tensor> Engine::Impl::ReadModelShaped(const std::string& name) const {
  MPC_ASSIGN_OR_RETURN(Tensor t, train_exec->ReadPersistent(name));
  const Value* v = train_program.graph->FindValue(name);
  if (v && !v->logical_shape.empty()) return t.SlicedTo(v->logical_shape);
  return t;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

int64_t Engine::Impl::MicroBatchesPerStep() const { return std::max(1, train_program.results.grad_accumulation.steps); }

bool Engine::Impl::AtEpochEnd() const {
  // With accumulation, the micro-batches left over at an epoch's end (fewer than a step
  // needs) are skipped, like a data loader's drop_last: the epoch ends there.
  return batches->batch_in_epoch() == 0 ||
         batches->batches_per_epoch() - batches->batch_in_epoch() < MicroBatchesPerStep();
}

absl::Status Engine::Impl::CheckUsable() const {
  if (failed_step.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "the engine is in an undefined state: step ", step + 1, " failed midway (", failed_step,
      ") and may have updated part of the parameters; LoadCheckpoint(dir) or LoadCheckpointFromBytes(bytes) to restore "
      "a saved state, or create a new Engine"));
}

absl::StatusOr<StepMetrics> Engine::Step() {
  Impl& m = *impl_;
  MPC_RETURN_IF_ERROR(m.CheckUsable());
  if (!m.has_train_data) {
    return absl::FailedPreconditionError(
        "Step(): the spec has no train_data to draw a batch from; pass the batch, Step(batch), or add train_data");
  }
  if (m.MicroBatchesPerStep() > 1 && m.AtEpochEnd() && m.batches->batch_in_epoch() != 0) {
    m.batches->Seek(m.batches->epoch() + 1, 0);
  }
  m.feeding_from_iterator = true;  // lets TakeStep gather the coming batch while the step runs
  absl::StatusOr<StepMetrics> out = m.RunStep([&m](int64_t) -> absl::Status {
    // A pinned batch buffer is read by the device after SetInput or UploadInputAhead
    // returns: wait for the last copies from them before the iterator rewrites one (all but
    // a no-op after a step: its loss fetch waited for the kernels, and the upload ahead
    // ran beside them; not after a failed step or a checkpoint load).
    if (m.pinned_batches.pinned_count() > 0) MPC_RETURN_IF_ERROR(m.backend->Synchronize());
    m.NextBatch();
    return m.FeedTrainBatch();
  });
  m.feeding_from_iterator = false;
  return out;
}

namespace {

// The step itself (Engine::Impl::RunStep's body).
absl::StatusOr<StepMetrics> TakeStep(Engine::Impl& m, const std::function<absl::Status(int64_t micro)>& feed) {
  const Program& p = m.train_program;
  const GradAccumulationResult& accumulation = p.results.grad_accumulation;
  const int64_t micro_batches = m.MicroBatchesPerStep();
  StepMetrics out;
  out.epoch = m.last_epoch = m.batches->epoch();
  out.lr = LearningRateAt(m.spec, m.step, m.total_steps);
  MPC_RETURN_IF_ERROR(
      m.train_exec->SetInput(p.results.optimizer.learning_rate->name, Tensor::Scalar(static_cast<float>(out.lr))));
  const LossScalingResult& scaling = p.results.loss_scaling;
  if (scaling.loss_scale) {
    MPC_ASSIGN_OR_RETURN(Tensor scale, m.train_exec->ReadPersistent(scaling.loss_scale->name));
    out.loss_scale = scale.GetAsDouble(0);
  }
  // --check-numerics every step, --tensor-stats every N-th: the observer sees each node
  // (of the micro-batch that applies the step, when accumulating).
  const NumericsSpec& numerics = m.spec.numerics();
  const int64_t stats_every = numerics.tensor_stats_every_n_steps();
  const bool stats = stats_every > 0 && (m.step + 1) % stats_every == 0;
  // The step's loss: the mean over its micro-batches, i.e. over all its examples.
  double loss_sum = 0;
  for (int64_t micro = 0; micro < micro_batches; ++micro) {
    const bool last = micro == micro_batches - 1;
    MPC_RETURN_IF_ERROR(feed(micro));
    if (micro_batches > 1) {
      MPC_RETURN_IF_ERROR(m.train_exec->SetInput(accumulation.first->name, Tensor::Scalar(micro == 0 ? 1.0f : 0.0f)));
      MPC_RETURN_IF_ERROR(m.train_exec->SetInput(accumulation.hold->name, Tensor::Scalar(last ? 0.0f : 1.0f)));
    }
    StepObserver* observer = nullptr;
    if (m.numerics && last && (numerics.check_every_op() || stats)) {
      m.numerics->BeginStep(m.step + 1, numerics.check_every_op(), stats);
      observer = m.numerics.get();
    }
    if (m.step_observer && last) observer = m.step_observer;
    m.train_exec->SetObserver(observer);
    // Each micro-batch draws its own dropout masks; the step index (which fault injection
    // keys on) is the optimizer step's.
    const uint64_t seed = m.spec.seed() + static_cast<uint64_t>(micro) * 0x9E3779B97F4A7C15ull;
    MPC_RETURN_IF_ERROR(m.train_exec->Run(seed, m.step));
    // Run only queues the kernels on an asynchronous device: gather the next batch on the
    // host meanwhile and start its copy (the loss fetch below waits for the device).
    MPC_RETURN_IF_ERROR(m.PrefetchNextBatch());
    MPC_ASSIGN_OR_RETURN(Tensor loss, m.train_exec->Fetch(p.loss_output));
    loss_sum += loss.GetAsDouble(0);
  }
  out.loss = micro_batches == 1 ? loss_sum : loss_sum / static_cast<double>(micro_batches);
  if (m.numerics) {
    out.overflow_node = m.numerics->overflow_node();
    out.tensor_stats = m.numerics->TakeStats();
  }
  if (scaling.loss_scale) {
    MPC_ASSIGN_OR_RETURN(Tensor scale, m.train_exec->ReadPersistent(scaling.loss_scale->name));
    m.loss_scale_after = scale.GetAsDouble(0);
  }
  if (scaling.found_nonfinite) {
    MPC_ASSIGN_OR_RETURN(Tensor found, m.train_exec->Fetch(scaling.found_nonfinite->name));
    out.skipped = found.GetAsDouble(0) != 0.0;
    m.skipped_steps += out.skipped;
  }
  if (scaling.grad_norm) {
    MPC_ASSIGN_OR_RETURN(Tensor norm, m.train_exec->Fetch(scaling.grad_norm->name));
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

}  // namespace

absl::StatusOr<StepMetrics> Engine::Impl::RunStep(const std::function<absl::Status(int64_t micro)>& feed) {
  // Anything that fails from here on may have run part of the step (an optimizer update of
  // some parameters but not others): the state is undefined until a checkpoint restores it.
  absl::StatusOr<StepMetrics> out = TakeStep(*this, feed);
  if (!out.ok()) failed_step = std::string(out.status().message());
  return out;
}

absl::StatusOr<EvalMetrics> Engine::Evaluate(Weights weights) { return impl_->RunEval(weights == Weights::kAverage); }

absl::StatusOr<TrainSummary> Engine::Train(const TrainCallbacks& callbacks) {
  Impl& m = *impl_;
  const auto start = std::chrono::steady_clock::now();
  TrainSummary summary;
  summary.planned_peak_bytes = planned_peak_bytes();
  const int64_t first_step = m.step;
  const EvalSpec& eval = m.spec.eval();
  const bool eval_enabled = m.spec.has_eval();
  auto evaluate = [&]() -> absl::Status {
    MPC_ASSIGN_OR_RETURN(EvalMetrics e, m.RunEval());
    summary.last_eval = e;
    summary.evaluated = true;
    m.metrics->WriteEval(e);
    if (callbacks.on_eval) callbacks.on_eval(e);
    if (m.ema_eval_exec) {  // and with the averaged weights (spec ema.evaluate)
      MPC_ASSIGN_OR_RETURN(EvalMetrics averaged, m.RunEval(/*averaged_weights=*/true));
      m.metrics->WriteEval(averaged);
      if (callbacks.on_eval) callbacks.on_eval(averaged);
    }
    return absl::OkStatus();
  };
  const int64_t per_epoch = m.batches->batches_per_epoch() / m.MicroBatchesPerStep();  // optimizer steps
  const int64_t total_epochs = per_epoch ? (m.total_steps + per_epoch - 1) / per_epoch : 0;
  while (m.step < m.total_steps) {
    MPC_ASSIGN_OR_RETURN(StepMetrics s, Step());
    m.metrics->WriteTrain(s);
    if (callbacks.on_step) callbacks.on_step(s);
    // Non-finite numbers stop the run here: nothing after this step is evaluated,
    // checkpointed or exported.
    if (absl::Status st = m.guard.Check(s, m.loss_scale_after); !st.ok()) {
      summary.steps = m.step;
      summary.skipped_steps = m.skipped_steps;
      summary.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      m.metrics->WriteSummary(summary, std::string(st.message()));
      return st;
    }
    const bool epoch_end = m.AtEpochEnd();
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
  const int64_t ran = m.step - first_step;
  MPC_ASSIGN_OR_RETURN(summary.rank_ms_per_step, m.GatherStepTimes(ran ? 1000.0 * summary.wall_s / ran : 0.0));
  m.metrics->WriteSummary(summary);
  return summary;
}

TrainingPosition Engine::Impl::Position() const {
  return {step, batches->epoch(), batches->batch_in_epoch(), spec.seed()};
}

void Engine::Impl::ResumeAt(const TrainingPosition& pos) {
  step = pos.step;
  batches->Seek(pos.epoch, pos.batch_in_epoch);
  failed_step.clear();  // every persistent value is the checkpoint's again
}

absl::Status Engine::Impl::CheckSavable() const {
  MPC_RETURN_IF_ERROR(CheckUsable());  // never a checkpoint of a half-updated state
  // In a job every rank holds the same state, so a checkpoint does not depend on the
  // number of ranks: checked here (a collective: every rank saves together).
  return CheckRanksAgree();
}

absl::Status Engine::SaveCheckpoint(const std::string& dir) {
  Impl& m = *impl_;
  MPC_RETURN_IF_ERROR(m.CheckSavable());
  MPC_ASSIGN_OR_RETURN(const SlicedState sliced, m.GatherSlicedState());  // every rank takes part
  if (m.rank != 0) return absl::OkStatus();                               // rank 0 writes it, once for the whole job
  return mpc::SaveCheckpoint(dir, *m.train_exec, m.Position(), m.checkpoint_identity, m.spec.checkpoint().keep_last(),
                             &sliced)
      .status();
}

absl::StatusOr<std::string> Engine::SaveCheckpointToBytes() {
  Impl& m = *impl_;
  MPC_RETURN_IF_ERROR(m.CheckSavable());
  // No file to write once for the job: every rank returns the (identical) bytes.
  MPC_ASSIGN_OR_RETURN(const SlicedState sliced, m.GatherSlicedState());
  return mpc::SaveCheckpointToBytes(*m.train_exec, m.Position(), m.checkpoint_identity, &sliced);
}

absl::Status Engine::LoadCheckpoint(const std::string& dir) {
  Impl& m = *impl_;
  const SlicedState place = m.SlicePlace();
  MPC_ASSIGN_OR_RETURN(const TrainingPosition pos,
                       mpc::LoadCheckpoint(dir, *m.train_exec, m.checkpoint_identity, &m.notices, &place));
  m.ResumeAt(pos);
  return absl::OkStatus();
}

absl::Status Engine::LoadCheckpointFromBytes(std::string_view bytes) {
  Impl& m = *impl_;
  const SlicedState place = m.SlicePlace();
  MPC_ASSIGN_OR_RETURN(const TrainingPosition pos,
                       mpc::LoadCheckpointFromBytes(bytes, *m.train_exec, m.checkpoint_identity, &m.notices, &place));
  m.ResumeAt(pos);
  return absl::OkStatus();
}

absl::Status Engine::ExportOnnx(const std::string& path, Weights weights) {
  Impl& m = *impl_;
  // The averaged weights: each trained parameter's `<name>.ema` state (frozen ones have none
  // and export as they are).
  std::map<std::string, std::string> source;
  if (weights == Weights::kAverage) {
    const auto& averaged = m.train_program.results.ema.averaged;
    if (averaged.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot export the averaged weights to ", path,
                       ": the spec keeps no moving average; add ema { decay: 0.999 }"));
    }
    source.insert(averaged.begin(), averaged.end());
  }
  // ZeRO-3: the sliced weights (or averages) gathered whole, in the program's order on every
  // rank (a collective); a rank given no path only takes part.
  std::map<std::string, Tensor> gathered;
  if (holds_parameter_slices()) {
    std::set<std::string> wanted;
    for (const Value* p : m.train_program.graph->ValuesOfKind(ValueKind::kParameter)) {
      auto it = source.find(p->name);
      wanted.insert(it == source.end() ? p->name : it->second);
    }
    for (const Value* v : m.train_exec->PersistentValues()) {
      if (v->sharded_from.empty() || !wanted.count(v->name)) continue;
      MPC_ASSIGN_OR_RETURN(Tensor whole, m.GatherWhole(*v));
      gathered.emplace(v->name, v->logical_shape.empty() ? std::move(whole) : whole.SlicedTo(v->logical_shape));
    }
    if (path.empty()) return absl::OkStatus();
  }
  auto read = [&](const std::string& name) -> absl::StatusOr<Tensor> {
    auto it = gathered.find(name);
    if (it != gathered.end()) return it->second;
    return m.ReadModelShaped(name);
  };
  // A fresh forward graph from the model file, with the trained weights and the
  // model's own state (batch-norm running statistics) swapped in.
  ImportOptions import;
  import.batch_size = m.spec.batch_size();
  import.input_rows = m.input_rows;
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> graph, m.model_bytes.empty()
                                                         ? ImportOnnxFile(m.model_path, import)
                                                         : ImportOnnxBytes(m.model_bytes, import, m.model_path));
  for (ValueKind kind : {ValueKind::kParameter, ValueKind::kState}) {
    for (Value* p : graph->ValuesOfKind(kind)) {
      auto it = source.find(p->name);
      MPC_ASSIGN_OR_RETURN(p->data, read(it == source.end() ? p->name : it->second));
      if (const int64_t bad = p->data.NonFiniteCount(); bad > 0) {
        return absl::FailedPreconditionError(absl::StrCat("not exporting ", path, " at step ", m.step, ": '", p->name,
                                                          "' holds ", bad, " non-finite value", bad == 1 ? "" : "s"));
      }
    }
  }
  ExportOptions options;
  options.metadata["mpc.trained_steps"] = absl::StrCat(m.step);
  if (weights == Weights::kAverage) {
    options.metadata["mpc.weights"] = absl::StrCat("ema decay ", m.spec.ema().decay());
  }
  options.batch_dim_param = "batch";  // loads again with any batch size
  options.external_data = m.options.export_external_data;
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
  MPC_RETURN_IF_ERROR(impl_->CheckWhole(name, "GetParameter"));
  MPC_ASSIGN_OR_RETURN(Tensor t, impl_->ReadModelShaped(name));
  const Tensor f = t.dtype() == DType::kF32 ? t : t.CastTo(DType::kF32);
  return std::vector<float>(f.data<float>(), f.data<float>() + f.num_elements());
}

int64_t Engine::step() const { return impl_->step; }
int Engine::rank() const { return impl_->rank; }
int Engine::world_size() const { return impl_->world_size; }
int64_t Engine::skipped_steps() const { return impl_->skipped_steps; }
std::vector<std::string> Engine::notices() const { return impl_->notices; }
int64_t Engine::total_steps() const { return impl_->total_steps; }
int64_t Engine::log_every_n_steps() const { return impl_->spec.log_every_n_steps(); }
bool Engine::holds_parameter_slices() const {
  for (const Value* p : impl_->train_program.graph->ValuesOfKind(ValueKind::kParameter)) {
    if (!p->sharded_from.empty()) return true;
  }
  return false;
}
bool Engine::keeps_weight_average() const { return !impl_->train_program.results.ema.averaged.empty(); }
int64_t Engine::planned_peak_bytes() const { return impl_->train_program.results.memory_plan.plan.peak_bytes; }

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
