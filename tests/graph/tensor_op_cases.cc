// The op-numerics cases of the indexing and data-movement ops (graph/ops_tensor.cc):
// Gather/GatherGrad, Where, Concat, Split, Slice/SliceGrad, Squeeze, Unsqueeze, Expand,
// Equal/Less/Greater/Not/And, ConstantOfShape, Shape, Range. Data movement is checked
// bit for bit; integer and bool operands are fixed data (Role::kFed / kConst), and the
// integer-data variants (index tensors moving through exported graphs) are forward only.
#include <limits>
#include <tuple>

#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Fixed integer (or bool) data fed as a graph input.
In Ints(const std::string& name, const Shape& shape, const std::vector<int64_t>& v, DType dtype = DType::kI64) {
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.dtype = dtype;
  in.shape = shape;
  in.value = Tensor::FromVector<int64_t>(shape, v).CastTo(dtype);
  return in;
}
In Bools(const std::string& name, const Shape& shape, const std::vector<int64_t>& v) {
  return Ints(name, shape, v, DType::kBool);
}
// Fixed float data in the run's dtype (values exact in bf16/f16).
In FedFloats(const std::string& name, const Shape& shape, const std::vector<double>& v) {
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.shape = shape;
  in.value = Tensor::FromVector<double>(shape, v);
  return in;
}
// A constant scalar of a fixed dtype (Range's integer start/limit/delta).
In ConstScalar(const std::string& name, double v, DType dtype) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.dtype = dtype;
  in.value = Tensor::FromVector<double>({}, {v}).CastTo(dtype);
  return in;
}

// ---------------------------------------------------------------------------------
// References.

int64_t NormAxis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

Tensor RefGather(const Tensor& data, const Tensor& idx, int64_t axis_attr) {
  const Shape& ds = data.shape();
  const int64_t axis = NormAxis(axis_attr, ds.size());
  Shape out(ds.begin(), ds.begin() + axis);
  out.insert(out.end(), idx.shape().begin(), idx.shape().end());
  out.insert(out.end(), ds.begin() + axis + 1, ds.end());
  Tensor y = F64(out);
  const size_t ir = idx.shape().size();
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const auto oi = Unravel(i, out);
    const std::vector<int64_t> ii(oi.begin() + axis, oi.begin() + axis + ir);
    int64_t k = static_cast<int64_t>(P(idx)[Ravel(ii, idx.shape())]);
    if (k < 0) k += ds[axis];
    std::vector<int64_t> di(oi.begin(), oi.begin() + axis);
    di.push_back(k);
    di.insert(di.end(), oi.begin() + axis + ir, oi.end());
    P(y)[i] = P(data)[Ravel(di, ds)];
  }
  return y;
}

Tensor RefGatherGrad(const Tensor& dy, const Tensor& idx, int64_t axis_attr, const Shape& shape) {
  const int64_t axis = NormAxis(axis_attr, shape.size());
  Tensor dx = F64(shape);
  const size_t ir = idx.shape().size();
  for (int64_t i = 0; i < dy.num_elements(); ++i) {
    const auto oi = Unravel(i, dy.shape());
    const std::vector<int64_t> ii(oi.begin() + axis, oi.begin() + axis + ir);
    int64_t k = static_cast<int64_t>(P(idx)[Ravel(ii, idx.shape())]);
    if (k < 0) k += shape[axis];
    std::vector<int64_t> di(oi.begin(), oi.begin() + axis);
    di.push_back(k);
    di.insert(di.end(), oi.begin() + axis + ir, oi.end());
    P(dx)[Ravel(di, shape)] += P(dy)[i];
  }
  return dx;
}

Tensor RefWhere(const Tensor& c, const Tensor& x, const Tensor& y) {
  const Shape shape = RefBroadcastShape(RefBroadcastShape(c.shape(), x.shape()), y.shape());
  Tensor out = F64(shape);
  for (int64_t i = 0; i < out.num_elements(); ++i) {
    const auto idx = Unravel(i, shape);
    P(out)
    [i] = P(c)[BroadcastOffset(idx, c.shape())] != 0 ? P(x)[BroadcastOffset(idx, x.shape())]
                                                     : P(y)[BroadcastOffset(idx, y.shape())];
  }
  return out;
}

