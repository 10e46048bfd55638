// The rules of onnx_initializer_roles.h, in that order.
#include "graph/onnx_initializer_roles.h"

#include <algorithm>
#include <regex>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "graph/onnx_fold_constants.h"
#include "graph/onnx_metadata.h"

namespace mpc {
namespace {

using Decision = InitializerPlan::Decision;

// Inputs that ONNX passes as tensors but that configure the op rather than carry
// learnable data (target shapes, dropout ratio, loss class weights, a float Range's start,
// limit and delta, Pad's pads, value and axes).
struct ConfigSlot {
  const char* op;
  int index;
};
constexpr ConfigSlot kConfigInputSlots[] = {
    {"Reshape", 1}, {"Dropout", 1}, {"Dropout", 2}, {"SoftmaxCrossEntropyLoss", 2},
    {"Expand", 1},  {"Tile", 1},    {"Squeeze", 1}, {"Unsqueeze", 1},
    {"Slice", 1},   {"Slice", 2},   {"Slice", 3},   {"Slice", 4},
    {"Clip", 1},    {"Clip", 2},    {"Pad", 1},     {"Pad", 2},
    {"Pad", 3},     {"Range", 0},   {"Range", 1},   {"Range", 2},
    {"CastLike", 1}, {"ReduceMean", 1}, {"ReduceSum", 1}, {"Split", 1},
    {"Resize", 1},  {"Resize", 2},  {"Resize", 3},
};

bool IsConfigSlot(const std::string& op, int index) {
  for (const ConfigSlot& slot : kConfigInputSlots) {
    if (op == slot.op && index == slot.index) return true;
  }
  return false;
}

// BatchNormalization's input_mean / input_var: running statistics.
bool IsStateSlot(const std::string& op, int index) { return op == "BatchNormalization" && index >= 3; }

struct Use {
  int node;
  int slot;
};

// The placeholders (%p_..., %b_..., %c_...) an FX node's text names, in order, once each.
std::vector<std::string> Placeholders(const std::string& fx_node) {
  static const std::regex kToken("%([pbc]_[A-Za-z0-9_]+)");
  std::vector<std::string> out;
  for (std::sregex_iterator it(fx_node.begin(), fx_node.end(), kToken), end; it != end; ++it) {
    const std::string token = (*it)[1].str();
    if (std::find(out.begin(), out.end(), token) == out.end()) out.push_back(token);
  }
  return out;
}

// onnxscript writes folded_from as a Python list repr: "['a.weight', 'val_3']".
std::vector<std::string> FoldedFrom(const std::string& repr) {
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(repr, ',')) {
    std::string name(part);
    name.erase(std::remove_if(name.begin(), name.end(), [](char c) { return c == '[' || c == ']' || c == '\'' || c == ' '; }),
               name.end());
    if (!name.empty()) names.push_back(name);
  }
  return names;
}

// The placeholder torch.export names a parameter by in its FX graph: a.b.c -> %p_a_b_c.
std::string ParameterPlaceholder(const std::string& fqn) {
  std::string placeholder = absl::StrCat("p_", fqn);
  std::replace(placeholder.begin(), placeholder.end(), '.', '_');
  return placeholder;
}

class Planner {
 public:
  Planner(const onnx::GraphProto& g, const std::map<std::string, InitializerFacts>& facts,
          const std::string& state_marker, const std::string& constant_marker)
      : g_(g), facts_(facts), state_marker_(state_marker), constant_marker_(constant_marker) {}

  InitializerPlan Run() {
    CollectMetadata();
    CollectUses();
    for (const auto& init : g_.initializer()) plan_.decisions[init.name()] = Decide(init);
    UntieStatistics();
    if (plan_.dynamo_export) UntieMergedParameters();
    if (plan_.dynamo_export) UntieMergedFoldedParameters();
    plan_.present_placeholders.insert(present_placeholders_.begin(), present_placeholders_.end());
    return std::move(plan_);
  }

