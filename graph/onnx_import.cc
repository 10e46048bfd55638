// ONNX ModelProto -> Graph (see onnx_import.h). Reading a file tries binary protobuf,
// then protobuf text, then runs ONNX's own checker. Import validates what mpc relies on
// (opsets, domains, static shapes, initializer data inside the model or in external data
// files next to it, see onnx_external_data.h) with messages that name
// the file, the node and the op, converts attributes to AttrMap verbatim, and lets the
// op registry's inference give every produced value its dtype and shape.
#include "graph/onnx_import.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/onnx_expand.h"
#include "graph/onnx_external_data.h"
#include "graph/onnx_fold_constants.h"
#include "graph/onnx_folded_parameters.h"
#include "graph/onnx_inline_functions.h"
#include "graph/onnx_initializer_roles.h"
#include "graph/onnx_metadata.h"
#include "graph/onnx_opsets.h"
#include "graph/op_registry.h"
#include "graph/ops_tensor.h"

// Initializer raw_data is little endian by the ONNX spec; it is copied byte for byte.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "mpc assumes a little-endian host");

namespace mpc {
namespace {

constexpr int64_t kMpcOpsetVersion = 1;
// What the ONNX library mpc links (Debian's 1.12) can check.
constexpr int64_t kOnnxCheckerMaxOpset = 17;
constexpr int64_t kOnnxCheckerMaxIrVersion = 8;

bool IsOnnxDomain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

absl::Status WithPrefix(const absl::Status& status, const std::string& prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// Text-format parse errors are collected (the first one is reported in our message)
// instead of protobuf's default of printing every error to stderr.
class FirstErrorCollector : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column, const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ", column ", column + 1, ": ", message);
  }
  void AddWarning(int, google::protobuf::io::ColumnNumber, const std::string&) override {}
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

// A binary ModelProto starts with a field tag such as 0x08 (ir_version), which is not
// printable; a text model is printable throughout. Text that happens to parse as binary
// would yield garbage unknown fields, so printable files are parsed as text first.
// "[i, j, ...]" of flat index `flat` in `shape` (row-major).
std::string ElementAt(const Shape& shape, int64_t flat) {
  std::vector<int64_t> idx(shape.size());
  for (int k = static_cast<int>(shape.size()) - 1; k >= 0; --k) {
    if (shape[k] > 0) {
      idx[k] = flat % shape[k];
      flat /= shape[k];
    }
  }
  return absl::StrCat("[", absl::StrJoin(idx, ","), "] of ", ShapeToString(shape));
}

// A NaN in an initializer is never there by design (an infinity may be: a mask): the
// model is refused at load, naming the tensor and its first NaN, as a NaN in the data is.
absl::Status RefuseNan(const Tensor& t, const std::string& what) {
  const int64_t n = t.num_elements();
  int64_t first = -1, count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(t.GetAsDouble(i))) {
      if (first < 0) first = i;
      ++count;
    }
  }
  if (count == 0) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " holds NaN at index ", first, " (element ", ElementAt(t.shape(), first), "; ", count, " NaN of ", n,
      " values); a weight or buffer is never NaN by design: re-export the model from weights without NaNs "
      "(torch.isnan(p).any() finds them)"));
}

bool LooksLikeText(const std::string& data) {
  const size_t n = std::min<size_t>(data.size(), 4096);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(data[i]);
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t') return false;
    if (c == 0x7f) return false;
  }
  return true;
}

// Copies `count` typed values into the tensor buffer, narrowing each element to `Dst`
// (the ONNX typed fields widen small types: f16/bf16 bits and bytes live in int32_data).
template <typename Dst, typename Field>
void CopyTyped(const Field& field, Tensor& out) {
  Dst* dst = out.data<Dst>();
  for (int i = 0; i < field.size(); ++i) dst[i] = static_cast<Dst>(field.Get(i));
}

// An error for a tensor whose data is in a side file when there is no model file whose
// directory the location could be relative to.
absl::Status ExternalDataWithoutFile(const onnx::TensorProto& proto, const std::string& what) {
  const std::string location = ExternalDataLocation(proto);
  return absl::InvalidArgumentError(absl::StrCat(
      what, " stores its data outside the model", location.empty() ? "" : absl::StrCat(" ('", location, "')"),
      ", but the model was read from memory, not from a file, so there is no directory to find that "
      "data in. Import the model from its file (the data file must be next to it), or re-save it with "
      "the data inside, e.g. in Python: m = onnx.load(path); onnx.save_model(m, out_path, "
      "save_as_external_data=False)"));
}

// The element count of a tensor's dimensions, refused when a dimension is negative or
// the count exceeds 2^48 (no tensor is that large; a product that overflows int64 would
// otherwise wrap, to 0 for 2^40 x 2^40, and be reported as "0-element but contains data").
// Checked before anything is allocated or ONNX's checker sees the tensor.
absl::StatusOr<int64_t> ElementCount(const onnx::TensorProto& proto, const std::string& what) {
  int64_t n = 1;
  for (int64_t d : proto.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has a negative dimension ", d, " (dimensions ",
                                                     absl::StrJoin(proto.dims(), " x "), ")"));
    }
    if (d > 0 && n > (int64_t{1} << 48) / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has dimensions ", absl::StrJoin(proto.dims(), " x "),
                       ", whose product exceeds 2^48 elements (it overflows 64-bit arithmetic beyond 2^63): "
                       "no tensor is that large, so the file is damaged or was written wrong; re-export it"));
    }
    n *= d;
  }
  return n;
}

// `external_data_dir`: where external data locations are relative to (the model file's
// directory), or empty when the model did not come from a file.
absl::StatusOr<Tensor> TensorFromProto(const onnx::TensorProto& proto, const std::string& what,
                                       const std::string& external_data_dir) {
  const bool external = UsesExternalData(proto);
  if (external && external_data_dir.empty()) return ExternalDataWithoutFile(proto, what);
  if (proto.has_segment()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " is a segment of a larger tensor, which mpc does not support"));
  }
  auto dtype = DTypeFromOnnx(proto.data_type());
  if (!dtype.ok()) return WithPrefix(dtype.status(), absl::StrCat(what, ": "));
  MPC_ASSIGN_OR_RETURN(const int64_t n, ElementCount(proto, what));
  const Shape shape(proto.dims().begin(), proto.dims().end());
  const size_t bytes = static_cast<size_t>(n) * DTypeSize(*dtype);
  if (external) {
    // Straight into the tensor's buffer: a large model's weights are never held twice.
    Tensor out(*dtype, shape);
    MPC_RETURN_IF_ERROR(ReadExternalData(proto, external_data_dir, what, out.raw(), bytes));
    return out;
  }
  if (proto.has_raw_data()) {
    if (proto.raw_data().size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has ", proto.raw_data().size(),
                                                     " bytes of raw_data; its type ", DTypeName(*dtype),
                                                     ShapeToString(shape), " needs ", bytes));
    }
    Tensor out(*dtype, shape);
    if (n > 0) std::memcpy(out.raw(), proto.raw_data().data(), bytes);
    return out;
  }
  // Typed storage: which repeated field holds the values depends on the element type.
  int have = 0;
  const char* field = "int32_data";
  switch (*dtype) {
    case DType::kF32:
      field = "float_data", have = proto.float_data_size();
      break;
    case DType::kF64:
      field = "double_data", have = proto.double_data_size();
      break;
    case DType::kI64:
      field = "int64_data", have = proto.int64_data_size();
      break;
    default:
      have = proto.int32_data_size();
      break;  // i32, and the narrower types widened
  }
  if (have != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", have, " values in ", field,
                                                   " (and no raw_data); its shape ", ShapeToString(shape), " needs ",
                                                   n));
  }
  Tensor out(*dtype, shape);
  switch (*dtype) {
    case DType::kF32:
      CopyTyped<float>(proto.float_data(), out);
      break;
    case DType::kF64:
      CopyTyped<double>(proto.double_data(), out);
      break;
    case DType::kI64:
      CopyTyped<int64_t>(proto.int64_data(), out);
      break;
    case DType::kI32:
      CopyTyped<int32_t>(proto.int32_data(), out);
      break;
    case DType::kF16:
    case DType::kBF16:
      CopyTyped<uint16_t>(proto.int32_data(), out);
      break;  // the bit patterns
    case DType::kU8:
    case DType::kBool:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      CopyTyped<uint8_t>(proto.int32_data(), out);
      break;
  }
  return out;
}