Tensor RefConcat(const std::vector<Tensor>& in, int64_t axis_attr) {
  const int64_t axis = NormAxis(axis_attr, in[0].shape().size());
  Shape shape = in[0].shape();
  shape[axis] = 0;
  for (const Tensor& t : in) shape[axis] += t.shape()[axis];
  Tensor y = F64(shape);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    auto idx = Unravel(i, shape);
    size_t j = 0;
    while (idx[axis] >= in[j].shape()[axis]) idx[axis] -= in[j++].shape()[axis];
    P(y)[i] = P(in[j])[Ravel(idx, in[j].shape())];
  }
  return y;
}

std::vector<Tensor> RefSplit(const Tensor& x, int64_t axis_attr, const std::vector<int64_t>& sizes) {
  const int64_t axis = NormAxis(axis_attr, x.shape().size());
  std::vector<Tensor> outs;
  int64_t at = 0;
  for (int64_t s : sizes) {
    Shape shape = x.shape();
    shape[axis] = s;
    Tensor y = F64(shape);
    for (int64_t i = 0; i < y.num_elements(); ++i) {
      auto idx = Unravel(i, shape);
      idx[axis] += at;
      P(y)[i] = P(x)[Ravel(idx, x.shape())];
    }
    outs.push_back(std::move(y));
    at += s;
  }
  return outs;
}

// The indices Python's slice(start, stop, step) takes from a sequence of length dim
// (CPython's PySlice_AdjustIndices): ONNX Slice follows the same rules.
std::vector<int64_t> PySlice(int64_t start, int64_t stop, int64_t step, int64_t dim) {
  auto adjust = [&](int64_t v) {
    if (v < 0) {
      v = v < -dim ? -1 - dim : v;  // avoid overflow, then shift
      v += dim;
      if (v < 0) v = step < 0 ? -1 : 0;
    } else if (v >= dim) {
      v = step < 0 ? dim - 1 : dim;
    }
    return v;
  };
  start = adjust(start);
  stop = adjust(stop);
  std::vector<int64_t> out;
  if (step > 0) {
    for (int64_t i = start; i < stop; i += step) out.push_back(i);
  } else {
    for (int64_t i = start; i > stop; i += step) out.push_back(i);
  }
  return out;
}

Tensor RefSlice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
                std::vector<int64_t> axes, std::vector<int64_t> steps) {
  const Shape& s = x.shape();
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  std::vector<std::vector<int64_t>> taken(s.size());
  for (size_t d = 0; d < s.size(); ++d) taken[d] = PySlice(0, s[d], 1, s[d]);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t d = NormAxis(axes[i], s.size());
    taken[d] = PySlice(starts[i], ends[i], steps[i], s[d]);
  }
  Shape out;
  for (const auto& t : taken) out.push_back(static_cast<int64_t>(t.size()));
  Tensor y = F64(out);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const auto oi = Unravel(i, out);
    std::vector<int64_t> ii(s.size());
    for (size_t d = 0; d < s.size(); ++d) ii[d] = taken[d][oi[d]];
    P(y)[i] = P(x)[Ravel(ii, s)];
  }
  return y;
}

Tensor RefSliceGrad(const Tensor& dy, const Shape& shape, const std::vector<int64_t>& starts,
                    const std::vector<int64_t>& steps) {
  Tensor dx = F64(shape);
  for (int64_t i = 0; i < dy.num_elements(); ++i) {
    auto idx = Unravel(i, dy.shape());
    for (size_t d = 0; d < idx.size(); ++d) idx[d] = starts[d] + idx[d] * steps[d];
    P(dx)[Ravel(idx, shape)] = P(dy)[i];
  }
  return dx;
}

RefFn Same(const Shape& shape) {
  return [shape](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefReshape(in[0], shape)}; };
}

// ---------------------------------------------------------------------------------
// Cases.