 private:
  void CollectMetadata() {
    auto note = [&](const std::string& name, const OnnxMetadata& md) {
      for (const auto& [key, value] : md) {
        if (key == kTorchInputKindKey) kind_[name] = value, plan_.dynamo_export = true;
        if (key == kTorchOriginalNameKey) original_name_[name] = value;
        if (key == kOnnxscriptFoldedFromKey) folded_from_[name] = FoldedFrom(value);
      }
    };
    for (const auto& v : g_.value_info()) note(v.name(), MetadataOf(v));
    for (const auto& v : g_.input()) note(v.name(), MetadataOf(v));
    for (const auto& t : g_.initializer()) note(t.name(), MetadataOf(t));
    for (int i = 0; i < g_.node_size(); ++i) {
      const OnnxMetadata md = MetadataOf(g_.node(i));
      const auto it = md.find(kTorchFxNodeKey);
      if (it != md.end()) {
        fx_placeholders_[i] = Placeholders(it->second);
        named_placeholders_.insert(fx_placeholders_[i].begin(), fx_placeholders_[i].end());
      }
    }
    for (const auto& init : g_.initializer()) {
      const auto it = original_name_.find(init.name());
      if (it != original_name_.end()) present_placeholders_.insert(it->second);
    }
    for (const auto& [name, sources] : folded_from_) {
      for (const std::string& source : sources) {
        folded_placeholders_.insert(ParameterPlaceholder(source));
      }
    }
  }

  void CollectUses() {
    for (int i = 0; i < g_.node_size(); ++i) {
      const onnx::NodeProto& node = g_.node(i);
      for (int s = 0; s < node.input_size(); ++s) {
        const std::string& in = node.input(s);
        if (in.empty()) continue;
        if (IsConfigSlot(node.op_type(), s)) {
          config_uses_[in].push_back({i, s});
        } else if (IsStateSlot(node.op_type(), s)) {
          state_uses_[in].push_back({i, s});
        } else {
          data_uses_[in].push_back({i, s});
        }
      }
    }
  }

  bool Has(const absl::flat_hash_map<std::string, std::vector<Use>>& uses, const std::string& name) const {
    return uses.contains(name);
  }

  // Whether a constant the exporter folded came from a parameter (rule 7).
  bool FoldedFromParameter(const std::string& name, std::string* because) const {
    const auto it = folded_from_.find(name);
    if (it == folded_from_.end()) return false;
    absl::flat_hash_set<std::string> present;
    for (const auto& init : g_.initializer()) present.insert(init.name());
    for (const std::string& source : it->second) {
      const auto kind = kind_.find(source);
      if (present.contains(source)) {
        if (kind != kind_.end() && kind->second == "PARAMETER") {
          *because = absl::StrCat("folded from parameter '", source, "'");  // a tied weight read transposed
          return true;
        }
        continue;
      }
      // A source the model no longer has: a parameter when some node's FX node still names
      // its placeholder (torch.export names a parameter a.b.c %p_a_b_c), or by its name.
      const std::string placeholder = ParameterPlaceholder(source);
      if (named_placeholders_.contains(placeholder) && !present_placeholders_.contains(placeholder)) {
        *because = absl::StrCat("folded from parameter %", placeholder);
        return true;
      }
      if (absl::EndsWith(source, ".weight") || absl::EndsWith(source, ".bias")) {
        *because = absl::StrCat("folded from '", source, "'");
        return true;
      }
    }
    return false;
  }

  // Whether `name`'s values flow, through any nodes, into an op of FoldOnlyOps.
  bool ReachesFoldOnlyOp(const std::string& name) const {
    std::vector<std::string> pending{name};
    absl::flat_hash_set<std::string> seen{name};
    while (!pending.empty()) {
      const std::string value = pending.back();
      pending.pop_back();
      for (const Use& use : Uses(value)) {
        const onnx::NodeProto& node = g_.node(use.node);
        if (IsFoldOnlyOp(node.op_type())) return true;
        // A Shape's output is the (static) shape, not the values: no data flows on.
        if (node.op_type() == "Shape" || node.op_type() == "Size") continue;
        for (const std::string& out : node.output()) {
          if (!out.empty() && seen.insert(out).second) pending.push_back(out);
        }
      }
    }
    return false;
  }

