// The pad-dims pass (see pad_dims.h).
#include "passes/pad_dims.h"

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"

namespace mpc {
namespace {

int64_t RoundUp(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// How an activation is padded: along `axis`, whose model extent is `logical`.
struct Padding {
  int axis = 0;
  int64_t logical = 0;
};

// A parameter reached directly or through the single Cast autocast put in front of it.
struct ParamRef {
  Value* param = nullptr;
  Node* cast = nullptr;  // the Cast between parameter and use, if any
};

ParamRef AsPaddableParam(Value* v, const Node* user) {
  ParamRef ref;
  if (v->kind == ValueKind::kParameter) {
    if (v->consumers.size() == 1) ref.param = v;
    return ref;
  }
  Node* p = v->producer;
  if (p && p->op == "Cast" && v->consumers.size() == 1 && p->inputs[0]->kind == ValueKind::kParameter &&
      p->inputs[0]->consumers.size() == 1) {
    ref.param = p->inputs[0];
    ref.cast = p;
  }
  (void)user;
  return ref;
}

class Padder {
 public:
  Padder(Graph& g, PadDimsResult& result) : g_(g), result_(result), b_(&g, "pad/") {}

  // Pads `axis` of a parameter (and its Cast output) to `to` with zeros.
  absl::Status PadParam(const ParamRef& ref, int axis, int64_t to) {
    Value* p = ref.param;
    if (p->shape[axis] == to) return absl::OkStatus();
    if (p->logical_shape.empty()) p->logical_shape = p->shape;
    Shape padded = p->shape;
    padded[axis] = to;
    result_.padding.push_back({p->name, axis, p->shape[axis], to});
    extra_param_bytes_ += (NumElements(padded) - NumElements(p->shape)) * static_cast<int64_t>(DTypeSize(p->dtype));
    p->data = p->data.PaddedTo(padded);
    p->shape = padded;
    if (ref.cast) MPC_RETURN_IF_ERROR(Reinfer(ref.cast));
    return absl::OkStatus();
  }

  absl::Status Reinfer(Node* n) {
    MPC_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().FindOrError(n->op, n->name));
    auto types = def->infer(*n);
    if (!types.ok()) {
      return absl::Status(types.status().code(),
                          absl::StrCat("node '", n->name, "' after padding: ", types.status().message()));
    }
    for (size_t i = 0; i < n->outputs.size(); ++i) n->outputs[i]->shape = (*types)[i].shape;
    return absl::OkStatus();
  }

  // The model-shaped view of a padded value (one SliceTo per value, shared).
  Value* Unpadded(Value* v) {
    auto it = sliced_.find(v);
    if (it != sliced_.end()) return it->second;
    Shape shape = v->shape;
    const Padding& p = padded_.at(v);
    shape[p.axis] = p.logical;
    AttrMap attrs;
    attrs.Set("shape", shape);
    Value* s = b_.Op("SliceTo", {v}, std::move(attrs));
    sliced_[v] = s;
    return s;
  }

  absl::StatusOr<bool> Run(const std::vector<Node*>& order, const std::function<int64_t(DType)>& multiple_for) {
    for (Node* n : order) {
      const OpDef* def = OpRegistry::Global().Find(n->op);
      bool handled = false;
      switch (def->padding) {
        case PaddingRule::kContraction: {
          MPC_ASSIGN_OR_RETURN(handled, PadGemm(n, multiple_for(n->inputs[0]->dtype)));
          break;
        }
        case PaddingRule::kChannelContraction: {
          MPC_ASSIGN_OR_RETURN(handled, PadConv(n, multiple_for(n->inputs[0]->dtype)));
          break;
        }
        case PaddingRule::kZeroPreservingUnary:
          handled = PassThroughUnary(n);
          break;
        case PaddingRule::kZeroPreservingBinary: {
          MPC_ASSIGN_OR_RETURN(handled, PassThroughBinary(n));
          break;
        }
        case PaddingRule::kChannelwise: {
          MPC_ASSIGN_OR_RETURN(handled, PassThroughChannelwise(n));
          break;
        }
        case PaddingRule::kFlatten:
          handled = PassThroughFlatten(n);
          break;
        case PaddingRule::kOpaque:
          break;
      }
      if (!handled) MPC_RETURN_IF_ERROR(SliceInputs(n));
      MPC_RETURN_IF_ERROR(b_.status());
    }
    // Graph outputs keep the model's shape and name.
    std::vector<Value*> outputs = g_.outputs();
    for (Value*& out : outputs) {
      if (!padded_.contains(out)) continue;
      const std::string name = out->name;
      MPC_RETURN_IF_ERROR(g_.RenameValue(out, g_.UniqueName(name + "/padded")));
      Value* s = Unpadded(out);
      MPC_RETURN_IF_ERROR(b_.status());
      MPC_RETURN_IF_ERROR(g_.RenameValue(s, name));
      out = s;
    }
    g_.SetOutputs(outputs);
    return !result_.padding.empty();
  }

  int64_t extra_param_bytes() const { return extra_param_bytes_; }
  double base_flops = 0, padded_flops = 0;

 private:
  absl::Status SliceInputs(Node* n) {
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* in = n->inputs[i];
      if (in && padded_.contains(in)) {
        Value* s = Unpadded(in);
        MPC_RETURN_IF_ERROR(b_.status());
        g_.SetNodeInput(n, static_cast<int>(i), s);
      }
    }
    return absl::OkStatus();
  }

  bool PassThroughUnary(Node* n) {
    Value* in = n->inputs.empty() ? nullptr : n->inputs[0];
    if (!in || !padded_.contains(in)) return false;
    if (!Reinfer(n).ok()) return false;
    const Padding pad = padded_[in];  // a copy: inserting below may rehash the map
    for (Value* out : n->outputs) padded_[out] = pad;
    return true;
  }

  absl::StatusOr<bool> PassThroughBinary(Node* n) {
    Value* a = n->inputs[0];
    Value* b = n->inputs[1];
    if (!padded_.contains(a) && !padded_.contains(b)) return false;
    Value* padded_side = padded_.contains(a) ? a : b;
    Value* other = padded_side == a ? b : a;
    const Padding pad = padded_[padded_side];
    const int rank = static_cast<int>(padded_side->shape.size());
    const int64_t width = padded_side->shape[pad.axis];
    // The axis of `other` that broadcasting lines up with the padded one (shapes align at
    // the end); negative when `other` has no such axis.
    const int other_axis = pad.axis - (rank - static_cast<int>(other->shape.size()));
    if (padded_.contains(other)) {
      const Padding op = padded_[other];
      if (op.axis != other_axis || op.logical != pad.logical || other->shape[op.axis] != width) return false;
    } else if (other_axis >= 0 && other->shape[other_axis] == pad.logical && pad.logical != 1) {
      // An unpadded operand along the padded axis: only a parameter can be padded (with zeros).
      ParamRef ref = AsPaddableParam(other, n);
      if (!ref.param || ref.param->shape.empty()) return false;
      MPC_RETURN_IF_ERROR(PadParam(ref, other_axis, width));
    } else if (other_axis >= 0 && other->shape[other_axis] != 1) {
      return false;
    } else if (n->op != "Mul") {
      // Adding/subtracting a value broadcast along the padded axis would make the padding non-zero.
      return false;
    }
    MPC_RETURN_IF_ERROR(Reinfer(n));
    Value* out = n->outputs[0];
    padded_[out] = {pad.axis + static_cast<int>(out->shape.size()) - rank, pad.logical};
    return true;
  }

  // Per-channel ops on a channel-padded NCHW input: every per-channel operand ([C]: scale,
  // bias, running statistics) is padded with zeros too, so the extra channels stay zero
  // (BatchNormalization normalises an all-zero channel to 0 and scales it by 0; pools of
  // zeros are zeros). Nothing is changed unless every such operand can be padded.
  absl::StatusOr<bool> PassThroughChannelwise(Node* n) {
    Value* x = n->inputs[0];
    if (!padded_.contains(x) || padded_[x].axis != 1 || x->shape.size() < 3) return false;
    const Padding pad = padded_[x];
    std::vector<ParamRef> per_channel;
    for (size_t i = 1; i < n->inputs.size(); ++i) {
      Value* in = n->inputs[i];
      if (!in) continue;
      if (in->shape != Shape{pad.logical}) return false;
      ParamRef ref = AsPaddableParam(in, n);
      // Running statistics are state that BatchNormStatsUpdate also reads: pad them in place.
      if (!ref.param && in->kind == ValueKind::kState) ref.param = in;
      if (!ref.param) return false;
      per_channel.push_back(ref);
    }
    for (const ParamRef& ref : per_channel) MPC_RETURN_IF_ERROR(PadParam(ref, 0, x->shape[1]));
    MPC_RETURN_IF_ERROR(Reinfer(n));
    padded_[n->outputs[0]] = pad;
    return true;
  }