OpCase Case(const std::string& name, const std::string& op, std::vector<In> inputs, RefFn ref, bool exact = true) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.inputs = std::move(inputs);
  c.ref = std::move(ref);
  c.exact = exact;
  return c;
}

OpCase ForwardOnly(OpCase c, std::vector<std::optional<DType>> out_dtypes = {}) {
  c.gradient = false;
  c.out_dtypes = std::move(out_dtypes);
  return c;
}

std::vector<OpCase> GatherCases() {
  std::vector<OpCase> cases;
  struct G {
    const char* name;
    Shape data;
    Shape idx_shape;
    std::vector<int64_t> idx;
    int64_t axis;
    bool set_axis;
    DType idx_dtype;
  };
  const std::vector<G> gathers = {
      // The embedding lookup: [vocab, dim] rows by token ids; repeats and a negative id.
      {"Embedding_Axis0_RepeatsNegative", {5, 4}, {2, 3}, {0, 4, 2, 2, -1, 1}, 0, false, DType::kI64},
      {"Axis1_Rank3", {3, 5, 2}, {4}, {4, 0, -2, 0}, 1, true, DType::kI64},
      {"AxisM1_I32Indices", {3, 4}, {3}, {3, -4, 3}, -1, true, DType::kI32},
      {"ScalarIndex", {4, 3}, {}, {2}, 0, true, DType::kI64},
      {"Rank3Indices_Repeats", {6, 2}, {2, 2, 2}, {5, 0, 5, 1, -6, 3, 3, 3}, 0, true, DType::kI64},
      {"Axis2_I32Rank2Indices", {2, 3, 4}, {2, 2}, {0, 3, -1, 0}, 2, true, DType::kI32},
  };
  for (const G& g : gathers) {
    OpCase c = Case(
        absl::StrCat("Gather_", g.name), "Gather",
        {X("data", g.data), Ints("indices", g.idx_shape, g.idx, g.idx_dtype)},
        [axis = g.axis](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefGather(in[0], in[1], axis)}; });
    if (g.set_axis) c.attrs.Set("axis", g.axis);
    cases.push_back(std::move(c));
  }
  // Index tensors gathered from index tensors (shape arithmetic in exported graphs).
  {
    OpCase c =
        Case("Gather_I64Data", "Gather", {Ints("data", {2, 3}, {7, -8, 9, 10, 11, -12}), Ints("indices", {2}, {1, -3})},
             [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefGather(in[0], in[1], 1)}; });
    c.attrs.Set("axis", int64_t{1});
    cases.push_back(ForwardOnly(std::move(c), {DType::kI64}));
  }
  // GatherGrad: the scatter-add, repeated indices summed (in f32 for bf16/f16).
  for (auto [name, dy, idx_shape, idx, axis, shape, dtype] :
       std::vector<std::tuple<const char*, Shape, Shape, std::vector<int64_t>, int64_t, Shape, DType>>{
           {"Axis0_Repeats", {2, 3, 4}, {2, 3}, {0, 4, 2, 2, -1, 1}, 0, {5, 4}, DType::kI64},
           {"Axis1_I32_Repeats", {3, 4, 2}, {4}, {4, 0, -2, 0}, 1, {3, 5, 2}, DType::kI32},
           {"AllSameIndex", {6, 3}, {6}, {1, 1, 1, 1, 1, 1}, 0, {2, 3}, DType::kI64}}) {
    OpCase c = Case(
        absl::StrCat("GatherGrad_", name), "GatherGrad", {X("dy", dy), Ints("indices", idx_shape, idx, dtype)},
        [axis = axis, shape = shape](const std::vector<Tensor>& in) {
          return std::vector<Tensor>{RefGatherGrad(in[0], in[1], axis, shape)};
        },
        /*exact=*/false);
    c.attrs.Set("axis", axis);
    c.attrs.Set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
    cases.push_back(ForwardOnly(std::move(c)));
  }
  return cases;
}

