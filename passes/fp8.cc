// The fp8 pass and the delayed-scaling update rule (see fp8.h).
#include "passes/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/float8.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"

namespace mpc {

float UpdateFp8Meta(float* history, int64_t len, float* scale, float* scale_inv, const Fp8ScaleRecipe& r) {
  float amax = history[0];
  if (!r.most_recent) {
    // NaN must win (std::max would drop it): it makes the amax non-finite, so the old
    // scale is kept.
    for (int64_t i = 1; i < len; ++i) {
      if (std::isnan(history[i]) || history[i] > amax) amax = history[i];
    }
  }
  if (std::isfinite(amax)) amax = std::max(amax, r.amax_floor);
  if (std::isfinite(amax) && amax > 0) {
    float s = (r.fp8_max / amax) / std::ldexp(1.0f, r.margin);
    if (std::isinf(s)) s = std::numeric_limits<float>::max();
    if (s > 0) *scale = s;
  }
  *scale_inv = 1.0f / *scale;
  if (!std::isfinite(history[0])) history[0] = 0.0f;
  std::rotate(history, history + 1, history + len);
  history[0] = 0.0f;
  return amax;
}

namespace {

bool IsGemm(const Node* n) { return n->op == "Gemm" || n->op == "MatMul"; }

// The scale and history of one quantized tensor.
struct Meta {
  std::string name;  // "<gemm>/input"
  float fp8_max = kF8E4M3Max;
  Value* scale = nullptr;
  Value* scale_inv = nullptr;
  Value* history = nullptr;    // training only
  Value* last_amax = nullptr;  // training only
};

// A backward GEMM and where its operands come from.
struct Backward {
  Node* node;
  int grad_index;     // the operand that is the incoming gradient dY
  int other_index;    // the operand that is a forward operand (or its transpose)
  int role;           // 0: the forward GEMM's input, 1: its weight
  Node* transpose;    // non-null: the operand is Transpose(forward operand)
};

const char* FormatName(float fp8_max) { return fp8_max == kF8E4M3Max ? "e4m3" : "e5m2"; }

class Converter {
 public:
  Converter(Graph& g, CompileInfo& info, const Fp8Spec& spec, bool training)
      : g_(g), info_(info), spec_(spec), training_(training), b_(&g, "fp8/") {}

  Meta* MakeMeta(const std::string& name, float fp8_max) {
    auto meta = std::make_unique<Meta>();
    meta->name = name;
    meta->fp8_max = fp8_max;
    meta->scale = g_.AddState(name + ".fp8_scale", Tensor::Scalar(1.0f));
    meta->scale_inv = g_.AddState(name + ".fp8_scale_inv", Tensor::Scalar(1.0f));
    if (training_) {
      meta->history = g_.AddState(name + ".fp8_amax_history", Tensor(DType::kF32, {spec_.amax_history_len()}));
      meta->last_amax = g_.AddState(name + ".fp8_last_amax", Tensor::Scalar(0.0f));
    }
    info_.fp8_tensors.push_back(name);
    metas_.push_back(std::move(meta));
    return metas_.back().get();
  }

  Value* Quantize(Value* x, const Meta& m) {
    AttrMap attrs;
    attrs.Set("format", std::string(FormatName(m.fp8_max)));
    std::vector<Value*> inputs{x, m.scale, m.scale_inv};
    if (m.history) inputs.push_back(m.history);
    Value* q = b_.Op("Fp8Quantize", std::move(inputs), std::move(attrs));
    if (q) quantizers_.push_back(b_.last_node());
    return q;
  }

  // Points the GEMM at f32 quantized operands; its product is cast back to the dtype the
  // rest of the graph expects, and that cast takes over the product's name and uses.
  absl::Status Convert(Node* n, Value* qa, Value* qb, const std::string& fa, const std::string& fb,
                       const std::string& forward) {
    Value* out = n->outputs[0];
    const DType out_dtype = out->dtype;
    g_.SetNodeInput(n, 0, qa);
    g_.SetNodeInput(n, 1, qb);
    if (n->inputs.size() > 2 && n->inputs[2]) g_.SetNodeInput(n, 2, b_.Cast(n->inputs[2], DType::kF32));
    n->attrs.Erase("mpc_output_dtype");
    n->attrs.Set("mpc_fp8", int64_t{1});
    MPC_RETURN_IF_ERROR(b_.status());
    MPC_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().FindOrError(n->op, n->name));
    auto types = def->infer(*n);
    if (!types.ok()) {
      return absl::Status(types.status().code(),
                          absl::StrCat("node '", n->name, "' with FP8 operands: ", types.status().message()));
    }
    out->dtype = (*types)[0].dtype;
    info_.fp8_gemms.push_back({n->name, fa, fb, forward});
    if (out->dtype == out_dtype) return absl::OkStatus();

    std::vector<std::pair<Node*, int>> uses;
    for (Node* c : out->consumers) {
      for (size_t i = 0; i < c->inputs.size(); ++i) {
        if (c->inputs[i] == out && std::find(uses.begin(), uses.end(), std::make_pair(c, static_cast<int>(i))) == uses.end()) {
          uses.emplace_back(c, static_cast<int>(i));
        }
      }
    }
    const std::string name = out->name;
    MPC_RETURN_IF_ERROR(g_.RenameValue(out, g_.UniqueName(name + "/fp8_f32")));
    Value* cast = b_.Cast(out, out_dtype);
    MPC_RETURN_IF_ERROR(b_.status());
    MPC_RETURN_IF_ERROR(g_.RenameValue(cast, name));
    for (const auto& [c, i] : uses) g_.SetNodeInput(c, i, cast);
    std::vector<Value*> outputs = g_.outputs();
    std::replace(outputs.begin(), outputs.end(), out, cast);
    g_.SetOutputs(outputs);
    for (auto& pg : info_.param_grads) {
      if (pg.second == out) pg.second = cast;
    }
    return absl::OkStatus();
  }

  // One batched update, after every quantization of the step.
  absl::Status AddUpdate() {
    if (!training_ || metas_.empty()) return absl::OkStatus();
    std::vector<Value*> inputs;
    std::vector<float> fp8_max;
    for (const auto& m : metas_) {
      inputs.insert(inputs.end(), {m->scale, m->scale_inv, m->history, m->last_amax});
      fp8_max.push_back(m->fp8_max);
    }
    AttrMap attrs;
    attrs.Set("fp8_max", fp8_max);
    attrs.Set("margin", static_cast<int64_t>(spec_.margin()));
    attrs.Set("algo", std::string(spec_.amax_compute_algo() == Fp8Spec::MOST_RECENT ? "most_recent" : "max"));
    attrs.Set("amax_floor", spec_.amax_floor());
    MPC_ASSIGN_OR_RETURN(Node * update, g_.AddNode("Fp8UpdateScales", std::move(inputs), std::move(attrs),
                                                   g_.UniqueName("fp8/update_scales")));
    update->control_deps = quantizers_;
    return absl::OkStatus();
  }

  GraphBuilder& builder() { return b_; }

 private:
  Graph& g_;
  CompileInfo& info_;
  const Fp8Spec& spec_;
  bool training_;
  GraphBuilder b_;
  std::vector<std::unique_ptr<Meta>> metas_;
  std::vector<Node*> quantizers_;
};

// Why a forward GEMM cannot run in FP8 by its shapes and dtypes ("" when it can).
std::string ShapeReason(const Node* n) {
  const Value* a = n->inputs[0];
  const Value* b = n->inputs[1];
  if (a->dtype == DType::kF64) return "f64 operands";
  if (a->shape.size() < 2 || b->shape.size() < 2) return "operands are not matrices";
  int64_t k, nn;
  if (n->op == "Gemm") {
    const bool ta = n->attrs.GetInt("transA", 0) != 0, tb = n->attrs.GetInt("transB", 0) != 0;
    k = ta ? a->shape[0] : a->shape[1];
    nn = tb ? b->shape[0] : b->shape[1];
  } else {
    k = a->shape.back();
    nn = b->shape.back();
  }
  if (k % 16 != 0 || nn % 16 != 0) {
    return absl::StrCat("K=", k, ", N=", nn, ": FP8 needs multiples of 16 (pad with --pad-multiple 16)");
  }
  return "";
}

}  // namespace

absl::StatusOr<bool> Fp8Pass::Run(Graph& g, const PassContext& ctx) {
  if (ctx.spec->precision().compute() != PrecisionSpec::FP8) return false;
  const Fp8Spec& f = ctx.spec->fp8();
  CompileInfo& info = *ctx.info;
  if (f.margin() < 0 || f.margin() > 64) return absl::InvalidArgumentError("spec field fp8.margin: must be in [0, 64]");
  if (f.amax_history_len() < 1) return absl::InvalidArgumentError("spec field fp8.amax_history_len: must be >= 1");
  if (!(f.amax_floor() >= 0) || !std::isfinite(f.amax_floor())) {
    return absl::InvalidArgumentError("spec field fp8.amax_floor: must be a finite number >= 0");
  }
  std::vector<std::regex> exclude;
  for (int i = 0; i < f.exclude_size(); ++i) {
    try {
      exclude.emplace_back(f.exclude(i));
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec field fp8.exclude[", i, "]: '", f.exclude(i), "' is not a valid regex: ", e.what()));
    }
  }
  for (const auto& n : g.nodes()) {
    if (n->attrs.Has("mpc_fp8")) return false;  // already converted
  }
  info.fp8_gemms.clear();
  info.fp8_skipped.clear();
  info.fp8_tensors.clear();
  info.fp8_fallback.clear();

  // The device: FP8 tensor cores, or kernels that emulate them (the CPU's).
  const Capabilities* caps = ctx.capabilities;
  const DType low = info.compute_dtype == DType::kF32 ? DType::kBF16 : info.compute_dtype;
  if (caps && !caps->fp8 && !caps->HasKernel("Fp8Quantize", low)) {
    const std::string why = absl::StrCat("device ", caps->device, " has no FP8 support (FP8 GEMMs need sm_89 or newer)");
    if (!f.fallback_to_bf16()) {
      return absl::FailedPreconditionError(
          absl::StrCat(why, "; use --precision bf16, or set fp8 { fallback_to_bf16: true } in the spec"));
    }
    info.fp8_fallback = absl::StrCat(why, "; GEMMs left in bf16 (fp8.fallback_to_bf16)");
    return false;
  }

  // Gradients: everything downstream of the loss seed (absent in evaluation programs).
  const bool training = info.loss_seed != nullptr;
  absl::flat_hash_set<const Value*> grad;
  if (training) {
    std::vector<const Value*> work{info.loss_seed};
    grad.insert(info.loss_seed);
    while (!work.empty()) {
      const Value* v = work.back();
      work.pop_back();
      for (const Node* c : v->consumers) {
        for (const Value* o : c->outputs) {
          if (grad.insert(o).second) work.push_back(o);
        }
      }
    }
  }
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::vector<Node*> forward, backward;
  for (Node* n : order) {
    if (!IsGemm(n)) continue;
    const bool g0 = grad.contains(n->inputs[0]), g1 = grad.contains(n->inputs[1]);
    if (!g0 && !g1) forward.push_back(n);
    if (g0 != g1) backward.push_back(n);
  }

  // Pair each backward GEMM with its forward GEMM: its non-gradient operand is one of the
  // forward operands (or their transpose, for MatMul), and its gradient operand has the
  // forward output's shape. Where a value feeds several forward GEMMs (shared inputs),
  // the one whose other backward GEMM takes the same dY wins.
  absl::flat_hash_map<const Value*, std::vector<std::pair<Node*, int>>> operand_of;
  for (Node* n : forward) {
    operand_of[n->inputs[0]].emplace_back(n, 0);
    if (n->inputs[1] != n->inputs[0]) operand_of[n->inputs[1]].emplace_back(n, 1);
  }
  auto resolve = [&](Value* v, Node** transpose) -> const std::vector<std::pair<Node*, int>>* {
    *transpose = nullptr;
    if (auto it = operand_of.find(v); it != operand_of.end()) return &it->second;
    Node* p = v->producer;
    if (p && p->op == "Transpose") {
      if (auto it = operand_of.find(p->inputs[0]); it != operand_of.end()) {
        *transpose = p;
        return &it->second;
      }
    }
    return nullptr;
  };
  absl::flat_hash_map<const Node*, std::vector<Backward>> backward_of;
  for (Node* bn : backward) {
    const int gi = grad.contains(bn->inputs[0]) ? 0 : 1, oi = 1 - gi;
    Node* transpose = nullptr;
    const auto* cands = resolve(bn->inputs[oi], &transpose);
    if (!cands) continue;
    const Value* dy = bn->inputs[gi];
    std::vector<std::pair<Node*, int>> fit;
    for (const auto& c : *cands) {
      if (c.first->outputs[0]->shape == dy->shape) fit.push_back(c);
    }
    if (fit.empty()) continue;
    std::pair<Node*, int> pick = fit[0];
    if (fit.size() > 1) {
      for (const auto& c : fit) {
        const Value* other = c.first->inputs[1 - c.second];
        bool shares = false;
        for (const Node* user : dy->consumers) {
          if (user == bn || !IsGemm(user)) continue;
          for (const Value* in : user->inputs) {
            shares = shares || in == other || (in && in->producer && in->producer->op == "Transpose" &&
                                               in->producer->inputs[0] == other);
          }
        }
        if (shares) {
          pick = c;
          break;
        }
      }
    }
    backward_of[pick.first].push_back({bn, gi, oi, pick.second, transpose});
  }

  // Decide, then convert.
  Converter conv(g, info, f, training);
  const float grad_max = f.format() == Fp8Spec::E4M3 ? kF8E4M3Max : kF8E5M2Max;
  for (size_t i = 0; i < forward.size(); ++i) {
    Node* n = forward[i];
    std::string reason = ShapeReason(n);
    for (int e = 0; reason.empty() && e < static_cast<int>(exclude.size()); ++e) {
      if (std::regex_match(n->name, exclude[e])) reason = absl::StrCat("excluded by fp8.exclude '", f.exclude(e), "'");
    }
    if (reason.empty() && !f.include_first_last()) {
      if (i == 0) reason = "first GEMM of the model (fp8.include_first_last is off)";
      else if (i + 1 == forward.size()) reason = "last GEMM of the model (fp8.include_first_last is off)";
    }
    if (!reason.empty()) {
      info.fp8_skipped.emplace_back(n->name, reason);
      continue;
    }
    const Meta* metas[2] = {conv.MakeMeta(n->name + "/input", kF8E4M3Max),
                            conv.MakeMeta(n->name + "/weight", kF8E4M3Max)};
    Value* q[2] = {conv.Quantize(n->inputs[0], *metas[0]), conv.Quantize(n->inputs[1], *metas[1])};
    MPC_RETURN_IF_ERROR(conv.builder().status());
    MPC_RETURN_IF_ERROR(conv.Convert(n, q[0], q[1], "e4m3", "e4m3", n->name));

    const Meta* grad_meta = nullptr;
    absl::flat_hash_map<const Value*, Value*> q_grad;  // dY -> its quantized value (shared by dX and dW)
    for (const Backward& bw : backward_of[n]) {
      Value* dy = bw.node->inputs[bw.grad_index];
      if (!grad_meta) grad_meta = conv.MakeMeta(n->name + "/grad_output", grad_max);
      Value*& qdy = q_grad[dy];
      if (!qdy) qdy = conv.Quantize(dy, *grad_meta);
      // The forward quantized operand, reused; a transpose of it is exact (one scale).
      Value* qx = q[bw.role];
      if (bw.transpose) qx = conv.builder().Op("Transpose", {qx}, bw.transpose->attrs);
      MPC_RETURN_IF_ERROR(conv.builder().status());
      Value* ops[2];
      ops[bw.grad_index] = qdy;
      ops[bw.other_index] = qx;
      const std::string fmt[2] = {bw.grad_index == 0 ? FormatName(grad_max) : "e4m3",
                                  bw.grad_index == 1 ? FormatName(grad_max) : "e4m3"};
      MPC_RETURN_IF_ERROR(conv.Convert(bw.node, ops[0], ops[1], fmt[0], fmt[1], n->name));
    }
  }
  MPC_RETURN_IF_ERROR(conv.AddUpdate());
  MPC_RETURN_IF_ERROR(conv.builder().status());
  if (!info.fp8_gemms.empty()) g.RemoveDeadValues();
  return !info.fp8_gemms.empty();
}

}  // namespace mpc
