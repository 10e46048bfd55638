// The op-numerics cases of the normalisation, elementwise-math and reduction ops
// (graph/ops_norm.cc): Erf, Sqrt, Exp, Log, Reciprocal, Pow, Gelu (+ GeluGrad),
// ReduceSum, ReduceMean, LayerNormalization (+ LayerNormGrad), RmsNorm (+ RmsNormGrad,
// graph/ops_rms_norm.cc) and BatchNormalization (+ BatchNormGrad), with float64
// references written as plain loops.
#include <map>
#include <tuple>

#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

// Fixed float data fed as a graph input (cast to the run's dtype), never differentiated.
In FedFloats(const std::string& name, const std::vector<double>& v) {
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.shape = {static_cast<int64_t>(v.size())};
  in.value = Tensor::FromVector<double>(in.shape, v);
  return in;
}

In ConstI64(const std::string& name, const Shape& shape, const std::vector<int64_t>& v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.dtype = DType::kI64;
  in.shape = shape;
  in.value = Tensor::FromVector<int64_t>(shape, v);
  return in;
}

double F(double v) { return static_cast<float>(v); }  // an f32 attribute as the kernel sees it

// ---------------------------------------------------------------------------------
// Elementwise math

double GeluRef(double x, bool tanh_approx) {
  if (tanh_approx) {
    const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
    return 0.5 * x * (1 + std::tanh(u));
  }
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}

double GeluDerivRef(double x, bool tanh_approx) {
  if (tanh_approx) {
    const double k = std::sqrt(2.0 / M_PI);
    const double u = k * (x + 0.044715 * x * x * x);
    const double t = std::tanh(u);
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
  }
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

std::vector<OpCase> MathCases() {
  std::vector<OpCase> cases;
  struct U {
    const char* op;
    std::function<double(double)> f;
    double lo, hi, min_abs;
  };
  const std::vector<U> ops = {
      {"Erf", [](double x) { return std::erf(x); }, -2, 2, 0},
      {"Sqrt", [](double x) { return std::sqrt(x); }, 0.1, 2, 0},
      {"Exp", [](double x) { return std::exp(x); }, -2, 2, 0},
      {"Log", [](double x) { return std::log(x); }, 0.1, 3, 0},
      {"Reciprocal", [](double x) { return 1.0 / x; }, -1, 1, 0.5},
  };
  for (const U& u : ops) {
    for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
      OpCase c;
      c.name = absl::StrCat(u.op, "_Rank", shape.size());
      c.op = u.op;
      c.inputs = {X("x", shape, u.lo, u.hi, u.min_abs)};
      c.ref = [f = u.f](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefUnary(in[0], f)}; };
      cases.push_back(std::move(c));
    }
  }
  {
    OpCase c;
    c.name = "SqrtGrad_Rank2";
    c.op = "SqrtGrad";
    c.inputs = {X("dy", {3, 5}), X("y", {3, 5}, 0.1, 2)};
    c.gradient = false;
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefBinary(in[0], in[1], [](double dy, double y) { return 0.5 * dy / y; })};
    };
    cases.push_back(std::move(c));
  }
  // Pow: positive bases (the exponent's gradient takes ln x), broadcasting either side.
  const std::vector<std::tuple<const char*, Shape, Shape>> pows = {
      {"Same", {3, 4}, {3, 4}},       {"ScalarExponent", {3, 4}, {}},
      {"RowExponent", {3, 4}, {4}},   {"ColumnExponent", {2, 3, 4}, {3, 1}},
      {"BroadcastBase", {4}, {3, 4}},
  };
  for (const auto& [name, xs, es] : pows) {
    OpCase c;
    c.name = absl::StrCat("Pow_", name);
    c.op = "Pow";
    c.inputs = {X("x", xs, 0.5, 2), X("e", es, -2, 2)};
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefBinary(in[0], in[1], [](double x, double e) { return std::pow(x, e); })};
    };
    cases.push_back(std::move(c));
  }
  {
    // An integer exponent (x^3 with x of either sign): differentiable in x only.
    OpCase c;
    c.name = "Pow_ConstInt64Exponent";
    c.op = "Pow";
    c.inputs = {X("x", {3, 4}, -1.5, 1.5), ConstI64("e", {}, {3})};
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefUnary(in[0], [](double x) { return x * x * x; })};
    };
    cases.push_back(std::move(c));
  }
  {
    OpCase c;  // x^0.5 with a float constant exponent in the run's dtype
    c.name = "Pow_ConstFloatExponent";
    c.op = "Pow";
    c.inputs = {X("x", {3, 4}, 0.2, 2), ConstFloat("e", 0.5)};
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefUnary(in[0], [](double x) { return std::sqrt(x); })};
    };
    cases.push_back(std::move(c));
  }
  for (const char* mode : {"default", "none", "tanh"}) {
    const bool approx = std::string(mode) == "tanh";
    for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
      OpCase c;
      c.name = absl::StrCat("Gelu_", mode, "_Rank", shape.size());
      c.op = "Gelu";
      if (std::string(mode) != "default") c.attrs.Set("approximate", std::string(mode));
      c.inputs = {X("x", shape, -3, 3)};
      c.ref = [approx](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefUnary(in[0], [approx](double x) { return GeluRef(x, approx); })};
      };
      cases.push_back(std::move(c));
    }
    if (std::string(mode) == "default") continue;
    // [3, 5], and [37, 1031]: above the kernels' 32768-element threading threshold, with
    // a length no vector width divides (every thread's range and the loops' tails).
    for (const Shape& shape : {Shape{3, 5}, Shape{37, 1031}}) {
      OpCase g;
      g.name = absl::StrCat("GeluGrad_", mode, shape[0] == 3 ? "" : "_Threaded");
      g.op = "GeluGrad";
      g.attrs.Set("approximate", std::string(mode));
      g.inputs = {X("dy", shape), X("x", shape, -6, 6)};
      g.gradient = false;
      g.ref = [approx](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{
            RefBinary(in[0], in[1], [approx](double dy, double x) { return dy * GeluDerivRef(x, approx); })};
      };
      cases.push_back(std::move(g));
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------
// Reductions

Tensor RefReduce(const Tensor& x, std::vector<int64_t> axes, bool keep, bool mean, bool noop_empty) {
  const Shape& s = x.shape();
  const int rank = static_cast<int>(s.size());
  if (axes.empty()) {
    if (noop_empty) return x;
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::vector<bool> reduced(rank, false);
  for (int64_t a : axes) reduced[a < 0 ? a + rank : a] = true;
  Shape kept;
  Shape out;
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    kept.push_back(reduced[i] ? 1 : s[i]);
    if (!reduced[i])
      out.push_back(s[i]);
    else {
      count *= s[i];
      if (keep) out.push_back(1);
    }
  }
  Tensor y = F64(out);
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    auto idx = Unravel(i, s);
    for (int d = 0; d < rank; ++d) {
      if (reduced[d]) idx[d] = 0;
    }
    P(y)[Ravel(idx, kept)] += P(x)[i];
  }
  if (mean) {
    for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] /= static_cast<double>(count);
  }
  return y;
}

std::vector<OpCase> ReduceCases() {
  std::vector<OpCase> cases;
  struct R {
    const char* name;
    Shape shape;
    std::optional<std::vector<int64_t>> axes;  // unset: no axes given
    bool as_input;
    std::optional<int64_t> keepdims;
    bool noop_empty = false;
  };
  const std::vector<R> variants = {
      {"AxesAttr1_KeepDefault", {2, 3, 4}, std::vector<int64_t>{1}, false, std::nullopt},
      {"AxesAttr1_Keep0", {2, 3, 4}, std::vector<int64_t>{1}, false, 0},
      {"AxesAttrM1_Keep1", {2, 3, 4}, std::vector<int64_t>{-1}, false, 1},
      {"AxesAttr0_Keep0", {2, 3, 4}, std::vector<int64_t>{0}, false, 0},
      {"AxesAttr0_2_Keep0", {2, 3, 4}, std::vector<int64_t>{0, 2}, false, 0},
      {"AxesAttrM1_M2_Keep1", {2, 3, 4}, std::vector<int64_t>{-1, -2}, false, 1},
      {"AxesInput1_Keep1", {2, 3, 4}, std::vector<int64_t>{1}, true, 1},
      {"AxesInputM2_0_Keep0", {2, 3, 4}, std::vector<int64_t>{-3, 1}, true, 0},
      {"AxesInputM1_Keep0", {3, 5}, std::vector<int64_t>{-1}, true, 0},
      {"AllAxes_Keep1", {2, 3, 4}, std::nullopt, false, 1},
      {"AllAxes_Keep0", {2, 3, 4}, std::nullopt, false, 0},
      {"AllAxesExplicit_Keep0", {3, 5}, std::vector<int64_t>{0, 1}, false, 0},
      {"Rank1_AllAxes_Keep0", {7}, std::nullopt, false, 0},
      {"EmptyAxesInput_AllAxes", {3, 4}, std::vector<int64_t>{}, true, 0},
      {"EmptyAxesInput_Noop", {3, 4}, std::vector<int64_t>{}, true, 1, true},
      {"NoAxes_Noop", {3, 4}, std::nullopt, false, 0, true},
  };
  for (const char* op : {"ReduceSum", "ReduceMean"}) {
    const bool mean = std::string(op) == "ReduceMean";
    for (const R& v : variants) {
      OpCase c;
      c.name = absl::StrCat(op, "_", v.name);
      c.op = op;
      c.inputs = {X("x", v.shape)};
      if (v.axes && v.as_input) {
        c.inputs.push_back(ConstI64("axes", {static_cast<int64_t>(v.axes->size())}, *v.axes));
      } else if (v.axes) {
        c.attrs.Set("axes", *v.axes);
      }
      if (v.keepdims) c.attrs.Set("keepdims", *v.keepdims);
      if (v.noop_empty) c.attrs.Set("noop_with_empty_axes", int64_t{1});
      const std::vector<int64_t> axes = v.axes.value_or(std::vector<int64_t>{});
      const bool keep = v.keepdims.value_or(1) != 0, noop = v.noop_empty;
      c.ref = [=](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefReduce(in[0], axes, keep, mean, noop)};
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------
// LayerNormalization

// X's shape split at a normalisation's `axis`: `rows` slices of `d` values each, the
// normalised shape and the statistics' (X's with 1 from axis on).
struct NormSplit {
  int64_t rows = 1, d = 1;
  Shape norm, stats;
};

NormSplit SplitAt(const Shape& s, int64_t axis) {
  const int rank = static_cast<int>(s.size());
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  NormSplit out;
  for (int i = 0; i < rank; ++i) {
    if (i < ax) {
      out.rows *= s[i];
      out.stats.push_back(s[i]);
    } else {
      out.d *= s[i];
      out.norm.push_back(s[i]);
      out.stats.push_back(1);
    }
  }
  return out;
}

// {Y, Mean, InvStdDev} over X.shape[axis:], scale/bias broadcast to that shape.
std::vector<Tensor> RefLayerNorm(const Tensor& x, const Tensor& scale, const Tensor* bias, int64_t axis, double eps) {
  const Shape& s = x.shape();
  const NormSplit split = SplitAt(s, axis);
  const int64_t rows = split.rows, d = split.d;
  const Shape &norm = split.norm, &stats = split.stats;
  Tensor y = F64(s), mean = F64(stats), inv = F64(stats);
  for (int64_t r = 0; r < rows; ++r) {
    double m = 0;
    for (int64_t j = 0; j < d; ++j) m += P(x)[r * d + j];
    m /= d;
    double v = 0;
    for (int64_t j = 0; j < d; ++j) v += (P(x)[r * d + j] - m) * (P(x)[r * d + j] - m);
    v /= d;
    const double is = 1.0 / std::sqrt(v + eps);
    for (int64_t j = 0; j < d; ++j) {
      const auto idx = Unravel(j, norm);
      double val = (P(x)[r * d + j] - m) * is * P(scale)[BroadcastOffset(idx, scale.shape())];
      if (bias) val += P(*bias)[BroadcastOffset(idx, bias->shape())];
      P(y)[r * d + j] = val;
    }
    P(mean)[r] = m;
    P(inv)[r] = is;
  }
  return {y, mean, inv};
}

// {dX, dScale, dB} of LayerNormGrad (dScale/dB over the normalised shape).
std::vector<Tensor> RefLayerNormGrad(const Tensor& dy, const Tensor& x, const Tensor& scale, const Tensor& mean,
                                     const Tensor& inv, int64_t axis) {
  const Shape& s = x.shape();
  const NormSplit split = SplitAt(s, axis);
  const int64_t rows = split.rows, d = split.d;
  const Shape& norm = split.norm;
  Tensor dx = F64(s), dscale = F64(norm), db = F64(norm);
  for (int64_t r = 0; r < rows; ++r) {
    const double m = P(mean)[r], is = P(inv)[r];
    double mg = 0, mgx = 0;
    for (int64_t j = 0; j < d; ++j) {
      const double g = P(dy)[r * d + j] * P(scale)[BroadcastOffset(Unravel(j, norm), scale.shape())];
      mg += g;
      mgx += g * (P(x)[r * d + j] - m) * is;
    }
    mg /= d;
    mgx /= d;
    for (int64_t j = 0; j < d; ++j) {
      const double g = P(dy)[r * d + j] * P(scale)[BroadcastOffset(Unravel(j, norm), scale.shape())];
      const double xh = (P(x)[r * d + j] - m) * is;
      P(dx)[r * d + j] = is * (g - mg - xh * mgx);
      P(dscale)[j] += P(dy)[r * d + j] * xh;
      P(db)[j] += P(dy)[r * d + j];
    }
  }
  return {dx, dscale, db};
}

std::vector<OpCase> LayerNormCases() {
  std::vector<OpCase> cases;
  struct L {
    const char* name;
    Shape x;
    std::optional<int64_t> axis;
    Shape scale;
    std::optional<Shape> bias;
    std::optional<float> eps;
  };
  const std::vector<L> variants = {
      {"Last1_DefaultAxis", {4, 6}, std::nullopt, {6}, Shape{6}, std::nullopt},
      {"Last1_AxisM1_Rank3", {2, 3, 5}, -1, {5}, Shape{5}, std::nullopt},
      {"Last2_AxisM2", {2, 3, 4}, -2, {3, 4}, Shape{3, 4}, std::nullopt},
      {"Last2_Axis1", {2, 3, 4}, 1, {3, 4}, Shape{3, 4}, std::nullopt},
      {"Last2_BroadcastScaleBias", {2, 3, 4}, 1, {4}, Shape{1, 4}, std::nullopt},
      {"Last1_NoBias", {3, 5}, std::nullopt, {5}, std::nullopt, std::nullopt},
      {"Last1_Epsilon1em2", {4, 6}, -1, {6}, Shape{6}, 1e-2f},
      {"Axis0_All", {3, 4}, 0, {3, 4}, Shape{3, 4}, std::nullopt},
  };
  for (const L& v : variants) {
    OpCase c;
    c.name = absl::StrCat("LayerNormalization_", v.name);
    c.op = "LayerNormalization";
    if (v.axis) c.attrs.Set("axis", *v.axis);
    if (v.eps) c.attrs.Set("epsilon", *v.eps);
    c.inputs = {X("x", v.x, -2, 2), X("scale", v.scale, 0.5, 1.5)};
    if (v.bias) c.inputs.push_back(X("bias", *v.bias));
    const int64_t axis = v.axis.value_or(-1);
    const double eps = F(v.eps.value_or(1e-5f));
    const bool has_bias = v.bias.has_value();
    // Y only: the statistics' dtype (f32, or f64 for f64) is not the run's in bf16/f16;
    // the *_Statistics cases below check them.
    c.ref = [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefLayerNorm(in[0], in[1], has_bias ? &in[2] : nullptr, axis, eps)[0]};
    };
    cases.push_back(std::move(c));
  }
  // Mean and InvStdDev: f32 for f32 data (and for bf16/f16), f64 for f64 data.
  for (DType dt : {DType::kF32, DType::kF64}) {
    for (auto [name, x, axis, norm] : std::vector<std::tuple<const char*, Shape, int64_t, Shape>>{
             {"Last1", {4, 6}, -1, {6}}, {"Last2", {2, 3, 4}, -2, {3, 4}}}) {
      OpCase c;
      c.name = absl::StrCat("LayerNormalization_", name, "_Statistics", dt == DType::kF32 ? "F32" : "F64");
      c.op = "LayerNormalization";
      c.attrs.Set("axis", axis);
      c.inputs = {XTyped("x", x, dt), XTyped("scale", norm, dt), XTyped("bias", norm, dt)};
      c.out_dtypes = {dt, dt, dt};
      c.gradient = false;
      c.ref = [axis = axis](const std::vector<Tensor>& in) {
        return RefLayerNorm(in[0], in[1], &in[2], axis, F(1e-5));
      };
      cases.push_back(std::move(c));
    }
  }
  for (auto [name, x, axis, norm, stats] : std::vector<std::tuple<const char*, Shape, int64_t, Shape, Shape>>{
           {"Last1", {4, 6}, -1, {6}, {4, 1}}, {"Last2", {2, 3, 4}, 1, {3, 4}, {2, 1, 1}}}) {
    OpCase c;
    c.name = absl::StrCat("LayerNormGrad_", name);
    c.op = "LayerNormGrad";
    c.attrs.Set("axis", axis);
    c.inputs = {X("dy", x), X("x", x, -2, 2), X("scale", norm, 0.5, 1.5), X("mean", stats, -0.3, 0.3),
                X("inv_std", stats, 0.5, 2)};
    c.gradient = false;
    c.ref = [axis = axis](const std::vector<Tensor>& in) {
      return RefLayerNormGrad(in[0], in[1], in[2], in[3], in[4], axis);
    };
    cases.push_back(std::move(c));
  }
  // The fused forms of passes/fuse_layer_norm_edges.h. An f32 X whose Y is written in a
  // 16-bit format (mpc_output_dtype): the f32 normalisation, rounded once. 37 values a row
  // (vector tails); 64 rows of 300 run threaded.
  for (DType y : {DType::kBF16, DType::kF16}) {
    for (auto [name, x, norm] : std::vector<std::tuple<const char*, Shape, Shape>>{{"Rows6x37", {6, 37}, {37}},
                                                                                   {"Rows64x300", {64, 300}, {300}}}) {
      OpCase c;
      c.name = absl::StrCat("LayerNormalization_", name, "_F32X_", y == DType::kBF16 ? "Bf16Y" : "F16Y");
      c.op = "LayerNormalization";
      c.attrs.Set("mpc_output_dtype", static_cast<int64_t>(DTypeToOnnx(y)));
      c.inputs = {XTyped("x", x, DType::kF32), XTyped("scale", norm, DType::kF32), XTyped("bias", norm, DType::kF32)};
      c.out_dtypes = {y};
      c.gradient = false;
      c.ref = [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefLayerNorm(in[0], in[1], &in[2], -1, F(1e-5))[0]};
      };
      cases.push_back(std::move(c));
    }
  }
  // LayerNormGrad adding a residual gradient into dX (its 6th input).
  for (auto [name, x, norm, stats] : std::vector<std::tuple<const char*, Shape, Shape, Shape>>{
           {"Rows6x37", {6, 37}, {37}, {6, 1}}, {"Rows64x300", {64, 300}, {300}, {64, 1}}}) {
    OpCase c;
    c.name = absl::StrCat("LayerNormGrad_", name, "_Addend");
    c.op = "LayerNormGrad";
    c.attrs.Set("axis", int64_t{-1});
    c.inputs = {X("dy", x),
                X("x", x, -2, 2),
                X("scale", norm, 0.5, 1.5),
                X("mean", stats, -0.3, 0.3),
                X("inv_std", stats, 0.5, 2),
                X("addend", x)};
    c.gradient = false;
    c.ref = [](const std::vector<Tensor>& in) {
      std::vector<Tensor> out = RefLayerNormGrad(in[0], in[1], in[2], in[3], in[4], -1);
      for (int64_t i = 0; i < out[0].num_elements(); ++i) P(out[0])[i] += P(in[5])[i];
      return out;
    };
    cases.push_back(std::move(c));
  }
  // Its epilogue: dX summed over the rows (output 3), in every dtype; and, for f32, also
  // dX's 16-bit copy (output 4) after the addend.
  auto with_column_sum = [](std::vector<Tensor> out) {
    const Shape& s = out[0].shape();
    const int64_t d = s.back(), rows = out[0].num_elements() / d;
    Tensor sum = F64({d});
    for (int64_t j = 0; j < d; ++j) {
      P(sum)[j] = 0;
      for (int64_t r = 0; r < rows; ++r) P(sum)[j] += P(out[0])[r * d + j];
    }
    out.push_back(sum);
    return out;
  };
  for (auto [name, x, norm, stats] : std::vector<std::tuple<const char*, Shape, Shape, Shape>>{
           {"Rows6x37", {6, 37}, {37}, {6, 1}}, {"Rows64x300", {64, 300}, {300}, {64, 1}}}) {
    OpCase c;
    c.name = absl::StrCat("LayerNormGrad_", name, "_ColumnSum");
    c.op = "LayerNormGrad";
    c.attrs.Set("axis", int64_t{-1});
    c.attrs.Set("mpc_dx_column_sum", int64_t{1});
    c.inputs = {X("dy", x), X("x", x, -2, 2), X("scale", norm, 0.5, 1.5), X("mean", stats, -0.3, 0.3),
                X("inv_std", stats, 0.5, 2)};
    c.gradient = false;
    c.ref = [with_column_sum](const std::vector<Tensor>& in) {
      return with_column_sum(RefLayerNormGrad(in[0], in[1], in[2], in[3], in[4], -1));
    };
    cases.push_back(std::move(c));
    for (DType narrow : {DType::kBF16, DType::kF16}) {
      OpCase e;
      e.name = absl::StrCat("LayerNormGrad_", name, "_F32_Addend_ColumnSum_", narrow == DType::kBF16 ? "Bf16" : "F16",
                            "Copy");
      e.op = "LayerNormGrad";
      e.attrs.Set("axis", int64_t{-1});
      e.attrs.Set("mpc_dx_column_sum", int64_t{1});
      e.attrs.Set("mpc_narrow_dx_dtype", static_cast<int64_t>(DTypeToOnnx(narrow)));
      e.inputs = {XTyped("dy", x, DType::kF32),          XTyped("x", x, DType::kF32),
                  XTyped("scale", norm, DType::kF32),    XTyped("mean", stats, DType::kF32),
                  XTyped("inv_std", stats, DType::kF32), XTyped("addend", x, DType::kF32)};
      e.out_dtypes = {DType::kF32, DType::kF32, DType::kF32, DType::kF32, narrow};
      e.gradient = false;
      e.ref = [with_column_sum](const std::vector<Tensor>& in) {
        std::vector<Tensor> out = RefLayerNormGrad(in[0], in[1], in[2], in[3], in[4], -1);
        for (int64_t i = 0; i < out[0].num_elements(); ++i) P(out[0])[i] += P(in[5])[i];
        out = with_column_sum(std::move(out));
        out.push_back(out[0]);  // the 16-bit copy of dX
        return out;
      };
      cases.push_back(std::move(e));
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------
// BatchNormalization

// {Y, running_mean_out, running_var_out, saved_mean, saved_inv_std} for X [N, C, ...].
std::vector<Tensor> RefBatchNorm(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& rmean,
                                 const Tensor& rvar, bool training, double eps, double momentum, bool unbiased_update) {
  const Shape& s = x.shape();
  const int64_t n = s[0], c = s[1];
  int64_t sp = 1;
  for (size_t i = 2; i < s.size(); ++i) sp *= s[i];
  const int64_t m = n * sp;
  Tensor y = F64(s), rm = F64({c}), rv = F64({c}), sm = F64({c}), si = F64({c});
  for (int64_t ch = 0; ch < c; ++ch) {
    double mean = P(rmean)[ch], var = P(rvar)[ch], unbiased = 0;
    if (training) {
      mean = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < sp; ++k) mean += P(x)[(i * c + ch) * sp + k];
      }
      mean /= m;
      double sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t k = 0; k < sp; ++k) {
          const double dlt = P(x)[(i * c + ch) * sp + k] - mean;
          sq += dlt * dlt;
        }
      }
      var = sq / m;
      unbiased = unbiased_update ? sq / (m - 1) : var;
    }
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < sp; ++k) {
        const int64_t o = (i * c + ch) * sp + k;
        P(y)[o] = (P(x)[o] - mean) * inv * P(scale)[ch] + P(bias)[ch];
      }
    }
    P(rm)[ch] = training ? momentum * P(rmean)[ch] + (1 - momentum) * mean : P(rmean)[ch];
    P(rv)[ch] = training ? momentum * P(rvar)[ch] + (1 - momentum) * unbiased : P(rvar)[ch];
    P(sm)[ch] = mean;
    P(si)[ch] = inv;
  }
  return {y, rm, rv, sm, si};
}

std::vector<Tensor> RefBatchNormGrad(const Tensor& dy, const Tensor& x, const Tensor& scale, const Tensor& mean,
                                     const Tensor& inv, bool training) {
  const Shape& s = x.shape();
  const int64_t n = s[0], c = s[1];
  int64_t sp = 1;
  for (size_t i = 2; i < s.size(); ++i) sp *= s[i];
  const int64_t m = n * sp;
  Tensor dx = F64(s), ds = F64({c}), db = F64({c});
  for (int64_t ch = 0; ch < c; ++ch) {
    const double mu = P(mean)[ch], is = P(inv)[ch], a = P(scale)[ch] * is;
    double sdy = 0, sdyx = 0;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < sp; ++k) {
        const int64_t o = (i * c + ch) * sp + k;
        sdy += P(dy)[o];
        sdyx += P(dy)[o] * (P(x)[o] - mu) * is;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < sp; ++k) {
        const int64_t o = (i * c + ch) * sp + k;
        const double xh = (P(x)[o] - mu) * is;
        P(dx)[o] = training ? a * (P(dy)[o] - sdy / m - xh * sdyx / m) : a * P(dy)[o];
      }
    }
    P(ds)[ch] = sdyx;
    P(db)[ch] = sdy;
  }
  return {dx, ds, db};
}

std::vector<OpCase> BatchNormCases() {
  std::vector<OpCase> cases;
  struct B {
    const char* name;
    bool training;
    std::optional<int64_t> mpc_training, training_mode;
    std::optional<float> eps, momentum;
  };
  const std::vector<B> modes = {
      {"Train_MpcTraining", true, 1, std::nullopt, std::nullopt, std::nullopt},
      {"Train_TrainingModeAttr", true, std::nullopt, 1, std::nullopt, std::nullopt},
      {"Train_Momentum0p7_Epsilon1em3", true, 1, 1, 1e-3f, 0.7f},
      {"Eval_Default", false, std::nullopt, std::nullopt, std::nullopt, std::nullopt},
      {"Eval_MpcTraining0", false, 0, std::nullopt, std::nullopt, std::nullopt},
      {"Eval_MpcTrainingOverridesTrainingMode", false, 0, 1, 1e-3f, std::nullopt},
  };
  // NCHW_Threaded is above the kernel's 16384-element threshold for splitting channels
  // across threads, with a channel count no thread count divides evenly. The CPU kernel
  // takes its per-element (expanded) form for planes of at most 16 values: NC, NCHW and
  // NCHW_SmallPlanes_Threaded (4x4 planes, the largest that form takes, threaded). In their
  // channels-last form (tests/graph/channels_last_op_cases.cc) the kernel groups rows by
  // 2^k: NCHW_OddRows_Threaded's 825 rows of 24 channels leave a last chunk of 7 groups of 8
  // rows and 1 row over.
  for (auto [sname, shape] : std::vector<std::pair<const char*, Shape>>{{"NC", {6, 3}},
                                                                        {"NCHW", {2, 3, 2, 3}},
                                                                        {"NCHW_Threaded", {4, 37, 11, 13}},
                                                                        {"NCHW_SmallPlanes_Threaded", {12, 103, 4, 4}},
                                                                        {"NCHW_OddRows_Threaded", {5, 24, 15, 11}}}) {
    const int64_t ch = shape[1];
    std::vector<double> fed_mean, fed_var;  // running statistics fed in training
    for (int64_t i = 0; i < ch; ++i) {
      fed_mean.push_back(0.25 - 0.125 * static_cast<double>(i % 5));
      fed_var.push_back(0.75 + 0.25 * static_cast<double>(i % 4));
    }
    for (const B& mode : modes) {
      OpCase c;
      c.name = absl::StrCat("BatchNormalization_", sname, "_", mode.name);
      c.op = "BatchNormalization";
      if (mode.mpc_training) c.attrs.Set("mpc_training", *mode.mpc_training);
      if (mode.training_mode) c.attrs.Set("training_mode", *mode.training_mode);
      if (mode.eps) c.attrs.Set("epsilon", *mode.eps);
      if (mode.momentum) c.attrs.Set("momentum", *mode.momentum);
      c.inputs = {X("x", shape, -2, 2), X("scale", {ch}, 0.5, 1.5), X("bias", {ch})};
      if (mode.training) {
        // The running statistics do not reach Y in training: fixed data, not differentiated.
        c.inputs.push_back(FedFloats("input_mean", fed_mean));
        c.inputs.push_back(FedFloats("input_var", fed_var));
      } else {
        c.inputs.push_back(X("input_mean", {ch}, -0.5, 0.5));
        c.inputs.push_back(X("input_var", {ch}, 0.5, 1.5));
      }
      const bool training = mode.training;
      // mpc's training programs: unbiased running_var update (PyTorch); ONNX's training_mode
      // alone: the biased one (the ONNX reference).
      const bool unbiased = mode.mpc_training.value_or(0) != 0;
      const double eps = F(mode.eps.value_or(1e-5f)), momentum = F(mode.momentum.value_or(0.9f));
      // Y and the running-statistics outputs; the saved statistics are checked below.
      c.ref = [=](const std::vector<Tensor>& in) {
        std::vector<Tensor> out = RefBatchNorm(in[0], in[1], in[2], in[3], in[4], training, eps, momentum, unbiased);
        out.resize(3);
        return out;
      };
      cases.push_back(std::move(c));
    }
    // Every output, saved statistics included (f32 for f32 data, f64 for f64 data).
    for (DType dt : {DType::kF32, DType::kF64}) {
      for (bool training : {true, false}) {
        OpCase c;
        c.name = absl::StrCat("BatchNormalization_", sname, training ? "_Train" : "_Eval", "_AllOutputs",
                              dt == DType::kF32 ? "F32" : "F64");
        c.op = "BatchNormalization";
        c.attrs.Set("mpc_training", static_cast<int64_t>(training));
        c.inputs = {XTyped("x", shape, dt), XTyped("scale", {ch}, dt), XTyped("bias", {ch}, dt),
                    XTyped("input_mean", {ch}, dt), XTyped("input_var", {ch}, dt)};
        c.inputs[4].lo = 0.5;
        c.inputs[4].hi = 1.5;
        c.out_dtypes = {dt, dt, dt, dt, dt};
        c.gradient = false;
        c.ref = [=](const std::vector<Tensor>& in) {
          return RefBatchNorm(in[0], in[1], in[2], in[3], in[4], training, F(1e-5), F(0.9), training);
        };
        cases.push_back(std::move(c));
      }
    }
    for (bool training : {true, false}) {
      OpCase c;
      c.name = absl::StrCat("BatchNormGrad_", sname, training ? "_Train" : "_Eval");
      c.op = "BatchNormGrad";
      c.attrs.Set("training_mode", static_cast<int64_t>(training));
      c.inputs = {X("dy", shape), X("x", shape, -2, 2), X("scale", {ch}, 0.5, 1.5), X("mean", {ch}, -0.3, 0.3),
                  X("inv_std", {ch}, 0.5, 2)};
      c.gradient = false;
      c.ref = [training](const std::vector<Tensor>& in) {
        return RefBatchNormGrad(in[0], in[1], in[2], in[3], in[4], training);
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// ---------------------------------------------------------------------------------
// RmsNorm

// {Y, InvRms} over X.shape[axis:]; scale (null: 1) broadcast to that shape.
std::vector<Tensor> RefRmsNorm(const Tensor& x, const Tensor* scale, int64_t axis, double eps) {
  const Shape& s = x.shape();
  const NormSplit split = SplitAt(s, axis);
  const int64_t rows = split.rows, d = split.d;
  const Shape &norm = split.norm, &stats = split.stats;
  Tensor y = F64(s), inv = F64(stats);
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < d; ++j) ms += P(x)[r * d + j] * P(x)[r * d + j];
    const double is = 1.0 / std::sqrt(ms / d + eps);
    for (int64_t j = 0; j < d; ++j) {
      const double w = scale ? P(*scale)[BroadcastOffset(Unravel(j, norm), scale->shape())] : 1.0;
      P(y)[r * d + j] = P(x)[r * d + j] * is * w;
    }
    P(inv)[r] = is;
  }
  return {y, inv};
}

// {dX[, dScale]} of RmsNormGrad(dY, X, InvRms[, Scale]) (dScale over the normalised shape).
std::vector<Tensor> RefRmsNormGrad(const Tensor& dy, const Tensor& x, const Tensor& inv, const Tensor* scale,
                                   int64_t axis) {
  const Shape& s = x.shape();
  const NormSplit split = SplitAt(s, axis);
  const int64_t rows = split.rows, d = split.d;
  const Shape& norm = split.norm;
  Tensor dx = F64(s), dscale = F64(norm);
  for (int64_t r = 0; r < rows; ++r) {
    const double is = P(inv)[r];
    auto w = [&](int64_t j) { return scale ? P(*scale)[BroadcastOffset(Unravel(j, norm), scale->shape())] : 1.0; };
    double mgx = 0;
    for (int64_t j = 0; j < d; ++j) mgx += P(dy)[r * d + j] * w(j) * P(x)[r * d + j] * is;
    mgx /= d;
    for (int64_t j = 0; j < d; ++j) {
      const double xh = P(x)[r * d + j] * is;
      P(dx)[r * d + j] = is * (P(dy)[r * d + j] * w(j) - xh * mgx);
      P(dscale)[j] += P(dy)[r * d + j] * xh;
    }
  }
  if (!scale) return {dx};
  return {dx, dscale};
}

std::vector<OpCase> RmsNormCases() {
  std::vector<OpCase> cases;
  struct V {
    const char* name;
    Shape x;
    std::optional<int64_t> axis;
    std::optional<Shape> scale;
    std::optional<float> eps;
  };
  // 37 and 300 values a row reach the vector tails and the threaded rows.
  const std::vector<V> variants = {
      {"Last1_DefaultAxis", {4, 6}, std::nullopt, Shape{6}, std::nullopt},
      {"Last1_Rank3_Epsilon1em6", {2, 3, 37}, -1, Shape{37}, 1e-6f},
      {"Last2_Axis1_BroadcastScale", {2, 3, 4}, 1, Shape{1, 4}, std::nullopt},
      {"Last1_NoScale", {3, 5}, -1, std::nullopt, std::nullopt},
      {"Rows64x300", {64, 300}, -1, Shape{300}, 1e-6f},
  };
  for (const V& v : variants) {
    OpCase c;
    c.name = absl::StrCat("RmsNorm_", v.name);
    c.op = "RmsNorm";
    if (v.axis) c.attrs.Set("axis", *v.axis);
    if (v.eps) c.attrs.Set("epsilon", *v.eps);
    c.inputs = {X("x", v.x, -2, 2)};
    if (v.scale) c.inputs.push_back(X("scale", *v.scale, 0.5, 1.5));
    const int64_t axis = v.axis.value_or(-1);
    const double eps = F(v.eps.value_or(1e-5f));
    const bool scaled = v.scale.has_value();
    // Y only (InvRms is f32 in bf16/f16 runs); the gradient cases differentiate Y
    // through RmsNormGrad against finite differences.
    c.ref = [=](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefRmsNorm(in[0], scaled ? &in[1] : nullptr, axis, eps)[0]};
    };
    if (v.x == Shape{64, 300}) c.gradient = false;  // the finite differences would take 19200 runs
    cases.push_back(std::move(c));
  }
  for (DType dt : {DType::kF32, DType::kF64}) {
    OpCase c;
    c.name = absl::StrCat("RmsNorm_Last2_Statistics", dt == DType::kF32 ? "F32" : "F64");
    c.op = "RmsNorm";
    c.attrs.Set("axis", int64_t{-2});
    c.inputs = {XTyped("x", {2, 3, 4}, dt), XTyped("scale", {3, 4}, dt)};
    c.out_dtypes = {dt, dt};
    c.gradient = false;
    c.ref = [](const std::vector<Tensor>& in) { return RefRmsNorm(in[0], &in[1], -2, F(1e-5)); };
    cases.push_back(std::move(c));
  }
  for (auto [name, x, axis, norm, stats, scaled] : std::vector<std::tuple<const char*, Shape, int64_t, Shape, Shape, bool>>{
           {"Last1", {4, 6}, -1, {6}, {4, 1}, true},
           {"Last2", {2, 3, 4}, 1, {3, 4}, {2, 1, 1}, true},
           {"Rows64x300", {64, 300}, -1, {300}, {64, 1}, true},
           {"Last1_NoScale", {3, 5}, -1, {5}, {3, 1}, false}}) {
    OpCase c;
    c.name = absl::StrCat("RmsNormGrad_", name);
    c.op = "RmsNormGrad";
    c.attrs.Set("axis", axis);
    c.inputs = {X("dy", x), X("x", x, -2, 2), X("inv_rms", stats, 0.5, 2)};
    if (scaled) c.inputs.push_back(X("scale", norm, 0.5, 1.5));
    c.gradient = false;
    c.ref = [axis = axis, scaled = scaled](const std::vector<Tensor>& in) {
      return RefRmsNormGrad(in[0], in[1], in[2], scaled ? &in[3] : nullptr, axis);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> NormCases() {
  std::vector<OpCase> all;
  for (auto family : {MathCases, ReduceCases, LayerNormCases, RmsNormCases, BatchNormCases}) {
    for (OpCase& c : family()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace

MPC_REGISTER_OP_CASES(Norm, NormCases);

}  // namespace mpc::opcases
