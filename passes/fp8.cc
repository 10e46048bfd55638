// The fp8 pass (see fp8.h).
#include "passes/fp8.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/float8.h"
#include "graph/float8_groups.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "passes/fp8_batch_rows.h"

namespace mpc {

const char* Fp8RecipeName(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kDelayed:
      return "delayed";
    case Fp8Recipe::kCurrent:
      return "current";
    case Fp8Recipe::kRowwise:
      return "rowwise";
    case Fp8Recipe::kBlock:
      return "block";
  }
  return "?";
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

using Backward = Fp8BackwardGemm;

const char* FormatName(float fp8_max) { return fp8_max == kF8E4M3Max ? "e4m3" : "e5m2"; }

class Converter {
 public:
  Converter(Graph& g, Fp8Result& result, const Fp8Options& options, bool training)
      : g_(g), result_(result), options_(options), training_(training), b_(&g, "fp8/") {}

  Meta* MakeMeta(const std::string& name, float fp8_max) {
    auto meta = std::make_unique<Meta>();
    meta->name = name;
    meta->fp8_max = fp8_max;
    meta->scale = g_.AddState(name + ".fp8_scale", Tensor::Scalar(1.0f));
    meta->scale_inv = g_.AddState(name + ".fp8_scale_inv", Tensor::Scalar(1.0f));
    if (training_) {
      meta->history = g_.AddState(name + ".fp8_amax_history", Tensor(DType::kF32, {options_.amax_history_len}));
      meta->last_amax = g_.AddState(name + ".fp8_last_amax", Tensor::Scalar(0.0f));
    }
    result_.tensors.push_back(name);
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

  // Just-in-time quantization of `x` for one GEMM operand: its scale groups along `axis`
  // (the operand's contraction axis). One node per (value, format, groups), shared.
  Value* QuantizeDynamic(Value* x, float fp8_max, Fp8Granularity granularity, int64_t axis) {
    const int64_t rank = static_cast<int64_t>(x->shape.size());
    if (axis < 0) axis += rank;
    // Per tensor and per 128x128 block the groups do not depend on the axis: one key.
    if (granularity == Fp8Granularity::kTensor || granularity == Fp8Granularity::kBlocks) axis = rank - 1;
    const auto key = std::make_tuple(x, fp8_max, static_cast<int>(granularity), axis);
    if (auto it = dynamic_.find(key); it != dynamic_.end()) return it->second;
    AttrMap attrs;
    attrs.Set("format", std::string(FormatName(fp8_max)));
    attrs.Set("granularity", std::string(Fp8GranularityName(granularity)));
    attrs.Set("axis", axis);
    attrs.Set("tile", kFp8Tile);
    attrs.Set("margin", static_cast<int64_t>(options_.margin));
    attrs.Set("amax_floor", options_.amax_floor);
    attrs.Set("power_of_two", static_cast<int64_t>(options_.power_of_two_scales ? 1 : 0));
    Value* q = b_.Op("Fp8QuantizeDynamic", {x}, std::move(attrs));
    dynamic_[key] = q;
    return q;
  }

  // Points the GEMM at f32 quantized operands; its product is cast back to the dtype the
  // rest of the graph expects. The product's Value (its uses, its name, and whatever
  // refers to it, a parameter gradient for one) moves behind that cast.
  absl::Status Convert(Node* n, Value* qa, Value* qb, const std::string& fa, const std::string& fb,
                       const std::string& forward, const std::string& scaling_a, const std::string& scaling_b) {
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
    result_.gemms.push_back({n->name, fa, fb, forward, scaling_a, scaling_b});
    const DType product_dtype = (*types)[0].dtype;
    if (product_dtype == out_dtype) return absl::OkStatus();

    // Cast(out) -> cast, then trade producers: `out` becomes the cast's output and the
    // cast's fresh value the GEMM's f32 product, which the cast reads.
    out->dtype = product_dtype;
    Value* product = b_.Cast(out, out_dtype);
    MPC_RETURN_IF_ERROR(b_.status());
    Node* cast = product->producer;
    g_.TradeProducers(out, product);
    g_.SetNodeInput(cast, 0, product);
    std::swap(out->dtype, product->dtype);
    return g_.RenameValue(product, g_.UniqueName(out->name + "/fp8_f32"));
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
    attrs.Set("margin", static_cast<int64_t>(options_.margin));
    attrs.Set("algo", std::string(options_.most_recent ? "most_recent" : "max"));
    attrs.Set("amax_floor", options_.amax_floor);
    MPC_ASSIGN_OR_RETURN(Node * update, g_.AddNode("Fp8UpdateScales", std::move(inputs), std::move(attrs),
                                                   g_.UniqueName("fp8/update_scales")));
    update->control_deps = quantizers_;
    return absl::OkStatus();
  }

  GraphBuilder& builder() { return b_; }

 private:
  Graph& g_;
  Fp8Result& result_;
  const Fp8Options& options_;
  bool training_;
  GraphBuilder b_;
  std::vector<std::unique_ptr<Meta>> metas_;
  std::vector<Node*> quantizers_;
  std::map<std::tuple<const Value*, float, int, int64_t>, Value*> dynamic_;
};

// Whether `v` is a weight: a parameter (or frozen initializer), possibly cast, transposed
// or reshaped on the way (autocast's Cast, an export's Transpose of an nn.Linear weight,
// [1, K, N] or [E, K, N] expert weights).
bool IsWeight(const Value* v) {
  while (v->producer) {
    const std::string& op = v->producer->op;
    if (op != "Cast" && op != "Transpose" && op != "Reshape" && op != "Squeeze" && op != "Unsqueeze" &&
        op != "Identity") {
      return false;
    }
    v = v->producer->inputs[0];
  }
  return v->kind == ValueKind::kParameter || v->kind == ValueKind::kConstant;
}

// Why a forward GEMM cannot run in FP8 by its shapes and dtypes ("" when it can).
std::string ShapeReason(const Node* n) {
  const Value* a = n->inputs[0];
  const Value* b = n->inputs[1];
  if (a->dtype == DType::kF64) return "f64 operands";
  if (a->shape.size() < 2 || b->shape.size() < 2) return "operands are not matrices";
  if (b->shape.size() > 2 && !IsWeight(a) && !IsWeight(b)) {
    return "a batched product of two activations (attention's Q.K^T and P.V): FP8 takes the GEMMs with a weight "
           "(Linear layers), as Transformer Engine and torchao do";
  }
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

// The recipe's range checks, and its exclude patterns compiled.
absl::StatusOr<std::vector<std::regex>> CheckRecipe(const Fp8Options& f) {
  if (f.margin < 0 || f.margin > 64) return absl::InvalidArgumentError("spec field fp8.margin: must be in [0, 64]");
  if (f.amax_history_len < 1) return absl::InvalidArgumentError("spec field fp8.amax_history_len: must be >= 1");
  if (!(f.amax_floor >= 0) || !std::isfinite(f.amax_floor)) {
    return absl::InvalidArgumentError("spec field fp8.amax_floor: must be a finite number >= 0");
  }
  std::vector<std::regex> exclude;
  for (int i = 0; i < static_cast<int>(f.exclude.size()); ++i) {
    try {
      exclude.emplace_back(f.exclude[i]);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("spec field fp8.exclude[", i, "]: '", f.exclude[i], "' is not a valid regex: ", e.what()));
    }
  }
  return exclude;
}

// Every value downstream of the loss seed: the gradients (none without a seed).
absl::flat_hash_set<const Value*> GradientValues(const Value* seed) {
  absl::flat_hash_set<const Value*> grad;
  if (!seed) return grad;
  std::vector<const Value*> work{seed};
  grad.insert(seed);
  while (!work.empty()) {
    const Value* v = work.back();
    work.pop_back();
    for (const Node* c : v->consumers) {
      for (const Value* o : c->outputs) {
        if (grad.insert(o).second) work.push_back(o);
      }
    }
  }
  return grad;
}

// Pairs each backward GEMM (one gradient operand, one not) with its forward GEMM: its
// non-gradient operand is one of the forward operands (or their transpose, for MatMul),
// and its gradient operand has the forward output's shape. Where a value feeds several
// forward GEMMs (shared inputs), the one whose other backward GEMM takes the same dY wins.
absl::flat_hash_map<const Node*, std::vector<Backward>> PairBackwardGemms(
    const std::vector<Node*>& forward, const std::vector<Node*>& backward,
    const absl::flat_hash_set<const Value*>& grad) {
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
            shares = shares || in == other ||
                     (in && in->producer && in->producer->op == "Transpose" && in->producer->inputs[0] == other);
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
  return backward_of;
}

// Why forward GEMM number `i` of `count` stays out of FP8 ("" when it goes in).
std::string SkipReason(const Node* n, size_t i, size_t count, const Fp8Options& f,
                       const std::vector<std::regex>& exclude) {
  std::string reason = ShapeReason(n);
  for (int e = 0; reason.empty() && e < static_cast<int>(exclude.size()); ++e) {
    if (std::regex_match(n->name, exclude[e])) reason = absl::StrCat("excluded by fp8.exclude '", f.exclude[e], "'");
  }
  if (reason.empty() && !f.include_first_last) {
    if (i == 0)
      reason = "first GEMM of the model (fp8.include_first_last is off)";
    else if (i + 1 == count)
      reason = "last GEMM of the model (fp8.include_first_last is off)";
  }
  return reason;
}

// Converts one forward GEMM and the backward GEMMs paired with it: E4M3 input and
// weight (reused, transposed where needed, by the backward GEMMs), one quantization of
// each incoming gradient dY shared by dX and dW.
absl::Status ConvertGemmFamily(Converter& conv, Node* n, const std::vector<Backward>& backward, float grad_max) {
  const Meta* metas[2] = {conv.MakeMeta(n->name + "/input", kF8E4M3Max),
                          conv.MakeMeta(n->name + "/weight", kF8E4M3Max)};
  Value* q[2] = {conv.Quantize(n->inputs[0], *metas[0]), conv.Quantize(n->inputs[1], *metas[1])};
  MPC_RETURN_IF_ERROR(conv.builder().status());
  MPC_RETURN_IF_ERROR(conv.Convert(n, q[0], q[1], "e4m3", "e4m3", n->name, "delayed", "delayed"));

  const Meta* grad_meta = nullptr;
  absl::flat_hash_map<const Value*, Value*> q_grad;  // dY -> its quantized value (shared by dX and dW)
  for (const Backward& bw : backward) {
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
    MPC_RETURN_IF_ERROR(conv.Convert(bw.node, ops[0], ops[1], fmt[0], fmt[1], n->name, "delayed", "delayed"));
  }
  return absl::OkStatus();
}

// The contraction axis of operand `i` of a GEMM, in that operand's own shape (negative:
// from the end).
int64_t ContractionAxis(const Node* n, int i) {
  if (n->op == "Gemm") {
    if (i == 0) return n->attrs.GetInt("transA", 0) != 0 ? 0 : 1;
    return n->attrs.GetInt("transB", 0) != 0 ? 1 : 0;
  }
  return i == 0 ? -1 : -2;
}

// How a just-in-time recipe groups one operand's scales. `weight`: the forward GEMM's
// second operand (or its use in a backward GEMM).
Fp8Granularity GranularityOf(Fp8Recipe recipe, const Value* operand, bool weight) {
  switch (recipe) {
    case Fp8Recipe::kRowwise:
      return Fp8Granularity::kRows;
    case Fp8Recipe::kBlock:
      return weight && operand->shape.size() == 2 ? Fp8Granularity::kBlocks : Fp8Granularity::kTiles;
    default:
      return Fp8Granularity::kTensor;
  }
}

// What the report says of an operand's scaling.
std::string ScalingName(Fp8Granularity g) {
  switch (g) {
    case Fp8Granularity::kTensor:
      return "tensor";
    case Fp8Granularity::kRows:
      return "rows";
    case Fp8Granularity::kTiles:
      return absl::StrCat("1x", kFp8Tile, " tiles");
    case Fp8Granularity::kBlocks:
      return absl::StrCat(kFp8Tile, "x", kFp8Tile, " blocks");
  }
  return "?";
}

// The just-in-time recipes (current, rowwise, block) for one forward GEMM and its backward
// GEMMs: every GEMM quantizes its operands along its own contraction axis. Where the groups
// do not depend on the axis (a whole tensor; 128x128 blocks of a matrix) a backward GEMM
// reuses the forward quantization (transposed where it reads a transpose), as the delayed
// recipe does; otherwise it quantizes the high-precision operand it reads.
absl::Status ConvertGemmFamilyJustInTime(Converter& conv, Fp8Recipe recipe, Node* n,
                                         const std::vector<Backward>& backward, float grad_max) {
  Value* forward_operand[2] = {n->inputs[0], n->inputs[1]};
  Fp8Granularity gran[2];
  Value* q[2];
  for (int i = 0; i < 2; ++i) {
    gran[i] = GranularityOf(recipe, forward_operand[i], i == 1);
    q[i] = conv.QuantizeDynamic(forward_operand[i], kF8E4M3Max, gran[i], ContractionAxis(n, i));
  }
  MPC_RETURN_IF_ERROR(conv.builder().status());
  MPC_RETURN_IF_ERROR(
      conv.Convert(n, q[0], q[1], "e4m3", "e4m3", n->name, ScalingName(gran[0]), ScalingName(gran[1])));

  for (const Backward& bw : backward) {
    Value* ops[2];
    std::string scaling[2], fmt[2];
    Value* dy = bw.node->inputs[bw.grad_index];
    const Fp8Granularity grad_gran = GranularityOf(recipe, dy, false);
    ops[bw.grad_index] = conv.QuantizeDynamic(dy, grad_max, grad_gran, ContractionAxis(bw.node, bw.grad_index));
    scaling[bw.grad_index] = ScalingName(grad_gran);
    fmt[bw.grad_index] = FormatName(grad_max);

    const Fp8Granularity other_gran = GranularityOf(recipe, forward_operand[bw.role], bw.role == 1);
    const bool transpose_invariant = other_gran == Fp8Granularity::kTensor || other_gran == Fp8Granularity::kBlocks;
    Value* other;
    if (transpose_invariant) {
      other = q[bw.role];
      if (bw.transpose) other = conv.builder().Op("Transpose", {other}, bw.transpose->attrs);
    } else {
      Value* x = bw.node->inputs[bw.other_index];
      other = conv.QuantizeDynamic(x, kF8E4M3Max, GranularityOf(recipe, x, bw.role == 1),
                                   ContractionAxis(bw.node, bw.other_index));
    }
    MPC_RETURN_IF_ERROR(conv.builder().status());
    ops[bw.other_index] = other;
    scaling[bw.other_index] = ScalingName(other_gran);
    fmt[bw.other_index] = "e4m3";
    MPC_RETURN_IF_ERROR(conv.Convert(bw.node, ops[0], ops[1], fmt[0], fmt[1], n->name, scaling[0], scaling[1]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<bool> Fp8Pass::Run(Graph& g) {
  const Fp8Options& f = options_;
  if (!f.enabled) return false;
  MPC_ASSIGN_OR_RETURN(std::vector<std::regex> exclude, CheckRecipe(f));
  for (const auto& n : g.nodes()) {
    if (n->attrs.Has("mpc_fp8")) return false;  // already converted
  }
  Fp8Result& result = *result_;
  result = Fp8Result{};

  // The device: FP8 tensor cores, or kernels that emulate them (the CPU's).
  const DType low = autocast_->compute_dtype == DType::kF32 ? DType::kBF16 : autocast_->compute_dtype;
  const bool delayed = f.recipe == Fp8Recipe::kDelayed;
  result.recipe = Fp8RecipeName(f.recipe);
  // The just-in-time recipes are emulated first everywhere (fp8-lower then turns their
  // quantizations into Fp8CastDynamic where the device has FP8 tensor cores), so they need
  // the Fp8QuantizeDynamic kernel.
  const bool supported = delayed ? caps_.fp8 || caps_.HasKernel("Fp8Quantize", low)
                                 : caps_.HasKernel("Fp8QuantizeDynamic", low);
  if (!supported) {
    const std::string why =
        delayed ? absl::StrCat("device ", caps_.device, " has no FP8 support (FP8 GEMMs need sm_89 or newer)")
                : absl::StrCat("device ", caps_.device, " has no kernel for the FP8 recipe '", result.recipe,
                               "' (Fp8QuantizeDynamic; the CPU and CUDA backends have it)");
    if (!f.fallback_to_bf16) {
      return absl::FailedPreconditionError(
          absl::StrCat(why, "; use --precision bf16, or set fp8 { fallback_to_bf16: true } in the spec"));
    }
    result.fallback = absl::StrCat(why, "; GEMMs left in bf16 (fp8.fallback_to_bf16)");
    return false;
  }

  // Forward GEMMs read no gradient; backward GEMMs read one gradient and one forward value.
  const bool training = autodiff_ != nullptr && autodiff_->loss_seed != nullptr;
  const absl::flat_hash_set<const Value*> grad = GradientValues(training ? autodiff_->loss_seed : nullptr);
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  std::vector<Node*> forward, backward;
  for (Node* n : order) {
    if (!IsGemm(n)) continue;
    const bool g0 = grad.contains(n->inputs[0]), g1 = grad.contains(n->inputs[1]);
    if (!g0 && !g1) forward.push_back(n);
    if (g0 != g1) backward.push_back(n);
  }
  absl::flat_hash_map<const Node*, std::vector<Backward>> backward_of = PairBackwardGemms(forward, backward, grad);

  Converter conv(g, result, f, training);
  RowViews rows;
  const float grad_max = f.e4m3_gradients ? kF8E4M3Max : kF8E5M2Max;
  for (size_t i = 0; i < forward.size(); ++i) {
    Node* n = forward[i];
    const std::string reason = SkipReason(n, i, forward.size(), f, exclude);
    if (!reason.empty()) {
      result.skipped.emplace_back(n->name, reason);
      continue;
    }
    std::vector<Backward> family = backward_of[n];
    MPC_ASSIGN_OR_RETURN(n, FoldBatchIntoRows(g, n, family, rows));
    if (delayed) {
      MPC_RETURN_IF_ERROR(ConvertGemmFamily(conv, n, family, grad_max));
    } else {
      MPC_RETURN_IF_ERROR(ConvertGemmFamilyJustInTime(conv, f.recipe, n, family, grad_max));
    }
  }
  MPC_RETURN_IF_ERROR(conv.AddUpdate());
  MPC_RETURN_IF_ERROR(conv.builder().status());
  if (!result.gemms.empty()) g.RemoveDeadValues();
  return !result.gemms.empty();
}

}  // namespace mpc
