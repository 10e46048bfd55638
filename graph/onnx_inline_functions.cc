// See onnx_inline_functions.h. Field numbers are onnx.proto's: FunctionProto.attribute_proto
// (11, IR 9), FunctionProto.overload (13, IR 10), NodeProto.overload (16, IR 10).
#include "graph/onnx_inline_functions.h"

#include <google/protobuf/unknown_field_set.h>

#include <algorithm>
#include <map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace mpc {
namespace {

constexpr int kFunctionAttributeProtoField = 11;
constexpr int kFunctionOverloadField = 13;
constexpr int kNodeOverloadField = 16;

bool IsDefaultDomain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

// The length-delimited unknown fields numbered `field`, in order.
std::vector<std::string> UnknownBytes(const google::protobuf::Message& message, int field) {
  std::vector<std::string> out;
  const google::protobuf::UnknownFieldSet& unknown = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() == field && f.type() == google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) {
      out.push_back(f.length_delimited());
    }
  }
  return out;
}

std::string Overload(const google::protobuf::Message& message, int field) {
  std::vector<std::string> values = UnknownBytes(message, field);
  return values.empty() ? std::string() : values.back();
}

// A function's identity: (domain, name, overload).
std::string FunctionKey(const std::string& domain, const std::string& name, const std::string& overload) {
  return absl::StrCat(domain, "\x1f", name, "\x1f", overload);
}
std::string CallKey(const onnx::NodeProto& node) {
  return FunctionKey(node.domain(), node.op_type(), Overload(node, kNodeOverloadField));
}

std::string Describe(const onnx::FunctionProto& f) {
  const std::string overload = Overload(f, kFunctionOverloadField);
  return absl::StrCat(f.domain().empty() ? "" : f.domain() + ".", f.name(),
                      overload.empty() ? "" : absl::StrCat(" (overload '", overload, "')"));
}

int64_t DefaultOpset(const google::protobuf::RepeatedPtrField<onnx::OperatorSetIdProto>& imports) {
  for (const auto& import : imports) {
    if (IsDefaultDomain(import.domain())) return import.version();
  }
  return -1;
}

class Inliner {
 public:
  Inliner(onnx::ModelProto& model, const std::string& source) : model_(model), source_(source) {
    for (const auto& f : model.functions()) functions_[FunctionKey(f.domain(), f.name(), Overload(f, kFunctionOverloadField))] = &f;
  }

  bool Calls(const onnx::NodeProto& node) const { return functions_.contains(CallKey(node)); }

  absl::Status Run() {
    onnx::GraphProto& graph = *model_.mutable_graph();
    CollectNames(graph);
    google::protobuf::RepeatedPtrField<onnx::NodeProto> inlined;
    std::vector<std::string> stack;
    for (const onnx::NodeProto& node : graph.node()) {
      if (Calls(node)) {
        MPC_RETURN_IF_ERROR(Expand(node, stack, inlined));
      } else {
        *inlined.Add() = node;
      }
    }
    graph.mutable_node()->Swap(&inlined);
    model_.clear_functions();
    return absl::OkStatus();
  }

 private:
  void CollectNames(const onnx::GraphProto& graph) {
    for (const auto& v : graph.input()) names_.insert(v.name());
    for (const auto& v : graph.output()) names_.insert(v.name());
    for (const auto& t : graph.initializer()) names_.insert(t.name());
    for (const auto& n : graph.node()) {
      names_.insert(n.input().begin(), n.input().end());
      names_.insert(n.output().begin(), n.output().end());
      if (!Calls(n)) node_names_.insert(n.name());  // a call's name passes to its body's nodes
    }
  }

  // `base` if no value has that name yet, else `base` with the first free numeric suffix.
  static std::string Fresh(absl::flat_hash_set<std::string>& used, const std::string& base) {
    std::string name = base;
    for (int k = 1; used.contains(name); ++k) name = absl::StrCat(base, "_", k);
    used.insert(name);
    return name;
  }

