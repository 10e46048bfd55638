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
    case OpClass::kAllow: return "allow";
    case OpClass::kDeny: return "deny";
    case OpClass::kInfer: return "infer";
    case OpClass::kClear: return "clear";
    case OpClass::kNone: return "none";
  }
  return "?";
}

// The four lists after the spec's edits; an op named in two edits is rejected.
absl::StatusOr<std::map<std::string, OpClass>> BuildLists(const PrecisionSpec& p) {
  std::map<std::string, OpClass> cls;
  for (const auto& op : autocast::DefaultAllow()) cls[op] = OpClass::kAllow;
  for (const auto& [list, c] : {std::pair{&autocast::DefaultDeny(), OpClass::kDeny},
                                std::pair{&autocast::DefaultInfer(), OpClass::kInfer},
                                std::pair{&autocast::DefaultClear(), OpClass::kClear}}) {
    for (const auto& op : *list) {
      if (cls.count(op)) {
        return absl::InternalError(absl::StrCat("autocast lists overlap: '", op, "' is in ", ClassName(cls[op]),
                                                " and ", ClassName(c)));
      }
      cls[op] = c;
    }
  }
  std::map<std::string, std::string> edited;  // op -> field that moved it
  auto edit = [&](const google::protobuf::RepeatedPtrField<std::string>& ops, OpClass c,
                  const std::string& field) -> absl::Status {
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
  MPC_RETURN_IF_ERROR(edit(p.add_allow(), OpClass::kAllow, "add_allow"));
  MPC_RETURN_IF_ERROR(edit(p.add_deny(), OpClass::kDeny, "add_deny"));
  MPC_RETURN_IF_ERROR(edit(p.add_infer(), OpClass::kInfer, "add_infer"));
  MPC_RETURN_IF_ERROR(edit(p.add_clear(), OpClass::kClear, "add_clear"));
  MPC_RETURN_IF_ERROR(edit(p.remove(), OpClass::kNone, "remove"));
  return cls;
}

absl::StatusOr<DType> OverrideDType(const std::string& name, int index) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16" || name == "fp16") return DType::kF16;
  return absl::InvalidArgumentError(absl::StrCat("spec field precision.node_override[", index, "].dtype: '", name,
                                                 "' must be f32, bf16 or f16"));
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

}  // namespace

absl::StatusOr<PrecisionSpec::Compute> ParsePrecision(const std::string& name) {
  if (name == "f32" || name == "fp32") return PrecisionSpec::F32;
  if (name == "tf32") return PrecisionSpec::TF32;
  if (name == "bf16") return PrecisionSpec::BF16;
  if (name == "fp16" || name == "f16") return PrecisionSpec::FP16;
  if (name == "fp8") return PrecisionSpec::FP8;
  return absl::InvalidArgumentError(absl::StrCat("--precision '", name, "': expected f32, tf32, bf16, fp16 or fp8"));
}

absl::StatusOr<bool> AutocastPass::Run(Graph& g, const PassContext& ctx) {
  const PrecisionSpec& p = ctx.spec->precision();
  CompileInfo& info = *ctx.info;
  info.paint.clear();
  info.casts_inserted = 0;
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  // FP8 paints like BF16: the fp8 pass later moves eligible GEMMs' operands to FP8.
  const bool low_precision = p.compute() == PrecisionSpec::BF16 || p.compute() == PrecisionSpec::FP16 ||
                             p.compute() == PrecisionSpec::FP8;
  if (!low_precision) {
    // f32 (and tf32, a GEMM mode): nothing converts; the report still explains every node.
    const std::string reason = p.compute() == PrecisionSpec::TF32 ? "precision tf32: f32 storage, TF32 GEMMs where supported"
                                                                  : "precision f32";
    for (Node* n : order) info.paint.push_back({n->name, n->op, DType::kF32, reason});
    return false;
  }
  const DType low = p.compute() == PrecisionSpec::FP16 ? DType::kF16 : DType::kBF16;
  info.compute_dtype = low;
  MPC_ASSIGN_OR_RETURN(auto lists, BuildLists(p));
  auto class_of = [&](const Node* n) {
    auto it = lists.find(n->op);
    return it == lists.end() ? OpClass::kNone : it->second;
  };

  absl::flat_hash_map<const Node*, std::string> allow, deny;  // node -> reason
  // Phase 1: allow-list ops.
  for (Node* n : order) {
    if (class_of(n) == OpClass::kAllow) allow[n] = "allow list: runs on tensor cores with f32 accumulation";
    if (class_of(n) == OpClass::kDeny) deny[n] = "deny list: numerically unsafe in low precision";
  }
  const bool full = p.level() != PrecisionSpec::TENSOR_CORES_ONLY;
  auto passthrough = [&](const Node* n) {
    const OpClass c = class_of(n);
    return (c == OpClass::kInfer || c == OpClass::kClear) && !deny.contains(n);
  };
  if (full) {
    // Phase 2: deny flows forward through infer and clear ops.
    for (Node* n : order) {
      const OpClass c = class_of(n);
      if (c != OpClass::kInfer && c != OpClass::kClear) continue;
      for (const Value* in : n->inputs) {
        if (in && in->producer && deny.contains(in->producer)) {
          deny[n] = absl::StrCat("downstream of deny op '", in->producer->name, "'");
          break;
        }
      }
    }
    // Phase 3: infer/clear ops with an allow op upstream and downstream (through
    // infer/clear paths) join the allow set.
    absl::flat_hash_map<const Node*, const Node*> up, down;  // nearest allow op found
    for (Node* n : order) {
      for (const Value* in : n->inputs) {
        if (!in || !in->producer) continue;
        const Node* pr = in->producer;
        if (class_of(pr) == OpClass::kAllow) up[n] = pr;
        else if (passthrough(pr) && up.contains(pr)) up[n] = up[pr];
        if (up.contains(n)) break;
      }
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      for (const Value* out : n->outputs) {
        for (const Node* c : out->consumers) {
          if (class_of(c) == OpClass::kAllow) down[n] = c;
          else if (passthrough(c) && down.contains(c)) down[n] = down[c];
          if (down.contains(n)) break;
        }
        if (down.contains(n)) break;
      }
    }
    for (Node* n : order) {
      if (passthrough(n) && up.contains(n) && down.contains(n)) {
        allow[n] = absl::StrCat(ClassName(class_of(n)), " op between allow ops '", up[n]->name, "' and '",
                                down[n]->name, "'");
      }
    }
    // Phase 4: allow through clear ops, forward and backward, to a fixed point.
    for (bool changed = true; changed;) {
      changed = false;
      for (Node* n : order) {
        if (class_of(n) != OpClass::kClear || deny.contains(n) || allow.contains(n)) continue;
        const Value* data = n->inputs.empty() ? nullptr : n->inputs[0];
        if (data && data->producer && allow.contains(data->producer)) {
          allow[n] = absl::StrCat("clear op fed by allow op '", data->producer->name, "'");
          changed = true;
          continue;
        }
        bool all_allow = !n->outputs.empty();
        for (const Value* out : n->outputs) {
          if (out->consumers.empty() || g.IsOutput(out)) all_allow = false;
          for (const Node* c : out->consumers) all_allow &= allow.contains(c);
        }
        if (all_allow) {
          allow[n] = "clear op whose consumers all run in low precision";
          changed = true;
        }
      }
    }
  }
  // Phase 5: what cannot run in the target dtype stays f32.
  absl::flat_hash_map<const Node*, std::string> kept_f32;
  for (Node* n : order) {
    if (!allow.contains(n)) continue;
    for (const Value* v : FloatOperands(*n)) {
      if (v->dtype != DType::kF32) {
        kept_f32[n] = absl::StrCat("operand '", v->name, "' is ", DTypeName(v->dtype), ", not f32");
        break;
      }
    }
    if (!kept_f32.contains(n) && !ctx.capabilities->HasKernel(n->op, low)) {
      kept_f32[n] = absl::StrCat("the ", ctx.capabilities->device, " backend has no ", DTypeName(low), " kernel");
    }
    if (kept_f32.contains(n)) allow.erase(n);
  }
  // Phase 6: user overrides, by node name.
  absl::flat_hash_map<const Node*, std::pair<DType, std::string>> forced;
  for (int i = 0; i < p.node_override_size(); ++i) {
    const NodeOverride& o = p.node_override(i);
    MPC_ASSIGN_OR_RETURN(DType d, OverrideDType(o.dtype(), i));
    if (d != DType::kF32 && d != low) {
      return absl::InvalidArgumentError(absl::StrCat("spec field precision.node_override[", i, "].dtype: ",
                                                     o.dtype(), " differs from the compute dtype ", DTypeName(low)));
    }
    std::regex re;
    try {
      re = std::regex(o.pattern());
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("spec field precision.node_override[", i, "].pattern: '",
                                                     o.pattern(), "' is not a valid regex: ", e.what()));
    }
    for (Node* n : order) {
      if (std::regex_match(n->name, re)) forced[n] = {d, absl::StrCat("user override (pattern '", o.pattern(), "')")};
    }
  }
  // Decide, and record the reason for every node.
  absl::flat_hash_map<const Node*, DType> target;
  for (Node* n : order) {
    PaintDecision d{n->name, n->op, DType::kF32, ""};
    if (forced.contains(n)) {
      d.dtype = forced[n].first;
      d.reason = forced[n].second;
    } else if (allow.contains(n)) {
      d.dtype = low;
      d.reason = allow[n];
    } else if (kept_f32.contains(n)) {
      d.reason = kept_f32[n];
    } else if (deny.contains(n)) {
      d.reason = deny[n];
    } else if (n->op == "Cast") {
      d.dtype = n->outputs[0]->dtype;
      d.reason = "cast from the model";
    } else if (class_of(n) == OpClass::kNone) {
      d.reason = "in no list: stays f32";
    } else {
      d.reason = absl::StrCat(ClassName(class_of(n)), " op not between low-precision ops");
    }
    target[n] = d.dtype;
    info.paint.push_back(d);
  }

  // Phase 7: rewrite operand dtypes, inserting shared casts.
  absl::flat_hash_map<std::pair<const Value*, DType>, Value*> casts;
  for (Node* n : order) {
    if (n->op == "Cast") casts[{n->inputs[0], n->outputs[0]->dtype}] = n->outputs[0];
  }
  GraphBuilder b(&g, "autocast/");
  auto cast_to = [&](Value* v, DType d) -> Value* {
    // A cast of a cast's output returns to the original value instead of chaining.
    if (v->producer && v->producer->op == "Cast" && v->producer->inputs[0]->dtype == d) return v->producer->inputs[0];
    auto it = casts.find({v, d});
    if (it != casts.end()) return it->second;
    Value* out = b.Cast(v, d);
    if (out) {
      casts[{v, d}] = out;
      ++info.casts_inserted;
      info.paint.push_back({b.last_node()->name, "Cast", d, "inserted cast"});
    }
    return out;
  };
  bool changed = false;
  for (Node* n : order) {
    if (n->op == "Cast") continue;
    const DType want = target[n];
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* in = n->inputs[i];
      if (!in || !IsFloating(in->dtype) || autocast::IsConfigInput(n->op, static_cast<int>(i))) continue;
      if (in->dtype == want || (in->dtype != DType::kF32 && in->dtype != low)) continue;
      Value* cast = cast_to(in, want);
      MPC_RETURN_IF_ERROR(b.status());
      g.SetNodeInput(n, static_cast<int>(i), cast);
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

}  // namespace mpc
