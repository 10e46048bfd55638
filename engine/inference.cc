// InferenceSession (engine/inference.h): the ONNX model is kept as a ModelProto; each
// distinct set of fed input shapes binds the model's dynamic input dimensions, imports
// it, runs the evaluation pass pipeline (autocast ... memory-plan, as `mpc compile
// --eval`) and creates an executor. Outputs are fetched by position, so passes that
// rename or recast values do not change what the caller sees.
#include "engine/inference.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "engine/compile_options.h"
#include "engine/device.h"
#include "engine/executor.h"
#include "engine/index_check.h"
#include "engine/numerics_observer.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "graph/onnx_import.h"
#include "graph/onnx_inline_functions.h"

namespace mpc {

std::string TensorSignature::ToString() const { return absl::StrCat(DTypeName(dtype), dims); }

namespace {

constexpr size_t kMaxCachedPrograms = 16;

// One compiled program: for one set of input shapes, on one backend.
struct Compiled {
  Program program;
  std::unique_ptr<Executor> executor;
  std::unique_ptr<NumericsObserver> numerics;  // check_numerics
  Backend* backend = nullptr;
  std::vector<std::string> input_values;      // graph value per session input, same order
  std::vector<std::string> output_values;     // graph value per session output, after the passes
  std::vector<TensorSignature> output_types;  // the model's dtype and shape per output
};

std::string ShapeKey(const std::vector<const Tensor*>& fed) {
  std::string key;
  for (const Tensor* t : fed) absl::StrAppend(&key, ShapeToString(t->shape()), ";");
  return key;
}

// Whether initializer `name` of `g` is a boolean (or integer) scalar holding true.
bool InitializerIsTrue(const onnx::GraphProto& g, const std::string& name) {
  for (const onnx::TensorProto& t : g.initializer()) {
    if (t.name() != name) continue;
    if (!t.raw_data().empty()) return t.raw_data()[0] != 0;
    if (t.int32_data_size() > 0) return t.int32_data(0) != 0;
    if (t.int64_data_size() > 0) return t.int64_data(0) != 0;
    return false;
  }
  return false;
}

// The nodes a training-mode export left in training mode, described for a notice.
std::vector<std::string> TrainingModeNotices(const onnx::ModelProto& model, const std::string& source) {
  std::vector<std::string> nodes;
  const onnx::GraphProto& g = model.graph();
  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    const std::string name = n.name().empty() ? absl::StrCat("#", i) : n.name();
    if (n.op_type() == "BatchNormalization") {
      for (const onnx::AttributeProto& a : n.attribute()) {
        if (a.name() == "training_mode" && a.i() != 0) nodes.push_back(absl::StrCat("BatchNormalization '", name, "'"));
      }
    } else if (n.op_type() == "Dropout" && n.input_size() > 2 && InitializerIsTrue(g, n.input(2))) {
      nodes.push_back(absl::StrCat("Dropout '", name, "'"));
    }
  }
  if (nodes.empty()) return {};
  const size_t shown = std::min<size_t>(nodes.size(), 3);
  std::vector<std::string> listed(nodes.begin(), nodes.begin() + shown);
  return {absl::StrCat(source, ": the model was exported in training mode (", absl::StrJoin(listed, ", "),
                       nodes.size() > shown ? absl::StrCat(" and ", nodes.size() - shown, " more") : std::string(),
                       "); inference runs it in evaluation mode: BatchNormalization uses its running statistics "
                       "and Dropout passes values through. Export with model.eval() to silence this")};
}

std::string Signatures(const std::vector<TensorSignature>& sigs) {
  std::vector<std::string> parts;
  for (const TensorSignature& s : sigs) parts.push_back(absl::StrCat("'", s.name, "' ", s.ToString()));
  return parts.empty() ? std::string("(none)") : absl::StrJoin(parts, ", ");
}

}  // namespace

struct InferenceSession::Impl {
  InferenceOptions options;
  std::string source;
  onnx::ModelProto model;
  std::string external_data_dir;  // the model file's directory (FromFile), for external data
  PrecisionSpec::Compute compute = PrecisionSpec::F32;
  std::vector<TensorSignature> inputs, outputs;
  std::vector<bool> rank_known;                               // per input: false when the model gives no shape at all
  std::unique_ptr<Backend> backend;                           // the requested device
  std::unique_ptr<Backend> cpu_fallback;                      // device "auto" on a GPU that cannot run the model
  std::map<std::string, std::unique_ptr<Compiled>> compiled;  // by fed shapes
  std::string last_device;
  std::vector<std::string> notices;

