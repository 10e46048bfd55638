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
  // Checkpoints (docs/training.md "Checkpoints"). A run that would overwrite the
  // checkpoints in checkpoint_dir stops at Create unless one of these says what to do:
  bool resume = false;                 // continue from the checkpoint in checkpoint_dir (an error if none)
  bool resume_if_present = false;      // continue from it if there is one, else start at step 0 (schedulers)
  bool overwrite_checkpoints = false;  // start over: remove the checkpoints in checkpoint_dir
  bool profile = false;                // time every kernel; see Engine::Profile()
  std::string precision;               // overrides TrainSpec.precision.compute: f32, tf32, bf16, fp16, fp8
  std::string loss_scaling;            // overrides TrainSpec.loss_scaling: off, dynamic, static:S
  int pad_multiple = 0;                // overrides TrainSpec.padding.multiple when > 0 (1 = off)
  // Overrides TrainSpec.numerics: check every op's outputs and stop at the first non-finite
  // one, naming it (a debugging mode: a host copy of every output); and tensor statistics
  // every N steps (StepMetrics::tensor_stats, the metrics file).
  bool check_numerics = false;
  int tensor_stats_every_n_steps = 0;
};

// Statistics of one tensor of a step (--tensor-stats): a forward activation, a gradient
// (any output of the backward pass) or an FP8 quantization.
struct TensorStats {
  std::string tensor;  // the value's name
  std::string node;    // the node that produced it, and its op
  std::string op;
  std::string phase;  // "forward" or "backward"
  std::string dtype;
  int64_t elements = 0;
  double amax = 0, min = 0, max = 0;
  double zero_fraction = 0;
  int64_t nonfinite = 0;
  // f16/bf16: the fraction of values that are subnormal (below the dtype's smallest
  // normal: precision already lost, the next step down is zero); with zero_fraction,
  // what underflowed. -1 for other dtypes.
  double subnormal_fraction = -1;
  // FP8 quantizations (Fp8Quantize): the fraction of non-zero inputs that quantized to
  // zero, and of inputs beyond the format's range that saturated. -1 otherwise.
  double fp8_underflow_fraction = -1;
  double fp8_saturated_fraction = -1;
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
  // With check_numerics and loss scaling: the backward node whose outputs overflowed
  // first in a skipped step ("" otherwise).
  std::string overflow_node;
  // Every tensor_stats_every_n_steps steps: statistics of the step's tensors.
  std::vector<TensorStats> tensor_stats;
};

struct EvalMetrics {
  int64_t step = 0;
  int64_t epoch = 0;
  double loss = 0;
  double accuracy = 0;  // classification losses only
  int64_t examples = 0;
  // The metrics below are negative (or empty) where they do not apply.
  int top_k = 0;                                                // eval.top_k when > 1
  double top_k_accuracy = -1;                                   // the label among the top_k largest logits
  double macro_f1 = -1;                                         // classification: unweighted mean of the per-class F1
  std::vector<double> class_precision, class_recall, class_f1;  // per class, index = class id
  bool averaged_weights = false;  // evaluated with the moving average of the weights (spec ema)
  double perplexity = -1;         // one class per position (language models): exp(mean loss)
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
  // Which weights an evaluation or export uses: the trained ones, or their moving average
  // (spec `ema`; evaluating it needs ema.evaluate, which compiles its evaluation program).
  enum class Weights { kTrained, kAverage };
  // Evaluates on the spec's eval data (or the training data when there is none).
  absl::StatusOr<EvalMetrics> Evaluate(Weights weights = Weights::kTrained);

  // A checkpoint of the current step into `dir` (DIR/step-NNNNNNNN/, written under a
  // temporary name and renamed; DIR/latest then names it; the spec's keep_last newest
  // stay); and loading the one DIR/latest names (every checksum verified first: a bad
  // checkpoint changes nothing).
  absl::Status SaveCheckpoint(const std::string& dir);
  absl::Status LoadCheckpoint(const std::string& dir);
  // What Create and LoadCheckpoint did that the user should know: a resume in another
  // precision (what was re-derived or reset), leftovers of interrupted writes removed,
  // checkpoints removed by overwrite_checkpoints, a resume_if_present that found nothing.
  std::vector<std::string> notices() const;
  // The model as ONNX with the trained weights, or with their moving average (spec `ema`;
  // an error when the spec keeps none).
  absl::Status ExportOnnx(const std::string& path, Weights weights = Weights::kTrained);

  std::vector<std::string> ParameterNames() const;
  // Persistent non-parameter state: optimizer moments and step counters, the loss
  // scale and its growth tracker.
  std::vector<std::string> StateNames() const;
  // A parameter's current FP32 master value (or a state tensor's), row-major, model shaped.
  absl::StatusOr<std::vector<float>> GetParameter(const std::string& name) const;
  int64_t step() const;
  int64_t total_steps() const;
  // The spec's log_every_n_steps: a progress line every N steps (0: per epoch only).
  int64_t log_every_n_steps() const;
  int64_t planned_peak_bytes() const;
  // Whether the spec keeps a moving average of the weights (`ema`).
  bool keeps_weight_average() const;
  std::vector<OpProfile> Profile() const;

  struct Impl;

 private:
  static absl::StatusOr<std::unique_ptr<Engine>> CreateForDevice(const EngineOptions& options);
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpc
