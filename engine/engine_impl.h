// Engine::Impl: the training state behind mpc.h, shared by the files that implement the
// Engine: engine_setup.cc (from options to a ready run), engine.cc (steps, the schedule,
// checkpoints, export) and evaluation.cc (evaluation passes over the data).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "distributed/communicator.h"
#include "engine/checkpoint.h"
#include "engine/dataset.h"
#include "engine/evaluation.h"
#include "engine/executor.h"
#include "engine/metrics.h"
#include "engine/output_lock.h"
#include "engine/mpc.h"
#include "engine/numerics_guard.h"
#include "engine/numerics_observer.h"
#include "engine/pinned_host_buffers.h"
#include "engine/program.h"
#include "proto/train_spec.pb.h"

namespace mpc {

struct Engine::Impl {
  EngineOptions options;
  TrainSpec spec;
  std::string spec_dir;
  std::string model_path;
  std::string model_bytes;  // EngineOptions::model_bytes: the model comes from memory (model_path names it)
  std::string checkpoint_dir;
  std::unique_ptr<Backend> backend;
  Program train_program, eval_program;
  std::unique_ptr<Executor> train_exec, eval_exec;
  // spec ema.evaluate: the evaluation program again, its parameters renamed to the training
  // program's `<name>.ema` state, so it runs on the averaged weights (null otherwise).
  Program ema_eval_program;
  std::unique_ptr<Executor> ema_eval_exec;
  Dataset train_data, eval_data;
  bool has_train_data = true;  // false: a spec without train_data, fed only by Step(batch)
  bool has_eval_data = false;
  Shape label_row;  // one example's labels without the batch axis (ProgramOptions::label_row)
  std::map<std::string, Shape> input_rows;  // one example's shape per model input (ProgramOptions::input_rows)
  std::unique_ptr<BatchIterator> batches;
  Tensor feature_batch, label_batch;
  std::vector<Tensor> more_input_batches;  // one per train_data.more_inputs
  int64_t step = 0;
  int64_t last_epoch = 0;     // epoch of the most recent step (the iterator may have rolled over)
  int64_t skipped_steps = 0;  // this process's count (not checkpointed)
  int64_t total_steps = 0;
  int64_t eval_batch_size = 0;
  CheckpointIdentity checkpoint_identity;  // what a checkpoint must match to load
  std::vector<std::string> notices;        // Engine::notices()
  // The checkpoint directory's and metrics file's writer locks (engine/output_lock.h),
  // held for the engine's life by the rank that writes them; declared before `metrics`
  // so they are released after it is closed.
  std::vector<std::unique_ptr<OutputLock>> output_locks;
  std::unique_ptr<MetricsWriter> metrics;
  std::vector<std::string> fp8_reported;       // FP8 tensors matching fp8.report_tensor
  std::unique_ptr<NumericsObserver> numerics;  // --check-numerics / --tensor-stats; null when off
  NumericsGuard guard;                         // when the run stops on non-finite numbers
  double loss_scale_after = 1;                 // the loss scale the next step uses (dynamic scaling changes it)
  // Sees every node of the next steps' last micro-batch while set (Engine::Parity's
  // capture); it takes the place of `numerics` there.
  StepObserver* step_observer = nullptr;
  // Why a step failed after it started running ("" while none has): the training state is
  // then undefined and Step refuses until LoadCheckpoint restores one.
  std::string failed_step;

  // Data-parallel (engine_distributed.cc): the job (null: this process runs alone), this
  // process's rank in it, and the global batch every rank draws before keeping its share
  // (feature_batch etc. then hold the share).
  Communicator* world = nullptr;
  int rank = 0;
  int world_size = 1;
  Tensor global_feature_batch, global_label_batch;
  std::vector<Tensor> global_more_input_batches;
  // The coming batch, gathered while the device runs the current step (PrefetchNextBatch)
  // and swapped into feature_batch etc. by NextBatch if the iterator is still at the
  // position it was gathered from (a Seek or a loaded checkpoint leaves it unused). The
  // iterator moves only when a batch is consumed, so checkpoints record the same position
  // with or without it. Single-process runs on the spec's data only. Its pinned buffers
  // are also copied to the device ahead (Executor::UploadInputAhead) where the backend
  // can: the inputs named in `uploaded_inputs`.
  struct PrefetchedBatch {
    bool enabled = false;
    bool ready = false;
    int64_t epoch = -1, batch_in_epoch = -1;
    Tensor features, labels;
    std::vector<Tensor> more_inputs;
    std::vector<std::string> uploaded_inputs;
  };
  PrefetchedBatch prefetch;
  // The inputs of the batch NextBatch took that are already on the device (the prefetch's
  // uploaded_inputs when it took the prefetch, else none): fed by SetInputFromUpload.
  std::vector<std::string> batch_uploaded_inputs;
  // True while Engine::Step() runs a step on the iterator's batches (not the caller's).
  bool feeding_from_iterator = false;
  // feature_batch, label_batch, more_input_batches and the prefetch buffers, pinned for
  // the device's copies (PrepareBatchTransfer). Declared after them and the backend: it
  // unpins before either goes.
  PinnedHostBuffers pinned_batches;

  // Setup, in the order Engine::Create runs it (engine_setup.cc).
  absl::Status ResolveSpec(const EngineOptions& options);
  absl::Status JoinJob();  // after ResolveSpec: the job, if mpirun started one
  absl::Status LoadData();
  absl::Status CompilePrograms();
  absl::Status CreateExecutors();
  absl::Status PrepareBatches();
  absl::Status SelectFp8Reports();
  void SetUpNumerics();
  absl::Status ResumeAndOpenMetrics();
  // After the executors: every rank's mpc, spec, model and collectives agree (an error
  // listing the ranks that differ otherwise).
  absl::Status CheckSameProgramOnAllRanks();
  // The end of PrepareBatches in a job: the batch buffers become this rank's share.
  void PrepareRankBatches();
  // After the batch buffers have their final sizes: the prefetch buffers beside them, and
  // the large ones pinned where the backend can (pinned_host_buffers.h; a refusal becomes
  // a notice).
  void PrepareBatchTransfer();
  // Gathers the iterator's coming batch into `prefetch` (engine_batches.cc) and starts
  // uploading its pinned buffers; called once the step's kernels are queued, so on an
  // asynchronous device the gather and the copies overlap them.
  absl::Status PrefetchNextBatch();
  // Feeds the training program the batch NextBatch took: inputs uploaded ahead from their
  // device copies, the rest from the host buffers.
  absl::Status FeedTrainBatch();
  // The next training batch into feature_batch/label_batch/more_input_batches (this
  // rank's rows of the global batch in a job).
  void NextBatch();
  // In a job: every rank's parameters, optimizer state and loss scale are bit-identical
  // (checked before each checkpoint; an error naming the first tensor that differs).
  absl::Status CheckRanksAgree() const;
  // ZeRO-1: every sliced state gathered whole from the ranks (a collective: every rank
  // calls it before a checkpoint is written), with this rank's place for loading.
  absl::StatusOr<SlicedState> GatherSlicedState() const;
  // One sliced state gathered whole (its padded shape; a collective, as above).
  absl::StatusOr<Tensor> GatherWhole(const Value& sliced) const;
  // This rank's place, for loading a checkpoint into its slices.
  SlicedState SlicePlace() const { return SlicedState{rank, world_size, {}}; }
  // An error when `name` is a sliced state (ZeRO-1): this rank holds only a slice of it.
  absl::Status CheckWhole(const std::string& name, const std::string& call) const;
  // Every rank's ms per step, in rank order (a collective in a job; just ours alone).
  absl::StatusOr<std::vector<double>> GatherStepTimes(double ms_per_step) const;
  // Resume, refuse to overwrite, or start over, as the options say; the step resumed at
  // (-1: none). Nothing in the checkpoint directory changes when it fails.
  absl::StatusOr<int64_t> PrepareCheckpointDir();

  // One optimizer step; `feed(micro)` sets the inputs of its micro-batch `micro` (the batch
  // iterator's, or the caller's, engine_batches.cc). An error marks failed_step.
  absl::StatusOr<StepMetrics> RunStep(const std::function<absl::Status(int64_t micro)>& feed);
  // FailedPrecondition once a step has failed midway (failed_step).
  absl::Status CheckUsable() const;
  // Before any checkpoint (directory or bytes): CheckUsable, then CheckRanksAgree.
  absl::Status CheckSavable() const;
  // The position a checkpoint records, and moving to a loaded one (which also clears
  // failed_step: every persistent value is the checkpoint's again).
  TrainingPosition Position() const;
  void ResumeAt(const TrainingPosition& pos);

  absl::Status CheckDataMatchesModel(const Dataset& data, const Program& program, const std::string& what) const;
  // evaluation.cc; `averaged_weights`: with the moving average (ema_eval_exec).
  absl::StatusOr<EvalMetrics> RunEval(bool averaged_weights = false);
  // How evaluation scores logits against labels of this row shape (the spec's loss).
  EvalScorer::Options ScorerOptions(const Shape& label_row) const;
  // Gradient accumulation: micro-batches per optimizer step (1 without), and whether the
  // batch position is at an epoch's end (no room left for a whole step).
  int64_t MicroBatchesPerStep() const;
  bool AtEpochEnd() const;
  // A parameter or state tensor as the model shapes it (padding removed).
  absl::StatusOr<Tensor> ReadModelShaped(const std::string& name) const;
};

// One example's shape: the tensor's shape without the leading example axis.
inline Shape RowShape(const Tensor& t) { return Shape(t.shape().begin() + 1, t.shape().end()); }

}  // namespace mpc