  absl::Status Describe();
  absl::StatusOr<std::unique_ptr<Compiled>> Compile(const std::vector<const Tensor*>& fed, Backend& on);
  absl::StatusOr<Compiled*> CompiledFor(const std::vector<const Tensor*>& fed);
};

absl::Status InferenceSession::Impl::Describe() {
  const onnx::GraphProto& g = model.graph();
  absl::flat_hash_set<std::string> initializers;
  for (const auto& init : g.initializer()) initializers.insert(init.name());
  auto describe = [&](const onnx::ValueInfoProto& info, const std::string& what,
                      bool need_type) -> absl::StatusOr<std::pair<TensorSignature, bool>> {
    TensorSignature sig;
    sig.name = info.name();
    if (!info.type().has_tensor_type()) {
      const char* kind = info.type().has_sequence_type()   ? "a sequence"
                         : info.type().has_optional_type() ? "an optional"
                         : info.type().has_map_type()      ? "a map"
                                                           : "not a tensor";
      return absl::UnimplementedError(absl::StrCat(source, ": ", what, " '", info.name(), "' is ", kind,
                                                   "; mpc runs models whose inputs and outputs are tensors"));
    }
    const auto& tt = info.type().tensor_type();
    if (tt.elem_type() != 0 || need_type) {
      auto dtype = DTypeFromOnnx(tt.elem_type());
      if (!dtype.ok()) {
        return absl::Status(dtype.status().code(),
                            absl::StrCat(source, ": ", what, " '", info.name(), "': ", dtype.status().message()));
      }
      sig.dtype = *dtype;
    }
    if (!tt.has_shape()) {
      sig.dims = "[?...]";
      return std::make_pair(sig, false);
    }
    std::vector<std::string> dims;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        sig.shape.push_back(d.dim_value());
        dims.push_back(absl::StrCat(d.dim_value()));
      } else {
        sig.shape.push_back(-1);
        dims.push_back(d.dim_param().empty() ? "?" : d.dim_param());
      }
    }
    sig.dims = absl::StrCat("[", absl::StrJoin(dims, ","), "]");
    return std::make_pair(sig, true);
  };
  for (const auto& in : g.input()) {
    if (initializers.contains(in.name())) continue;  // old exporters list weights as inputs
    MPC_ASSIGN_OR_RETURN(auto described, describe(in, "graph input", true));
    inputs.push_back(described.first);
    rank_known.push_back(described.second);
  }
  for (const auto& out : g.output()) {
    MPC_ASSIGN_OR_RETURN(auto described, describe(out, "graph output", false));
    outputs.push_back(described.first);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Compiled>> InferenceSession::Impl::Compile(const std::vector<const Tensor*>& fed,
                                                                          Backend& on) {
  // Bind every input dimension to the fed shape; the static ones were checked to match.
  onnx::ModelProto bound = model;
  onnx::GraphProto* g = bound.mutable_graph();
  size_t k = 0;
  for (int i = 0; i < g->input_size(); ++i) {
    auto* in = g->mutable_input(i);
    if (k >= inputs.size() || in->name() != inputs[k].name) continue;  // an initializer listed as input
    auto* shape = in->mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : fed[k]->shape()) shape->add_dim()->set_dim_value(d);
    ++k;
  }
  ImportOptions import;
  import.batch_size = 1;  // unused: no input dimension is dynamic any more
  import.external_data_dir = external_data_dir;
  auto c = std::make_unique<Compiled>();
  c->backend = &on;
  Program& program = c->program;
  MPC_ASSIGN_OR_RETURN(program.graph, ImportOnnxModel(bound, import, source));
  Graph& graph = *program.graph;
  program.forward_nodes = static_cast<int64_t>(graph.nodes().size());
  for (const TensorSignature& in : inputs) c->input_values.push_back(in.name);
  for (size_t i = 0; i < graph.outputs().size(); ++i) {
    const Value* v = graph.outputs()[i];
    TensorSignature sig;
    sig.name = i < outputs.size() ? outputs[i].name : v->name;
    sig.dtype = v->dtype;
    sig.shape = v->shape;
    sig.dims = ShapeToString(v->shape);
    c->output_types.push_back(sig);
  }
  // The evaluation pipeline with every model output kept, in evaluation mode unless the
  // caller asked for the model's own training_mode.
  TrainSpec spec;
  spec.mutable_precision()->set_compute(compute);
  if (options.pad_multiple > 0) spec.mutable_padding()->set_multiple(options.pad_multiple);
  CompileOptions compile = CompileOptionsFromSpec(spec);
  compile.keep_all_outputs = true;
  compile.keep_model_training_mode = options.follow_model_training_mode;
  PassPipeline pipeline = MakeEvaluationPipeline(compile, on.capabilities(), &program.results);
  MPC_ASSIGN_OR_RETURN(program.report, pipeline.Run(graph));
  program.node_origin = pipeline.node_origins();
  if (graph.outputs().size() != c->output_types.size()) {
    return absl::InternalError(absl::StrCat(source, ": the pass pipeline changed the number of graph outputs from ",
                                            c->output_types.size(), " to ", graph.outputs().size()));
  }
  for (const Value* v : graph.outputs()) c->output_values.push_back(v->name);
  MPC_ASSIGN_OR_RETURN(c->executor, Executor::Create(graph, program.results.memory_plan, on));
  if (options.check_numerics) {
    c->numerics = std::make_unique<NumericsObserver>(program.results.memory_plan.order, program.node_origin,
                                                     /*loss_scaled=*/false);
    c->numerics->BeginStep(/*step=*/0, /*check=*/true, /*stats=*/false);
    c->executor->SetObserver(c->numerics.get());
  }
  return c;
}

