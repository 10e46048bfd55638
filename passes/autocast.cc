// The autocast pass (see autocast.h for the phases).
#include "passes/autocast.h"

#include <map>
#include <regex>
#include <set>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "passes/autocast_lists.h"

namespace mpc {
namespace {

enum class OpClass { kAllow, kDeny, kInfer, kClear, kNone };

const char* ClassName(OpClass c) {
  switch (c) {
    case OpClass::kAllow:
      return "allow";
    case OpClass::kDeny:
      return "deny";
    case OpClass::kInfer:
      return "infer";
    case OpClass::kClear:
      return "clear";
    case OpClass::kNone:
      return "none";
  }
  return "?";
}

// The four lists after the spec's edits; an op named in two edits is rejected.
absl::StatusOr<std::map<std::string, OpClass>> BuildLists(const AutocastOptions& o) {
  std::map<std::string, OpClass> cls;
  for (const auto& op : autocast::DefaultAllow()) cls[op] = OpClass::kAllow;
  for (const auto& [list, c] :
       {std::pair{&autocast::DefaultDeny(), OpClass::kDeny}, std::pair{&autocast::DefaultInfer(), OpClass::kInfer},
        std::pair{&autocast::DefaultClear(), OpClass::kClear}}) {
    for (const auto& op : *list) {
      if (cls.count(op)) {
        return absl::InternalError(
            absl::StrCat("autocast lists overlap: '", op, "' is in ", ClassName(cls[op]), " and ", ClassName(c)));
      }
      cls[op] = c;
    }
  }
  std::map<std::string, std::string> edited;  // op -> field that moved it
  auto edit = [&](const std::vector<std::string>& ops, OpClass c, const std::string& field) -> absl::Status {
    for (const std::string& op : ops) {
      if (!OpRegistry::Global().Find(op) && !cls.count(op)) {
        return absl::InvalidArgumentError(absl::StrCat("spec field precision.", field, ": unknown op '", op, "'"));
      }
      if (edited.count(op)) {
        return absl::InvalidArgumentError(absl::StrCat("spec field precision.", field, ": op '", op,
                                                       "' is also in precision.", edited[op],
                                                       "; the lists must not overlap"));
      }
      edited[op] = field;
      cls[op] = c;
    }
    return absl::OkStatus();
  };
  MPC_RETURN_IF_ERROR(edit(o.add_allow, OpClass::kAllow, "add_allow"));
  MPC_RETURN_IF_ERROR(edit(o.add_deny, OpClass::kDeny, "add_deny"));
  MPC_RETURN_IF_ERROR(edit(o.add_infer, OpClass::kInfer, "add_infer"));
  MPC_RETURN_IF_ERROR(edit(o.add_clear, OpClass::kClear, "add_clear"));
  MPC_RETURN_IF_ERROR(edit(o.remove, OpClass::kNone, "remove"));
  return cls;
}

absl::StatusOr<DType> OverrideDType(const std::string& name, int index) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16" || name == "fp16") return DType::kF16;
  return absl::InvalidArgumentError(
      absl::StrCat("spec field precision.node_override[", index, "].dtype: '", name, "' must be f32, bf16 or f16"));
}

// The node's float operands that autocast may retype (config inputs excluded).
std::vector<const Value*> FloatOperands(const Node& n) {
  std::vector<const Value*> out;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    const Value* v = n.inputs[i];
    if (v && IsFloating(v->dtype) && !autocast::IsConfigInput(n.op, static_cast<int>(i))) out.push_back(v);
  }
  for (const Value* v : n.outputs) {
    if (IsFloating(v->dtype)) out.push_back(v);
  }
  return out;
}

using Reasons = absl::flat_hash_map<const Node*, std::string>;

// One run of the pass over one graph: the lists, the nodes in order, and the decisions so
// far. Each phase is one method, named as in docs/autocast.md.
class Painter {
 public:
  Painter(Graph& g, std::vector<Node*> order, std::map<std::string, OpClass> lists, DType low)
      : g_(g), order_(std::move(order)), lists_(std::move(lists)), low_(low) {}

  OpClass ClassOf(const Node* n) const {
    auto it = lists_.find(n->op);
    return it == lists_.end() ? OpClass::kNone : it->second;
  }

  // Phase 1: allow-list ops are painted low precision; deny-list ops are noted.
  void PaintAllowAndDenyOps() {
    for (Node* n : order_) {
      if (ClassOf(n) == OpClass::kAllow) allow_[n] = "allow list: runs on tensor cores with f32 accumulation";
      if (ClassOf(n) == OpClass::kDeny) deny_[n] = "deny list: numerically unsafe in low precision";
    }
  }

  // Phase 2: deny flows forward through infer and clear ops.
  void PropagateDeny() {
    for (Node* n : order_) {
      const OpClass c = ClassOf(n);
      if (c != OpClass::kInfer && c != OpClass::kClear) continue;
      for (const Value* in : n->inputs) {
        if (in && in->producer && deny_.contains(in->producer)) {
          deny_[n] = absl::StrCat("downstream of deny op '", in->producer->name, "'");
          break;
        }
      }
    }
  }