std::vector<OpCase> WhereCases() {
  std::vector<OpCase> cases;
  auto ref = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefWhere(in[0], in[1], in[2])}; };
  for (auto [name, c, x, y] :
       std::vector<std::tuple<const char*, Shape, Shape, Shape>>{{"Same", {3, 4}, {3, 4}, {3, 4}},
                                                                 {"BroadcastAllThree", {2, 3, 1}, {3, 4}, {4}},
                                                                 {"ScalarY_MaskedFill", {2, 1, 4}, {2, 3, 4}, {}},
                                                                 {"CondRow", {4}, {3, 4}, {3, 1}}}) {
    cases.push_back(Case(absl::StrCat("Where_", name), "Where", {Mask("cond", c), X("x", x), X("y", y)}, ref));
  }
  {
    OpCase c = Case("Where_SameValueBothSides", "Where", {Mask("cond", {3, 4}), X("x", {3, 4}), SameAs(1)}, ref);
    cases.push_back(std::move(c));
  }
  cases.push_back(ForwardOnly(Case("Where_I64", "Where",
                                   {Bools("cond", {2, 3}, {1, 0, 0, 1, 1, 0}), Ints("x", {2, 3}, {1, 2, 3, 4, 5, 6}),
                                    Ints("y", {3}, {-7, -8, -9})},
                                   ref),
                              {DType::kI64}));
  return cases;
}

std::vector<OpCase> ConcatSplitCases() {
  std::vector<OpCase> cases;
  for (auto [name, shapes, axis] :
       std::vector<std::tuple<const char*, std::vector<Shape>, int64_t>>{{"Axis0_Three", {{2, 3}, {1, 3}, {3, 3}}, 0},
                                                                         {"Axis1_Rank3", {{2, 1, 3}, {2, 4, 3}}, 1},
                                                                         {"AxisM1", {{2, 3}, {2, 2}, {2, 1}}, -1},
                                                                         {"Single", {{2, 3}}, 0},
                                                                         // Rows split across threads (> 64 KiB).
                                                                         {"Threaded", {{600, 40}, {600, 24}}, 1}}) {
    std::vector<In> inputs;
    for (size_t i = 0; i < shapes.size(); ++i) inputs.push_back(X(absl::StrCat("x", i), shapes[i]));
    OpCase c = Case(absl::StrCat("Concat_", name), "Concat", inputs,
                    [axis = axis](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefConcat(in, axis)}; });
    c.attrs.Set("axis", axis);
    cases.push_back(std::move(c));
  }
  {
    OpCase c = Case("Concat_SameInputTwice", "Concat", {X("x", {2, 3}), SameAs(0)},
                    [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefConcat(in, 1)}; });
    c.attrs.Set("axis", int64_t{1});
    cases.push_back(std::move(c));
  }
  {
    OpCase c = Case("Concat_I64Shapes", "Concat", {Ints("a", {2}, {4, -1}), Ints("b", {1}, {8}), Ints("c", {0}, {})},
                    [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefConcat(in, 0)}; });
    c.attrs.Set("axis", int64_t{0});
    cases.push_back(ForwardOnly(std::move(c), {DType::kI64}));
  }

  struct S {
    const char* name;
    Shape shape;
    int64_t axis;
    std::vector<int64_t> sizes;
    enum { kInput, kAttr, kNumOutputs } how;
    std::vector<int> loss;
  };
  const std::vector<S> splits = {
      {"SplitInput_Axis1", {2, 6, 3}, 1, {1, 3, 2}, S::kInput, {0, 1, 2}},
      {"SplitAttr_AxisM1", {3, 6}, -1, {2, 4}, S::kAttr, {0, 1}},
      {"NumOutputs_Uneven", {7, 2}, 0, {3, 3, 1}, S::kNumOutputs, {0, 1, 2}},
      {"NumOutputs_Even", {2, 6}, 1, {2, 2, 2}, S::kNumOutputs, {0, 1, 2}},
      // Outputs that do not reach the loss get zero gradients.
      {"SplitInput_MiddleOutputUnused", {2, 6, 3}, 1, {1, 3, 2}, S::kInput, {0, 2}},
      {"SplitInput_OnlyLastUsed", {5, 2}, 0, {2, 0, 3}, S::kInput, {2}},
      // Rows split across threads (> 64 KiB), the middle output unread.
      {"SplitAttr_Threaded", {600, 72}, -1, {24, 24, 24}, S::kAttr, {0, 2}},
  };
  for (const S& s : splits) {
    std::vector<In> inputs = {X("x", s.shape)};
    if (s.how == S::kInput) inputs.push_back(ConstInts("split", s.sizes));
    OpCase c =
        Case(absl::StrCat("Split_", s.name), "Split", inputs,
             [axis = s.axis, sizes = s.sizes](const std::vector<Tensor>& in) { return RefSplit(in[0], axis, sizes); });
    c.attrs.Set("axis", s.axis);
    if (s.how == S::kAttr) c.attrs.Set("split", s.sizes);
    if (s.how == S::kNumOutputs) c.attrs.Set("num_outputs", static_cast<int64_t>(s.sizes.size()));
    c.loss_outputs = s.loss;
    cases.push_back(std::move(c));
  }
  {
    OpCase c = Case("Split_I64", "Split", {Ints("x", {5}, {1, 2, 3, 4, 5}), ConstInts("split", {2, 3})},
                    [](const std::vector<Tensor>& in) {
                      return RefSplit(in[0], 0, {2, 3});
                    });
    cases.push_back(ForwardOnly(std::move(c), {DType::kI64, DType::kI64}));
  }
  return cases;
}

