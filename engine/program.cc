// CompileProgram: model import, loss attachment, and the pass pipelines.
#include "engine/program.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/onnx_import.h"
#include "graph/ops_norm.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/fp8.h"
#include "passes/fp8_lower.h"
#include "passes/fuse_epilogues.h"
#include "passes/fuse_updates.h"
#include "passes/loss_scaling.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/pad_dims.h"
#include "passes/simplify.h"

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
    return absl::InvalidArgumentError(absl::StrCat("the model ", model, " has ", g.inputs().size(),
                                                   " inputs (", absl::StrJoin(Names(g.inputs()), ", "),
                                                   "); set features_input in the spec"));
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
    return absl::InvalidArgumentError(absl::StrCat("the model ", model, " has ", g.outputs().size(),
                                                   " outputs; set loss.output in the spec"));
  }
  return g.outputs()[0];
}

}  // namespace

PassPipeline MakeTrainingPipeline(const PipelineOptions& options) {
  PassPipeline p(options);
  p.Add(std::make_unique<AutocastPass>());
  p.Add(std::make_unique<PadDimsPass>());
  p.Add(std::make_unique<AutodiffPass>());
  p.Add(std::make_unique<Fp8Pass>());
  p.Add(std::make_unique<Fp8LowerPass>());
  p.Add(std::make_unique<LossScalingPass>());
  p.Add(std::make_unique<OptimizerPass>());
  p.Add(std::make_unique<SimplifyPass>());
  p.Add(std::make_unique<FuseEpiloguesPass>());
  p.Add(std::make_unique<FuseUpdatesPass>());
  p.Add(std::make_unique<MemoryPlanPass>());
  return p;
}

PassPipeline MakeEvalPipeline(const PipelineOptions& options) {
  PassPipeline p(options);
  p.Add(std::make_unique<AutocastPass>());
  p.Add(std::make_unique<PadDimsPass>());
  // Evaluation GEMMs run in FP8 too, with the scales training left (shared by name).
  p.Add(std::make_unique<Fp8Pass>());
  p.Add(std::make_unique<Fp8LowerPass>());
  p.Add(std::make_unique<SimplifyPass>());
  p.Add(std::make_unique<FuseEpiloguesPass>());
  p.Add(std::make_unique<MemoryPlanPass>());
  return p;
}

absl::StatusOr<Program> CompileProgram(const TrainSpec& spec, const Capabilities& caps,
                                       const ProgramOptions& options) {
  Program program;
  program.batch_size = options.batch_size;
  ImportOptions import;
  import.batch_size = options.batch_size;
  MPC_ASSIGN_OR_RETURN(program.graph, ImportOnnxFile(options.model_path, import));
  Graph& g = *program.graph;
  program.forward_nodes = static_cast<int64_t>(g.nodes().size());
  for (const Value* p : g.ValuesOfKind(ValueKind::kParameter)) program.parameter_count += NumElements(p->shape);

  MPC_ASSIGN_OR_RETURN(Value* features, PickFeatures(g, spec, options.model_path));
  MPC_ASSIGN_OR_RETURN(Value* logits, PickLogits(g, spec, options.model_path));
  program.features_input = features->name;
  program.logits_output = logits->name;
  if (features->shape.empty() || features->shape[0] != options.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model input '", features->name, "' has shape ", ShapeToString(features->shape),
        "; its first dimension must be the batch (dynamic, or equal to batch_size ", options.batch_size, ")"));
  }
  // Training and evaluation differ only in Dropout's and BatchNormalization's mode, which the
  // compiler decides.
  for (const auto& n : g.nodes()) {
    if (n->op == "Dropout" || n->op == "BatchNormalization") {
      n->attrs.Set("mpc_training", static_cast<int64_t>(options.training));
    }
  }
  // Training BatchNormalization writes its running statistics back into their state.
  if (options.training) MPC_RETURN_IF_ERROR(AddBatchNormStatsUpdates(g));

  CompileInfo& info = program.info;
  if (options.training) {
    GraphBuilder b(&g, "loss/");
    Value* loss = nullptr;
    const std::string labels_name = spec.labels_input();
    if (g.FindValue(labels_name)) {
      return absl::InvalidArgumentError(absl::StrCat("spec field labels_input: the model already has a value named '",
                                                     labels_name, "'; choose another labels_input name"));
    }
    if (spec.loss().type() == LossSpec::MEAN_SQUARED_ERROR) {
      Value* labels = g.AddInput(labels_name, logits->dtype, logits->shape);
      loss = b.Op("MeanSquaredError", {logits, labels});
    } else {
      Shape label_row = options.label_row;
      // Compiled without data (`mpc compile`): logits [batch*T, classes] can only mean
      // one label per position.
      if (label_row.empty() && logits->shape.size() == 2 && logits->shape[0] != options.batch_size &&
          logits->shape[0] % options.batch_size == 0) {
        label_row = {logits->shape[0] / options.batch_size};
      }
      Shape label_shape{options.batch_size};
      label_shape.insert(label_shape.end(), label_row.begin(), label_row.end());
      Value* labels = g.AddInput(labels_name, DType::kI64, label_shape);
      if (!label_row.empty()) {
        const int64_t rows = NumElements(label_shape);
        if (logits->shape.size() != 2 || logits->shape[0] != rows) {
          return absl::InvalidArgumentError(absl::StrCat(
              "the labels have one class per position (", ShapeToString(label_shape), " per batch) but output '",
              logits->name, "' is ", ShapeToString(logits->shape), "; softmax cross-entropy needs logits of shape [",
              rows, ", classes]: flatten the model's logits to [batch*positions, classes]"));
        }
        labels = b.Reshape(labels, {rows});
      }
      AttrMap attrs;
      attrs.Set("reduction", std::string("mean"));
      loss = b.Op("SoftmaxCrossEntropyLoss", {logits, labels}, std::move(attrs));
    }
    MPC_RETURN_IF_ERROR(b.status());
    program.labels_input = labels_name;
    program.loss_output = loss->name;
    info.loss = loss;
    g.SetOutputs({loss});
  } else {
    g.SetOutputs({logits});
  }

  PassContext ctx;
  ctx.spec = &spec;
  ctx.capabilities = &caps;
  ctx.info = &info;
  PassPipeline pipeline = options.training ? MakeTrainingPipeline(options.pipeline)
                                           : MakeEvalPipeline(options.pipeline);
  MPC_ASSIGN_OR_RETURN(program.report, pipeline.Run(g, ctx));
  if (info.order.empty() && !g.nodes().empty()) {
    return absl::InvalidArgumentError("the memory-plan pass cannot be disabled: the executor needs its plan");
  }
  return program;
}

}  // namespace mpc
