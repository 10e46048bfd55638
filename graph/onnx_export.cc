// Graph -> ONNX ModelProto (see onnx_export.h). Persistent values and constants become
// initializers (raw little-endian data, or ranges of an external data file), nodes are
// written in the graph's deterministic topological order so two exports of the same graph
// are byte-identical, and every activation gets a value_info entry so viewers such as
// Netron show its type and shape.
#include "graph/onnx_export.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "graph/onnx_external_data.h"
#include "graph/onnx_import.h"
#include "graph/op_registry.h"

// raw_data is little endian by the ONNX spec; host buffers are written byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "mpc assumes a little-endian host");

namespace mpc {
namespace {

void SetTensorType(DType dtype, const Shape& shape, onnx::TypeProto* type, const std::string& batch_param = "") {
  auto* tt = type->mutable_tensor_type();
  tt->set_elem_type(DTypeToOnnx(dtype));
  auto* s = tt->mutable_shape();  // present even for scalars: rank 0 is known
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i == 0 && !batch_param.empty())
      s->add_dim()->set_dim_param(batch_param);
    else
      s->add_dim()->set_dim_value(shape[i]);
  }
}

void AddValueInfo(const Value& v, google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                  const std::string& batch_param = "") {
  onnx::ValueInfoProto* info = list->Add();
  info->set_name(v.name);
  SetTensorType(v.dtype, v.shape, info->mutable_type(), batch_param);
}

// `external`: when set, data of at least `threshold` bytes goes to that side file
// instead of raw_data.
absl::Status AddInitializer(const Value& v, onnx::GraphProto* g, ExternalDataWriter* external, int64_t threshold) {
  const Tensor* data = &v.data;
  Tensor converted;  // only filled when the stored data needs a change of form
  if (data->empty()) {
    if (NumElements(v.shape) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot export ", ValueKindName(v.kind), " '", v.name, "': it has no data"));
    }
    converted = Tensor(v.dtype, v.shape);
    data = &converted;
  }
  if (data->num_elements() != NumElements(v.shape)) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot export ", ValueKindName(v.kind), " '", v.name, "': its data has shape ",
                     ShapeToString(data->shape()), " but the value is ", DTypeName(v.dtype), ShapeToString(v.shape)));
  }
  // The value's declared type is what consumers see; data kept in another dtype is
  // converted on the way out.
  if (data->dtype() != v.dtype) {
    converted = data->CastTo(v.dtype);
    data = &converted;
  }
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(v.name);
  t->set_data_type(DTypeToOnnx(v.dtype));
  for (int64_t d : v.shape) t->add_dims(d);
  if (external != nullptr && static_cast<int64_t>(data->bytes()) >= threshold) {
    MPC_RETURN_IF_ERROR(external->Append(data->raw(), data->bytes(), t));
  } else {
    t->set_raw_data(static_cast<const char*>(data->raw()), data->bytes());
  }
  // ONNX cannot say whether an initializer is trainable; the importer treats float ones
  // as parameters. This marker keeps constants and state what they are on re-import.
  if (v.kind == ValueKind::kConstant) t->set_doc_string(kOnnxConstantMarker);
  if (v.kind == ValueKind::kState) t->set_doc_string(kOnnxStateMarker);
  return absl::OkStatus();
}

void SetAttribute(const std::string& name, const AttrValue& value, onnx::AttributeProto* a) {
  a->set_name(name);
  std::visit(
      [a](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          a->set_type(onnx::AttributeProto::INT);
          a->set_i(v);
        } else if constexpr (std::is_same_v<T, float>) {
          a->set_type(onnx::AttributeProto::FLOAT);
          a->set_f(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          a->set_type(onnx::AttributeProto::STRING);
          a->set_s(v);
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          a->set_type(onnx::AttributeProto::INTS);
          for (int64_t x : v) a->add_ints(x);
        } else {
          a->set_type(onnx::AttributeProto::FLOATS);
          for (float x : v) a->add_floats(x);
        }
      },
      value);
}

