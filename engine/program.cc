// CompileProgram: model import, the spec's choice of input and output, and the pipeline.
#include "engine/program.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/compile_options.h"
#include "engine/memory_budget.h"
#include "graph/onnx_import.h"

namespace mpc {
namespace {

std::vector<std::string> Names(const std::vector<Value*>& values) {
  std::vector<std::string> names;
  for (const Value* v : values) names.push_back(v->name);
  return names;
}

absl::StatusOr<Value*> PickFeatures(const Graph& g, const TrainSpec& spec, const std::string& model) {
  if (spec.has_features_input()) {
    Value* v = g.FindValue(spec.features_input());
    if (!v || v->kind != ValueKind::kInput) {
      return absl::InvalidArgumentError(absl::StrCat("spec field features_input: the model ", model,
                                                     " has no input named '", spec.features_input(),
                                                     "'; its inputs are: ", absl::StrJoin(Names(g.inputs()), ", ")));
    }
    return v;
  }
  if (g.inputs().size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the model ", model, " has ", g.inputs().size(), " inputs (",
                                                   absl::StrJoin(Names(g.inputs()), ", "),
                                                   "); set features_input in the spec, and feed the others from "
                                                   "train_data.npy.inputs"));
  }
  return g.inputs()[0];
}

absl::StatusOr<Value*> PickLogits(const Graph& g, const TrainSpec& spec, const std::string& model) {
  if (spec.loss().has_output()) {
    for (Value* v : g.outputs()) {
      if (v->name == spec.loss().output()) return v;
    }
    return absl::InvalidArgumentError(absl::StrCat("spec field loss.output: the model ", model,
                                                   " has no output named '", spec.loss().output(),
                                                   "'; its outputs are: ", absl::StrJoin(Names(g.outputs()), ", ")));
  }
  if (g.outputs().size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the model ", model, " has ", g.outputs().size(), " outputs; set loss.output in the spec"));
  }
  return g.outputs()[0];
}

}  // namespace

absl::StatusOr<Program> CompileProgram(const TrainSpec& spec, const Capabilities& caps, const ProgramOptions& options) {
  // memory.recompute AUTO: the least recomputation that fits the limit, compiled as if the
  // spec had asked for it.
  if (options.training && spec.memory().recompute() == MemorySpec::AUTO) {
    MPC_ASSIGN_OR_RETURN(const TrainSpec chosen, ChooseRecomputation(spec, caps, options));
    absl::StatusOr<Program> program = CompileProgram(chosen, caps, options);
    if (program.status().code() == absl::StatusCode::kResourceExhausted) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "memory.recompute AUTO: not even recomputing every block fits; ", program.status().message()));
    }
    MPC_RETURN_IF_ERROR(program.status());
    program->results.recompute.chosen_for_limit_mb = spec.memory().limit_mb();
    return program;
  }
  Program program;
  program.batch_size = options.batch_size;
  ImportOptions import;
  import.batch_size = options.batch_size;
  import.initializer_roles = &program.initializer_roles;
  import.input_rows = options.input_rows;
  const std::string model_name = !options.model_bytes.empty()  ? std::string("(model bytes)")
                                 : !options.model_path.empty() ? options.model_path
                                                               : std::string("(no model)");
  if (!options.model_bytes.empty()) {
    MPC_ASSIGN_OR_RETURN(program.graph, ImportOnnxBytes(options.model_bytes, import, model_name));
  } else {
    MPC_ASSIGN_OR_RETURN(program.graph, ImportOnnxFile(options.model_path, import));
  }
  Graph& g = *program.graph;
  program.forward_nodes = static_cast<int64_t>(g.nodes().size());
  for (const Value* in : g.inputs()) program.model_inputs.push_back(in->name);
  for (const Value* p : g.ValuesOfKind(ValueKind::kParameter)) program.parameter_count += NumElements(p->shape);

  MPC_ASSIGN_OR_RETURN(Value * features, PickFeatures(g, spec, model_name));
  MPC_ASSIGN_OR_RETURN(Value * logits, PickLogits(g, spec, model_name));
  program.features_input = features->name;
  program.logits_output = logits->name;
  program.logits_shape = logits->shape;  // the passes may rewrite the training graph's logits value
  // The class axis: last, or 1 when the labels are per position and the logits put their
  // classes first ([batch, classes, H, W] against [batch, H, W], attach-loss's layouts).
  const Shape& ls = logits->shape;
  const bool classes_on_axis_1 = !options.label_row.empty() && ls.size() == options.label_row.size() + 2 &&
                                 Shape(ls.begin() + 2, ls.end()) == options.label_row;
  program.classes = ls.empty() ? 0 : classes_on_axis_1 ? ls[1] : ls.back();
  if (features->shape.empty() || features->shape[0] != options.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model input '", features->name, "' has shape ", ShapeToString(features->shape),
        "; its first dimension must be the batch (dynamic, or equal to batch_size ", options.batch_size, ")"));
  }

  CompileOptions compile = CompileOptionsFromSpec(spec);
  compile.loss.logits = logits->name;
  compile.loss.batch_size = options.batch_size;
  compile.data_parallel.world_size = options.training ? options.world_size : 1;
  compile.loss_scaling.rank = options.rank;
  compile.job_ranks = options.world_size;
  compile.job_rank = options.rank;
  compile.loss.label_row = options.label_row;
  CompileResults& results = program.results;
  Capabilities effective = caps;
  if (options.fused_attention) effective.fused_attention = true;
  PassPipeline pipeline = options.training ? MakeTrainingPipeline(compile, effective, &results, options.pipeline)
                                           : MakeEvaluationPipeline(compile, effective, &results, options.pipeline);
  const auto logits_slot = std::find(g.outputs().begin(), g.outputs().end(), logits) - g.outputs().begin();
  MPC_ASSIGN_OR_RETURN(program.report, pipeline.Run(g));
  program.node_origin = pipeline.node_origins();
  if (!options.training) {
    // The evaluation program's logits by their output slot (select-outputs leaves them
    // alone in slot 0): a pass that replaces the value moves the slot, and the engine
    // fetches the logits by the name of what is there now.
    const size_t slot = compile.keep_all_outputs ? static_cast<size_t>(logits_slot) : 0;
    if (slot < g.outputs().size()) program.logits_output = g.outputs()[slot]->name;
  }
  if (options.training) {
    program.labels_input = results.loss.labels->name;
    program.loss_output = results.loss.loss->name;
    // A data-parallel step reports the loss of the whole batch: the ranks' mean.
    if (results.data_parallel.mean_loss) program.loss_output = results.data_parallel.mean_loss->name;
  }
  if (results.memory_plan.order.empty() && !g.nodes().empty()) {
    return absl::InvalidArgumentError("the memory-plan pass cannot be disabled: the executor needs its plan");
  }
  // The per-rank limit: known now, before anything runs.
  MPC_RETURN_IF_ERROR(CheckMemoryLimit(program, spec, caps, options));
  return program;
}

}  // namespace mpc