  // Phase 3: infer/clear ops with an allow op upstream and downstream (through
  // infer/clear paths) join the allow set.
  void JoinOpsBetweenAllowOps() {
    absl::flat_hash_map<const Node*, const Node*> up, down;  // nearest allow op found
    for (Node* n : order_) {
      for (const Value* in : n->inputs) {
        if (!in || !in->producer) continue;
        const Node* pr = in->producer;
        if (ClassOf(pr) == OpClass::kAllow)
          up[n] = pr;
        else if (PassesThrough(pr) && up.contains(pr))
          up[n] = up[pr];
        if (up.contains(n)) break;
      }
    }
    for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
      Node* n = *it;
      for (const Value* out : n->outputs) {
        for (const Node* c : out->consumers) {
          if (ClassOf(c) == OpClass::kAllow)
            down[n] = c;
          else if (PassesThrough(c) && down.contains(c))
            down[n] = down[c];
          if (down.contains(n)) break;
        }
        if (down.contains(n)) break;
      }
    }
    for (Node* n : order_) {
      if (PassesThrough(n) && up.contains(n) && down.contains(n)) {
        allow_[n] =
            absl::StrCat(ClassName(ClassOf(n)), " op between allow ops '", up[n]->name, "' and '", down[n]->name, "'",
                         autocast::ReducesInF32(n->op) ? "; reads and writes low precision, reduces in f32" : "");
      }
    }
  }

  // Phase 4: allow through clear ops, forward and backward, to a fixed point.
  void PropagateAllowThroughClearOps() {
    for (bool changed = true; changed;) {
      changed = false;
      for (Node* n : order_) {
        if (ClassOf(n) != OpClass::kClear || deny_.contains(n) || allow_.contains(n)) continue;
        const Value* data = n->inputs.empty() ? nullptr : n->inputs[0];
        if (data && data->producer && allow_.contains(data->producer)) {
          allow_[n] = absl::StrCat("clear op fed by allow op '", data->producer->name, "'");
          changed = true;
          continue;
        }
        bool all_allow = !n->outputs.empty();
        for (const Value* out : n->outputs) {
          if (out->consumers.empty() || g_.IsOutput(out)) all_allow = false;
          for (const Node* c : out->consumers) all_allow &= allow_.contains(c);
        }
        if (all_allow) {
          allow_[n] = "clear op whose consumers all run in low precision";
          changed = true;
        }
      }
    }
  }

  // Phase 5: what cannot run in the target dtype stays f32.
  void KeepUnsupportedInF32(const Capabilities& caps) {
    for (Node* n : order_) {
      if (!allow_.contains(n)) continue;
      for (const Value* v : FloatOperands(*n)) {
        if (v->dtype != DType::kF32) {
          kept_f32_[n] = absl::StrCat("operand '", v->name, "' is ", DTypeName(v->dtype), ", not f32");
          break;
        }
      }
      if (!kept_f32_.contains(n) && !caps.HasKernel(n->op, low_)) {
        kept_f32_[n] = absl::StrCat("the ", caps.device, " backend has no ", DTypeName(low_), " kernel");
      }
      if (kept_f32_.contains(n)) allow_.erase(n);
    }
  }

  // Phase 6: user overrides, by node name.
  absl::Status ApplyNodeOverrides(const std::vector<AutocastOptions::NodeOverride>& overrides) {
    for (int i = 0; i < static_cast<int>(overrides.size()); ++i) {
      const AutocastOptions::NodeOverride& o = overrides[i];
      MPC_ASSIGN_OR_RETURN(DType d, OverrideDType(o.dtype, i));
      if (d != DType::kF32 && d != low_) {
        return absl::InvalidArgumentError(absl::StrCat("spec field precision.node_override[", i, "].dtype: ", o.dtype,
                                                       " differs from the compute dtype ", DTypeName(low_)));
      }
      std::regex re;
      try {
        re = std::regex(o.pattern);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(absl::StrCat("spec field precision.node_override[", i, "].pattern: '",
                                                       o.pattern, "' is not a valid regex: ", e.what()));
      }
      for (Node* n : order_) {
        if (std::regex_match(n->name, re)) forced_[n] = {d, absl::StrCat("user override (pattern '", o.pattern, "')")};
      }
    }
    return absl::OkStatus();
  }

  // Every node's dtype and the reason for it, in order.
  void Decide(AutocastResult& result) {
    for (Node* n : order_) {
      PaintDecision d{n->name, n->op, DType::kF32, ""};
      if (forced_.contains(n)) {
        d.dtype = forced_[n].first;
        d.reason = forced_[n].second;
      } else if (allow_.contains(n)) {
        d.dtype = low_;
        d.reason = allow_[n];
      } else if (kept_f32_.contains(n)) {
        d.reason = kept_f32_[n];
      } else if (deny_.contains(n)) {
        d.reason = deny_[n];
      } else if (n->op == "Cast") {
        d.dtype = n->outputs[0]->dtype;
        d.reason = "cast from the model";
      } else if (ClassOf(n) == OpClass::kNone) {
        d.reason = "in no list: stays f32";
      } else {
        d.reason = absl::StrCat(ClassName(ClassOf(n)), " op not between low-precision ops");
      }
      target_[n] = d.dtype;
      result.paint.push_back(d);
    }
  }

  // Phase 7: rewrite operand dtypes, inserting shared casts. Returns whether anything
  // changed.
  absl::StatusOr<bool> InsertCasts(AutocastResult& result) {
    absl::flat_hash_map<std::pair<const Value*, DType>, Value*> casts;
    for (Node* n : order_) {
      if (n->op == "Cast") casts[{n->inputs[0], n->outputs[0]->dtype}] = n->outputs[0];
    }
    GraphBuilder b(&g_, "autocast/");
    auto cast_to = [&](Value* v, DType d) -> Value* {
      // A cast of a cast's output returns to the original value instead of chaining.
      if (v->producer && v->producer->op == "Cast" && v->producer->inputs[0]->dtype == d) return v->producer->inputs[0];
      auto it = casts.find({v, d});
      if (it != casts.end()) return it->second;
      Value* out = b.Cast(v, d);
      if (out) {
        casts[{v, d}] = out;
        ++result.casts_inserted;
        result.paint.push_back({b.last_node()->name, "Cast", d, "inserted cast"});
      }
      return out;
    };
    bool changed = false;
    for (Node* n : order_) {
      if (n->op == "Cast") continue;
      const DType want = target_[n];
      for (size_t i = 0; i < n->inputs.size(); ++i) {
        Value* in = n->inputs[i];
        if (!in || !IsFloating(in->dtype) || autocast::IsConfigInput(n->op, static_cast<int>(i)) ||
            autocast::KeepsF32Operand(n->op, static_cast<int>(i))) {
          continue;
        }
        if (in->dtype == want || (in->dtype != DType::kF32 && in->dtype != low_)) continue;
        Value* cast = cast_to(in, want);
        MPC_RETURN_IF_ERROR(b.status());
        g_.SetNodeInput(n, static_cast<int>(i), cast);
        changed = true;
      }
      const OpDef* def = OpRegistry::Global().Find(n->op);
      auto types = def->infer(*n);
      if (!types.ok()) {
        return absl::Status(types.status().code(), absl::StrCat("node '", n->name, "' (", n->op, ") in ",
                                                                DTypeName(want), ": ", types.status().message()));
      }
      for (size_t i = 0; i < n->outputs.size() && i < types->size(); ++i) n->outputs[i]->dtype = (*types)[i].dtype;
    }
    return changed;
  }

 private:
  bool PassesThrough(const Node* n) const {
    const OpClass c = ClassOf(n);
    return (c == OpClass::kInfer || c == OpClass::kClear) && !deny_.contains(n);
  }

  Graph& g_;
  const std::vector<Node*> order_;
  const std::map<std::string, OpClass> lists_;
  const DType low_;
  Reasons allow_, deny_, kept_f32_;  // node -> reason
  absl::flat_hash_map<const Node*, std::pair<DType, std::string>> forced_;
  absl::flat_hash_map<const Node*, DType> target_;
};

}  // namespace