absl::StatusOr<onnx::ModelProto> ExportModel(const Graph& graph, const ExportOptions& options,
                                             ExternalDataWriter* external) {
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, graph.TopologicalOrder());
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name(options.producer);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("mpc");

  for (const Value* v : graph.inputs()) AddValueInfo(*v, g->mutable_input(), options.batch_dim_param);
  for (const auto& v : graph.values()) {
    if (v->kind == ValueKind::kParameter || v->kind == ValueKind::kState || v->kind == ValueKind::kConstant) {
      MPC_RETURN_IF_ERROR(AddInitializer(*v, g, external, options.external_data_threshold));
    }
  }

  bool uses_mpc_domain = false;
  for (const Node* node : order) {
    onnx::NodeProto* n = g->add_node();
    n->set_name(node->name);
    n->set_op_type(node->op);
    // Ops the registry does not know yet are written as plain ONNX ops.
    const OpDef* def = OpRegistry::Global().Find(node->op);
    if (def != nullptr && def->domain == "mpc") {
      n->set_domain("mpc");
      uses_mpc_domain = true;
    }
    for (const Value* in : node->inputs) n->add_input(in ? in->name : "");
    // Trailing outputs nothing reads are left out, as ONNX's optional outputs are: mpc's
    // BatchNormalization always has five (the saved statistics BatchNormGrad reads), and
    // ONNX allows at most three (one in inference mode). The importer recreates them.
    const int min_outputs = def != nullptr ? std::max(def->min_outputs, 1) : 1;
    size_t written = node->outputs.size();
    while (static_cast<int>(written) > min_outputs && node->outputs[written - 1]->consumers.empty() &&
           !graph.IsOutput(node->outputs[written - 1])) {
      --written;
    }
    for (size_t i = 0; i < written; ++i) n->add_output(node->outputs[i]->name);
    for (const auto& [name, value] : node->attrs.all()) {
      // The importer's reading of exporter metadata (an embedding's padding index) is not an
      // attribute ONNX's Gather has; a file written with it would fail ONNX's checker.
      if (name == "mpc_padding_idx") continue;
      SetAttribute(name, value, n->add_attribute());
    }
    // ONNX has no control edges; keep the ordering constraint visible to readers.
    if (!node->control_deps.empty()) {
      std::vector<std::string> deps;
      for (const Node* dep : node->control_deps) deps.push_back(dep->name);
      n->set_doc_string(absl::StrCat("runs after: ", absl::StrJoin(deps, ", ")));
    }
    for (size_t i = 0; i < written; ++i) {
      const Value* out = node->outputs[i];
      if (!graph.IsOutput(out) && options.batch_dim_param.empty()) AddValueInfo(*out, g->mutable_value_info());
    }
  }
  for (const Value* v : graph.outputs()) AddValueInfo(*v, g->mutable_output(), options.batch_dim_param);

  auto* onnx_opset = model.add_opset_import();
  onnx_opset->set_domain("");
  onnx_opset->set_version(options.opset);
  if (uses_mpc_domain) {
    auto* mpc_opset = model.add_opset_import();
    mpc_opset->set_domain("mpc");
    mpc_opset->set_version(1);
  }
  for (const auto& [key, value] : options.metadata) {
    auto* prop = model.add_metadata_props();
    prop->set_key(key);
    prop->set_value(value);
  }
  return model;
}

bool IsInitializer(const Value& v) {
  return v.kind == ValueKind::kParameter || v.kind == ValueKind::kState || v.kind == ValueKind::kConstant;
}

}  // namespace

absl::StatusOr<onnx::ModelProto> ExportOnnxModel(const Graph& graph, const ExportOptions& options) {
  return ExportModel(graph, options, /*external=*/nullptr);
}

absl::Status ExportOnnxFile(const Graph& graph, const ExportOptions& options, const std::string& path) {
  int64_t initializer_bytes = 0;
  for (const auto& v : graph.values()) {
    if (IsInitializer(*v)) initializer_bytes += NumElements(v->shape) * static_cast<int64_t>(DTypeSize(v->dtype));
  }
  std::unique_ptr<ExternalDataWriter> external;
  if (options.external_data || initializer_bytes > options.max_inline_bytes) {
    std::string location = options.external_data_file;
    if (location.empty()) location = std::filesystem::path(path).filename().string() + ".data";
    if (location.find('/') != std::string::npos || location == "." || location == "..") {
      return absl::InvalidArgumentError(absl::StrCat(path, ": external data file name '", location,
                                                     "' must be a plain file name (it is written next to the model)"));
    }
    external = std::make_unique<ExternalDataWriter>(ResolvePath(ModelDirectory(path), location), location);
  }
  auto model = ExportModel(graph, options, external.get());
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(path, ": ", model.status().message()));
  }
  std::string bytes;
  if (!model->SerializeToString(&bytes)) {
    return absl::InternalError(absl::StrCat(path,
                                            ": the model cannot be serialized (protobuf limits a model to 2 GiB; ",
                                            "export with ExportOptions::external_data to keep the weights outside)"));
  }
  // The data first: a model file is never renamed into place before the data it names.
  if (external != nullptr) MPC_RETURN_IF_ERROR(external->Commit());
  return WriteFileAtomically(path, bytes);
}

}  // namespace mpc