  std::vector<Use> Uses(const std::string& name) const {
    std::vector<Use> out;
    for (const auto* uses : {&data_uses_, &config_uses_, &state_uses_}) {
      const auto it = uses->find(name);
      if (it != uses->end()) out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return out;
  }

  Decision Decide(const onnx::TensorProto& init) {
    const std::string& name = init.name();
    const InitializerFacts facts = facts_.count(name) ? facts_.at(name) : InitializerFacts{};
    if (init.doc_string() == state_marker_) return {InitializerKind::kState, "state in mpc's export"};
    if (init.doc_string() == constant_marker_) return {InitializerKind::kConstant, "a constant in mpc's export"};
    if (!facts.floating) return {InitializerKind::kConstant, "not floating point"};
    const bool data = Has(data_uses_, name), config = Has(config_uses_, name), state = Has(state_uses_, name);
    if (!data && !state && config) return {InitializerKind::kConstant, "configures an op (a shape, axes, bounds)"};
    if (!data && state) return {InitializerKind::kState, "BatchNormalization running statistic"};
    const auto kind = kind_.find(name);
    if (kind != kind_.end()) {
      if (kind->second == "PARAMETER") return {InitializerKind::kParameter, "a PyTorch parameter (graph signature)"};
      if (kind->second == "BUFFER") return {InitializerKind::kConstant, "a PyTorch buffer (graph signature)"};
      if (kind->second == "CONSTANT_TENSOR") {
        return {InitializerKind::kConstant, "a PyTorch constant tensor (graph signature)"};
      }
    }
    if (!facts.finite) return {InitializerKind::kConstant, "holds non-finite values (a mask or a table, not a weight)"};
    if (ReachesFoldOnlyOp(name)) {
      // mpc computes Sin, Cos, Trilu, ... only at import, on constants: what feeds them is a
      // buffer (a rotary inv_freq table), never a weight.
      return {InitializerKind::kConstant, "feeds an op mpc computes only at import (a buffer, e.g. a rotary table)"};
    }
    if (folded_from_.count(name)) {
      std::string because;
      if (FoldedFromParameter(name, &because)) {
        return {InitializerKind::kParameter, absl::StrCat("folded by the exporter from a parameter (", because, ")"),
                true, folded_from_.at(name)};
      }
      return {InitializerKind::kConstant, "folded by the exporter from buffers or constants"};
    }
    if (plan_.dynamo_export) {
      return {InitializerKind::kConstant, "not a parameter in the export's graph signature"};
    }
    return {InitializerKind::kParameter, "a float initializer (the export does not say which are parameters)"};
  }

  // A running statistic read as a weight too, or by several BatchNormalizations: each
  // BatchNormalization's statistics become its own state.
  void UntieStatistics() {
    for (const auto& [name, uses] : state_uses_) {
      const auto decided = plan_.decisions.find(name);
      if (decided == plan_.decisions.end()) continue;  // not an initializer
      const bool shared_with_data = Has(data_uses_, name);
      std::set<int> nodes;
      for (const Use& use : uses) nodes.insert(use.node);
      if (!shared_with_data && nodes.size() < 2) continue;
      bool first = !shared_with_data;  // the first BatchNormalization keeps the original when nothing else reads it
      for (int node : nodes) {
        if (first) {
          first = false;
          continue;
        }
        const std::string copy = absl::StrCat(name, "@", NodeLabel(node));
        plan_.copies.push_back({copy, name, {InitializerKind::kState, absl::StrCat(
                                                 "BatchNormalization running statistic, untied from '", name,
                                                 "' (the export shares it with ",
                                                 shared_with_data ? "a weight" : "another BatchNormalization", ")")}});
        for (const Use& use : uses) {
          if (use.node == node) plan_.redirects[{use.node, use.slot}] = copy;
        }
      }
    }
  }

  // Constants folded from different parameters with equal values (two GroupNorm weights of
  // ones, each reshaped to [C, 1, 1]) are merged too. Their readers' FX nodes name the
  // parameters they stood for: readers naming different parameter placeholders get
  // different copies.
  void UntieMergedFoldedParameters() {
    for (const auto& init : g_.initializer()) {
      const std::string& name = init.name();
      const auto decided = plan_.decisions.find(name);
      if (decided == plan_.decisions.end() || !decided->second.folded) continue;
      const auto uses = data_uses_.find(name);
      if (uses == data_uses_.end()) continue;
      std::map<std::vector<std::string>, std::vector<Use>> by_parameters;
      std::vector<std::vector<std::string>> order;
      for (const Use& use : uses->second) {
        std::vector<std::string> key;
        const auto fx = fx_placeholders_.find(use.node);
        if (fx != fx_placeholders_.end()) {
          for (const std::string& token : fx->second) {
            if (absl::StartsWith(token, "p_") && !present_placeholders_.contains(token)) key.push_back(token);
          }
        }
        if (!by_parameters.count(key)) order.push_back(key);
        by_parameters[key].push_back(use);
      }
      for (size_t k = 1; k < order.size(); ++k) {  // the first group keeps the original
        const std::string copy = absl::StrCat(
            name, ".", order[k].empty() ? NodeLabel(by_parameters[order[k]][0].node) : order[k][0].substr(2));
        Decision decision = decided->second;
        decision.reason = absl::StrCat(decision.reason, "; untied from '", name,
                                       "', which the exporter shares among layers for their equal initial values");
        plan_.copies.push_back({copy, name, decision});
        for (const Use& use : by_parameters[order[k]]) plan_.redirects[{use.node, use.slot}] = copy;
      }
    }
  }

  // Parameters merged by the exporter's optimizer: a reader whose FX node does not name the
  // parameter's placeholder read another parameter that had the same initial value.
  void UntieMergedParameters() {
    std::map<std::string, std::string> copy_of_placeholder;  // placeholder -> copy name
    for (const auto& init : g_.initializer()) {
      const std::string& name = init.name();
      const auto decided = plan_.decisions.find(name);
      if (decided == plan_.decisions.end() || decided->second.kind != InitializerKind::kParameter) continue;
      const auto original = original_name_.find(name);
      if (original == original_name_.end()) continue;
      const auto uses = data_uses_.find(name);
      if (uses == data_uses_.end()) continue;
      for (const Use& use : uses->second) {
        const auto fx = fx_placeholders_.find(use.node);
        if (fx == fx_placeholders_.end() || fx->second.empty()) continue;
        const std::vector<std::string>& names = fx->second;
        if (std::find(names.begin(), names.end(), original->second) != names.end()) continue;
        // The placeholder this input stood for: the node's parameter placeholders that no
        // initializer carries, matched in order with the node's redirected inputs.
        std::vector<std::string> orphans;  // placeholders neither present nor folded into a constant
        for (const std::string& token : names) {
          if (absl::StartsWith(token, "p_") && !present_placeholders_.contains(token) &&
              !folded_placeholders_.contains(token)) {
            orphans.push_back(token);
          }
        }
        int position = 0;
        const onnx::NodeProto& node = g_.node(use.node);
        for (int s = 0; s < use.slot; ++s) position += IsMergedInto(node.input(s), names);
        const std::string placeholder = position < static_cast<int>(orphans.size())
                                            ? orphans[position]
                                            : absl::StrCat("p_", name, "@", NodeLabel(use.node));
        auto [it, added] = copy_of_placeholder.emplace(placeholder, "");
        if (added) {
          it->second = absl::StartsWith(placeholder, "p_") ? placeholder.substr(2) : placeholder;
          plan_.copies.push_back(
              {it->second, name,
               {InitializerKind::kParameter,
                absl::StrCat("a PyTorch parameter (%", placeholder, ") that the exporter merged into '", name,
                             "' for their equal initial values; untied")}});
        }
        plan_.redirects[{use.node, use.slot}] = it->second;
      }
    }
  }

  // Whether `input` is a parameter initializer whose placeholder the node's FX node does
  // not name (so it stands for another, merged one).
  bool IsMergedInto(const std::string& input, const std::vector<std::string>& names) const {
    const auto original = original_name_.find(input);
    if (original == original_name_.end()) return false;
    const auto decided = plan_.decisions.find(input);
    if (decided == plan_.decisions.end() || decided->second.kind != InitializerKind::kParameter) return false;
    return std::find(names.begin(), names.end(), original->second) == names.end();
  }

  std::string NodeLabel(int node) const {
    const onnx::NodeProto& n = g_.node(node);
    return n.name().empty() ? absl::StrCat(n.op_type(), "_", node) : n.name();
  }

  const onnx::GraphProto& g_;
  const std::map<std::string, InitializerFacts>& facts_;
  const std::string state_marker_, constant_marker_;
  InitializerPlan plan_;
  absl::flat_hash_map<std::string, std::string> kind_, original_name_;
  absl::flat_hash_map<std::string, std::vector<std::string>> folded_from_;
  absl::flat_hash_map<int, std::vector<std::string>> fx_placeholders_;
  absl::flat_hash_set<std::string> present_placeholders_;
  absl::flat_hash_set<std::string> named_placeholders_;   // every placeholder some FX node names
  absl::flat_hash_set<std::string> folded_placeholders_;  // those of the sources of folded constants
  absl::flat_hash_map<std::string, std::vector<Use>> data_uses_, config_uses_, state_uses_;
};

}  // namespace

InitializerPlan PlanInitializers(const onnx::GraphProto& graph, const std::map<std::string, InitializerFacts>& facts,
                                 const std::string& state_marker, const std::string& constant_marker) {
  return Planner(graph, facts, state_marker, constant_marker).Run();
}

std::string InitializerKindName(InitializerKind kind) {
  switch (kind) {
    case InitializerKind::kParameter:
      return "trained";
    case InitializerKind::kState:
      return "state";
    case InitializerKind::kConstant:
      break;
  }
  return "constant";
}

}  // namespace mpc