absl::StatusOr<bool> AutocastPass::Run(Graph& g) {
  const AutocastOptions& o = options_;
  AutocastResult& result = *result_;
  result = AutocastResult{};
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  // FP8 paints like BF16: the fp8 pass later moves eligible GEMMs' operands to FP8.
  const bool low_precision =
      o.precision == Precision::kBF16 || o.precision == Precision::kFP16 || o.precision == Precision::kFP8;
  if (!low_precision) {
    // f32 (and tf32, a GEMM mode): nothing converts; the report still explains every node.
    const std::string reason = o.precision == Precision::kTF32
                                   ? "precision tf32: f32 storage, f32 GEMMs and convolutions in TF32 (tf32 pass)"
                                   : "precision f32";
    for (Node* n : order) result.paint.push_back({n->name, n->op, DType::kF32, reason});
    return false;
  }
  const DType low = o.precision == Precision::kFP16 ? DType::kF16 : DType::kBF16;
  result.compute_dtype = low;
  MPC_ASSIGN_OR_RETURN(auto lists, BuildLists(o));
  Painter painter(g, std::move(order), std::move(lists), low);
  painter.PaintAllowAndDenyOps();
  if (!o.tensor_cores_only) {
    painter.PropagateDeny();
    painter.JoinOpsBetweenAllowOps();
    painter.PropagateAllowThroughClearOps();
  }
  painter.KeepUnsupportedInF32(caps_);
  MPC_RETURN_IF_ERROR(painter.ApplyNodeOverrides(o.node_overrides));
  painter.Decide(result);
  return painter.InsertCasts(result);
}

}  // namespace mpc