  // Flatten keeps a padded axis when flattening starts at it and every later axis is 1.
  bool PassThroughFlatten(Node* n) {
    Value* x = n->inputs[0];
    if (!padded_.contains(x)) return false;
    const Padding pad = padded_[x];
    const int rank = static_cast<int>(x->shape.size());
    int64_t axis = n->attrs.GetInt("axis", 1);
    if (axis < 0) axis += rank;
    if (axis != pad.axis) return false;
    for (int d = pad.axis + 1; d < rank; ++d) {
      if (x->shape[d] != 1) return false;
    }
    if (!Reinfer(n).ok()) return false;
    padded_[n->outputs[0]] = {1, pad.logical};
    return true;
  }

  // Gemm(A[M, K], W, C) and MatMul(A[..., K], W[K, N]) with a 2-D weight (how transformer
  // linear layers export): the rows of A, whatever its rank, are the GEMM's M.
  absl::StatusOr<bool> PadGemm(Node* n, int64_t m) {
    Value* a = n->inputs[0];
    Value* w = n->inputs[1];
    Value* c = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    const bool matmul = n->op == "MatMul";
    const bool ta = n->attrs.GetInt("transA", 0) != 0, tb = n->attrs.GetInt("transB", 0) != 0;
    if (ta || n->attrs.Has("mpc_output_dtype") || n->attrs.Has("mpc_fp8")) return false;
    if (matmul ? (a->shape.size() < 2 || w->shape.size() != 2) : a->shape.size() != 2) return false;
    if (padded_.contains(a) && padded_[a].axis != static_cast<int>(a->shape.size()) - 1) {
      // Padded along another axis (a Conv's channels): the GEMM sees the model's shape.
      Value* s = Unpadded(a);
      MPC_RETURN_IF_ERROR(b_.status());
      g_.SetNodeInput(n, 0, s);
      a = s;
    }
    ParamRef wref = AsPaddableParam(w, n);
    const int k_axis = tb ? 1 : 0, n_axis = tb ? 0 : 1;
    const int64_t m_rows = NumElements(a->shape) / a->shape.back();
    const int64_t k_logical = padded_.contains(a) ? padded_[a].logical : a->shape.back();
    const int64_t n_logical = w->shape[n_axis];
    base_flops += 2.0 * m_rows * k_logical * n_logical;
    // Contraction: follow a padded input (its extra columns are zeros).
    if (padded_.contains(a)) {
      if (!wref.param) {
        padded_flops += 2.0 * m_rows * k_logical * n_logical;
        return false;  // cannot widen a non-parameter weight: slice the input instead
      }
      MPC_RETURN_IF_ERROR(PadParam(wref, k_axis, a->shape.back()));
    }
    // Output features: pad the weight's N (and a row bias) to the multiple.
    const int64_t n_to = RoundUp(n_logical, m);
    bool pad_n = m > 1 && n_to != n_logical && wref.param;
    ParamRef cref;
    if (pad_n && c) {
      cref = AsPaddableParam(c, n);
      const bool row_bias = c->shape == Shape{n_logical} || c->shape == Shape{1, n_logical};
      if (!cref.param || !row_bias) pad_n = false;
    }
    if (pad_n) {
      MPC_RETURN_IF_ERROR(PadParam(wref, n_axis, n_to));
      if (c) MPC_RETURN_IF_ERROR(PadParam(cref, static_cast<int>(cref.param->shape.size()) - 1, n_to));
    }
    MPC_RETURN_IF_ERROR(Reinfer(n));
    const Shape& out = n->outputs[0]->shape;
    padded_flops += 2.0 * m_rows * a->shape.back() * out.back();
    if (pad_n) {
      padded_[n->outputs[0]] = {static_cast<int>(out.size()) - 1, n_logical};
      result_.padding.push_back({n->outputs[0]->name, static_cast<int>(out.size()) - 1, n_logical, n_to});
    }
    return true;
  }