absl::StatusOr<Compiled*> InferenceSession::Impl::CompiledFor(const std::vector<const Tensor*>& fed) {
  const std::string key = ShapeKey(fed);
  auto it = compiled.find(key);
  if (it != compiled.end()) return it->second.get();
  auto c = Compile(fed, *backend);
  if (!c.ok() && options.device == "auto" && backend->name() != "cpu") {
    // "auto": the GPU when the CUDA backend can run this model, else the CPU (as mpc-train).
    if (!cpu_fallback) {
      MPC_ASSIGN_OR_RETURN(cpu_fallback, CreateBackend("cpu"));
    }
    c = Compile(fed, *cpu_fallback);
  }
  if (!c.ok()) return c.status();
  if (compiled.size() >= kMaxCachedPrograms) compiled.clear();  // many shapes: keep memory bounded
  Compiled* out = c->get();
  compiled.emplace(key, *std::move(c));
  return out;
}

InferenceSession::InferenceSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
InferenceSession::~InferenceSession() = default;

const std::vector<TensorSignature>& InferenceSession::inputs() const { return impl_->inputs; }
const std::vector<TensorSignature>& InferenceSession::outputs() const { return impl_->outputs; }
std::string InferenceSession::device() const { return impl_->last_device; }
const std::vector<std::string>& InferenceSession::notices() const { return impl_->notices; }

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::Clone() const {
  const Impl& m = *impl_;
  auto impl = std::make_unique<Impl>();
  impl->options = m.options;
  impl->source = m.source;
  impl->model = m.model;
  impl->external_data_dir = m.external_data_dir;
  impl->compute = m.compute;
  impl->inputs = m.inputs;
  impl->outputs = m.outputs;
  impl->rank_known = m.rank_known;
  impl->notices = m.notices;
  MPC_ASSIGN_OR_RETURN(impl->backend, CreateBackend(m.options.device.empty() ? "cpu" : m.options.device));
  return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::FromFile(const std::string& path,
                                                                             const InferenceOptions& options) {
  MPC_ASSIGN_OR_RETURN(onnx::ModelProto model, ReadOnnxModelFile(path));  // parses, checks
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> session, FromModel(model, options, path));
  session->impl_->external_data_dir = ModelDirectory(path);  // weights in side files stay there until compiled
  return session;
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::FromBytes(const std::string& bytes,
                                                                              const InferenceOptions& options,
                                                                              const std::string& source_name) {
  onnx::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes) || !model.has_graph()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, ": not a serialized ONNX model (", bytes.size(),
                     " bytes that do not parse as a binary ModelProto with a graph); pass the bytes of a .onnx file"));
  }
  MPC_RETURN_IF_ERROR(InlineLocalFunctions(model, source_name));
  MPC_RETURN_IF_ERROR(CheckOnnxModel(model, source_name));
  return FromModel(model, options, source_name);
}