std::string DimsToString(const onnx::TensorShapeProto& shape) {
  std::vector<std::string> dims;
  for (const auto& d : shape.dim()) {
    dims.push_back(d.has_dim_value() ? absl::StrCat(d.dim_value()) : (d.dim_param().empty() ? "?" : d.dim_param()));
  }
  return absl::StrCat("[", absl::StrJoin(dims, ","), "]");
}

// Checks the declared operator sets and returns the default-domain opset the model is
// read with. Imports of other domains are checked where a node uses them: an unused
// import is harmless. Each default-domain op must be a definition mpc reads at that opset
// (graph/onnx_opsets.h); every op that is not is named in one error.
absl::StatusOr<int64_t> CheckOpsets(const onnx::ModelProto& model, const std::string& source) {
  int64_t opset = -1;
  for (const auto& import : model.opset_import()) {
    if (IsOnnxDomain(import.domain())) {
      opset = import.version();
    } else if (import.domain() == "mpc" && import.version() != kMpcOpsetVersion) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": the model imports the 'mpc' operator set version ",
                                                     import.version(), "; this build of mpc provides version ",
                                                     kMpcOpsetVersion,
                                                     ". Re-export the program with this version of mpc"));
    }
  }
  if (opset < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        source,
        ": the model declares no operator set for the default ONNX domain (opset_import); "
        "mpc reads opsets ",
        kMinOnnxOpset, " to ", kMaxOnnxOpset, ". Re-export it with opset_version between ", kMinOnnxOpset, " and ",
        kMaxOnnxOpset));
  }
  if (opset > kMaxOnnxOpset) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the model uses ONNX opset ", opset, "; mpc reads opsets up to ", kMaxOnnxOpset,
        ". Re-export it with opset_version between ", kMinOnnxOpset, " and ", kMaxOnnxOpset,
        " (torch.onnx.export(..., opset_version=", kMaxOnnxOpset, ")) or convert it with "
        "onnx.version_converter.convert_version(model, ", kMaxOnnxOpset, ")"));
  }
  std::vector<std::string> unread;
  absl::flat_hash_set<std::string> seen;
  for (const auto& node : model.graph().node()) {
    if (!IsOnnxDomain(node.domain()) || !seen.insert(node.op_type()).second) continue;
    const std::string message = UnreadDefinitionMessage(node.op_type(), opset);
    if (!message.empty()) unread.push_back(message);
  }
  if (!unread.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": the model uses ONNX opset ", opset, " and ", unread.size() == 1 ? "an op" : "ops",
        " whose definition there mpc does not read: ", absl::StrJoin(unread, "; "),
        ". Re-export it with opset_version between ", kMinOnnxOpset, " and ", kMaxOnnxOpset,
        " or convert it with onnx.version_converter.convert_version(model, ", kMaxOnnxOpset, ")"));
  }
  return opset;
}

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const ImportOptions& options, std::string source)
      : model_(model), options_(options), source_(std::move(source)), graph_(new Graph()) {}

  absl::StatusOr<std::unique_ptr<Graph>> Run() {
    MPC_ASSIGN_OR_RETURN(opset_, CheckOpsets(model_, source_));
    if (!model_.has_graph()) return Error("the model has no graph");
    const onnx::GraphProto& g = model_.graph();
    MPC_RETURN_IF_ERROR(CheckAllOpsSupported(g));
    MPC_RETURN_IF_ERROR(ImportInitializers(g));
    MPC_RETURN_IF_ERROR(ImportInputs(g));
    for (int i = 0; i < g.node_size(); ++i) MPC_RETURN_IF_ERROR(ImportNode(g.node(i), i));
    MPC_RETURN_IF_ERROR(ImportOutputs(g));
    return std::move(graph_);
  }

 private:
  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", message));
  }

  absl::Status Define(const std::string& name, Value* value, const std::string& where) {
    if (!values_.emplace(name, value).second) {
      return Error(
          absl::StrCat(where, " defines '", name, "', which is already defined; ONNX value names must be unique"));
    }
    return absl::OkStatus();
  }

  // `base` when no value has that name yet, else the graph's next unique variant of it.
  std::string FreshName(const std::string& base) {
    return values_.contains(base) || graph_->FindValue(base) ? graph_->UniqueName(base) : base;
  }

  void Report(InitializerRole role) {
    if (options_.initializer_roles) options_.initializer_roles->push_back(std::move(role));
  }

  // Every initializer as a parameter, state or constant, as graph/onnx_initializer_roles.h
  // decides, plus the private copies it unties from shared ones.
  absl::Status ImportInitializers(const onnx::GraphProto& g) {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, InitializerFacts> facts;
    for (const auto& init : g.initializer()) {
      const std::string what = absl::StrCat("initializer '", init.name(), "'");
      if (init.name().empty()) return Error("an initializer has no name");
      auto tensor = TensorFromProto(init, what, options_.external_data_dir);
      if (!tensor.ok()) return WithPrefix(tensor.status(), absl::StrCat(source_, ": "));
      InitializerFacts& f = facts[init.name()];
      f.floating = IsFloating(tensor->dtype());
      f.finite = !f.floating || tensor->NonFiniteCount() == 0;
      if (!f.finite) {
        const absl::Status nan = RefuseNan(*tensor, what);
        if (!nan.ok()) return WithPrefix(nan, absl::StrCat(source_, ": "));
      }
      if (!tensors.emplace(init.name(), *std::move(tensor)).second) {
        return Error(absl::StrCat(what, " is defined twice; ONNX value names must be unique"));
      }
    }
    plan_ = PlanInitializers(g, facts, kOnnxStateMarker, kOnnxConstantMarker);
    // An infinity is a buffer's by design (an additive mask), never a trained weight's.
    for (const auto& [name, decision] : plan_.decisions) {
      if (decision.kind != InitializerKind::kParameter || facts.at(name).finite) continue;
      int64_t first = -1;
      tensors.at(name).NonFiniteCount(&first);
      return Error(absl::StrCat("initializer '", name, "' is a parameter (", decision.reason, ") but holds ",
                                tensors.at(name).GetAsDouble(first), " at index ", first, " (element ",
                                ElementAt(tensors.at(name).shape(), first),
                                "); a trained weight must be finite: re-export the model from weights without "
                                "infinities"));
    }
    auto add = [&](const std::string& name, const Tensor& value, const InitializerPlan::Decision& decision) {
      switch (decision.kind) {
        case InitializerKind::kState:
          return graph_->AddState(name, value);
        case InitializerKind::kParameter:
          return graph_->AddParameter(name, value);
        case InitializerKind::kConstant:
          break;
      }
      return graph_->AddConstant(name, value);
    };
    std::vector<const onnx::TensorProto*> folded;  // defined after the parameters they may derive from
    for (const auto& init : g.initializer()) {
      const InitializerPlan::Decision& decision = plan_.decisions.at(init.name());
      if (decision.folded) {
        folded.push_back(&init);
        continue;
      }
      Value* v = add(init.name(), tensors.at(init.name()), decision);
      Report({init.name(), InitializerKindName(decision.kind), decision.reason});
      MPC_RETURN_IF_ERROR(Define(init.name(), v, absl::StrCat("initializer '", init.name(), "'")));
    }
    for (const onnx::TensorProto* init : folded) {
      MPC_RETURN_IF_ERROR(DeriveFoldedParameter(init->name(), tensors.at(init->name()), plan_.decisions.at(init->name())));
    }
    for (const InitializerPlan::Copy& copy : plan_.copies) {
      if (values_.contains(copy.name)) {
        return Error(absl::StrCat("initializer '", copy.source, "' is shared where it cannot be (",
                                  copy.decision.reason, "), and the name '", copy.name,
                                  "' for its private copy is taken; rename that value"));
      }
      Value* v = add(copy.name, tensors.at(copy.source), copy.decision);
      Report({copy.name, InitializerKindName(copy.decision.kind), copy.decision.reason});
      MPC_RETURN_IF_ERROR(Define(copy.name, v, absl::StrCat("untied copy of '", copy.source, "'")));
    }
    for (const auto& node : g.node()) {
      for (int i = 0; i < node.input_size(); ++i) {
        if (node.op_type() == "BatchNormalization" && i >= 3) bn_state_inputs_.insert(node.input(i));
      }
    }
    return absl::OkStatus();
  }

  // A constant the exporter folded from parameters (graph/onnx_folded_parameters.h): Reshape
  // or Transpose of a parameter the model has, Expand of a new collapsed parameter, or, when
  // its values say nothing, a parameter of its own.
  absl::Status DeriveFoldedParameter(const std::string& name, const Tensor& value,
                                     const InitializerPlan::Decision& decision) {
    std::vector<std::pair<std::string, const Tensor*>> parameters;
    for (Value* p : graph_->ValuesOfKind(ValueKind::kParameter)) parameters.emplace_back(p->name, &p->data);
    const FoldedDerivation d = mpc::DeriveFoldedParameter(value, parameters);
    const std::string where = absl::StrCat("initializer '", name, "'");
    if (d.kind == FoldedDerivation::Kind::kNone) {
      Value* v = graph_->AddParameter(name, value);
      Report({name, "trained", decision.reason});
      return Define(name, v, where);
    }
    Value* source = nullptr;
    if (d.kind == FoldedDerivation::Kind::kExpand) {
      // Named after the parameter it came from where the fold names one the model no longer has.
      std::string base_name = absl::StrCat(name, ".base");
      for (const std::string& from : decision.folded_from) {
        if (!values_.contains(from) && from.find("val_") != 0 && from.find('.') != std::string::npos) {
          base_name = from;
          break;
        }
      }
      base_name = FreshName(base_name);
      source = graph_->AddParameter(base_name, d.base);
      Report({base_name, "trained", d.reason});
      MPC_RETURN_IF_ERROR(Define(base_name, source, where));
    } else {
      source = values_.at(d.source);
    }
    Report({name, "derived", d.reason});
    std::vector<Value*> inputs{source};
    AttrMap attrs;
    std::string op = "Reshape";
    if (d.kind == FoldedDerivation::Kind::kTranspose) {
      op = "Transpose";
      attrs.Set("perm", std::vector<int64_t>{1, 0});
    } else {
      if (d.kind == FoldedDerivation::Kind::kExpand) op = "Expand";
      const Shape& shape = value.shape();
      inputs.push_back(graph_->AddConstant(graph_->UniqueName(name + "/shape"),
                                           Tensor::FromVector<int64_t>({static_cast<int64_t>(shape.size())},
                                                                       std::vector<int64_t>(shape.begin(), shape.end()))));
    }
    auto node = graph_->AddNode(op, std::move(inputs), std::move(attrs), graph_->UniqueName(name + "/derive"), {name});
    if (!node.ok()) return WithPrefix(node.status(), absl::StrCat(source_, ": ", where, ": "));
    return Define(name, (*node)->outputs[0], where);
  }

  absl::Status ImportInputs(const onnx::GraphProto& g) {
    // input_rows[""] is the data of a model's only input (a spec that does not name it).
    int real_inputs = 0;
    for (const auto& input : g.input()) real_inputs += !values_.contains(input.name());
    for (const auto& input : g.input()) {
      // Old exporters (IR < 4) list initializers as inputs too; those are weights.
      if (values_.contains(input.name())) continue;
      const std::string what = absl::StrCat("graph input '", input.name(), "'");
      if (!input.type().has_tensor_type()) {
        return Error(absl::StrCat(what, " is not a tensor; mpc supports tensor inputs only"));
      }
      const auto& tt = input.type().tensor_type();
      auto dtype = DTypeFromOnnx(tt.elem_type());
      if (!dtype.ok()) return WithPrefix(dtype.status(), absl::StrCat(source_, ": ", what, ": "));
      if (!tt.has_shape()) {
        return Error(absl::StrCat(what,
                                  " has no shape; mpc needs the rank and static sizes of "
                                  "every input. Re-export with an example input of the real shape"));
      }
      auto row = options_.input_rows.find(input.name());
      if (row == options_.input_rows.end() && real_inputs == 1) row = options_.input_rows.find("");
      Shape shape;
      for (int axis = 0; axis < tt.shape().dim_size(); ++axis) {
        const auto& dim = tt.shape().dim(axis);
        if (dim.has_dim_value() && dim.dim_value() < 0) {
          return Error(absl::StrCat(what, " has a negative size ", dim.dim_value(), " at axis ", axis));
        }
        const auto named = dim.dim_param().empty() ? bound_dims_.end() : bound_dims_.find(dim.dim_param());
        if (dim.has_dim_value()) {
          shape.push_back(dim.dim_value());
        } else if (named != bound_dims_.end()) {  // a symbol an earlier input bound
          shape.push_back(named->second);
        } else if (axis > 0 && row != options_.input_rows.end() &&
                   static_cast<int>(row->second.size()) == tt.shape().dim_size() - 1) {
          const int64_t size = row->second[axis - 1];  // the data's extent binds the symbol
          if (!dim.dim_param().empty()) {
            const auto [it, added] = bound_dims_.emplace(dim.dim_param(), size);
            if (!added && it->second != size) {
              return Error(absl::StrCat(what, " has dimension '", dim.dim_param(), "' at axis ", axis, " = ", size,
                                        " in its data, but another input bound '", dim.dim_param(), "' to ",
                                        it->second, "; the inputs' data must agree"));
            }
          }
          shape.push_back(size);
        } else if (axis == 0) {
          if (options_.batch_size < 1) {
            return Error(absl::StrCat(what, " has a dynamic batch axis 0 and the batch size is ", options_.batch_size,
                                      "; set a batch size of at least 1"));
          }
          shape.push_back(options_.batch_size);
          if (!dim.dim_param().empty()) bound_dims_.emplace(dim.dim_param(), options_.batch_size);
        } else {
          return Error(absl::StrCat(
              what, " has a dynamic dimension", dim.dim_param().empty() ? "" : absl::StrCat(" '", dim.dim_param(), "'"),
              " at axis ", axis, " (shape ", DimsToString(tt.shape()),
              "); mpc binds axis 0 to the batch size and every other symbolic dimension to the data's "
              "extent on that axis (mpc-train reads it from the training data), and no data shape was given "
              "for this input. Train it with data for '", input.name(), "', or re-export with a fixed size "
              "for that axis (remove it from dynamic_axes / dynamic_shapes)"));
        }
      }
      // Every later size computation multiplies these extents; refuse corrupt ones here.
      int64_t elements = 1;
      for (int64_t d : shape) {
        if (d > 0 && elements > (int64_t{1} << 48) / d) {
          return Error(absl::StrCat(what, " has shape ", ShapeToString(shape), ", too large for a tensor"));
        }
        elements *= d;
      }
      MPC_RETURN_IF_ERROR(Define(input.name(), graph_->AddInput(input.name(), *dtype, shape), what));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<AttrValue> ConvertAttribute(const onnx::AttributeProto& a, const std::string& where) const {
    auto type = a.type();
    // IR version 1 models leave the type unset; it is implied by the field that is set.
    if (type == onnx::AttributeProto::UNDEFINED) {
      if (a.has_f())
        type = onnx::AttributeProto::FLOAT;
      else if (a.has_i())
        type = onnx::AttributeProto::INT;
      else if (a.has_s())
        type = onnx::AttributeProto::STRING;
      else if (a.ints_size() > 0)
        type = onnx::AttributeProto::INTS;
      else if (a.floats_size() > 0)
        type = onnx::AttributeProto::FLOATS;
    }
    if (!a.ref_attr_name().empty()) {
      return Error(absl::StrCat(where, ": attribute '", a.name(), "' refers to a function attribute ('",
                                a.ref_attr_name(), "'), which only a node inside a function body may; the model is malformed"));
    }
    switch (type) {
      case onnx::AttributeProto::INT:
        return AttrValue(static_cast<int64_t>(a.i()));
      case onnx::AttributeProto::FLOAT:
        return AttrValue(a.f());
      case onnx::AttributeProto::STRING:
        return AttrValue(a.s());
      case onnx::AttributeProto::INTS:
        return AttrValue(std::vector<int64_t>(a.ints().begin(), a.ints().end()));
      case onnx::AttributeProto::FLOATS:
        return AttrValue(std::vector<float>(a.floats().begin(), a.floats().end()));
      default:
        break;
    }
    const std::string type_name = type == onnx::AttributeProto::UNDEFINED
                                      ? std::string("UNDEFINED")
                                      : onnx::AttributeProto_AttributeType_Name(type);
    return Error(absl::StrCat(where, ": attribute '", a.name(), "' has type ", type_name,
                              ", which mpc does not support; node attributes may be INT, FLOAT, STRING, INTS or FLOATS",
                              type == onnx::AttributeProto::TENSOR ? " (tensor attributes only on Constant)" : ""));
  }

  // Constant nodes are folded into constant Values at import.
  absl::Status ImportConstant(const onnx::NodeProto& node, const std::string& where) {
    if (node.output_size() != 1 || node.output(0).empty()) {
      return Error(absl::StrCat(where, ": a Constant has exactly one output"));
    }
    if (node.attribute_size() != 1) {
      return Error(absl::StrCat(where,
                                ": a Constant needs exactly one value attribute (value, "
                                "value_float, value_floats, value_int or value_ints); it has ",
                                node.attribute_size()));
    }
    const onnx::AttributeProto& a = node.attribute(0);
    Tensor value;
    if (a.name() == "value") {
      auto t = TensorFromProto(a.t(), absl::StrCat(where, ": attribute 'value'"), options_.external_data_dir);
      if (!t.ok()) return WithPrefix(t.status(), absl::StrCat(source_, ": "));
      value = *std::move(t);
    } else if (a.name() == "value_float") {
      value = Tensor::Scalar(a.f());
    } else if (a.name() == "value_floats") {
      value = Tensor::FromVector<float>({a.floats_size()}, std::vector<float>(a.floats().begin(), a.floats().end()));
    } else if (a.name() == "value_int") {
      value = Tensor::FromVector<int64_t>({}, {static_cast<int64_t>(a.i())});
    } else if (a.name() == "value_ints") {
      value = Tensor::FromVector<int64_t>({a.ints_size()}, std::vector<int64_t>(a.ints().begin(), a.ints().end()));
    } else {
      return Error(absl::StrCat(where, ": Constant attribute '", a.name(),
                                "' is not supported; mpc supports value, value_float, "
                                "value_floats, value_int and value_ints"));
    }
    return Define(node.output(0), graph_->AddConstant(node.output(0), std::move(value)), where);
  }

  std::string SupportedOps() const {
    std::vector<std::string> names = OpRegistry::Global().OpNames();
    names.push_back("Constant");
    for (const std::string& expanded : OnnxExpansionOps()) names.push_back(expanded);
    std::sort(names.begin(), names.end());
    return absl::StrJoin(names, " ");
  }

  std::string NodeName(const onnx::NodeProto& node, int index) {
    std::string name = node.name().empty() ? absl::StrCat(node.op_type(), "_", index) : node.name();
    // ONNX does not require unique node names; mpc looks nodes up by name.
    std::string unique = name;
    for (int k = 1; node_names_.contains(unique); ++k) unique = absl::StrCat(name, "_", k);
    node_names_.insert(unique);
    return unique;
  }

  // One node: its op checked against the registry, its inputs resolved, its attributes
  // converted, then either folded into a constant (static shape arithmetic) or added.
  absl::Status ImportNode(const onnx::NodeProto& node, int index) {
    node_index_ = index;
    const std::string name = NodeName(node, index);
    const std::string& op = node.op_type();
    const std::string where = absl::StrCat("node '", name, "' (", op, ")");
    const bool mpc_domain = node.domain() == "mpc";
    if (!IsOnnxDomain(node.domain()) && !mpc_domain) {
      return Error(absl::StrCat(where, " is in operator domain '", node.domain(),
                                "', which mpc does not support; mpc runs ops of the default "
                                "ONNX domain (opsets ",
                                kMinOnnxOpset, "-", kMaxOnnxOpset, ") and its own 'mpc' domain"));
    }
    if (op == "Constant" && !mpc_domain) return ImportConstant(node, where);
    // torch.onnx.export merges equal initializers: a fresh BatchNorm's running statistics can
    // arrive as Identity(weight or bias). They become state of their own with that initial value.
    if (op == "Identity" && node.input_size() == 1 && node.output_size() == 1 &&
        bn_state_inputs_.contains(node.output(0)) && values_.contains(node.input(0))) {
      const Value* src = values_.at(node.input(0));
      if (!src->producer && src->kind != ValueKind::kInput && IsFloating(src->dtype)) {
        return Define(node.output(0), graph_->AddState(node.output(0), src->data), where);
      }
    }
    if (!mpc_domain && HasOnnxExpansion(op)) return ImportExpanded(node, name, where);
    if (!mpc_domain && IsFoldOnlyOp(op)) return ImportFoldOnly(node, name, where);
    if (!mpc_domain && op == "SplitToSequence") return ImportSplitToSequence(node, where);
    if (!mpc_domain && op == "SequenceAt") return ImportSequenceAt(node, name, where);
    MPC_RETURN_IF_ERROR(CheckOpSupported(name, op, mpc_domain, where));
    MPC_ASSIGN_OR_RETURN(std::vector<Value*> inputs, ResolveInputs(node, where));
    MPC_ASSIGN_OR_RETURN(AttrMap attrs, ConvertAttributes(node, where));
    if (!mpc_domain) MPC_RETURN_IF_ERROR(UndoInferenceRewrites(node, where, inputs));
    if (!mpc_domain && op == "Gather") ReadEmbeddingPaddingIndex(node, attrs);
    // graph/onnx_opsets.cc: pooling read at opset 19 and later drops a ceil_mode window
    // that would start in the end padding (graph/ops_conv_util.h).
    if (!mpc_domain && (op == "MaxPool" || op == "AveragePool") && opset_ >= kPoolingDropsPaddedWindowOpset) {
      attrs.Set("mpc_ceil_drops_padded_window", int64_t{1});
    }
    // graph/ops_tensor_fold.cc: static shape arithmetic (Shape -> Gather -> Unsqueeze ->
    // Concat -> Reshape) becomes constants, which the ops needing constant inputs read.
    if (!mpc_domain && node.output_size() == 1 && !node.output(0).empty()) {
      Node probe;
      probe.name = name;
      probe.op = op;
      probe.inputs = inputs;
      probe.attrs = attrs;
      while (!probe.inputs.empty() && probe.inputs.back() == nullptr) probe.inputs.pop_back();
      std::vector<Tensor> folded = tensor_ops::FoldStatic(probe);
      if (!folded.empty()) {
        return Define(node.output(0), graph_->AddConstant(node.output(0), std::move(folded[0])), where);
      }
      std::optional<Tensor> computed = FoldConstantInputs(op, inputs, attrs);
      if (computed) return Define(node.output(0), graph_->AddConstant(node.output(0), *std::move(computed)), where);
    }
    return AddImportedNode(node, name, std::move(inputs), std::move(attrs), where);
  }

  // onnxscript's optimizer (torch.onnx.export's default optimize=True) rewrites a graph for
  // inference and tags each rewritten node with the rule (pkg.onnxscript.rewriter.rule_name).
  // Two of its rules change what training computes:
  //   FuseBatchNormInto{Conv,ConvTranspose,Gemm} folds a BatchNorm into the weights with its
  //     running statistics: the batch-statistics normalisation training needs is gone and
  //     cannot be recovered, so the model is refused with the fix;
  //   RemoveOptionalBiasFrom{Conv,Gemm} drops a bias that is all zeros, as freshly
  //     initialised ones are: it is restored as a zero parameter, which PyTorch trains.
  absl::Status UndoInferenceRewrites(const onnx::NodeProto& node, const std::string& where,
                                     std::vector<Value*>& inputs) {
    const OnnxMetadata md = MetadataOf(node);
    const auto rule = md.find(kOnnxscriptRuleNameKey);
    if (rule == md.end()) return absl::OkStatus();
    if (absl::StrContains(rule->second, "FuseBatchNormInto")) {
      return absl::InvalidArgumentError(absl::StrCat(
          source_, ": ", where, " was made by the exporter's optimizer rule '", rule->second,
          "', which folds a BatchNorm into the layer's weights with its running statistics (an inference "
          "rewrite): the batch-statistics normalisation the module trains with is not in this file. Re-export "
          "it for training with torch.onnx.export(model, args, optimize=False)"));
    }
    const bool conv = node.op_type() == "Conv", gemm = node.op_type() == "Gemm";
    if (!absl::StrContains(rule->second, "RemoveOptionalBiasFrom") || !(conv || gemm)) return absl::OkStatus();
    if (inputs.size() > 2 && inputs[2] != nullptr) return absl::OkStatus();
    if (inputs.size() < 2 || !inputs[0] || !inputs[1] || inputs[1]->shape.size() < 2) return absl::OkStatus();
    const Value* w = inputs[1];
    const int64_t out = conv ? w->shape[0] : (TransB(node) ? w->shape[0] : w->shape[1]);
    // Named after the bias placeholder its FX node names (%p_fc_bias -> fc_bias) that no
    // initializer carries any more.
    std::string bias_name = absl::StrCat(NodeName(node, node_index_), ".bias");
    const auto fx = md.find(kTorchFxNodeKey);
    if (fx != md.end()) {
      static const std::regex kBias("%(p_[A-Za-z0-9_]*bias)\\b");
      for (std::sregex_iterator it(fx->second.begin(), fx->second.end(), kBias), end; it != end; ++it) {
        if (!plan_.present_placeholders.count((*it)[1].str())) {
          bias_name = (*it)[1].str().substr(2);
          break;
        }
      }
    }
    bias_name = FreshName(bias_name);
    Value* bias = graph_->AddParameter(bias_name, Tensor(w->dtype, {out}));
    Report({bias_name, "trained",
            absl::StrCat("a zero bias the exporter's optimizer removed ('", rule->second, "'), restored")});
    MPC_RETURN_IF_ERROR(Define(bias_name, bias, absl::StrCat("restored bias of ", where)));
    inputs.resize(3, nullptr);
    inputs[2] = bias;
    return absl::OkStatus();
  }

  // nn.Embedding(padding_idx=p) exports as a plain Gather; the dynamo exporter's FX
  // metadata still shows aten.embedding's third argument. mpc's Gather gradient then leaves
  // row p untouched (attribute mpc_padding_idx), as PyTorch does.
  static void ReadEmbeddingPaddingIndex(const onnx::NodeProto& node, AttrMap& attrs) {
    const OnnxMetadata md = MetadataOf(node);
    const auto fx = md.find(kTorchFxNodeKey);
    if (fx == md.end()) return;
    static const std::regex kEmbedding(R"(aten\.embedding\.default\]\(args = \(%\w+, %\w+, (-?\d+))");
    std::smatch match;
    if (!std::regex_search(fx->second, match, kEmbedding)) return;
    const int64_t padding = std::stoll(match[1].str());
    if (padding >= 0) attrs.Set("mpc_padding_idx", padding);
  }

  static bool TransB(const onnx::NodeProto& node) {
    for (const auto& a : node.attribute()) {
      if (a.name() == "transB") return a.i() != 0;
    }
    return false;
  }

  // Row t of GatherND's / ScatterND's constant index tuples ([..., k]) as the row of the
  // data viewed as [D0*...*Dk-1, rest] it addresses (negative indices count from the end).
  absl::StatusOr<int64_t> IndexTupleRow(const Value& indices, int64_t t, const Shape& data_shape,
                                        const std::string& where) const {
    const int64_t k = indices.shape.back();
    int64_t at = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t i = static_cast<int64_t>(indices.data.GetAsDouble(t * k + d));
      if (i < 0) i += data_shape[d];
      if (i < 0 || i >= data_shape[d]) return Error(absl::StrCat(where, ": index ", i, " out of range"));
      at = at * data_shape[d] + i;
    }
    return at;
  }

  // GatherND of data the model computes or trains (Swin's relative-position bias table) at
  // constant indices: a Gather of the data viewed as [D0*...*Dk-1, rest] at the flattened
  // indices, which autodiff differentiates. nullptr when the indices are not constant.
  absl::StatusOr<Value*> GatherNdAsGather(const std::vector<Value*>& inputs, const AttrMap& attrs,
                                          const std::string& name, const std::string& where) {
    if (inputs.size() != 2 || !inputs[0] || !inputs[1] || attrs.GetInt("batch_dims", 0) != 0) return nullptr;
    const Value* indices = inputs[1];
    if (indices->kind != ValueKind::kConstant || indices->shape.empty()) return nullptr;
    Value* data = inputs[0];
    const int64_t k = indices->shape.back();
    const int64_t rank = static_cast<int64_t>(data->shape.size());
    if (k < 1 || k > rank) return Error(absl::StrCat(where, ": index tuples of ", k, " for data of rank ", rank));
    int64_t rows = 1;
    Shape viewed{1};
    for (int64_t d = 0; d < k; ++d) rows *= data->shape[d];
    viewed[0] = rows;
    for (int64_t d = k; d < rank; ++d) viewed.push_back(data->shape[d]);
    const Shape out_rows(indices->shape.begin(), indices->shape.end() - 1);
    Tensor flat(DType::kI64, out_rows);
    for (int64_t t = 0; t < flat.num_elements(); ++t) {
      MPC_ASSIGN_OR_RETURN(flat.data<int64_t>()[t], IndexTupleRow(*indices, t, data->shape, where));
    }
    GraphBuilder b(graph_.get(), name + "/");
    Value* rows_view = b.Reshape(data, viewed);
    Value* gathered = b.Op("Gather", {rows_view, graph_->AddConstant(graph_->UniqueName(name + "/rows"), flat)});
    MPC_RETURN_IF_ERROR(b.status());
    return gathered;
  }

  // ScatterND into data the model computes (T5's shift_right writes the input ids, moved one
  // position right, into a tensor of zeros) at constant indices: each row of the data
  // viewed as [D0*...*Dk-1, rest] is either the update the indices send there (the last one,
  // as ONNX's reference applies them in order) or the data's own, so the result is
  // Where(written, Gather(updates viewed as [T, rest], source row), data), which autodiff
  // differentiates. nullptr when the indices are not constant or a reduction is asked for.
  absl::StatusOr<Value*> ScatterNdAsWhere(const std::vector<Value*>& inputs, const AttrMap& attrs,
                                          const std::string& name, const std::string& where) {
    if (inputs.size() != 3 || !inputs[0] || !inputs[1] || !inputs[2]) return nullptr;
    if (attrs.GetString("reduction", "none") != "none") return nullptr;
    const Value* indices = inputs[1];
    if (indices->kind != ValueKind::kConstant || indices->shape.empty()) return nullptr;
    Value* data = inputs[0];
    Value* updates = inputs[2];
    const int64_t k = indices->shape.back();
    const int64_t rank = static_cast<int64_t>(data->shape.size());
    if (k < 1 || k > rank) return Error(absl::StrCat(where, ": index tuples of ", k, " for data of rank ", rank));
    Shape rest(data->shape.begin() + k, data->shape.end());
    Shape expected_updates(indices->shape.begin(), indices->shape.end() - 1);
    expected_updates.insert(expected_updates.end(), rest.begin(), rest.end());
    if (updates->shape != expected_updates || updates->dtype != data->dtype) {
      return Error(absl::StrCat(where, ": updates '", updates->name, "' are ", DTypeName(updates->dtype), " ",
                                ShapeToString(updates->shape), "; the data and indices call for ",
                                DTypeName(data->dtype), " ", ShapeToString(expected_updates)));
    }
    int64_t rows = 1;
    for (int64_t d = 0; d < k; ++d) rows *= data->shape[d];
    const int64_t tuples = indices->data.num_elements() / k;
    Tensor source(DType::kI64, {rows});
    Tensor written(DType::kBool, {rows});
    std::fill_n(source.data<int64_t>(), rows, int64_t{0});
    std::fill_n(written.data<uint8_t>(), rows, uint8_t{0});
    for (int64_t t = 0; t < tuples; ++t) {
      MPC_ASSIGN_OR_RETURN(const int64_t at, IndexTupleRow(*indices, t, data->shape, where));
      source.data<int64_t>()[at] = t;
      written.data<uint8_t>()[at] = 1;
    }
    Shape row_view{rows}, update_view{tuples}, mask_shape{rows};
    row_view.insert(row_view.end(), rest.begin(), rest.end());
    update_view.insert(update_view.end(), rest.begin(), rest.end());
    mask_shape.insert(mask_shape.end(), rest.size(), 1);
    GraphBuilder b(graph_.get(), name + "/");
    Value* sent = b.Op("Gather", {b.Reshape(updates, update_view),
                                  graph_->AddConstant(graph_->UniqueName(name + "/source_rows"), source)});
    Value* mask = graph_->AddConstant(graph_->UniqueName(name + "/written_rows"), written.Reshaped(mask_shape));
    Value* merged = b.Op("Where", {mask, sent, b.Reshape(data, row_view)});
    Value* out = b.Reshape(merged, data->shape);
    MPC_RETURN_IF_ERROR(b.status());
    return out;
  }

  // torch.split in an un-optimized dynamo export: SplitToSequence, then SequenceAt with a
  // constant position for each part. mpc has no sequence values; it records the split and
  // imports each SequenceAt as the Slice (and, with keepdims 0, Squeeze) of that part.
  struct SplitSequence {
    Value* input = nullptr;
    int64_t axis = 0;
    std::vector<int64_t> starts, sizes;
    bool squeeze = false;
  };

  absl::Status ImportSplitToSequence(const onnx::NodeProto& node, const std::string& where) {
    MPC_ASSIGN_OR_RETURN(std::vector<Value*> inputs, ResolveInputs(node, where));
    MPC_ASSIGN_OR_RETURN(AttrMap attrs, ConvertAttributes(node, where));
    if (inputs.empty() || !inputs[0] || node.output_size() != 1) {
      return Error(absl::StrCat(where, ": SplitToSequence needs an input and one output"));
    }
    SplitSequence seq;
    seq.input = inputs[0];
    const int64_t rank = static_cast<int64_t>(seq.input->shape.size());
    seq.axis = attrs.GetInt("axis", 0);
    if (seq.axis < 0) seq.axis += rank;
    if (seq.axis < 0 || seq.axis >= rank) return Error(absl::StrCat(where, ": axis out of range"));
    const int64_t extent = seq.input->shape[seq.axis];
    const Value* split = inputs.size() > 1 ? inputs[1] : nullptr;
    if (split && split->kind != ValueKind::kConstant) {
      return absl::UnimplementedError(absl::StrCat(source_, ": ", where, ": the split sizes must be constant"));
    }
    if (!split) {
      seq.sizes.assign(extent, 1);
      seq.squeeze = attrs.GetInt("keepdims", 1) == 0;
    } else if (split->data.num_elements() == 1 && split->shape.empty()) {
      const int64_t size = static_cast<int64_t>(split->data.GetAsDouble(0));
      if (size < 1) return Error(absl::StrCat(where, ": split size ", size, " must be positive"));
      for (int64_t at = 0; at < extent; at += size) seq.sizes.push_back(std::min(size, extent - at));
    } else {
      for (int64_t i = 0; i < split->data.num_elements(); ++i) {
        seq.sizes.push_back(static_cast<int64_t>(split->data.GetAsDouble(i)));
      }
    }
    int64_t at = 0;
    for (int64_t size : seq.sizes) seq.starts.push_back(at), at += size;
    if (at != extent) {
      return Error(absl::StrCat(where, ": the split sizes add up to ", at, ", not the axis extent ", extent));
    }
    sequences_[node.output(0)] = seq;
    return absl::OkStatus();
  }

  absl::Status ImportSequenceAt(const onnx::NodeProto& node, const std::string& name, const std::string& where) {
    if (node.input_size() != 2 || node.output_size() != 1) {
      return Error(absl::StrCat(where, ": SequenceAt takes a sequence and a position"));
    }
    const auto seq = sequences_.find(node.input(0));
    if (seq == sequences_.end()) {
      return absl::UnimplementedError(absl::StrCat(source_, ": ", where, ": input '", node.input(0),
                                                   "' is not a SplitToSequence output; mpc reads sequences only "
                                                   "as the parts of a split"));
    }
    const auto position = values_.find(node.input(1));
    if (position == values_.end() || position->second->kind != ValueKind::kConstant) {
      return absl::UnimplementedError(absl::StrCat(source_, ": ", where, ": the position must be a constant"));
    }
    const SplitSequence& s = seq->second;
    int64_t k = static_cast<int64_t>(position->second->data.GetAsDouble(0));
    const int64_t parts = static_cast<int64_t>(s.sizes.size());
    if (k < 0) k += parts;
    if (k < 0 || k >= parts) return Error(absl::StrCat(where, ": position out of range for ", parts, " parts"));
    GraphBuilder b(graph_.get(), name + "/");
    Value* part = b.Op("Slice", {s.input, b.ShapeConstant({s.starts[k]}), b.ShapeConstant({s.starts[k] + s.sizes[k]}),
                                 b.ShapeConstant({s.axis})});
    if (s.squeeze) part = b.Op("Squeeze", {part, b.ShapeConstant({s.axis})});
    MPC_RETURN_IF_ERROR(b.status());
    if (!graph_->FindValue(node.output(0))) MPC_RETURN_IF_ERROR(graph_->RenameValue(part, node.output(0)));
    return Define(node.output(0), part, where);
  }

  // A node whose every input is a constant (no parameter, no graph input), computed now
  // (graph/onnx_fold_constants.h), or nullopt.
  std::optional<Tensor> FoldConstantInputs(const std::string& op, const std::vector<Value*>& inputs,
                                           const AttrMap& attrs) const {
    std::vector<const Tensor*> data;
    for (const Value* v : inputs) {
      if (v == nullptr) {
        data.push_back(nullptr);
        continue;
      }
      if (v->kind != ValueKind::kConstant || (v->data.empty() && NumElements(v->shape) > 0)) return std::nullopt;
      data.push_back(&v->data);
    }
    while (!data.empty() && data.back() == nullptr) data.pop_back();
    return FoldConstantMath(op, data, attrs);
  }

  // An op mpc reads only on constant inputs: computed into a constant, or an error naming
  // the input that is not constant.
  absl::Status ImportFoldOnly(const onnx::NodeProto& node, const std::string& name, const std::string& where) {
    MPC_ASSIGN_OR_RETURN(std::vector<Value*> inputs, ResolveInputs(node, where));
    MPC_ASSIGN_OR_RETURN(AttrMap attrs, ConvertAttributes(node, where));
    if (node.output_size() != 1 || node.output(0).empty()) {
      return Error(absl::StrCat(where, " must have exactly one output"));
    }
    std::optional<Tensor> computed = FoldConstantInputs(node.op_type(), inputs, attrs);
    if (computed) return Define(node.output(0), graph_->AddConstant(node.output(0), *std::move(computed)), where);
    if (node.op_type() == "GatherND" || node.op_type() == "ScatterND") {
      MPC_ASSIGN_OR_RETURN(Value * computed_at_run_time, node.op_type() == "GatherND"
                                                             ? GatherNdAsGather(inputs, attrs, name, where)
                                                             : ScatterNdAsWhere(inputs, attrs, name, where));
      if (computed_at_run_time) {
        if (!graph_->FindValue(node.output(0))) {
          MPC_RETURN_IF_ERROR(graph_->RenameValue(computed_at_run_time, node.output(0)));
        }
        return Define(node.output(0), computed_at_run_time, where);
      }
    }
    std::string computed_input;
    for (const Value* v : inputs) {
      if (v && v->kind != ValueKind::kConstant) {
        computed_input = v->name;
        break;
      }
    }
    return absl::UnimplementedError(absl::StrCat(
        source_, ": ", where, ": mpc reads ", node.op_type(),
        " only on constant inputs (buffers it computes once, at import), and ",
        computed_input.empty() ? std::string("these dtypes or sizes are not computed there")
                               : absl::StrCat("input '", computed_input, "' is computed by the model or trained"),
        "; mpc has no ", node.op_type(), " kernel. Ops it runs: ", SupportedOps()));
  }

  // An op imported as a small graph of mpc's ops (graph/onnx_expand.h); its output keeps
  // the ONNX name.
  absl::Status ImportExpanded(const onnx::NodeProto& node, const std::string& name, const std::string& where) {
    MPC_ASSIGN_OR_RETURN(std::vector<Value*> inputs, ResolveInputs(node, where));
    MPC_ASSIGN_OR_RETURN(AttrMap attrs, ConvertAttributes(node, where));
    auto outputs = ExpandOnnxNode(*graph_, node.op_type(), name, inputs, attrs);
    if (!outputs.ok()) return WithPrefix(outputs.status(), absl::StrCat(source_, " (opset ", opset_, "): "));
    for (int i = 1; i < node.output_size(); ++i) {
      if (!node.output(i).empty()) {
        return absl::UnimplementedError(absl::StrCat(source_, ": ", where, ": optional output ", i, " '",
                                                     node.output(i), "' is not supported; mpc imports ",
                                                     node.op_type(), " with its first output only"));
      }
    }
    if (node.output_size() < 1) return Error(absl::StrCat(where, " must have an output"));
    Value* out = (*outputs)[0];
    if (!node.output(0).empty() && !graph_->FindValue(node.output(0))) {
      MPC_RETURN_IF_ERROR(graph_->RenameValue(out, node.output(0)));
    }
    return Define(node.output(0), out, where);
  }

  // Every op the model uses that mpc lacks, in one error (a user re-exporting or asking
  // for ops wants the whole list, not one op per attempt): each op with its node count and
  // first node, in the order the model first uses them.
  absl::Status CheckAllOpsSupported(const onnx::GraphProto& g) {
    struct Use {
      int count = 0;
      std::string first_node;
    };
    std::vector<std::string> order;
    absl::flat_hash_map<std::string, Use> missing;
    for (int i = 0; i < g.node_size(); ++i) {
      const onnx::NodeProto& node = g.node(i);
      const bool mpc_domain = node.domain() == "mpc";
      if (!IsOnnxDomain(node.domain()) && !mpc_domain) continue;  // ImportNode names the domain
      if (node.op_type() == "Constant" && !mpc_domain) continue;  // imported as a value
      if (OpRegistry::Global().Find(node.op_type()) != nullptr) continue;
      if (!mpc_domain && HasOnnxExpansion(node.op_type())) continue;  // graph/onnx_expand.h
      if (!mpc_domain && IsFoldOnlyOp(node.op_type())) continue;      // graph/onnx_fold_constants.h
      if (!mpc_domain && (node.op_type() == "SplitToSequence" || node.op_type() == "SequenceAt")) continue;
      Use& use = missing[node.op_type()];
      if (use.count++ == 0) {
        use.first_node = NodeName(node, i);
        order.push_back(node.op_type());
      }
    }
    if (order.empty()) return absl::OkStatus();
    std::vector<std::string> listed;
    for (const std::string& op : order) {
      const Use& use = missing.at(op);
      listed.push_back(absl::StrCat("'", op, "' (", use.count, use.count == 1 ? " node: '" : " nodes, first '",
                                    use.first_node, "')"));
    }
    return absl::UnimplementedError(
        absl::StrCat(source_, ": ", order.size() == 1 ? "op " : absl::StrCat(order.size(), " ops "),
                     absl::StrJoin(listed, ", "), order.size() == 1 ? " is" : " are", " not supported by mpc (opset ",
                     opset_, "); supported ops: ", SupportedOps(), ". Re-export the model using only these ops"));
  }

  // The op is registered, and in the domain the node names.
  absl::Status CheckOpSupported(const std::string& name, const std::string& op, bool mpc_domain,
                                const std::string& where) {
    const OpDef* def = OpRegistry::Global().Find(op);
    if (def == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(source_, ": node '", name, "': op '", op, "' is not supported by mpc (",
                       mpc_domain ? "domain 'mpc'" : absl::StrCat("opset ", opset_),
                       "); supported ops: ", SupportedOps(), ". Re-export the model using only these ops"));
    }
    if (!mpc_domain && def->domain == "mpc") {
      return Error(absl::StrCat(where, ": '", op,
                                "' is an op of the 'mpc' domain; the node must "
                                "set domain: \"mpc\" (and the model import that operator set)"));
    }
    return absl::OkStatus();
  }

  // Each input by name (nullptr for an absent optional one); earlier nodes defined them.
  absl::StatusOr<std::vector<Value*>> ResolveInputs(const onnx::NodeProto& node, const std::string& where) {
    std::vector<Value*> inputs;
    for (int i = 0; i < node.input_size(); ++i) {
      const std::string& in = node.input(i);
      if (in.empty()) {  // an absent optional input
        inputs.push_back(nullptr);
        continue;
      }
      const auto redirect = plan_.redirects.find({node_index_, i});
      auto it = values_.find(redirect == plan_.redirects.end() ? in : redirect->second);
      if (it == values_.end()) {
        return Error(absl::StrCat(where, ": input ", i, " '", in,
                                  "' is not a graph input, an initializer or the output of an "
                                  "earlier node (ONNX nodes must be topologically sorted)"));
      }
      inputs.push_back(it->second);
    }
    return inputs;
  }

  // The node's attributes as mpc's, with the ONNX forms mpc spells differently rewritten
  // (ConstantOfShape's value tensor, Split's implicit equal parts).
  absl::StatusOr<AttrMap> ConvertAttributes(const onnx::NodeProto& node, const std::string& where) {
    const std::string& op = node.op_type();
    AttrMap attrs;
    for (const auto& a : node.attribute()) {
      if (op == "ConstantOfShape" && a.name() == "value" && a.type() == onnx::AttributeProto::TENSOR) {
        // graph/ops_tensor.cc: the one-element value tensor as attributes dtype and value.
        auto t = TensorFromProto(a.t(), absl::StrCat(where, ": attribute 'value'"), options_.external_data_dir);
        if (!t.ok()) return WithPrefix(t.status(), absl::StrCat(source_, ": "));
        if (t->num_elements() != 1) {
          return Error(absl::StrCat(where, ": attribute 'value' has ", t->num_elements(),
                                    " elements; ConstantOfShape needs a one-element tensor"));
        }
        attrs.Set("dtype", static_cast<int64_t>(DTypeToOnnx(t->dtype())));
        if (IsFloating(t->dtype())) {
          attrs.Set("value", static_cast<float>(t->GetAsDouble(0)));
        } else {
          attrs.Set("value",
                    t->dtype() == DType::kI64 ? t->data<int64_t>()[0] : static_cast<int64_t>(t->GetAsDouble(0)));
        }
        continue;
      }
      MPC_ASSIGN_OR_RETURN(AttrValue value, ConvertAttribute(a, where));
      attrs.Set(a.name(), std::move(value));
    }
    if (op == "Split" && !attrs.Has("split") && !attrs.Has("num_outputs") &&
        (node.input_size() < 2 || node.input(1).empty())) {
      attrs.Set("num_outputs", static_cast<int64_t>(node.output_size()));  // equal parts, one per output
    }
    return attrs;
  }

  // The node in the graph, its outputs defined under their ONNX names.
  absl::Status AddImportedNode(const onnx::NodeProto& node, const std::string& name, std::vector<Value*> inputs,
                               AttrMap attrs, const std::string& where) {
    const std::string& op = node.op_type();
    std::vector<std::string> output_names(node.output().begin(), node.output().end());
    if (op == "MaxPool" && output_names.size() > 1) {  // graph/ops_conv.cc: no Indices output
      if (!output_names[1].empty()) {
        return absl::UnimplementedError(
            absl::StrCat(source_, ": ", where, ": MaxPool's optional Indices output '", output_names[1],
                         "' is not supported; remove it from the node (mpc's MaxPool gradient needs no indices)"));
      }
      output_names.resize(1);
    }
    auto created = graph_->AddNode(op, std::move(inputs), std::move(attrs), name, output_names);
    if (!created.ok()) {
      return WithPrefix(created.status(), absl::StrCat(source_, " (opset ", opset_, "): "));
    }
    for (int i = 0; i < node.output_size(); ++i) {
      if (node.output(i).empty()) continue;  // an optional output the model does not use
      MPC_RETURN_IF_ERROR(Define(node.output(i), (*created)->outputs[i], where));
    }
    return absl::OkStatus();
  }

  absl::Status ImportOutputs(const onnx::GraphProto& g) {
    for (const auto& out : g.output()) {
      const std::string what = absl::StrCat("graph output '", out.name(), "'");
      auto it = values_.find(out.name());
      if (it == values_.end()) {
        return Error(absl::StrCat(what, " is not produced by any node, initializer or input"));
      }
      Value* v = it->second;
      // The declared type must agree with inference; a mismatch means the model and
      // mpc disagree on an op's semantics, which is better caught here than in training.
      if (out.type().has_tensor_type()) {
        const auto& tt = out.type().tensor_type();
        if (tt.elem_type() != 0) {
          auto declared = DTypeFromOnnx(tt.elem_type());
          if (declared.ok() && *declared != v->dtype) {
            return Error(absl::StrCat(what, " is declared as ", DTypeName(*declared), " but mpc computes it as ",
                                      DTypeName(v->dtype)));
          }
        }
        if (tt.has_shape()) {
          const auto& shape = tt.shape();
          bool match = shape.dim_size() == static_cast<int>(v->shape.size());
          // Axis 0 is skipped: it follows the batch size chosen at import.
          for (int axis = 1; match && axis < shape.dim_size(); ++axis) {
            if (shape.dim(axis).has_dim_value() && shape.dim(axis).dim_value() != v->shape[axis]) {
              match = false;
            }
          }
          if (!match) {
            return Error(absl::StrCat(what, " is declared with shape ", DimsToString(shape), " but mpc infers ",
                                      DTypeName(v->dtype), ShapeToString(v->shape)));
          }
        }
      }
      graph_->AddOutput(v);
    }
    return absl::OkStatus();
  }

  const onnx::ModelProto& model_;
  const ImportOptions& options_;
  const std::string source_;
  std::unique_ptr<Graph> graph_;
  int64_t opset_ = 0;
  absl::flat_hash_map<std::string, Value*> values_;  // ONNX value name -> Value
  absl::flat_hash_set<std::string> node_names_;
  absl::flat_hash_map<std::string, SplitSequence> sequences_;  // SplitToSequence outputs
  absl::flat_hash_map<std::string, int64_t> bound_dims_;  // dim_param -> size bound from an input's data
  absl::flat_hash_set<std::string> bn_state_inputs_;  // read as some BatchNormalization's input_mean/var
  InitializerPlan plan_;
  int node_index_ = -1;  // the node being imported (plan_.redirects is keyed by it)
};