  absl::Status Expand(const onnx::NodeProto& call, std::vector<std::string>& stack,
                      google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    const std::string key = CallKey(call);
    const onnx::FunctionProto& f = *functions_.at(key);
    const std::string where =
        absl::StrCat(source_, ": node '", call.name(), "' (a call of the model's local function ", Describe(f), ")");
    if (std::find(stack.begin(), stack.end(), key) != stack.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " calls itself (directly or through other functions); ONNX functions cannot recurse. "
                 "Re-export the model without functions (torch.onnx.export without export_modules_as_functions)"));
    }
    const int64_t model_opset = DefaultOpset(model_.opset_import());
    const int64_t function_opset = DefaultOpset(f.opset_import());
    if (model_opset > 0 && function_opset > 0 && function_opset != model_opset) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the function's body imports ONNX opset ", function_opset, " and the model opset ", model_opset,
          "; mpc reads one opset per model. Convert the model (onnx.version_converter.convert_version(model, ",
          model_opset, ") after onnx.inliner.inline_local_functions(model)) or re-export it"));
    }
    if (call.input_size() > f.input_size() || call.output_size() > f.output_size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " passes ", call.input_size(), " inputs and ",
                                                     call.output_size(), " outputs; the function declares ",
                                                     f.input_size(), " and ", f.output_size()));
    }
    const std::string prefix =
        Fresh(node_names_, call.name().empty() ? absl::StrCat(f.domain(), ".", f.name()) : call.name());

    // The function's formal names bound to the call's values; a formal input the call
    // leaves out is a missing optional input (""), a formal output it leaves out is internal.
    // A formal output that is also a formal input is passed through (an Identity after the body).
    absl::flat_hash_map<std::string, std::string> bound;
    for (int i = 0; i < f.input_size(); ++i) bound[f.input(i)] = i < call.input_size() ? call.input(i) : "";
    const absl::flat_hash_set<std::string> formal_inputs(f.input().begin(), f.input().end());
    absl::flat_hash_set<std::string> produced;
    for (const auto& body : f.node()) produced.insert(body.output().begin(), body.output().end());
    for (int i = 0; i < call.output_size(); ++i) {
      if (call.output(i).empty() || formal_inputs.contains(f.output(i))) continue;
      if (!produced.contains(f.output(i))) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": the function's output '", f.output(i), "' (output ", i,
            ") is neither computed by its body nor one of its inputs, so the call's output '", call.output(i),
            "' has no value. The exporter wrote an invalid function (onnx.inliner.inline_local_functions "
            "gives the same unsorted graph); re-export without export_modules_as_functions for this module"));
      }
      bound[f.output(i)] = call.output(i);
    }
    auto rename = [&](const std::string& formal) -> std::string {
      if (formal.empty()) return formal;
      auto it = bound.find(formal);
      if (it != bound.end()) return it->second;
      return bound[formal] = Fresh(names_, absl::StrCat(prefix, "/", formal));
    };

    std::map<std::string, const onnx::AttributeProto*> given;
    for (const auto& a : call.attribute()) given[a.name()] = &a;
    std::vector<onnx::AttributeProto> defaults;
    for (const std::string& bytes : UnknownBytes(f, kFunctionAttributeProtoField)) {
      onnx::AttributeProto a;
      if (a.ParseFromString(bytes)) defaults.push_back(std::move(a));
    }
    auto actual = [&](const std::string& name) -> const onnx::AttributeProto* {
      auto it = given.find(name);
      if (it != given.end()) return it->second;
      for (const auto& d : defaults) {
        if (d.name() == name) return &d;
      }
      return nullptr;  // an optional attribute left unset: the body node goes without it
    };

    stack.push_back(key);
    for (int i = 0; i < f.node_size(); ++i) {
      const onnx::NodeProto& body = f.node(i);
      onnx::NodeProto node = body;  // keeps the node's metadata (unknown fields)
      node.set_name(absl::StrCat(prefix, "/", body.name().empty() ? absl::StrCat(body.op_type(), "_", i) : body.name()));
      for (int k = 0; k < node.input_size(); ++k) node.set_input(k, rename(body.input(k)));
      for (int k = 0; k < node.output_size(); ++k) node.set_output(k, rename(body.output(k)));
      node.clear_attribute();
      for (const auto& a : body.attribute()) {
        if (a.has_g() || a.graphs_size() > 0) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": its node '", body.name(), "' (", body.op_type(),
                           ") holds a subgraph; mpc does not import control flow (If, Loop, Scan)"));
        }
        if (a.ref_attr_name().empty()) {
          *node.add_attribute() = a;
        } else if (const onnx::AttributeProto* value = actual(a.ref_attr_name())) {
          onnx::AttributeProto* copy = node.add_attribute();
          *copy = *value;
          copy->set_name(a.name());
        }
      }
      if (Calls(node)) {
        MPC_RETURN_IF_ERROR(Expand(node, stack, out));
      } else {
        *out.Add() = std::move(node);
      }
    }
    stack.pop_back();
    for (int i = 0; i < call.output_size(); ++i) {
      if (call.output(i).empty() || !formal_inputs.contains(f.output(i))) continue;
      onnx::NodeProto* identity = out.Add();
      identity->set_op_type("Identity");
      identity->set_name(absl::StrCat(prefix, "/passthrough_", i));
      identity->add_input(bound.at(f.output(i)));
      identity->add_output(call.output(i));
    }
    return absl::OkStatus();
  }

  onnx::ModelProto& model_;
  const std::string& source_;
  absl::flat_hash_map<std::string, const onnx::FunctionProto*> functions_;
  absl::flat_hash_set<std::string> names_;
  absl::flat_hash_set<std::string> node_names_;
};

}  // namespace

bool CallsLocalFunctions(const onnx::ModelProto& model) {
  if (model.functions_size() == 0) return false;
  absl::flat_hash_set<std::string> keys;
  for (const auto& f : model.functions()) keys.insert(FunctionKey(f.domain(), f.name(), Overload(f, kFunctionOverloadField)));
  for (const auto& node : model.graph().node()) {
    if (keys.contains(CallKey(node))) return true;
  }
  return false;
}

absl::Status InlineLocalFunctions(onnx::ModelProto& model, const std::string& source) {
  if (model.functions_size() == 0) return absl::OkStatus();
  return Inliner(model, source).Run();
}

}  // namespace mpc