absl::StatusOr<std::unique_ptr<InferenceSession>> InferenceSession::FromModel(const onnx::ModelProto& model,
                                                                              const InferenceOptions& options,
                                                                              const std::string& source_name) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->source = source_name;
  impl->model = model;
  if (!model.has_graph()) return absl::InvalidArgumentError(absl::StrCat(source_name, ": the ONNX model has no graph"));
  MPC_ASSIGN_OR_RETURN(impl->compute, ParsePrecision(options.precision.empty() ? "f32" : options.precision));
  if (options.pad_multiple < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("pad multiple ", options.pad_multiple,
                     " is negative; use 0 (backend default), 1 (off) or a positive multiple"));
  }
  MPC_RETURN_IF_ERROR(impl->Describe());
  impl->notices = TrainingModeNotices(model, source_name);
  MPC_ASSIGN_OR_RETURN(impl->backend, CreateBackend(options.device.empty() ? "cpu" : options.device));
  return std::unique_ptr<InferenceSession>(new InferenceSession(std::move(impl)));
}

absl::StatusOr<std::vector<NamedTensor>> InferenceSession::Run(const std::map<std::string, Tensor>& feeds) {
  Impl& m = *impl_;
  // Names first: an unknown name is usually a typo, which the list of inputs fixes.
  for (const auto& [name, value] : feeds) {
    bool known = false;
    for (const TensorSignature& s : m.inputs) known |= s.name == name;
    if (!known) {
      return absl::InvalidArgumentError(absl::StrCat(m.source, ": the model has no input named '", name,
                                                     "'; its inputs are: ", Signatures(m.inputs)));
    }
  }
  std::vector<std::string> missing;
  for (const TensorSignature& s : m.inputs) {
    if (!feeds.count(s.name)) missing.push_back(absl::StrCat("'", s.name, "' ", s.ToString()));
  }
  if (!missing.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(m.source, ": no value given for input",
                                                   missing.size() > 1 ? "s " : " ", absl::StrJoin(missing, ", "),
                                                   "; every model input must be fed"));
  }
  std::vector<const Tensor*> fed;
  for (size_t i = 0; i < m.inputs.size(); ++i) {
    const TensorSignature& s = m.inputs[i];
    const Tensor& t = feeds.at(s.name);
    bool shape_ok = !m.rank_known[i] || t.shape().size() == s.shape.size();
    for (size_t d = 0; shape_ok && m.rank_known[i] && d < s.shape.size(); ++d) {
      shape_ok = s.shape[d] < 0 || s.shape[d] == t.shape()[d];
    }
    if (t.dtype() != s.dtype || !shape_ok) {
      const bool dynamic = std::any_of(s.shape.begin(), s.shape.end(), [](int64_t d) { return d < 0; });
      return absl::InvalidArgumentError(absl::StrCat(
          m.source, ": input '", s.name, "' expects ", s.ToString(), " but was given ", DTypeName(t.dtype()),
          ShapeToString(t.shape()),
          t.dtype() != s.dtype ? absl::StrCat(" (dtype ", DTypeName(t.dtype()), " instead of ", DTypeName(s.dtype), ")")
                               : std::string(" (shape mismatch)"),
          dynamic || !m.rank_known[i] ? "; named or '?' dimensions take any size" : ""));
    }
    fed.push_back(&t);
  }
  MPC_ASSIGN_OR_RETURN(Compiled * c, m.CompiledFor(fed));
  for (size_t i = 0; i < fed.size(); ++i) {
    const Value* input = c->program.graph->FindValue(c->input_values[i]);
    if (input) {
      MPC_RETURN_IF_ERROR(
          CheckGatherIndices(*input, *fed[i], absl::StrCat(m.source, ": input '", m.inputs[i].name, "'")));
    }
  }
  m.last_device = c->backend->name();
  for (size_t i = 0; i < fed.size(); ++i) MPC_RETURN_IF_ERROR(c->executor->SetInput(c->input_values[i], *fed[i]));
  MPC_RETURN_IF_ERROR(c->executor->Run(/*seed=*/0, /*step=*/0));
  MPC_RETURN_IF_ERROR(c->backend->Synchronize());
  std::vector<NamedTensor> results;
  for (size_t i = 0; i < c->output_values.size(); ++i) {
    const TensorSignature& want = c->output_types[i];
    MPC_ASSIGN_OR_RETURN(Tensor t, c->executor->Fetch(c->output_values[i]));
    // Passes keep outputs model-shaped and model-typed; this only guards the contract.
    if (t.dtype() != want.dtype) t = t.CastTo(want.dtype);
    if (t.shape() != want.shape) {
      if (t.num_elements() != NumElements(want.shape)) {
        return absl::InternalError(absl::StrCat(m.source, ": output '", want.name, "' came back as ",
                                                ShapeToString(t.shape()), "; the model's shape is ",
                                                ShapeToString(want.shape)));
      }
      t = t.Reshaped(want.shape);
    }
    results.push_back(NamedTensor{want.name, std::move(t)});
  }
  return results;
}

}  // namespace mpc