  // Conv(X[N, C, ...], W[M, C, k...], B[M]) with group 1: the output channels M are padded
  // to the multiple (W's axis 0 and the bias, with zeros), and W's input channels follow a
  // channel-padded X. cuDNN's tensor-core convolutions want both channel counts aligned.
  absl::StatusOr<bool> PadConv(Node* n, int64_t m) {
    Value* x = n->inputs[0];
    Value* w = n->inputs[1];
    Value* c = n->inputs.size() > 2 ? n->inputs[2] : nullptr;
    if (n->attrs.GetInt("group", 1) != 1 || x->shape.size() < 3 || w->shape.size() != x->shape.size()) return false;
    if (n->attrs.Has("mpc_output_dtype") || n->attrs.Has("mpc_fp8")) return false;
    if (padded_.contains(x) && padded_[x].axis != 1) return false;  // sliced by the caller
    ParamRef wref = AsPaddableParam(w, n);
    const int64_t c_logical = padded_.contains(x) ? padded_[x].logical : x->shape[1];
    const int64_t m_logical = w->shape[0];
    const Value* y = n->outputs[0];
    const int64_t kernel = NumElements(w->shape) / (w->shape[0] * w->shape[1]);
    const double positions = static_cast<double>(NumElements(y->shape)) / y->shape[1];  // N * output spatial
    base_flops += 2.0 * positions * m_logical * c_logical * kernel;
    if (padded_.contains(x)) {
      if (!wref.param) {
        padded_flops += 2.0 * positions * m_logical * c_logical * kernel;
        return false;  // a weight that is not a parameter: slice the input instead
      }
      MPC_RETURN_IF_ERROR(PadParam(wref, 1, x->shape[1]));
    }
    const int64_t m_to = RoundUp(m_logical, m);
    bool pad_m = m > 1 && m_to != m_logical && wref.param;
    ParamRef cref;
    if (pad_m && c) {
      cref = AsPaddableParam(c, n);
      if (!cref.param || c->shape != Shape{m_logical}) pad_m = false;
    }
    if (pad_m) {
      MPC_RETURN_IF_ERROR(PadParam(wref, 0, m_to));
      if (c) MPC_RETURN_IF_ERROR(PadParam(cref, 0, m_to));
    }
    MPC_RETURN_IF_ERROR(Reinfer(n));
    padded_flops += 2.0 * positions * y->shape[1] * x->shape[1] * kernel;
    if (pad_m) {
      padded_[n->outputs[0]] = {1, m_logical};
      result_.padding.push_back({n->outputs[0]->name, 1, m_logical, m_to});
    }
    return true;
  }

  Graph& g_;
  PadDimsResult& result_;
  GraphBuilder b_;
  absl::flat_hash_map<const Value*, Padding> padded_;  // padded activations
  absl::flat_hash_map<const Value*, Value*> sliced_;
  int64_t extra_param_bytes_ = 0;
};

}  // namespace

absl::StatusOr<bool> PadDimsPass::Run(Graph& g) {
  const int forced = options_.multiple;
  if (forced < 0) return absl::InvalidArgumentError("spec field padding.multiple: must be >= 0");
  auto multiple_for = [&](DType d) -> int64_t { return forced > 0 ? forced : caps_.PadMultiple(d); };
  // Already padded (the pass ran before): padding is idempotent.
  for (const auto& v : g.values()) {
    if (!v->logical_shape.empty()) return false;
  }
  *result_ = PadDimsResult{};
  MPC_ASSIGN_OR_RETURN(std::vector<Node*> order, g.TopologicalOrder());
  Padder padder(g, *result_);
  MPC_ASSIGN_OR_RETURN(bool changed, padder.Run(order, multiple_for));
  int64_t param_bytes = 0;
  for (const Value* p : g.ValuesOfKind(ValueKind::kParameter)) {
    param_bytes += NumElements(p->logical_shape.empty() ? p->shape : p->logical_shape) * DTypeSize(p->dtype);
  }
  result_->extra_flops_pct =
      padder.base_flops > 0 ? 100.0 * (padder.padded_flops - padder.base_flops) / padder.base_flops : 0;
  result_->extra_bytes_pct = param_bytes ? 100.0 * padder.extra_param_bytes() / param_bytes : 0;
  return changed;
}

}  // namespace mpc
