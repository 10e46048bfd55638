// See onnx_expand_layers.h.
#include "graph/onnx_expand_layers.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace mpc {
namespace {

AttrMap ReduceOver(std::vector<int64_t> axes) {
  AttrMap attrs;
  attrs.Set("axes", std::move(axes));
  attrs.Set("keepdims", int64_t{1});
  return attrs;
}

// X in the dtype the statistics are computed in: f32 for 16-bit X when stash_type is 1
// (ONNX's default), else X's own.
Value* InStashType(GraphBuilder& b, Value* x, const AttrMap& attrs) {
  const bool narrow = x->dtype == DType::kBF16 || x->dtype == DType::kF16;
  return narrow && attrs.GetInt("stash_type", 1) == 1 ? b.Cast(x, DType::kF32) : x;
}

absl::Status NeedRank(const Value* x, int at_least, const std::string& what, const std::string& where) {
  if (static_cast<int>(x->shape.size()) >= at_least) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", what, " '", x->name, "' has shape ",
                                                 ShapeToString(x->shape), "; it needs rank ", at_least, " or more"));
}

}  // namespace

absl::StatusOr<Value*> ExpandRmsNormalization(GraphBuilder& b, const std::vector<Value*>& inputs,
                                              const AttrMap& attrs, const std::string& where) {
  if (inputs.size() < 2 || inputs[1] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": RMSNormalization needs X and scale"));
  }
  Value* x = inputs[0];
  const int rank = static_cast<int>(x->shape.size());
  int64_t axis = attrs.GetInt("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": axis ", attrs.GetInt("axis", -1),
                                                   " is out of range for X of rank ", rank));
  }
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < rank; ++a) axes.push_back(a);
  Value* xs = InStashType(b, x, attrs);
  Value* mean_square = b.Op("ReduceMean", {b.Mul(xs, xs)}, ReduceOver(axes));
  Value* eps = b.ScalarConstant(attrs.GetFloat("epsilon", 1e-5f), xs->dtype);
  Value* normalized = b.Mul(xs, b.Op("Reciprocal", {b.Op("Sqrt", {b.Add(mean_square, eps)})}));
  if (normalized && normalized->dtype != x->dtype) normalized = b.Cast(normalized, x->dtype);
  Value* scale = inputs[1]->dtype == x->dtype ? inputs[1] : b.Cast(inputs[1], x->dtype);
  return b.Mul(normalized, scale);
}

absl::StatusOr<Value*> ExpandGroupNormalization(GraphBuilder& b, const std::vector<Value*>& inputs,
                                                const AttrMap& attrs, bool instance, const std::string& where) {
  const char* op = instance ? "InstanceNormalization" : "GroupNormalization";
  if (inputs.size() < 3 || inputs[1] == nullptr || inputs[2] == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", op, " needs X, scale and bias"));
  }
  Value* x = inputs[0];
  MPC_RETURN_IF_ERROR(NeedRank(x, 3, "X", where));
  const Shape& shape = x->shape;
  const int64_t n = shape[0], c = shape[1];
  const int64_t groups = instance ? c : attrs.GetInt("num_groups", 0);
  if (groups < 1 || c % groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": num_groups ", groups, " does not divide the ", c,
                                                   " channels of X ", ShapeToString(shape)));
  }
  int64_t spatial = 1;
  for (size_t d = 2; d < shape.size(); ++d) spatial *= shape[d];
  // Opset 21 takes scale and bias per channel; opset 18 took them per group.
  const int64_t per = NumElements(inputs[1]->shape);
  if (per != c && per != groups) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": scale '", inputs[1]->name, "' has ", per,
                                                   " elements; it needs one per channel (", c, ") or per group (",
                                                   groups, ")"));
  }
  Value* xs = InStashType(b, x, attrs);
  Value* grouped = b.Reshape(xs, {n, groups, (c / groups) * spatial});
  Value* mean = b.Op("ReduceMean", {grouped}, ReduceOver({2}));
  Value* centred = b.Sub(grouped, mean);
  Value* variance = b.Op("ReduceMean", {b.Mul(centred, centred)}, ReduceOver({2}));
  Value* eps = b.ScalarConstant(attrs.GetFloat("epsilon", 1e-5f), xs->dtype);
  Value* normalized = b.Div(centred, b.Op("Sqrt", {b.Add(variance, eps)}));
  if (normalized && normalized->dtype != x->dtype) normalized = b.Cast(normalized, x->dtype);
  auto affine = [&](Value* v, Value* param, const Shape& to) {
    Value* p = param->dtype == x->dtype ? param : b.Cast(param, x->dtype);
    return b.Reshape(p, to);
  };
  if (per == c) {
    Shape channel(shape.size(), 1);
    channel[1] = c;
    Value* y = b.Reshape(normalized, shape);
    return b.Add(b.Mul(y, affine(y, inputs[1], channel)), affine(y, inputs[2], channel));
  }
  Value* y = b.Add(b.Mul(normalized, affine(normalized, inputs[1], {1, groups, 1})),
                   affine(normalized, inputs[2], {1, groups, 1}));
  return b.Reshape(y, shape);
}

absl::StatusOr<Value*> ExpandAttention(GraphBuilder& b, const std::vector<Value*>& inputs, const AttrMap& attrs,
                                       const std::string& where) {
  if (inputs.size() < 3 || !inputs[0] || !inputs[1] || !inputs[2]) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": Attention needs Q, K and V"));
  }
  for (size_t i = 4; i < inputs.size(); ++i) {
    if (inputs[i]) {
      return absl::UnimplementedError(absl::StrCat(where, ": input ", i, " '", inputs[i]->name,
                                                   "' (a KV cache) is not supported; mpc trains without one"));
    }
  }
  if (attrs.GetInt("qk_matmul_output_mode", 0) != 0 || attrs.GetFloat("softcap", 0.0f) != 0.0f) {
    return absl::UnimplementedError(
        absl::StrCat(where, ": qk_matmul_output_mode and softcap are not supported (leave them 0)"));
  }
  Value *q = inputs[0], *k = inputs[1], *v = inputs[2];
  // 16-bit operands are computed in f32 and the result rounded once (a model trained under
  // autocast gets its own casts from autocast either way).
  const DType io_dtype = q->dtype;
  if (io_dtype == DType::kBF16 || io_dtype == DType::kF16) {
    q = b.Cast(q, DType::kF32), k = b.Cast(k, DType::kF32), v = b.Cast(v, DType::kF32);
  }
  const bool three_d = q->shape.size() == 3;
  if (!three_d && q->shape.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": Q has shape ", ShapeToString(q->shape), "; Attention takes 3-D or 4-D operands"));
  }
  if (k->shape.size() != q->shape.size() || v->shape.size() != q->shape.size()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": Q, K and V must have the same rank"));
  }
  const int64_t batch = q->shape[0];
  // [B, heads, S, d] for every operand.
  auto heads_first = [&](Value* t, int64_t heads, const char* attr) -> absl::StatusOr<Value*> {
    if (!three_d) return t;
    if (heads < 1 || t->shape[2] % heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": 3-D operands need ", attr, " dividing their last axis (",
                                                     t->shape[2], "); it is ", heads));
    }
    return b.Transpose(b.Reshape(t, {batch, t->shape[1], heads, t->shape[2] / heads}), {0, 2, 1, 3});
  };
  MPC_ASSIGN_OR_RETURN(Value * q4, heads_first(q, attrs.GetInt("q_num_heads", 0), "q_num_heads"));
  MPC_ASSIGN_OR_RETURN(Value * k4, heads_first(k, attrs.GetInt("kv_num_heads", 0), "kv_num_heads"));
  MPC_ASSIGN_OR_RETURN(Value * v4, heads_first(v, attrs.GetInt("kv_num_heads", 0), "kv_num_heads"));
  MPC_RETURN_IF_ERROR(b.status());
  const int64_t q_heads = q4->shape[1], kv_heads = k4->shape[1];
  const int64_t q_len = q4->shape[2], kv_len = k4->shape[2], head_dim = q4->shape[3];
  if (kv_heads < 1 || q_heads % kv_heads != 0 || v4->shape[1] != kv_heads) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", q_heads, " query heads are not a multiple of the ",
                                                   kv_heads, " key/value heads"));
  }
  // Grouped-query attention: each key/value head serves q_heads / kv_heads query heads.
  auto repeat_heads = [&](Value* t) {
    if (q_heads == kv_heads) return t;
    const int64_t rep = q_heads / kv_heads;
    Value* five = b.Reshape(t, {batch, kv_heads, 1, t->shape[2], t->shape[3]});
    Value* wide = b.Op("Expand", {five, b.ShapeConstant({batch, kv_heads, rep, t->shape[2], t->shape[3]})});
    return b.Reshape(wide, {batch, q_heads, t->shape[2], t->shape[3]});
  };
  k4 = repeat_heads(k4);
  v4 = repeat_heads(v4);
  MPC_RETURN_IF_ERROR(b.status());
  const double scale = attrs.Has("scale") ? attrs.GetFloat("scale", 1.0f) : 1.0 / std::sqrt(double(head_dim));
  Value* scores = b.Mul(b.Op("MatMul", {q4, b.Transpose(k4, {0, 1, 3, 2})}), b.ScalarConstant(scale, q4->dtype));
  Value* mask = inputs.size() > 3 ? inputs[3] : nullptr;
  if (mask && mask->dtype != DType::kBool) {  // a float mask is added to the scaled scores
    scores = b.Add(scores, mask->dtype == scores->dtype ? mask : b.Cast(mask, scores->dtype));
  }
  Value* keep = mask && mask->dtype == DType::kBool ? mask : nullptr;
  if (attrs.GetInt("is_causal", 0) != 0) {  // upper-left aligned: query i sees keys j <= i
    Tensor causal(DType::kBool, {q_len, kv_len});
    for (int64_t i = 0; i < q_len; ++i) {
      for (int64_t j = 0; j < kv_len; ++j) causal.data<uint8_t>()[i * kv_len + j] = j <= i ? 1 : 0;
    }
    Value* c = b.graph()->AddConstant(b.graph()->UniqueName(where + "/causal"), std::move(causal));
    keep = keep ? b.Op("And", {keep, c}) : c;
  }
  if (keep) {
    Value* minus_inf = b.ScalarConstant(-std::numeric_limits<double>::infinity(), scores->dtype);
    scores = b.Op("Where", {keep, scores, minus_inf});
  }
  AttrMap last_axis;
  last_axis.Set("axis", int64_t{-1});
  Value* probs = b.Op("Softmax", {scores}, std::move(last_axis));
  if (mask && mask->dtype == DType::kBool) {
    // A query whose keys a bool mask hides completely attends to nothing: ONNX gives it 0,
    // not the softmax's NaN.
    probs = b.Op("Where", {b.Op("Equal", {probs, probs}), probs, b.ScalarConstant(0.0, probs->dtype)});
  }
  Value* y = b.Op("MatMul", {probs, v4});
  MPC_RETURN_IF_ERROR(b.status());
  if (three_d) y = b.Reshape(b.Transpose(y, {0, 2, 1, 3}), {batch, q_len, q_heads * y->shape[3]});
  return y->dtype == io_dtype ? y : b.Cast(y, io_dtype);
}

namespace {

// ONNX's coordinate transform: the input coordinate output index `o` samples.
absl::StatusOr<double> SourceCoordinate(const std::string& mode, int64_t o, int64_t in, int64_t out, double scale) {
  if (mode == "half_pixel") return (o + 0.5) / scale - 0.5;
  if (mode == "pytorch_half_pixel") return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
  // ONNX's reference divides by the unrounded resized length, in * scale (out itself when
  // sizes were given, where scale = out / in).
  if (mode == "align_corners") return out > 1 ? static_cast<double>(o) * (in - 1) / (in * scale - 1) : 0.0;
  if (mode == "asymmetric") return o / scale;
  return absl::UnimplementedError(absl::StrCat("coordinate_transformation_mode '", mode,
                                               "' is not supported (half_pixel, pytorch_half_pixel, align_corners, "
                                               "asymmetric are)"));
}

absl::StatusOr<int64_t> Nearest(const std::string& rounding, double x) {
  const double f = std::floor(x), frac = x - f;
  if (rounding == "floor") return static_cast<int64_t>(f);
  if (rounding == "ceil") return static_cast<int64_t>(std::ceil(x));
  if (rounding == "round_prefer_floor") return static_cast<int64_t>(frac <= 0.5 ? f : f + 1);
  if (rounding == "round_prefer_ceil") return static_cast<int64_t>(frac < 0.5 ? f : f + 1);
  return absl::UnimplementedError(absl::StrCat("nearest_mode '", rounding, "' is not one ONNX defines"));
}

// The [out, in] matrix whose rows hold each output position's interpolation weights.
absl::StatusOr<Tensor> InterpolationMatrix(const AttrMap& attrs, int64_t in, int64_t out, double scale) {
  const std::string mode = attrs.GetString("mode", "nearest");
  const std::string transform = attrs.GetString("coordinate_transformation_mode", "half_pixel");
  Tensor m(DType::kF32, {out, in});
  for (int64_t o = 0; o < out; ++o) {
    MPC_ASSIGN_OR_RETURN(double x, SourceCoordinate(transform, o, in, out, scale));
    float* row = m.data<float>() + o * in;
    if (mode == "nearest") {
      MPC_ASSIGN_OR_RETURN(int64_t i, Nearest(attrs.GetString("nearest_mode", "round_prefer_floor"), x));
      row[std::clamp<int64_t>(i, 0, in - 1)] = 1.0f;
    } else {
      x = std::clamp(x, 0.0, static_cast<double>(in - 1));
      const int64_t i0 = static_cast<int64_t>(std::floor(x)), i1 = std::min(i0 + 1, in - 1);
      const double w1 = x - i0;
      row[i0] += static_cast<float>(1 - w1);
      row[i1] += static_cast<float>(w1);
    }
  }
  return m;
}

}  // namespace

absl::StatusOr<Value*> ExpandRotaryEmbedding(GraphBuilder& b, const std::vector<Value*>& inputs, const AttrMap& attrs,
                                             const std::string& where) {
  if (inputs.size() < 3 || !inputs[0] || !inputs[1] || !inputs[2]) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": RotaryEmbedding needs X, cos_cache and sin_cache"));
  }
  Value* x = inputs[0];
  const Shape original = x->shape;
  if (original.size() != 3 && original.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": X has shape ", ShapeToString(original),
                                                   "; RotaryEmbedding takes 3-D or 4-D X"));
  }
  const int64_t batch = original[0];
  Value* xs = nullptr;  // [B, S, heads, D]
  if (original.size() == 4) {
    xs = b.Transpose(x, {0, 2, 1, 3});
  } else {
    const int64_t heads = attrs.GetInt("num_heads", 0);
    if (heads < 1 || original[2] % heads != 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": 3-D X needs num_heads dividing its last axis (",
                                                     original[2], "); it is ", heads));
    }
    xs = b.Reshape(x, {batch, original[1], heads, original[2] / heads});
  }
  MPC_RETURN_IF_ERROR(b.status());
  const int64_t seq = xs->shape[1], heads = xs->shape[2], head = xs->shape[3];
  int64_t rot = attrs.GetInt("rotary_embedding_dim", 0);
  if (rot == 0) rot = head;
  if (rot < 2 || rot > head || rot % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": rotary_embedding_dim ", rot, " for head size ", head));
  }
  auto slice_last = [&](Value* t, int64_t start, int64_t end, int64_t step) {
    return b.Op("Slice", {t, b.ShapeConstant({start}), b.ShapeConstant({end}), b.ShapeConstant({3}),
                          b.ShapeConstant({step})});
  };
  // The caches, gathered at the positions, as [B, S, 1, rot/2].
  Value* cos = inputs[1];
  Value* sin = inputs[2];
  if (inputs.size() > 3 && inputs[3]) {
    cos = b.Op("Gather", {cos, inputs[3]});
    sin = b.Op("Gather", {sin, inputs[3]});
  }
  MPC_RETURN_IF_ERROR(b.status());
  if (cos->shape.empty() || cos->shape.back() != rot / 2) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the caches' last axis is ",
                                                   cos->shape.empty() ? 0 : cos->shape.back(), "; it must be rot/2 = ",
                                                   rot / 2));
  }
  cos = b.Reshape(cos, {cos->shape.size() == 3 ? cos->shape[0] : 1, seq, 1, rot / 2});
  sin = b.Reshape(sin, {sin->shape.size() == 3 ? sin->shape[0] : 1, seq, 1, rot / 2});
  if (cos->dtype != xs->dtype) cos = b.Cast(cos, xs->dtype), sin = b.Cast(sin, xs->dtype);
  const bool interleaved = attrs.GetInt("interleaved", 0) != 0;
  Value* x1 = interleaved ? slice_last(xs, 0, rot, 2) : slice_last(xs, 0, rot / 2, 1);
  Value* x2 = interleaved ? slice_last(xs, 1, rot, 2) : slice_last(xs, rot / 2, rot, 1);
  Value* real = b.Sub(b.Mul(cos, x1), b.Mul(sin, x2));
  Value* imag = b.Add(b.Mul(sin, x1), b.Mul(cos, x2));
  MPC_RETURN_IF_ERROR(b.status());
  AttrMap last;
  last.Set("axis", int64_t{-1});
  Value* rotated = nullptr;
  if (interleaved) {
    const Shape pairs{batch, seq, heads, rot / 2, 1};
    rotated = b.Reshape(b.Op("Concat", {b.Reshape(real, pairs), b.Reshape(imag, pairs)}, last),
                        {batch, seq, heads, rot});
  } else {
    rotated = b.Op("Concat", {real, imag}, last);
  }
  Value* y = rot == head ? rotated : b.Op("Concat", {rotated, slice_last(xs, rot, head, 1)}, last);
  MPC_RETURN_IF_ERROR(b.status());
  return original.size() == 4 ? b.Transpose(y, {0, 2, 1, 3}) : b.Reshape(y, original);
}

absl::StatusOr<Value*> ExpandResize(GraphBuilder& b, const std::vector<Value*>& inputs, const AttrMap& attrs,
                                    const std::string& where) {
  Value* x = inputs[0];
  const std::string mode = attrs.GetString("mode", "nearest");
  if (mode != "nearest" && mode != "linear") {
    return absl::UnimplementedError(absl::StrCat(where, ": mode '", mode, "' is not supported (nearest, linear are)"));
  }
  if (attrs.GetInt("antialias", 0) != 0 || attrs.GetString("keep_aspect_ratio_policy", "stretch") != "stretch") {
    return absl::UnimplementedError(
        absl::StrCat(where, ": antialias and keep_aspect_ratio_policy other than 'stretch' are not supported"));
  }
  const int rank = static_cast<int>(x->shape.size());
  std::vector<int64_t> axes = attrs.GetInts("axes", {});
  if (axes.empty()) {
    for (int d = 0; d < rank; ++d) axes.push_back(d);
  }
  for (int64_t& a : axes) a = a < 0 ? a + rank : a;
  const Value* scales = inputs.size() > 2 ? inputs[2] : nullptr;
  const Value* sizes = inputs.size() > 3 ? inputs[3] : nullptr;
  if (scales && NumElements(scales->shape) == 0) scales = nullptr;
  const Value* given = sizes ? sizes : scales;
  if (!given || given->kind != ValueKind::kConstant || NumElements(given->shape) != static_cast<int64_t>(axes.size())) {
    return absl::UnimplementedError(absl::StrCat(where, ": Resize needs constant scales or sizes, one per axis"));
  }
  Shape out_shape = x->shape;
  std::vector<double> scale(rank, 1.0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k], in = x->shape[a];
    if (sizes) {
      out_shape[a] = static_cast<int64_t>(sizes->data.GetAsDouble(static_cast<int64_t>(k)));
      scale[a] = static_cast<double>(out_shape[a]) / in;
    } else {
      scale[a] = scales->data.GetAsDouble(static_cast<int64_t>(k));
      out_shape[a] = static_cast<int64_t>(std::floor(in * scale[a]));
    }
    if (out_shape[a] < 1) return absl::InvalidArgumentError(absl::StrCat(where, ": axis ", a, " resizes to nothing"));
    if (out_shape[a] != in && a < rank - 2) {
      return absl::UnimplementedError(
          absl::StrCat(where, ": only the last two axes may change size (axis ", a, " of ", rank, ")"));
    }
  }
  // Y = R_h X R_w^T: each resized axis is one MatMul with a constant interpolation matrix,
  // which autodiff differentiates as any MatMul.
  Value* y = x;
  Graph& g = *b.graph();
  if (rank >= 1 && out_shape[rank - 1] != x->shape[rank - 1]) {
    MPC_ASSIGN_OR_RETURN(Tensor r, InterpolationMatrix(attrs, x->shape[rank - 1], out_shape[rank - 1], scale[rank - 1]));
    Tensor rt(DType::kF32, {r.shape()[1], r.shape()[0]});
    for (int64_t i = 0; i < r.shape()[0]; ++i) {
      for (int64_t j = 0; j < r.shape()[1]; ++j) rt.data<float>()[j * r.shape()[0] + i] = r.data<float>()[i * r.shape()[1] + j];
    }
    Value* m = g.AddConstant(g.UniqueName(where + "/resize_w"), rt.CastTo(x->dtype));
    y = b.Op("MatMul", {y, m});
  }
  if (rank >= 2 && out_shape[rank - 2] != x->shape[rank - 2]) {
    MPC_ASSIGN_OR_RETURN(Tensor r, InterpolationMatrix(attrs, x->shape[rank - 2], out_shape[rank - 2], scale[rank - 2]));
    Value* m = g.AddConstant(g.UniqueName(where + "/resize_h"), r.CastTo(x->dtype));
    y = b.Op("MatMul", {m, y});
  }
  MPC_RETURN_IF_ERROR(b.status());
  return y == x ? b.Op("Identity", {x}) : y;
}

}  // namespace mpc