// The tensors of the main graph that can hold external data: initializers and the
// tensor attributes of its nodes (Constant's value, ConstantOfShape's value).
std::vector<onnx::TensorProto*> ExternalTensors(onnx::ModelProto& model) {
  std::vector<onnx::TensorProto*> out;
  onnx::GraphProto* g = model.mutable_graph();
  for (auto& init : *g->mutable_initializer()) {
    if (UsesExternalData(init)) out.push_back(&init);
  }
  for (auto& node : *g->mutable_node()) {
    for (auto& a : *node.mutable_attribute()) {
      if (a.has_t() && UsesExternalData(a.t())) out.push_back(a.mutable_t());
    }
  }
  return out;
}

// Checks, before ONNX's checker (whose messages do not say how to fix them), that every
// external tensor has a location inside the model's directory whose file exists, or
// refuses external data in a model from bytes. Returns whether the model has any.
absl::StatusOr<bool> CheckExternalData(const onnx::ModelProto& model, const std::string& path,
                                       const std::string& model_dir) {
  bool any = false;
  auto check = [&](const onnx::TensorProto& t, const std::string& what) -> absl::Status {
    if (!UsesExternalData(t)) return absl::OkStatus();
    any = true;
    const absl::Status st =
        model_dir.empty() ? ExternalDataWithoutFile(t, what) : FindExternalDataFile(t, model_dir, what).status();
    return st.ok() ? st : WithPrefix(st, absl::StrCat(path, ": "));
  };
  for (const auto& init : model.graph().initializer()) {
    MPC_RETURN_IF_ERROR(check(init, absl::StrCat("initializer '", init.name(), "'")));
  }
  for (const auto& node : model.graph().node()) {
    for (const auto& a : node.attribute()) {
      if (a.has_t()) {
        MPC_RETURN_IF_ERROR(
            check(a.t(), absl::StrCat("node '", node.name(), "' (", node.op_type(), "): attribute '", a.name(), "'")));
      }
    }
  }
  return any;
}