std::vector<OpCase> SliceCases() {
  std::vector<OpCase> cases;
  struct Sl {
    const char* name;
    Shape shape;
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const std::vector<Sl> slices = {
      {"StartsEndsOnly", {4, 5}, {1, 0}, {3, 5}, {}, {}},
      {"NegativeAxisAndIndices", {3, 4, 5}, {-3}, {-1}, {-1}, {}},
      {"ClampedAndInt64Max", {4, 5}, {-100, 1}, {100, kMax}, {0, 1}, {}},
      {"Step2", {3, 6}, {0}, {6}, {1}, {2}},
      {"Step3_Rank3_TwoAxes", {3, 7, 2}, {1, 2}, {kMax, 3}, {1, 0}, {3, 1}},
      {"ReverseInt64Min", {3, 5}, {-1}, {kMin}, {1}, {-1}},
      {"NegativeStep2", {6, 3}, {4}, {0}, {0}, {-2}},
      {"NegativeStepClampedStart", {4, 3}, {100, -100}, {-100, 100}, {0, 1}, {-1, 1}},
      {"AxesOutOfOrder", {4, 5, 3}, {1, 2}, {3, 5}, {2, 0}, {1, 1}},
  };
  for (const Sl& s : slices) {
    std::vector<In> inputs = {X("x", s.shape), ConstInts("starts", s.starts), ConstInts("ends", s.ends)};
    if (!s.axes.empty() || !s.steps.empty()) inputs.push_back(ConstInts("axes", s.axes));
    if (!s.steps.empty()) inputs.push_back(ConstInts("steps", s.steps));
    cases.push_back(Case(absl::StrCat("Slice_", s.name), "Slice", inputs, [s](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefSlice(in[0], s.starts, s.ends, s.axes, s.steps)};
    }));
  }
  {
    // Opset 1-9: starts/ends/axes as attributes.
    OpCase c = Case("Slice_Attributes_Opset9", "Slice", {X("x", {4, 5})}, [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefSlice(in[0], {1, -3}, {-1, kMax}, {1, 0}, {})};
    });
    c.attrs.Set("starts", std::vector<int64_t>{1, -3});
    c.attrs.Set("ends", std::vector<int64_t>{-1, kMax});
    c.attrs.Set("axes", std::vector<int64_t>{1, 0});
    cases.push_back(std::move(c));
  }
  cases.push_back(ForwardOnly(
      Case("Slice_I64ShapeTail", "Slice",
           {Ints("x", {4}, {2, 3, 5, 7}), ConstInts("starts", {-2}), ConstInts("ends", {kMax})},
           [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefSlice(in[0], {-2}, {kMax}, {}, {})}; }),
      {DType::kI64}));
  for (auto [name, dy, shape, starts, steps] :
       std::vector<std::tuple<const char*, Shape, Shape, std::vector<int64_t>, std::vector<int64_t>>>{
           {"Step2", {2, 3}, {4, 6}, {1, 0}, {1, 2}}, {"NegativeStep", {3, 2}, {3, 5}, {2, 4}, {-1, -3}}}) {
    OpCase c = Case(absl::StrCat("SliceGrad_", name), "SliceGrad", {X("dy", dy)},
                    [shape = shape, starts = starts, steps = steps](const std::vector<Tensor>& in) {
                      return std::vector<Tensor>{RefSliceGrad(in[0], shape, starts, steps)};
                    });
    c.attrs.Set("shape", std::vector<int64_t>(shape.begin(), shape.end()));
    c.attrs.Set("starts", starts);
    c.attrs.Set("steps", steps);
    cases.push_back(ForwardOnly(std::move(c)));
  }
  return cases;
}

std::vector<OpCase> SqueezeExpandCases() {
  std::vector<OpCase> cases;
  const Shape x4 = {3, 1, 4, 1};
  {
    cases.push_back(Case("Squeeze_AxesInput", "Squeeze", {X("x", x4), ConstInts("axes", {1, -1})}, Same({3, 4})));
    OpCase attr = Case("Squeeze_AxesAttr_Opset11", "Squeeze", {X("x", x4)}, Same({3, 4, 1}));
    attr.attrs.Set("axes", std::vector<int64_t>{1});
    cases.push_back(std::move(attr));
    cases.push_back(Case("Squeeze_NoAxesRemovesAllOnes", "Squeeze", {X("x", {1, 3, 1, 4})}, Same({3, 4})));
    cases.push_back(
        ForwardOnly(Case("Squeeze_I64", "Squeeze", {Ints("x", {1, 3}, {5, 6, 7}), ConstInts("axes", {0})}, Same({3})),
                    {DType::kI64}));
  }
  {
    cases.push_back(
        Case("Unsqueeze_AxesInput", "Unsqueeze", {X("x", {3, 4}), ConstInts("axes", {0, -1})}, Same({1, 3, 4, 1})));
    cases.push_back(
        Case("Unsqueeze_AxesUnsorted", "Unsqueeze", {X("x", {2, 3}), ConstInts("axes", {2, 0})}, Same({1, 2, 1, 3})));
    OpCase attr = Case("Unsqueeze_AxesAttr_Opset11", "Unsqueeze", {X("x", {3, 4})}, Same({3, 1, 4}));
    attr.attrs.Set("axes", std::vector<int64_t>{1});
    cases.push_back(std::move(attr));
    cases.push_back(
        ForwardOnly(Case("Unsqueeze_I64Scalar", "Unsqueeze", {Ints("x", {}, {9}), ConstInts("axes", {0})}, Same({1})),
                    {DType::kI64}));
  }
  for (auto [name, in, target, out] : std::vector<std::tuple<const char*, Shape, std::vector<int64_t>, Shape>>{
           {"RowToMatrix", {4}, {3, 4}, {3, 4}},
           {"BothWays", {3, 1}, {2, 1, 4}, {2, 3, 4}},
           {"TargetSmallerRank", {2, 3}, {1}, {2, 3}},
           {"Scalar", {}, {2, 3}, {2, 3}},
           {"MiddleAxis", {2, 1, 3}, {2, 4, 3}, {2, 4, 3}}}) {
    cases.push_back(
        Case(absl::StrCat("Expand_", name), "Expand", {X("x", in), ConstInts("shape", target)},
             [out = out](const std::vector<Tensor>& t) { return std::vector<Tensor>{RefBroadcastTo(t[0], out)}; }));
  }
  cases.push_back(ForwardOnly(Case("Expand_I64", "Expand", {Ints("x", {2, 1}, {3, -4}), ConstInts("shape", {2, 3})},
                                   [](const std::vector<Tensor>& t) {
                                     return std::vector<Tensor>{RefBroadcastTo(t[0], {2, 3})};
                                   }),
                              {DType::kI64}));
  return cases;
}

std::vector<OpCase> LogicCases() {
  std::vector<OpCase> cases;
  auto cmp = [](std::function<double(double, double)> f) {
    return [f](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefBinary(in[0], in[1], f)}; };
  };
  const auto eq = [](double a, double b) { return a == b ? 1.0 : 0.0; };
  const auto lt = [](double a, double b) { return a < b ? 1.0 : 0.0; };
  const auto gt = [](double a, double b) { return a > b ? 1.0 : 0.0; };
  const std::vector<std::optional<DType>> bool_out = {DType::kBool};
  // Floats: values exact in every run dtype, with ties so that all three answers occur.
  const std::vector<double> a = {0.5, -1, 2, 0.25, 3, -1.5};
  const std::vector<double> b = {0.5, 2, -1.5};
  const auto le = [](double a, double b) { return a <= b ? 1.0 : 0.0; };
  const auto ge = [](double a, double b) { return a >= b ? 1.0 : 0.0; };
  for (auto [op, f] : std::vector<std::pair<const char*, std::function<double(double, double)>>>{
           {"Equal", eq}, {"Less", lt}, {"Greater", gt}, {"LessOrEqual", le}, {"GreaterOrEqual", ge}}) {
    cases.push_back(ForwardOnly(
        Case(absl::StrCat(op, "_Float_Broadcast"), op, {FedFloats("a", {2, 3}, a), FedFloats("b", {3}, b)}, cmp(f)),
        bool_out));
    cases.push_back(
        ForwardOnly(Case(absl::StrCat(op, "_Float_Random"), op, {X("a", {3, 4}), X("b", {3, 1})}, cmp(f)), bool_out));
    cases.push_back(ForwardOnly(
        Case(absl::StrCat(op, "_I64"), op, {Ints("a", {2, 3}, {1, -5, 7, 0, 3, 3}), Ints("b", {2, 1}, {3, 0})}, cmp(f)),
        bool_out));
    cases.push_back(
        ForwardOnly(Case(absl::StrCat(op, "_I32_Scalar"), op,
                         {Ints("a", {4}, {1, 2, 3, 4}, DType::kI32), Ints("b", {}, {2}, DType::kI32)}, cmp(f)),
                    bool_out));
  }
  cases.push_back(ForwardOnly(
      Case("Equal_Bool", "Equal", {Bools("a", {4}, {0, 1, 0, 1}), Bools("b", {4}, {0, 0, 1, 1})}, cmp(eq)), bool_out));
  cases.push_back(
      ForwardOnly(Case("And_Broadcast", "And", {Bools("a", {2, 3}, {0, 1, 1, 1, 0, 1}), Bools("b", {3}, {1, 1, 0})},
                       cmp([](double x, double y) { return x != 0 && y != 0 ? 1.0 : 0.0; })),
                  bool_out));
  cases.push_back(
      ForwardOnly(Case("Or_Broadcast", "Or", {Bools("a", {2, 3}, {0, 1, 0, 0, 0, 1}), Bools("b", {3}, {1, 0, 0})},
                       cmp([](double x, double y) { return x != 0 || y != 0 ? 1.0 : 0.0; })),
                  bool_out));
  cases.push_back(
      ForwardOnly(Case("Xor_Broadcast", "Xor", {Bools("a", {2, 3}, {0, 1, 0, 1, 0, 1}), Bools("b", {2, 1}, {1, 0})},
                       cmp([](double x, double y) { return (x != 0) != (y != 0) ? 1.0 : 0.0; })),
                  bool_out));
  cases.push_back(ForwardOnly(Case("Not_Rank2", "Not", {Bools("x", {2, 3}, {0, 1, 1, 0, 0, 1})},
                                   [](const std::vector<Tensor>& in) {
                                     return std::vector<Tensor>{
                                         RefUnary(in[0], [](double v) { return v != 0 ? 0.0 : 1.0; })};
                                   }),
                              bool_out));
  return cases;
}

std::vector<OpCase> GeneratorCases() {
  std::vector<OpCase> cases;
  auto fill = [](Shape shape, double v) {
    return [shape, v](const std::vector<Tensor>&) {
      Tensor y = F64(shape);
      for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = v;
      return std::vector<Tensor>{y};
    };
  };
  {
    OpCase c = Case("ConstantOfShape_F32Value", "ConstantOfShape", {ConstInts("shape", {2, 3})}, fill({2, 3}, 1.5));
    c.attrs.Set("value", 1.5f);
    cases.push_back(ForwardOnly(std::move(c), {DType::kF32}));
  }
  cases.push_back(
      ForwardOnly(Case("ConstantOfShape_DefaultZeroF32", "ConstantOfShape", {ConstInts("shape", {4})}, fill({4}, 0)),
                  {DType::kF32}));
  {
    OpCase c = Case("ConstantOfShape_I64", "ConstantOfShape", {ConstInts("shape", {3, 1})}, fill({3, 1}, -7));
    c.attrs.Set("dtype", int64_t{7});
    c.attrs.Set("value", int64_t{-7});
    cases.push_back(ForwardOnly(std::move(c), {DType::kI64}));
  }
  {
    OpCase c = Case("ConstantOfShape_Bool", "ConstantOfShape", {ConstInts("shape", {2, 2})}, fill({2, 2}, 1));
    c.attrs.Set("dtype", int64_t{9});
    c.attrs.Set("value", int64_t{1});
    cases.push_back(ForwardOnly(std::move(c), {DType::kBool}));
  }
  auto ints = [](std::vector<double> v) {
    return [v](const std::vector<Tensor>&) {
      return std::vector<Tensor>{Tensor::FromVector<double>({static_cast<int64_t>(v.size())}, v)};
    };
  };
  cases.push_back(ForwardOnly(Case("Shape_Rank3", "Shape", {X("x", {2, 3, 4})}, ints({2, 3, 4})), {DType::kI64}));
  {
    OpCase c = Case("Shape_StartEnd_Opset15", "Shape", {X("x", {2, 3, 4, 5})}, ints({3, 4}));
    c.attrs.Set("start", int64_t{1});
    c.attrs.Set("end", int64_t{-1});
    cases.push_back(ForwardOnly(std::move(c), {DType::kI64}));
  }
  auto range = [](double start, double delta, int64_t n) {
    return [=](const std::vector<Tensor>&) {
      Tensor y = F64({n});
      for (int64_t i = 0; i < n; ++i) P(y)[i] = start + static_cast<double>(i) * delta;
      return std::vector<Tensor>{y};
    };
  };
  cases.push_back(ForwardOnly(Case("Range_Float", "Range",
                                   {ConstFloat("start", 0.5), ConstFloat("limit", 3), ConstFloat("delta", 0.25)},
                                   range(0.5, 0.25, 10))));
  cases.push_back(ForwardOnly(Case("Range_FloatNegativeDelta", "Range",
                                   {ConstFloat("start", 3), ConstFloat("limit", -1), ConstFloat("delta", -0.5)},
                                   range(3, -0.5, 8))));
  cases.push_back(ForwardOnly(Case("Range_I64", "Range",
                                   {ConstScalar("start", 2, DType::kI64), ConstScalar("limit", 11, DType::kI64),
                                    ConstScalar("delta", 3, DType::kI64)},
                                   range(2, 3, 3)),
                              {DType::kI64}));
  return cases;
}

std::vector<OpCase> TensorCases() {
  std::vector<OpCase> all;
  for (auto family :
       {GatherCases, WhereCases, ConcatSplitCases, SliceCases, SqueezeExpandCases, LogicCases, GeneratorCases}) {
    for (OpCase& c : family()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace

MPC_REGISTER_OP_CASES(Tensor, TensorCases);

}  // namespace mpc::opcases
