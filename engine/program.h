// Building a program from a model and a spec: import the ONNX model with the batch
// size bound, check which input and output the spec trains on, then run the training or
// evaluation pipeline (passes/pipelines.h) with options from the spec
// (engine/compile_options.h). `mpc compile` and the engine share this path.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/onnx_import.h"
#include "passes/pipelines.h"
#include "proto/train_spec.pb.h"

namespace mpc {

struct Program {
  std::unique_ptr<Graph> graph;
  CompileResults results;                  // what every pass decided (passes/compile_results.h)
  std::map<int, std::string> node_origin;  // Node::id -> the pass that created it (or "model")
  std::vector<PassReport> report;
  std::string features_input;
  std::vector<std::string> model_inputs;  // every input of the imported model, features_input among them
  std::string labels_input;               // training programs only
  std::string logits_output;              // the model output the loss reads
  Shape logits_shape;                     // its shape in the model (batch bound)
  int64_t classes = 0;                    // the size of its class axis
  std::string loss_output;                // training programs only
  int64_t batch_size = 0;
  int64_t forward_nodes = 0;    // nodes of the imported model
  int64_t parameter_count = 0;  // trainable elements
  std::vector<InitializerRole> initializer_roles;  // what the import made of each initializer
};

struct ProgramOptions {
  std::string model_path;
  // The serialized ONNX ModelProto in memory (EngineOptions::model_bytes): imported instead
  // of model_path when set; model_path (if any) then only names the model in errors.
  std::string model_bytes;
  int64_t batch_size = 1;
  // The shape of one example's labels without the batch axis: empty for one class per
  // example; [T, ...] for one class per position (sequence models), whose labels are
  // flattened to [batch*T*...] to match logits of shape [batch*T*..., classes].
  Shape label_row;
  // One example's shape per model input, binding symbolic dimensions past axis 0
  // (ImportOptions::input_rows).
  std::map<std::string, Shape> input_rows;
  bool training = true;
  // A data-parallel job (training programs): its size and this process's rank. batch_size
  // is then this rank's share of the spec's batch.
  int world_size = 1;
  int rank = 0;
  PipelineOptions pipeline;
  // Attention as one FusedAttention op even on a backend that keeps its own path (the
  // CPU): the graph a GPU with fused attention runs, trained on the CPU to check its
  // numerics (EngineOptions::fused_attention).
  bool fused_attention = false;
};

absl::StatusOr<Program> CompileProgram(const TrainSpec& spec, const Capabilities& caps, const ProgramOptions& options);

}  // namespace mpc
