// Forward inference: load an ONNX model, compile its forward graph in evaluation mode
// for a backend and a precision (the same import, autocast and pass pipeline as
// `mpc compile --eval`: passes/pipelines.h's MakeEvaluationPipeline), feed named inputs, run,
// and get every graph output back in the model's dtype and shape.
//
//   InferenceOptions options;          // cpu, f32
//   auto session = InferenceSession::FromFile("model.onnx", options);
//   if (!session.ok()) { ... session.status().message() ... }
//   auto outputs = (*session)->Run({{"x", x}});   // std::vector<NamedTensor>
//
// Threading: a session is not thread-safe (Run compiles and caches programs and reuses one
// executor's arena per input shape); Clone() gives independent sessions for other threads.
//
// Compilation happens on the first Run and again whenever the fed shapes change: every
// dynamic dimension the model declares on its inputs (the batch axis, or any other) is
// bound to the size of the tensor fed for it. Programs are cached per input shape.
// A model needs no loss or labels; Dropout runs in inference mode (the identity)
// whatever its training_mode input says.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/tensor.h"

namespace onnx {
class ModelProto;
}

namespace mpc {

struct InferenceOptions {
  std::string device = "cpu";     // "cpu", "cuda", "cuda:N", or "auto" (CUDA when it can run the model)
  std::string precision = "f32";  // f32, tf32, bf16, fp16 (f16), fp8: autocast as in `mpc compile --precision`
  int pad_multiple = 0;  // pad GEMM and conv-channel dims to this multiple; 0: the backend's preference, 1: never
  // Evaluation mode by default: Dropout is the identity and BatchNormalization uses its
  // running statistics, whatever training_mode the model declares. True keeps each op's
  // own training_mode (ONNX's reference semantics; the node-test conformance uses it).
  bool follow_model_training_mode = false;
  // Check every op's outputs and fail at the first non-finite one, naming it (slow: a
  // host copy of every output; for debugging).
  bool check_numerics = false;
};

// A graph input or output as the model declares it. `shape` uses -1 for a dynamic
// dimension; `dims` spells the shape with the model's dimension names ("[batch,784]").
struct TensorSignature {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::string dims;
  std::string ToString() const;  // "f32[batch,784]"
};

struct NamedTensor {
  std::string name;
  Tensor value;
};

class InferenceSession {
 public:
  // Reads a binary or text ONNX model file (errors name the file).
  static absl::StatusOr<std::unique_ptr<InferenceSession>> FromFile(const std::string& path,
                                                                    const InferenceOptions& options = {});
  // A serialized binary ModelProto; `source_name` is what error messages call it.
  static absl::StatusOr<std::unique_ptr<InferenceSession>> FromBytes(const std::string& bytes,
                                                                     const InferenceOptions& options = {},
                                                                     const std::string& source_name = "<model bytes>");
  static absl::StatusOr<std::unique_ptr<InferenceSession>> FromModel(const onnx::ModelProto& model,
                                                                     const InferenceOptions& options = {},
                                                                     const std::string& source_name = "<model>");
  ~InferenceSession();

  // The inputs the caller feeds (initializers excluded) and the outputs Run returns,
  // in the model's order.
  const std::vector<TensorSignature>& inputs() const;
  const std::vector<TensorSignature>& outputs() const;

  // Runs the model. Every input must be fed exactly once with its declared dtype and
  // shape (dynamic dimensions: any size). Returns every graph output, in order, named
  // as in the model, in the model's dtype. Errors name the input and what was expected.
  absl::StatusOr<std::vector<NamedTensor>> Run(const std::map<std::string, Tensor>& feeds);

  // The backend the last Run compiled for, e.g. "cpu" (empty before the first Run).
  std::string device() const;

  // A new session on the same model and options that shares no state with this one (its
  // own copy of the model, its own backend, no compiled programs yet): two sessions may
  // Run on two threads at once, one session may not. Reads only what does not change
  // after construction, so it may be called while this session runs on another thread.
  // mpc::Predictor (mpc.h) keeps a pool of these.
  absl::StatusOr<std::unique_ptr<InferenceSession>> Clone() const;

  // Things about the model a caller should tell its user, one line each: today, nodes
  // exported in training mode (BatchNormalization training_mode = 1, Dropout with a true
  // training_mode input), which inference runs in evaluation mode.
  const std::vector<std::string>& notices() const;

  struct Impl;

 private:
  explicit InferenceSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpc
