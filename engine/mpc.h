// mpc: the one public header for embedding the engine in a C++ program.
//
//   auto engine = mpc::Engine::Create({.spec_path = "train.spec"});
//   if (!engine.ok()) { ... engine.status().message() ... }
//   (*engine)->Train(callbacks);          // the whole run the spec describes
//   (*engine)->SaveCheckpoint("ckpt");    // or Step() / Evaluate() one at a time
//
// Everything behind it (graph, passes, backends) is private; this header depends only
// on the standard library and abseil's Status types.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mpc {

struct EngineOptions {
  std::string spec_path;       // mpc.TrainSpec in protobuf text format (required)
  std::string model_path;      // overrides TrainSpec.model when set
  std::string device;          // overrides TrainSpec.device when set ("cpu", "cuda", "auto")
  std::string checkpoint_dir;  // overrides TrainSpec.checkpoint.dir when set
  std::string metrics_path;    // JSON Lines metrics file; empty: none
  bool resume = false;         // continue from the checkpoint in checkpoint_dir, if any
  bool profile = false;        // time every kernel; see Engine::Profile()
  std::string precision;       // overrides TrainSpec.precision.compute: f32, tf32, bf16, fp16, fp8
  std::string loss_scaling;    // overrides TrainSpec.loss_scaling: off, dynamic, static:S
  int pad_multiple = 0;        // overrides TrainSpec.padding.multiple when > 0 (1 = off)
};

struct StepMetrics {
  int64_t step = 0;   // 1-based count of steps taken
  int64_t epoch = 0;  // 0-based epoch the step belongs to
  double loss = 0;
  double lr = 0;
  double loss_scale = 1;  // the scale this step's backward pass used (1 when off)
  bool skipped = false;   // non-finite gradients: the update was skipped
  double grad_norm = -1;  // global gradient norm before clipping (-1 when not clipping)
  // FP8 tensors matching fp8.report_tensor: "<tensor>.amax" (the amax this step's scale
  // update used) and "<tensor>.scale" (the scale the next step quantizes with).
  std::map<std::string, double> fp8;
};

struct EvalMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  double accuracy = 0;  // classification losses only
  int64_t examples = 0;
};

struct TrainSummary {
  int64_t steps = 0;
  double wall_s = 0;
  int64_t planned_peak_bytes = 0;
  EvalMetrics last_eval;
  bool evaluated = false;
  int64_t skipped_steps = 0;
};

struct TrainCallbacks {
  std::function<void(const StepMetrics&)> on_step;
  std::function<void(const EvalMetrics&)> on_eval;
  std::function<void(int64_t epoch, int64_t total_epochs)> on_epoch_end;
};

// One row of the per-op profile: total time spent in kernels of one op kind.
struct OpProfile {
  std::string op;
  int64_t calls = 0;
  double total_ms = 0;
};

class Engine {
 public:
  // Loads the spec and model, compiles the training and evaluation programs and
  // initializes the training state (or restores it with options.resume).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  ~Engine();

  // Runs the whole schedule of the spec: steps, evaluation, checkpoints, metrics.
  absl::StatusOr<TrainSummary> Train(const TrainCallbacks& callbacks = {});
  // One training step on the next batch.
  absl::StatusOr<StepMetrics> Step();
  // Evaluates on the spec's eval data (or the training data when there is none).
  absl::StatusOr<EvalMetrics> Evaluate();

  // Atomic checkpoint write (temp file, fsync, rename) into `dir`; and its inverse.
  absl::Status SaveCheckpoint(const std::string& dir);
  absl::Status LoadCheckpoint(const std::string& dir);
  // The model as ONNX with the trained weights.
  absl::Status ExportOnnx(const std::string& path);

  std::vector<std::string> ParameterNames() const;
  // Persistent non-parameter state: optimizer moments and step counters, the loss
  // scale and its growth tracker.
  std::vector<std::string> StateNames() const;
  // A parameter's current FP32 master value (or a state tensor's), row-major, model shaped.
  absl::StatusOr<std::vector<float>> GetParameter(const std::string& name) const;
  int64_t step() const;
  int64_t total_steps() const;
  int64_t planned_peak_bytes() const;
  std::vector<OpProfile> Profile() const;

  struct Impl;

 private:
  static absl::StatusOr<std::unique_ptr<Engine>> CreateForDevice(const EngineOptions& options);
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpc
