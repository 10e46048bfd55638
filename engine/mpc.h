// mpc: the one public header for embedding the engine in a C++ program.
//
//   mpc::EngineOptions options;
//   options.spec_path = "train.spec";
//   auto engine = mpc::Engine::Create(options);
//   if (!engine.ok()) { ... engine.status().message() ... }
//   (*engine)->Train(callbacks);          // the whole run the spec describes
//   (*engine)->SaveCheckpoint("ckpt");    // or Step() / Evaluate() one at a time
//
// Or with no files: options.spec_text, options.model_bytes, options.external_batches, and
// Step(batch) / Evaluate(batches) on the caller's mpc::Batch of HostTensors. Inference:
// mpc::Predictor (at the end of this header), safe to Run from several threads at once.
//
// Everything behind it (graph, passes, backends) is private; this header depends only
// on the standard library and abseil's Status types. Installed as <prefix>/include/mpc/mpc.h
// (#include "mpc/mpc.h", CMake: find_package(mpc) and mpc::mpc; docs/embedding.md).
// Versioning is semantic: within a major version no source-incompatible change here.
#pragma once

// The version of the library this header belongs to. Kept equal to CMakeLists.txt's
// project(VERSION): cmake/package.cmake stops the configure when they differ.
#define MPC_VERSION_MAJOR 0
#define MPC_VERSION_MINOR 1
#define MPC_VERSION_PATCH 0
#define MPC_VERSION_STRING "0.1.0"

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mpc {

struct EngineOptions {
  // The spec: exactly one of spec_path (a file) and spec_text (its contents, e.g. built in
  // code). Both are mpc.TrainSpec in protobuf text format (proto/train_spec.proto).
  std::string spec_path;
  std::string spec_text;
  // What relative paths in spec_text (model, data files, checkpoint.dir) are relative to;
  // empty: the current directory. (A spec_path's paths are relative to its directory.)
  std::string base_dir;
  std::string model_path;  // overrides TrainSpec.model when set
  // The serialized ONNX ModelProto (the bytes of a .onnx file); overrides model_path and
  // TrainSpec.model when set. Copied: the caller's string need not outlive Create. A model
  // with external data (side files) cannot come as bytes.
  std::string model_bytes;
  // The caller feeds the training batches (Engine::Step(const Batch&)) and evaluation
  // batches (Evaluate(const std::vector<Batch>&)): the spec needs no train_data, and then
  // needs `steps` (no data to count epochs in). A spec's data sources, when it has them,
  // still feed Step() and Evaluate() as well.
  bool external_batches = false;
  std::string device;          // overrides TrainSpec.device when set ("cpu", "cuda", "auto")
  std::string checkpoint_dir;  // overrides TrainSpec.checkpoint.dir when set
  std::string metrics_path;    // JSON Lines metrics file; empty: none
  // Checkpoints (docs/training.md "Checkpoints"). A run that would overwrite the
  // checkpoints in checkpoint_dir stops at Create unless one of these says what to do:
  bool resume = false;                 // continue from the checkpoint in checkpoint_dir (an error if none)
  bool resume_if_present = false;      // continue from it if there is one, else start at step 0 (schedulers)
  bool overwrite_checkpoints = false;  // start over: remove the checkpoints in checkpoint_dir
  bool profile = false;                // time every kernel; see Engine::Profile()
  // Compiler passes to skip, by name (as `mpc compile --disable-passes`): for measuring
  // what a pass gains and for finding which one a problem comes from. An unknown name is an
  // error; a required pass (autodiff, optimizer, memory-plan, ...) skipped leaves a program
  // that does not train.
  std::vector<std::string> disabled_passes;
  // Attention compiled to one FusedAttention op (passes/fuse_attention.h) even on the CPU,
  // whose own path is the unfused chain: the graph a GPU with fused attention runs, trained
  // here to check its numerics. The CPU's FusedAttention kernels are plain loops, slower
  // than its own path.
  bool fused_attention = false;
  std::string precision;               // overrides TrainSpec.precision.compute: f32, tf32, bf16, fp16, fp8
  std::string loss_scaling;            // overrides TrainSpec.loss_scaling: off, dynamic, static:S
  std::string fp8_recipe;              // overrides TrainSpec.fp8.recipe: delayed, current, rowwise, block
  std::string recompute;               // overrides TrainSpec.memory.recompute: none, selective, full
  int pad_multiple = 0;                // overrides TrainSpec.padding.multiple when > 0 (1 = off)
  // Overrides TrainSpec.numerics: check every op's outputs and stop at the first non-finite
  // one, naming it (a debugging mode: a host copy of every output); and tensor statistics
  // every N steps (StepMetrics::tensor_stats, the metrics file).
  bool check_numerics = false;
  int tensor_stats_every_n_steps = 0;
  // false: the engine neither inspects nor writes a checkpoint directory (the spec's
  // checkpoint.dir is ignored, SaveCheckpoint still works on the directory it is given).
  // For scratch runs beside a real one, such as Engine::Parity's.
  bool use_checkpoint_dir = true;
  // ExportOnnx writes the initializers of 1 KiB or more to "<model file>.data" beside the
  // model (ONNX external data). It always does above 1800 MiB of weights: protobuf cannot
  // serialize a model over 2 GiB in one file.
  bool export_external_data = false;
};

// A tensor the caller owns and hands to Engine::Step / Evaluate: row-major,
// little-endian bytes. The engine copies what it needs during the call and keeps no
// reference, so the caller may reuse or free it as soon as the call returns.
enum class HostDType { kFloat32, kBFloat16, kInt32, kInt64 };

// "f32", "bf16", "i32", "i64": the names error messages use.
inline const char* HostDTypeName(HostDType t) {
  switch (t) {
    case HostDType::kFloat32:
      return "f32";
    case HostDType::kBFloat16:
      return "bf16";
    case HostDType::kInt32:
      return "i32";
    case HostDType::kInt64:
      return "i64";
  }
  return "?";
}

struct HostTensor {
  HostDType dtype = HostDType::kFloat32;
  std::vector<int64_t> shape;  // [batch, ...]; the leading axis is the batch
  // num_elements() * element_size() bytes. bf16 elements are the upper 16 bits of the
  // f32 value (as uint16_t).
  std::vector<uint8_t> data;

  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  size_t element_size() const { return dtype == HostDType::kInt64 ? 8 : dtype == HostDType::kBFloat16 ? 2 : 4; }

  // Typed constructors: copy `values` (shape's product of them) into a new tensor.
  static HostTensor Float32(std::vector<int64_t> shape, const std::vector<float>& values) {
    return Of(HostDType::kFloat32, std::move(shape), values.data(), values.size() * sizeof(float));
  }
  static HostTensor BFloat16(std::vector<int64_t> shape, const std::vector<uint16_t>& values) {
    return Of(HostDType::kBFloat16, std::move(shape), values.data(), values.size() * sizeof(uint16_t));
  }
  static HostTensor Int32(std::vector<int64_t> shape, const std::vector<int32_t>& values) {
    return Of(HostDType::kInt32, std::move(shape), values.data(), values.size() * sizeof(int32_t));
  }
  static HostTensor Int64(std::vector<int64_t> shape, const std::vector<int64_t>& values) {
    return Of(HostDType::kInt64, std::move(shape), values.data(), values.size() * sizeof(int64_t));
  }

 private:
  static HostTensor Of(HostDType dtype, std::vector<int64_t> shape, const void* values, size_t bytes) {
    HostTensor t;
    t.dtype = dtype;
    t.shape = std::move(shape);
    const uint8_t* begin = static_cast<const uint8_t*>(values);
    t.data.assign(begin, begin + bytes);
    return t;
  }
};

// One batch: model input name -> tensor. It names the spec's features_input, the labels
// (TrainSpec.labels_input, "labels" by default; Engine::labels_name()) and every other
// input of the model (Engine::InputNames()).
using Batch = std::map<std::string, HostTensor>;

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
  // Each rank's wall time per step of this Train call, in rank order (one entry alone).
  std::vector<double> rank_ms_per_step;
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

// Engine::Parity (`mpc parity`, docs/parity.md): the spec trained twice from the same
// initial weights on the same batches, in FP32 and in a lower precision, and where the
// two part ways.
struct ParityOptions {
  EngineOptions engine;   // the spec and its overrides (engine.precision is ignored)
  std::string precision;  // compared with f32: tf32, bf16, fp16 (f16) or fp8 (engine.fp8_recipe: its recipe)
  int64_t steps = 0;      // steps of both runs; 0: the spec's whole schedule
  // 1-based steps at which every node output and parameter gradient is compared; empty:
  // the first and the last step.
  std::vector<int64_t> probe_steps;
};

// One value of a probed step: the lower-precision program's output against FP32's.
struct ParityValue {
  std::string value;  // the value's name (a parameter's name for a gradient row)
  std::string node;   // the node that produced it, its op, "forward" or "backward"
  std::string op;
  std::string phase;
  std::string dtype;  // its dtype in the lower-precision program
  int64_t elements = 0;
  // ||out - ref|| / ||ref|| over the whole tensor, ref the FP32 program's value
  // (infinite when out holds a non-finite value and ref does not; see `cancelled`).
  double relative_error = 0;
  // The numerics contract's tolerance for the loosest dtype the value depends on
  // (docs/numerics.md): f32 1e-5, tf32 1e-3, f16 2e-3, bf16 1e-2, f8 1e-1.
  double tolerance = 0;
  // The op cancelled its inputs almost exactly (FP32's output is below 1e-3 of their
  // magnitude, e.g. a bias gradient that batch normalization makes zero): the error is
  // then relative to the inputs' magnitude, FP32's own value being rounding noise.
  bool cancelled = false;
  std::string origin;  // the pass that created the node ("model" for the model's own nodes)
  std::string reason;  // why autocast painted the node as it did ("" when it made no decision)
};

struct ParityProbe {
  int64_t step = 0;  // 1-based
  double loss_f32 = 0, loss_other = 0;
  // Every floating-point node output both programs compute (same name and element count),
  // in the lower-precision program's execution order; scaled gradients (loss scaling)
  // are divided by the scale first.
  std::vector<ParityValue> values;
  std::vector<ParityValue> gradients;  // the gradient the optimizer applies, per parameter
  int first_past_tolerance = -1;       // index into values: where the divergence starts (-1: none)
  int first_gemm_past_tolerance = -1;  // index into values: the first GEMM (Gemm, MatMul) past it
  int64_t not_compared = 0;            // outputs only one program has (casts, fusions)
};

struct ParityReport {
  std::string precision;
  int64_t steps = 0;
  std::vector<double> loss_f32, loss_other;  // per step
  std::vector<bool> skipped_other;           // per step: the lower precision skipped it
  std::vector<ParityProbe> probes;
  EvalMetrics eval_f32, eval_other;  // after the last step
  int64_t planned_peak_bytes_f32 = 0, planned_peak_bytes_other = 0;
  double step_ms_f32 = 0, step_ms_other = 0;  // median wall time of a step (probe steps left out)
  std::vector<std::string> notices;
};

// Errors: every call returns a Status; none throws or aborts on bad input. A step that
// fails once it has started running (a kernel error, a numerics check stopping it) leaves
// the training state undefined (parameters may be half updated): every later Step returns
// FailedPrecondition until LoadCheckpoint (or LoadCheckpointFromBytes) restores a saved
// state (or create a new Engine).
// Errors found before anything ran (a batch that does not fit) leave the Engine usable.
//
// Threading: an Engine is not thread-safe. Call it from one thread at a time (different
// Engines may run on different threads).
class Engine {
 public:
  // Loads the spec and model, compiles the training and evaluation programs and
  // initializes the training state (or restores it with options.resume).
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options);
  // Trains options.engine's spec in FP32 and in options.precision side by side (see
  // ParityOptions); never touches a checkpoint directory.
  static absl::StatusOr<ParityReport> Parity(const ParityOptions& options);
  ~Engine();

  // Runs the whole schedule of the spec: steps, evaluation, checkpoints, metrics.
  absl::StatusOr<TrainSummary> Train(const TrainCallbacks& callbacks = {});
  // One training step on the next batch of the spec's train_data.
  absl::StatusOr<StepMetrics> Step();
  // One training step on the caller's batch: every model input and the labels, each
  // [batch_size, ...] with the model input's dtype and values per example (the rows are
  // reshaped as the model input needs, e.g. [B,28,28] feeds [B,784]); class labels i64
  // [batch_size] in range. A batch that does not fit is an InvalidArgument naming the input
  // and what was expected, and changes nothing. One batch is one optimizer step: the spec
  // must have accumulate_steps 1 (or see StepMicroBatches).
  absl::StatusOr<StepMetrics> Step(const Batch& batch);
  // One optimizer step over accumulate_steps micro-batches (gradient accumulation), each as
  // Step(batch) takes it; the loss is their mean. Every one is checked before any runs.
  absl::StatusOr<StepMetrics> StepMicroBatches(const std::vector<Batch>& micro_batches);
  // Which weights an evaluation or export uses: the trained ones, or their moving average
  // (spec `ema`; evaluating it needs ema.evaluate, which compiles its evaluation program).
  enum class Weights { kTrained, kAverage };
  // Evaluates on the spec's eval data (or the training data when there is none).
  absl::StatusOr<EvalMetrics> Evaluate(Weights weights = Weights::kTrained);
  // Evaluates on the caller's batches (as Step(batch) takes them, each with 1 to the
  // evaluation batch size examples: eval.batch_size, else batch_size); the metrics are over
  // all their examples.
  absl::StatusOr<EvalMetrics> Evaluate(const std::vector<Batch>& batches, Weights weights = Weights::kTrained);

  // A checkpoint of the current step into `dir` (DIR/step-NNNNNNNN/, written under a
  // temporary name and renamed; DIR/latest then names it; the spec's keep_last newest
  // stay); and loading the one DIR/latest names (every checksum verified first: a bad
  // checkpoint changes nothing). In a data-parallel job every rank calls SaveCheckpoint (it
  // checks that the ranks' states agree) and rank 0 writes the one checkpoint of the job,
  // which any number of ranks can load.
  absl::Status SaveCheckpoint(const std::string& dir);
  absl::Status LoadCheckpoint(const std::string& dir);
  // The same checkpoint as one self-contained byte string, nothing on disk (to keep in
  // memory, a database, a message): every persistent tensor, the position in the run and
  // what the checkpoint must match, with the manifest's and each tensor's CRC-32C.
  // LoadCheckpointFromBytes checks and loads it exactly as LoadCheckpoint does a directory
  // (every checksum first: bad bytes change nothing; another model or optimizer is an error,
  // another precision a notice) into an Engine of the same spec, which then continues bit
  // for bit as the saved one would. In a data-parallel job every rank calls
  // SaveCheckpointToBytes (it checks that the ranks' states agree) and gets the bytes.
  absl::StatusOr<std::string> SaveCheckpointToBytes();
  absl::Status LoadCheckpointFromBytes(std::string_view bytes);
  // What Create and LoadCheckpoint(FromBytes) did that the user should know: a resume in another
  // precision (what was re-derived or reset), leftovers of interrupted writes removed,
  // checkpoints removed by overwrite_checkpoints, a resume_if_present that found nothing.
  std::vector<std::string> notices() const;
  // The model as ONNX with the trained weights, or with their moving average (spec `ema`;
  // an error when the spec keeps none). In a ZeRO-3 job (holds_parameter_slices) it is a
  // collective: every rank calls it, the weights are gathered whole from the ranks' slices,
  // and each rank writes `path` unless it is empty (a rank that only takes part; give the
  // ranks different paths, or only rank 0 one: mpc-train does the latter).
  absl::Status ExportOnnx(const std::string& path, Weights weights = Weights::kTrained);

  std::vector<std::string> ParameterNames() const;
  // Persistent non-parameter state: optimizer moments and step counters, the loss
  // scale and its growth tracker.
  std::vector<std::string> StateNames() const;
  // A parameter's current FP32 master value (or a state tensor's), row-major, model shaped.
  absl::StatusOr<std::vector<float>> GetParameter(const std::string& name) const;
  // Sets a parameter's (or state tensor's) FP32 master value: `values` row-major, as many
  // as the model shape holds (GetParameter's layout). The low-precision copy a bf16/fp16
  // program computes with follows. An error names the parameter and both sizes.
  absl::Status SetParameter(const std::string& name, const std::vector<float>& values);
  // The model inputs a Batch feeds: the features_input first, then the others; and the
  // name of the labels entry.
  std::vector<std::string> InputNames() const;
  std::string labels_name() const;
  // The batch size every Step(batch) takes (TrainSpec.batch_size).
  int64_t batch_size() const;
  // Steps this Engine skipped (non-finite gradients under loss scaling) since it was created.
  int64_t skipped_steps() const;
  int64_t step() const;
  // In a data-parallel job (mpirun; docs/distributed.md): this process's rank and the
  // number of ranks. 0 and 1 for a process that runs alone.
  int rank() const;
  int world_size() const;
  int64_t total_steps() const;
  // The spec's log_every_n_steps: a progress line every N steps (0: per epoch only).
  int64_t log_every_n_steps() const;
  int64_t planned_peak_bytes() const;
  // Whether the spec keeps a moving average of the weights (`ema`).
  bool keeps_weight_average() const;
  // ZeRO-3: each rank holds only its slices of the parameters (ExportOnnx is a collective).
  bool holds_parameter_slices() const;
  std::vector<OpProfile> Profile() const;

  struct Impl;

 private:
  static absl::StatusOr<std::unique_ptr<Engine>> CreateForDevice(const EngineOptions& options);
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// ---------------------------------------------------------------------------------------
// Inference: mpc::Predictor runs a model's forward graph (what `mpc run` runs: the same
// import, evaluation pass pipeline and executor) on the caller's HostTensors.
//
//   auto predictor = mpc::Predictor::FromFile("trained.onnx");     // or FromBytes, FromEngine
//   if (!predictor.ok()) { ... predictor.status().message() ... }
//   mpc::HostTensors in;
//   in["image"] = mpc::HostTensor::Float32({1, 1, 28, 28}, pixels);
//   auto out = (*predictor)->Run(in);                               // from any thread
//   if (out.ok()) { const mpc::HostTensor& logits = out->at("logits"); ... }
//
// Threading: Run may be called from any number of threads at once on one Predictor.
// Shared, read-only after creation: the model, its signatures (inputs(), outputs()) and the
// options. Per call: the checked and converted inputs and the returned outputs. Between the
// two, a pool of workers (each its own copy of the model, its own backend, and for each
// input shape it has seen a compiled program with an executor and its activation arena): a
// Run takes an idle worker, or creates one while fewer than max_concurrent_runs exist, or
// waits for one to come back. A worker compiles on its first Run for a shape (about the cost
// of a `mpc run`); Warm() pays that up front. Workers never share mutable state, so results
// do not depend on which worker ran or how many ran at once.
//
// Errors: every misuse is an error value (never an exception or abort) that names the input
// and what was expected: an unknown or missing input, a wrong dtype, rank or dimension, a
// negative or zero dimension, data whose byte count does not match the shape. Inputs are
// checked before any worker is taken, and a failed Run leaves the Predictor as it was:
// the next Run with good inputs returns what it would have returned anyway.
struct PredictorOptions {
  std::string device = "cpu";     // "cpu", "cuda", "cuda:N", or "auto" (CUDA when it can run the model)
  std::string precision = "f32";  // f32, tf32, bf16, fp16 (f16), fp8: as `mpc run --precision`
  int pad_multiple = 0;  // pad GEMM and conv-channel dims to this multiple; 0: the backend's preference, 1: never
  // The most Runs that compute at once (the pool's size); more callers wait for a worker.
  // 0: the number of hardware threads.
  int max_concurrent_runs = 0;
};

// A model input or output. `dtype` is the HostDType it is fed or returned as: the model's
// own when it is f32, bf16, i32 or i64; f32 for other floating types (f16, f64, f8: fed
// values are rounded to the model's type, outputs widened exactly); i32 for u8 and bool.
struct TensorInfo {
  std::string name;
  HostDType dtype = HostDType::kFloat32;
  std::vector<int64_t> shape;  // -1 for a dynamic dimension (any size > 0 is accepted)
  std::string type;            // as the model declares it, e.g. "f32[batch,1,28,28]"
};

// Named tensors in and out of Predictor::Run.
using HostTensors = std::map<std::string, HostTensor>;

class Predictor {
 public:
  // A binary or text ONNX model file (weights in external-data side files are read from
  // beside it), as `mpc run --model` takes.
  static absl::StatusOr<std::unique_ptr<Predictor>> FromFile(const std::string& path,
                                                             const PredictorOptions& options = {});
  // The bytes of a binary .onnx file (copied; no external data).
  static absl::StatusOr<std::unique_ptr<Predictor>> FromBytes(const std::string& bytes,
                                                              const PredictorOptions& options = {});
  // The model `engine` trains, with its current weights (or their moving average): what
  // Engine::ExportOnnx writes. The Predictor keeps its own copy: later steps of the engine do
  // not change it. In a ZeRO-3 job it is a collective, as ExportOnnx is: every rank calls it
  // (each gets its own Predictor).
  static absl::StatusOr<std::unique_ptr<Predictor>> FromEngine(Engine& engine, const PredictorOptions& options = {},
                                                               Engine::Weights weights = Engine::Weights::kTrained);
  ~Predictor();
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;

  // What Run takes (every input, exactly once) and returns (every output), in the model's
  // order.
  const std::vector<TensorInfo>& inputs() const;
  const std::vector<TensorInfo>& outputs() const;

  // Runs the model on `inputs` (name -> tensor; dynamic dimensions take any size, each
  // distinct set of shapes compiles once per worker). Returns every output by name.
  // Thread-safe; the inputs are copied during the call and not kept.
  absl::StatusOr<HostTensors> Run(const HostTensors& inputs) const;

  // Creates up to `workers` workers now (capped at max_concurrent_runs) and compiles each
  // for `example`'s shapes, so that the first requests of a service do not pay for it.
  absl::Status Warm(const HostTensors& example, int workers) const;

  // The workers created so far, and the most that may exist.
  int workers() const;
  int max_concurrent_runs() const;
  // What the user should know about the model (e.g. nodes exported in training mode, which
  // run in evaluation mode), one line each.
  const std::vector<std::string>& notices() const;

  struct Impl;

 private:
  explicit Predictor(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpc
