// The fp8-lower pass (see fp8_lower.h).
#include "passes/fp8_lower.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/float8_groups.h"

namespace mpc {
namespace {

bool IsF32Bf16F16(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// A 2-D Transpose that swaps the two axes (perm [1,0], or the default reversal).
bool IsMatrixTranspose(const Node* n) {
  if (!n || n->op != "Transpose" || n->inputs[0]->shape.size() != 2) return false;
  const std::vector<int64_t> perm = n->attrs.GetInts("perm", {1, 0});
  return perm == std::vector<int64_t>{1, 0};
}

bool IsQuantization(const Node* n) { return n && (n->op == "Fp8Quantize" || n->op == "Fp8QuantizeDynamic"); }
bool IsJustInTime(const Node* quantize) { return quantize->op == "Fp8QuantizeDynamic"; }

// Where a GEMM operand comes from: the quantization (delayed Fp8Quantize, or a just-in-time
// Fp8QuantizeDynamic) of tensor S, used as S or as S^T.
struct Source {
  Node* quantize = nullptr;
  bool transposed = false;
};

std::optional<Source> ResolveOperand(const Value* v) {
  Node* p = v->producer;
  if (IsQuantization(p)) return Source{p, false};
  if (IsMatrixTranspose(p)) {
    Node* q = p->inputs[0]->producer;
    if (IsQuantization(q)) return Source{q, true};
  }
  return std::nullopt;
}

// How a just-in-time quantization groups its scales (tensor for the delayed recipe).
Fp8Granularity GranularityOf(const Node* quantize) {
  if (!IsJustInTime(quantize)) return Fp8Granularity::kTensor;
  return ParseFp8Granularity(quantize->attrs.GetString("granularity", "tensor")).value_or(Fp8Granularity::kTensor);
}

bool IsBlockScaled(Fp8Granularity g) { return g == Fp8Granularity::kTiles || g == Fp8Granularity::kBlocks; }

// Why the scale groups of a GEMM's operands cannot go to cuBLASLt's scale modes ("" when
// they can): both per tensor, both per row (OUTER_VEC_32F), or 1x128 tiles (VEC128_32F)
// with tiles or 128x128 blocks (BLK128x128_32F) — never two block operands, and groups
// that run along the GEMM's K.
std::string ScaleModeProblem(const Source src[2], const bool cast_transposed[2]) {
  const Fp8Granularity g[2] = {GranularityOf(src[0].quantize), GranularityOf(src[1].quantize)};
  if (IsJustInTime(src[0].quantize) != IsJustInTime(src[1].quantize)) {
    return "one operand has delayed scaling and the other just-in-time scaling (no FP8 GEMM mixes them)";
  }
  const bool pair_ok = (g[0] == g[1] && g[0] != Fp8Granularity::kBlocks) || (IsBlockScaled(g[0]) && IsBlockScaled(g[1]) && g[0] != g[1]);
  if (!pair_ok) {
    return absl::StrCat("operand scales ", Fp8GranularityName(g[0]), " x ", Fp8GranularityName(g[1]),
                        ": cuBLASLt's FP8 scale modes pair tensor x tensor, rows x rows, and 1x128 tiles with tiles "
                        "or 128x128 blocks (never blocks x blocks)");
  }
  for (int i = 0; i < 2; ++i) {
    const Node* q = src[i].quantize;
    if (IsBlockScaled(g[i]) && q->attrs.GetInt("tile", 128) != kFp8Tile) {
      return absl::StrCat("operand ", i, " has tiles of ", q->attrs.GetInt("tile", 128), ": cuBLASLt's block scaling is ",
                          kFp8Tile, " wide");
    }
    if (g[i] != Fp8Granularity::kRows && g[i] != Fp8Granularity::kTiles) continue;
    int64_t axis = q->attrs.GetInt("axis", -1);
    if (axis < 0) axis += static_cast<int64_t>(q->inputs[0]->shape.size());
    // The codes are x (K = x's axis 1) or x^T (K = x's axis 0).
    if (axis != (cast_transposed[i] ? 0 : 1)) {
      return absl::StrCat("operand ", i, "'s ", Fp8GranularityName(g[i]), " run along axis ", axis,
                          " of its tensor, not along the GEMM's contraction");
    }
  }
  return "";
}

DType FormatDType(const Node* quantize) {
  return quantize->attrs.GetString("format", "e4m3") == "e4m3" ? DType::kF8E4M3 : DType::kF8E5M2;
}

// Everything needed to rewrite one GEMM.
struct Plan {
  Node* gemm = nullptr;
  Source src[2];
  bool cast_transposed[2] = {false, false};  // Fp8Cast transpose attribute per operand
  Value* bias = nullptr;                     // what Fp8Gemm adds (nullptr: none)
  Node* bias_cast = nullptr;                 // the Cast(bias -> f32) bypassed, if any
  Node* out_cast = nullptr;                  // the Cast of the product folded in, if any
  Value* result = nullptr;                   // the value the Fp8Gemm's output replaces
  bool fast_accumulation = false;            // Fp8Gemm fast_accum = 1
};

// Why `n` cannot be lowered ("" when it can); fills `plan` as far as it gets.
std::string Analyze(const Graph& g, Node* n, const Capabilities* caps, Plan* plan) {
  plan->gemm = n;
  for (int i = 0; i < 2; ++i) {
    auto src = ResolveOperand(n->inputs[i]);
    if (!src) {
      return absl::StrCat("operand ", i, " '", n->inputs[i]->name,
                          "' does not come from an Fp8Quantize or Fp8QuantizeDynamic (or a 2-D Transpose of one)");
    }
    if (n->inputs[i]->shape.size() != 2) {
      return absl::StrCat("operand ", i, " is ", ShapeToString(n->inputs[i]->shape),
                          ": only 2-D operands (no batched MatMul) lower to Fp8Gemm");
    }
    plan->src[i] = *src;
  }
  bool ta = false, tb = false;
  if (n->op == "Gemm") {
    ta = n->attrs.GetInt("transA", 0) != 0;
    tb = n->attrs.GetInt("transB", 0) != 0;
    if (n->attrs.GetFloat("alpha", 1.0f) != 1.0f) return "alpha != 1";
    if (n->attrs.Has("mpc_output_dtype") || n->attrs.Has("mpc_activation")) {
      return "the Gemm carries mpc_output_dtype or mpc_activation";
    }
  }
  const Value* a = n->inputs[0];
  const int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
  const int64_t nn = n->outputs[0]->shape[1];
  // TN layout: A stored [M,K] = op(V_a), B stored [N,K] = op(V_b)^T, where V = S or S^T.
  plan->cast_transposed[0] = plan->src[0].transposed != ta;
  plan->cast_transposed[1] = plan->src[1].transposed == tb;
  if (m % 16 != 0 || nn % 16 != 0 || k % 16 != 0) {
    return absl::StrCat("M=", m, " N=", nn, " K=", k,
                        ": FP8 tensor-core GEMMs need multiples of 16 (pad-dims pads the model's dims; the batch "
                        "size, M or K of every GEMM, must be a multiple of 16 itself)");
  }
  const DType fa = FormatDType(plan->src[0].quantize), fb = FormatDType(plan->src[1].quantize);
  if (fa == DType::kF8E5M2 && fb == DType::kF8E5M2) return "both operands are E5M2 (no FP8 kernel multiplies those)";
  if (std::string why = ScaleModeProblem(plan->src, plan->cast_transposed); !why.empty()) return why;

  if (n->inputs.size() > 2 && n->inputs[2]) {
    Value* c = n->inputs[2];
    if (n->attrs.GetFloat("beta", 1.0f) != 1.0f) return "beta != 1";
    if (c->shape != Shape{nn} && c->shape != Shape{1, nn}) {
      return absl::StrCat("C ", ShapeToString(c->shape), " is not a bias row [", nn, "]");
    }
    plan->bias = c;
    // The fp8 pass widened the bias to f32 for the f32 GEMM; Fp8Gemm takes it as it was
    // (exact: the GEMM adds the same f32 values), the form cuBLASLt's FP8 kernels want.
    Node* widen = c->producer;
    if (widen && widen->op == "Cast" && c->dtype == DType::kF32 && IsF32Bf16F16(widen->inputs[0]->dtype)) {
      plan->bias = widen->inputs[0];
      plan->bias_cast = widen;
    }
  }

  Value* out = n->outputs[0];
  plan->result = out;
  if (out->consumers.size() == 1 && out->consumers[0]->op == "Cast" && !g.IsOutput(out) &&
      IsF32Bf16F16(out->consumers[0]->outputs[0]->dtype)) {
    plan->out_cast = out->consumers[0];
    plan->result = plan->out_cast->outputs[0];
  }
  if (!IsF32Bf16F16(plan->result->dtype)) {
    return absl::StrCat("the product is ", DTypeName(plan->result->dtype), "; Fp8Gemm writes f32, bf16 or f16");
  }

  if (caps) {
    if (GranularityOf(plan->src[0].quantize) != Fp8Granularity::kTensor && !caps->fp8_group_scales) {
      return absl::StrCat("device ", caps->device, " has no FP8 GEMMs with group scales (per row, 1x128, 128x128: "
                          "cuBLASLt's scale modes need sm_90 and cuBLAS 12.9)");
    }
    for (int i = 0; i < 2; ++i) {
      const DType x = plan->src[i].quantize->inputs[0]->dtype;
      const char* cast = IsJustInTime(plan->src[i].quantize) ? "Fp8CastDynamic" : "Fp8Cast";
      if (!caps->HasKernel(cast, x)) {
        return absl::StrCat("device ", caps->device, " has no ", cast, " kernel for ", DTypeName(x));
      }
    }
    if (!caps->HasKernel("Fp8Gemm", fa)) {
      return absl::StrCat("device ", caps->device, " has no Fp8Gemm kernel for ", DTypeName(fa), " operands");
    }
  }
  return "";
}

// Whether the GEMM's result (through the Cast the fp8 pass added) is unused; fills
// plan->gemm, out_cast and bias_cast for the removal.
bool IsDead(const Graph& g, Node* n, Plan* plan) {
  plan->gemm = n;
  const Value* out = n->outputs[0];
  if (g.IsOutput(out)) return false;
  if (!out->consumers.empty()) {
    Node* cast = out->consumers[0];
    if (out->consumers.size() != 1 || cast->op != "Cast" || !cast->outputs[0]->consumers.empty() ||
        g.IsOutput(cast->outputs[0])) {
      return false;
    }
    plan->out_cast = cast;
  }
  if (n->inputs.size() > 2 && n->inputs[2] && n->inputs[2]->producer && n->inputs[2]->producer->op == "Cast") {
    plan->bias_cast = n->inputs[2]->producer;
  }
  return true;
}

// "<gemm>/input" from the scale state "<gemm>/input.fp8_scale" (the fp8 pass's naming).
std::string TensorName(const Node* quantize) {
  std::string s = quantize->inputs[1]->name;
  const std::string suffix = ".fp8_scale";
  if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
    s.resize(s.size() - suffix.size());
  }
  return s;
}

// The lowering itself, once the device has FP8 tensor cores.
// Whether a lowered GEMM accumulates fast, and why (Fp8LowerPass's header): by the fp8
// pass's record of it (a forward GEMM is its own forward node).
std::pair<bool, std::string> Accumulation(const std::string& gemm, bool fast_forward, const Fp8Result* fp8,
                                          bool block_scaled) {
  bool forward = false;  // a GEMM the fp8 pass did not record promotes
  if (fp8) {
    for (const Fp8Result::Gemm& r : fp8->gemms) {
      if (r.node == gemm) forward = r.forward_node.empty() || r.forward_node == r.node;
    }
  }
  if (!forward) return {false, "promoted: a backward GEMM (its gradient sums keep the f32 accumulator) or one the fp8 "
                               "pass did not record"};
  if (!fast_forward) return {false, "promoted: fp8.fast_accumulation_forward is false"};
  if (block_scaled) {
    return {false, "promoted: cuBLASLt's block-scaled FP8 GEMMs (1x128 tiles, 128x128 blocks) have no fast "
                   "accumulation; the recipe promotes to f32 every 128 products"};
  }
  return {true, "fast: a forward GEMM (no periodic f32 promotion)"};
}

absl::StatusOr<bool> LowerFp8Gemms(Graph& g, const Capabilities& caps, bool fast_forward, const Fp8Result* fp8,
                                   Fp8LowerResult& result) {
  std::vector<Fp8LowerDecision>* decisions = &result.decisions;
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::vector<Plan> plans, dead;
  absl::flat_hash_set<const Node*> lowered;  // plans and dead GEMMs: the uses that go away
  for (Node* n : order) {
    if ((n->op != "Gemm" && n->op != "MatMul") || n->attrs.GetInt("mpc_fp8", 0) != 1) continue;
    Plan plan;
    if (IsDead(g, n, &plan)) {
      // Autodiff's dX of a layer whose input needs no gradient: removed with the
      // emulation rather than lowered into an Fp8Gemm whose operand casts (side effects)
      // nothing would remove.
      decisions->push_back({n->name, false, "its result is unused (dead code, removed)"});
      dead.push_back(plan);
      lowered.insert(n);
      continue;
    }
    const std::string reason = Analyze(g, n, &caps, &plan);
    decisions->push_back({n->name, reason.empty(), reason});
    if (!reason.empty()) {
      result.emulated.emplace_back(n->name, reason);
      continue;
    }
    const bool block_scaled = IsBlockScaled(GranularityOf(plan.src[0].quantize));
    std::tie(plan.fast_accumulation, decisions->back().accumulation) =
        Accumulation(n->name, fast_forward, fp8, block_scaled);
    decisions->back().fast_accumulation = plan.fast_accumulation;
    result.lowered.push_back(n->name);
    plans.push_back(plan);
    lowered.insert(n);
  }
  if (plans.empty()) return false;

  // A quantization can go when every use of it is lowered: directly, or through 2-D
  // Transposes that feed only lowered GEMMs.
  auto only_lowered = [&](const Value* v) {
    return std::all_of(v->consumers.begin(), v->consumers.end(), [&](const Node* c) { return lowered.contains(c); });
  };
  absl::flat_hash_map<const Node*, bool> removable;
  std::vector<Node*> quantizers;  // in first-use order
  for (const Plan& p : plans) {
    for (const Source& s : p.src) {
      if (removable.contains(s.quantize)) continue;
      bool all = true;
      for (const Node* c : s.quantize->outputs[0]->consumers) {
        all = all && (lowered.contains(c) || (IsMatrixTranspose(c) && only_lowered(c->outputs[0])));
      }
      removable[s.quantize] = all;
      quantizers.push_back(s.quantize);
    }
  }

  // One Fp8Cast per (quantization, layout); the first one of a removable quantization
  // records its amax. A just-in-time quantization becomes an Fp8CastDynamic, whose
  // scale_inv (in the GEMM's layout) is its second output.
  struct Cast {
    Value* codes = nullptr;
    Value* scale_inv = nullptr;
  };
  std::map<std::pair<int, bool>, Cast> casts;  // (quantize node id, transposed) -> codes
  absl::flat_hash_set<const Node*> recorded;
  auto cast_of = [&](Node* q, bool transposed) -> absl::StatusOr<Cast> {
    Cast& made = casts[{q->id, transposed}];
    if (made.codes) return made;
    if (IsJustInTime(q)) {
      AttrMap attrs = q->attrs;
      if (transposed) attrs.Set("transpose", int64_t{1});
      const std::string base = q->outputs[0]->name;
      const std::string suffix = transposed ? "_t" : "";
      MPC_ASSIGN_OR_RETURN(
          Node * cast, g.AddNode("Fp8CastDynamic", {q->inputs[0]}, std::move(attrs),
                                 absl::StrCat("fp8_lower/", base, transposed ? "/cast_t" : "/cast"),
                                 {base + ".fp8_codes" + suffix, base + ".fp8_scale_inv" + suffix}));
      made = Cast{cast->outputs[0], cast->outputs[1]};
      return made;
    }
    std::vector<Value*> inputs{q->inputs[0], q->inputs[1]};
    const bool has_history = q->inputs.size() > 3 && q->inputs[3];
    if (has_history && removable[q] && recorded.insert(q).second) inputs.push_back(q->inputs[3]);
    AttrMap attrs;
    attrs.Set("format", q->attrs.GetString("format", "e4m3"));
    if (transposed) attrs.Set("transpose", int64_t{1});
    const std::string tensor = TensorName(q);
    const std::string suffix = transposed ? ".fp8_codes_t" : ".fp8_codes";
    MPC_ASSIGN_OR_RETURN(Node * cast, g.AddNode("Fp8Cast", std::move(inputs), std::move(attrs),
                                                absl::StrCat("fp8_lower/", tensor, transposed ? "/cast_t" : "/cast"),
                                                {tensor + suffix}));
    made = Cast{cast->outputs[0], q->inputs[2]};
    return made;
  };

  absl::flat_hash_set<Node*> maybe_dead;  // bypassed pure nodes: bias casts
  for (Plan& p : plans) {
    Node* n = p.gemm;
    Cast cast[2];
    for (int i = 0; i < 2; ++i) {
      MPC_ASSIGN_OR_RETURN(cast[i], cast_of(p.src[i].quantize, p.cast_transposed[i]));
    }
    AttrMap attrs;
    attrs.Set("transA", int64_t{0});
    attrs.Set("transB", int64_t{1});
    attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(p.result->dtype)));
    if (p.fast_accumulation) attrs.Set("fast_accum", int64_t{1});
    for (int i = 0; i < 2; ++i) {
      const Fp8Granularity granularity = GranularityOf(p.src[i].quantize);
      if (granularity == Fp8Granularity::kTensor) continue;
      attrs.Set(i == 0 ? "a_scaling" : "b_scaling", std::string(Fp8GranularityName(granularity)));
      attrs.Set("tile", p.src[i].quantize->attrs.GetInt("tile", kFp8Tile));
    }
    std::vector<Value*> inputs{cast[0].codes, cast[1].codes, cast[0].scale_inv, cast[1].scale_inv};
    if (p.bias) inputs.push_back(p.bias);
    const std::string gemm_name = n->name;
    const std::string result_name = p.result->name;
    MPC_ASSIGN_OR_RETURN(
        Node * fp8, g.AddNode("Fp8Gemm", std::move(inputs), std::move(attrs), gemm_name, {result_name + "/fp8_gemm"}));
    Value* y = fp8->outputs[0];
    if (y->dtype != p.result->dtype || y->shape != p.result->shape) {
      return absl::InternalError(absl::StrCat("fp8-lower: Fp8Gemm for '", gemm_name, "' infers ", DTypeName(y->dtype),
                                              ShapeToString(y->shape), " but replaces ", DTypeName(p.result->dtype),
                                              ShapeToString(p.result->shape)));
    }
    // The product's Value (its uses, name and every reference to it) moves behind the
    // Fp8Gemm; the Fp8Gemm's fresh value goes with the emulation, which is removed.
    g.TradeProducers(p.result, y);
    if (p.out_cast) MPC_RETURN_IF_ERROR(g.RemoveNode(p.out_cast));
    MPC_RETURN_IF_ERROR(g.RemoveNode(n));
    if (p.bias_cast) maybe_dead.insert(p.bias_cast);
  }

  for (const Plan& p : dead) {
    if (p.out_cast) MPC_RETURN_IF_ERROR(g.RemoveNode(p.out_cast));
    MPC_RETURN_IF_ERROR(g.RemoveNode(p.gemm));
    if (p.bias_cast) maybe_dead.insert(p.bias_cast);
  }
  // The emulation that is no longer used: quantizations (they have side effects, so
  // nothing else would remove them) with their transposes, and bypassed bias casts. A
  // quantization whose amax no Fp8Cast took over (only dead GEMMs used it) stays: the
  // emulated program records that amax too.
  for (Node* q : quantizers) {
    const bool has_history = q->inputs.size() > 3 && q->inputs[3];
    if (!removable[q] || (has_history && !recorded.contains(q))) continue;
    std::vector<Node*> transposes;
    for (Node* c : q->outputs[0]->consumers) {
      if (std::find(transposes.begin(), transposes.end(), c) == transposes.end()) transposes.push_back(c);
    }
    for (Node* t : transposes) MPC_RETURN_IF_ERROR(g.RemoveNode(t));
    MPC_RETURN_IF_ERROR(g.RemoveNode(q));
  }
  for (Node* c : maybe_dead) {
    if (c->outputs[0]->consumers.empty() && !g.IsOutput(c->outputs[0])) MPC_RETURN_IF_ERROR(g.RemoveNode(c));
  }
  // Just-in-time quantizations (pure) that only removed dead GEMMs read, with the
  // transposes between: nothing reads them now.
  for (bool removed = true; removed;) {
    removed = false;
    std::vector<Node*> unused;
    for (const auto& node : g.nodes()) {
      Node* n = node.get();
      const bool jit = n->op == "Fp8QuantizeDynamic";
      const bool transpose_of_jit = IsMatrixTranspose(n) && n->inputs[0]->producer &&
                                    n->inputs[0]->producer->op == "Fp8QuantizeDynamic";
      if ((jit || transpose_of_jit) && n->outputs[0]->consumers.empty() && !g.IsOutput(n->outputs[0])) {
        unused.push_back(n);
      }
    }
    for (Node* n : unused) MPC_RETURN_IF_ERROR(g.RemoveNode(n));
    removed = !unused.empty();
  }
  g.RemoveDeadValues();

  // The end-of-step scale update rewrites scale, scale_inv and the history in place:
  // every reader of them (now including the Fp8Casts and Fp8Gemms) runs first.
  for (const auto& node : g.nodes()) {
    Node* update = node.get();
    if (update->op != "Fp8UpdateScales") continue;
    std::set<int> have;
    for (const Node* d : update->control_deps) have.insert(d->id);
    for (Value* state : update->inputs) {
      for (Node* reader : state->consumers) {
        if (reader != update && have.insert(reader->id).second) update->control_deps.push_back(reader);
      }
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<bool> Fp8LowerPass::Run(Graph& g) {
  *result_ = Fp8LowerResult{};
  if (!enabled_) return false;
  // Without FP8 tensor cores the emulation is what runs (the CPU's exact reference).
  if (!caps_.fp8) return false;
  return LowerFp8Gemms(g, caps_, fast_accumulation_forward_, fp8_, *result_);
}

}  // namespace mpc