// Every stored tensor's dimensions (initializers, Constant and other tensor attributes)
// named when their product cannot be a tensor, before ONNX's checker, whose message for
// an overflowed product is about its stored data instead.
absl::Status CheckTensorDimensions(const onnx::ModelProto& model, const std::string& path) {
  for (const auto& init : model.graph().initializer()) {
    const absl::Status st = ElementCount(init, absl::StrCat("initializer '", init.name(), "'")).status();
    if (!st.ok()) return WithPrefix(st, absl::StrCat(path, ": "));
  }
  for (const auto& node : model.graph().node()) {
    for (const auto& a : node.attribute()) {
      if (!a.has_t()) continue;
      const absl::Status st =
          ElementCount(a.t(), absl::StrCat("node '", node.name(), "' (", node.op_type(), "): attribute '", a.name(), "'"))
              .status();
      if (!st.ok()) return WithPrefix(st, absl::StrCat(path, ": "));
    }
  }
  return absl::OkStatus();
}

// Parses and checks a model; `model_dir` is the directory of the file it came from
// ("" for bytes in memory), where its external data must be.
absl::StatusOr<onnx::ModelProto> ParseModel(const std::string& data, const std::string& path,
                                            const std::string& model_dir) {
  if (data.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the file is empty, expected an ONNX model"));
  }
  onnx::ModelProto model;
  bool parsed = false;
  std::string text_error;
  auto parse_text = [&] {
    model.Clear();
    FirstErrorCollector errors;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&errors);
    parsed = parser.ParseFromString(data, &model);
    text_error = errors.first();
  };
  const bool text = LooksLikeText(data);
  if (text) parse_text();
  if (!parsed) {
    model.Clear();
    parsed = model.ParseFromString(data) && model.has_graph();
  }
  if (!parsed && !text) parse_text();
  if (!parsed) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not an ONNX model (neither binary nor text protobuf parses)",
                     text && !text_error.empty() ? absl::StrCat("; as text: ", text_error) : "",
                     ". The file may be truncated or not a model; re-export it (torch.onnx.export) or check "
                     "the path"));
  }
  if (!model.has_graph()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the ONNX model has no graph"));
  }
  // Calls of the model's own functions become their bodies, so that every check below
  // (and the import) sees ONNX operators only.
  MPC_RETURN_IF_ERROR(InlineLocalFunctions(model, path));
  // Our own opset check first: its message says how to fix the model, while the
  // checker's messages for an unsupported opset are about individual ops.
  MPC_ASSIGN_OR_RETURN(const int64_t opset, CheckOpsets(model, path));
  MPC_ASSIGN_OR_RETURN(bool external, CheckExternalData(model, path, model_dir));
  MPC_RETURN_IF_ERROR(CheckTensorDimensions(model, path));
  // Debian's ONNX 1.12 checker knows opsets up to 17 and IR versions up to 8: a newer
  // model (every torch.onnx.export since PyTorch 2.8) is one it would refuse for its
  // version alone, or check against older schemas. Such models are checked by the import
  // itself (topological order, unique names, shapes and dtypes by mpc's own inference, each
  // op's definition by graph/onnx_opsets.h).
  if (opset > kOnnxCheckerMaxOpset || model.ir_version() > kOnnxCheckerMaxIrVersion) return model;
  try {
    if (external) {
      // ONNX 1.12's checker looks for each data file relative to the working directory
      // (its model directory is empty for an in-memory model), so it checks a copy whose
      // locations are full paths (validated above to lie inside the model's directory);
      // the model itself keeps ONNX's relative locations. The copy is small: the data
      // is outside it.
      onnx::ModelProto checked = model;
      for (onnx::TensorProto* t : ExternalTensors(checked)) {
        for (auto& entry : *t->mutable_external_data()) {
          if (entry.key() == "location") {
            entry.set_value(std::filesystem::absolute(ResolvePath(model_dir, entry.value())).string());
          }
        }
      }
      onnx::checker::check_model(checked);
    } else {
      onnx::checker::check_model(model);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the ONNX checker rejects the model: ", e.what(),
                     ". Fix the exporter's output (onnx.checker.check_model reproduces this) or re-export it"));
  }
  return model;
}

}  // namespace

absl::Status CheckOnnxModel(const onnx::ModelProto& model, const std::string& source_name) {
  MPC_ASSIGN_OR_RETURN(const int64_t opset, CheckOpsets(model, source_name));
  if (opset > kOnnxCheckerMaxOpset || model.ir_version() > kOnnxCheckerMaxIrVersion) return absl::OkStatus();
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(source_name, ": the ONNX checker rejects the model: ", e.what()));
  }
  return absl::OkStatus();
}

std::string ModelDirectory(const std::string& model_path) {
  const std::string dir = std::filesystem::path(model_path).parent_path().string();
  return dir.empty() ? "." : dir;
}

absl::StatusOr<onnx::ModelProto> ReadOnnxModelFile(const std::string& path) {
  MPC_ASSIGN_OR_RETURN(std::string data, ReadFileToString(path));
  return ParseModel(data, path, ModelDirectory(path));
}

absl::StatusOr<onnx::ModelProto> ParseOnnxModelBytes(const std::string& data, const std::string& source_name) {
  return ParseModel(data, source_name, /*model_dir=*/"");
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(const onnx::ModelProto& model, const ImportOptions& options,
                                                       const std::string& source_name) {
  const std::string source = source_name.empty() ? "<model>" : source_name;
  if (CallsLocalFunctions(model)) {  // a model built in memory; files are inlined when parsed
    onnx::ModelProto inlined = model;
    MPC_RETURN_IF_ERROR(InlineLocalFunctions(inlined, source));
    return Importer(inlined, options, source).Run();
  }
  return Importer(model, options, source).Run();
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxFile(const std::string& path, const ImportOptions& options) {
  MPC_ASSIGN_OR_RETURN(onnx::ModelProto model, ReadOnnxModelFile(path));
  ImportOptions with_dir = options;
  with_dir.external_data_dir = ModelDirectory(path);
  return ImportOnnxModel(model, with_dir, path);
}

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxBytes(const std::string& data, const ImportOptions& options,
                                                       const std::string& source_name) {
  MPC_ASSIGN_OR_RETURN(onnx::ModelProto model, ParseOnnxModelBytes(data, source_name));
  return ImportOnnxModel(model, options, source_name);
}

}  // namespace mpc
