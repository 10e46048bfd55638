// The op-numerics cases of the convolution and pooling ops: Conv (strides, asymmetric
// pads, dilation, groups, depthwise, bias or not, auto_pad SAME_UPPER / SAME_LOWER /
// VALID, 1x1, 1-D), MaxPool / AveragePool (ceil_mode, pads, dilation, count_include_pad,
// auto_pad, 1-D), GlobalAveragePool, GlobalMaxPool, and the backward ops ConvGradInput,
// ConvGradWeight, MaxPoolGrad and AveragePoolGrad forward-checked in every dtype; and the
// three convolution ops in TF32 (mpc_tf32).
//
// The references below are written from ONNX's definitions, independently of
// graph/ops_conv_util.cc: every case states its explicit pads (SAME pads worked out by
// hand in the case), and a window visitor enumerates (input, weight, output) index
// triples that forward and both backward references share.
#include <functional>
#include <limits>

#include "graph/graph.h"
#include "gtest/gtest.h"
#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

// A 2-D problem (1-D cases have h = kh = 1, stride/dilation 1 and no pads along H).
struct Geo {
  int64_t n, c, h, w, m, kh, kw, g;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;
  bool ceil = false;  // pooling: ceil_mode
  int64_t OutH() const { return Out(h, kh, sh, dh, pt, pb); }
  int64_t OutW() const { return Out(w, kw, sw, dw, pl, pr); }
  int64_t Out(int64_t in, int64_t k, int64_t s, int64_t d, int64_t p0, int64_t p1) const {
    const int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
    if (!ceil) return span / s + 1;
    // ONNX opset 17: ceil, and a last window starting in the end padding is kept
    // (PyTorch would drop it); it sees no input and gives 0.
    return (span + s - 1) / s + 1;
  }
};

// Calls f(x_index, w_index, y_index) for every product term of the convolution
// (indices into NCHW X, [M, C/g, kh, kw] W and NCHW Y).
void ForEachConvTerm(const Geo& q, const std::function<void(int64_t, int64_t, int64_t)>& f) {
  const int64_t oh = q.OutH(), ow = q.OutW(), cg = q.c / q.g, mg = q.m / q.g;
  for (int64_t n = 0; n < q.n; ++n) {
    for (int64_t m = 0; m < q.m; ++m) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t x = 0; x < ow; ++x) {
          for (int64_t ic = 0; ic < cg; ++ic) {
            const int64_t c = (m / mg) * cg + ic;
            for (int64_t i = 0; i < q.kh; ++i) {
              for (int64_t j = 0; j < q.kw; ++j) {
                const int64_t ih = y * q.sh - q.pt + i * q.dh, iw = x * q.sw - q.pl + j * q.dw;
                if (ih < 0 || ih >= q.h || iw < 0 || iw >= q.w) continue;
                f(((n * q.c + c) * q.h + ih) * q.w + iw, ((m * cg + ic) * q.kh + i) * q.kw + j,
                  ((n * q.m + m) * oh + y) * ow + x);
              }
            }
          }
        }
      }
    }
  }
}

Shape XShape(const Geo& q, bool one_d) { return one_d ? Shape{q.n, q.c, q.w} : Shape{q.n, q.c, q.h, q.w}; }
Shape WShape(const Geo& q, bool one_d) {
  return one_d ? Shape{q.m, q.c / q.g, q.kw} : Shape{q.m, q.c / q.g, q.kh, q.kw};
}
Shape YShape(const Geo& q, int64_t channels, bool one_d) {
  return one_d ? Shape{q.n, channels, q.OutW()} : Shape{q.n, channels, q.OutH(), q.OutW()};
}

Tensor RefConv(const Geo& q, bool one_d, const Tensor& x, const Tensor& w, const Tensor* b) {
  Tensor y = F64(YShape(q, q.m, one_d));
  const int64_t plane = q.OutH() * q.OutW();
  if (b) {
    for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = P(*b)[(i / plane) % q.m];
  }
  ForEachConvTerm(q, [&](int64_t xi, int64_t wi, int64_t yi) { P(y)[yi] += P(x)[xi] * P(w)[wi]; });
  return y;
}

Tensor RefConvGradInput(const Geo& q, bool one_d, const Tensor& dy, const Tensor& w) {
  Tensor dx = F64(XShape(q, one_d));
  ForEachConvTerm(q, [&](int64_t xi, int64_t wi, int64_t yi) { P(dx)[xi] += P(dy)[yi] * P(w)[wi]; });
  return dx;
}

Tensor RefConvGradWeight(const Geo& q, bool one_d, const Tensor& dy, const Tensor& x) {
  Tensor dw = F64(WShape(q, one_d));
  ForEachConvTerm(q, [&](int64_t xi, int64_t wi, int64_t yi) { P(dw)[wi] += P(dy)[yi] * P(x)[xi]; });
  return dw;
}

struct ConvSpec {
  const char* name;
  Geo q;
  bool one_d = false;
  bool bias = false;
  AttrMap attrs;  // as set on the node (explicit pads, or auto_pad)
};

AttrMap ConvAttrs(const Geo& q, bool one_d, bool pads, bool strides_dil = true) {
  AttrMap a;
  if (one_d) {
    if (pads) a.Set("pads", std::vector<int64_t>{q.pl, q.pr});
    if (strides_dil) {
      a.Set("strides", std::vector<int64_t>{q.sw});
      a.Set("dilations", std::vector<int64_t>{q.dw});
    }
  } else {
    if (pads) a.Set("pads", std::vector<int64_t>{q.pt, q.pl, q.pb, q.pr});
    if (strides_dil) {
      a.Set("strides", std::vector<int64_t>{q.sh, q.sw});
      a.Set("dilations", std::vector<int64_t>{q.dh, q.dw});
    }
  }
  if (q.g != 1) a.Set("group", q.g);
  return a;
}

std::vector<ConvSpec> ConvSpecs() {
  std::vector<ConvSpec> specs;
  auto add = [&](const char* name, Geo q, bool bias, bool one_d = false) {
    ConvSpec s{name, q, one_d, bias, ConvAttrs(q, one_d, true)};
    specs.push_back(s);
    return &specs.back();
  };
  add("Basic3x3_Bias", Geo{2, 3, 6, 6, 4, 3, 3, 1}, true);
  add("Basic3x3_NoBias_DefaultAttrs", Geo{1, 2, 5, 4, 3, 3, 3, 1}, false)->attrs = AttrMap();
  {
    Geo q{1, 2, 7, 6, 3, 3, 3, 1};
    q.sh = q.sw = 2;
    q.pt = 1, q.pl = 0, q.pb = 2, q.pr = 1;
    add("Stride2_AsymPads", q, false);
    add("Stride2_AsymPads_Bias", q, true);
  }
  {
    Geo q{1, 2, 7, 7, 2, 3, 3, 1};
    q.dh = q.dw = 2;
    q.pt = q.pl = q.pb = q.pr = 2;
    add("Dilation2_Pads2_Bias", q, true);
  }
  {
    Geo q{1, 2, 8, 7, 2, 2, 3, 1};
    q.dh = 2, q.dw = 3, q.sh = 1, q.sw = 2, q.pt = 1, q.pr = 1;
    add("Dilation2x3_Stride1x2", q, false);
  }
  {
    Geo q{2, 4, 5, 5, 6, 3, 3, 2};
    q.pt = q.pl = q.pb = q.pr = 1;
    add("Group2_Pads1_Bias", q, true);
    add("Group2_Pads1", q, false);
  }
  {
    Geo q{1, 3, 6, 5, 3, 3, 3, 3};
    q.sh = q.sw = 2;
    q.pt = q.pl = q.pb = q.pr = 1;
    add("Depthwise_Stride2_Bias", q, true);
  }
  {
    Geo q{1, 2, 5, 5, 4, 3, 3, 2};  // two output channels per input channel
    q.pt = q.pl = q.pb = q.pr = 1;
    add("Depthwise_Multiplier2", q, false);
  }
  {
    // SAME_UPPER, strides 2 on 5x6: out 3x3; total pad H = 2*2+3-5 = 2 (1, 1),
    // W = 2*2+3-6 = 1 (0 before, 1 after).
    Geo q{1, 2, 5, 6, 3, 3, 3, 1};
    q.sh = q.sw = 2;
    q.pt = 1, q.pb = 1, q.pl = 0, q.pr = 1;
    ConvSpec* s = add("AutoPadSameUpper_Stride2_Bias", q, true);
    s->attrs = ConvAttrs(q, false, false);
    s->attrs.Set("auto_pad", std::string("SAME_UPPER"));
    q.pl = 1, q.pr = 0;  // SAME_LOWER puts the odd pad first
    s = add("AutoPadSameLower_Stride2", q, false);
    s->attrs = ConvAttrs(q, false, false);
    s->attrs.Set("auto_pad", std::string("SAME_LOWER"));
  }
  {
    // SAME_UPPER, stride 1 on 4x4 with a 3x3 kernel: pads 1 all round.
    Geo q{2, 2, 4, 4, 2, 3, 3, 1};
    q.pt = q.pl = q.pb = q.pr = 1;
    ConvSpec* s = add("AutoPadSameUpper_Stride1", q, false);
    s->attrs = AttrMap();
    s->attrs.Set("auto_pad", std::string("SAME_UPPER"));
  }
  {
    Geo q{1, 2, 6, 5, 2, 3, 2, 1};
    q.sh = 2;
    ConvSpec* s = add("AutoPadValid_Stride2x1", q, true);
    s->attrs = ConvAttrs(q, false, false);
    s->attrs.Set("auto_pad", std::string("VALID"));
  }
  add("Conv1x1_Bias", Geo{2, 4, 3, 3, 5, 1, 1, 1}, true);
  {
    Geo q{1, 3, 4, 4, 2, 3, 3, 1};
    ConvSpec* s = add("KernelShapeAttr", q, false);
    s->attrs.Set("kernel_shape", std::vector<int64_t>{3, 3});
  }
  {
    Geo q{2, 3, 1, 8, 4, 1, 3, 1};
    q.sw = 2, q.pl = 1, q.pr = 1;
    add("Conv1D_Stride2_Pads_Bias", q, true, /*one_d=*/true);
  }
  {
    Geo q{1, 4, 1, 9, 4, 1, 3, 2};
    q.dw = 2, q.pl = 2, q.pr = 0;
    add("Conv1D_Group2_Dilation2", q, false, /*one_d=*/true);
  }
  return specs;
}

std::vector<OpCase> ConvCasesOnly() {
  std::vector<OpCase> cases;
  for (const ConvSpec& s : ConvSpecs()) {
    const Geo q = s.q;
    const bool one_d = s.one_d, bias = s.bias;
    OpCase c;
    c.name = absl::StrCat("Conv_", s.name);
    c.op = "Conv";
    c.attrs = s.attrs;
    c.inputs = {X("X", XShape(q, one_d)), X("W", WShape(q, one_d))};
    if (bias) c.inputs.push_back(X("B", {q.m}));
    c.ref = [q, one_d, bias](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefConv(q, one_d, in[0], in[1], bias ? &in[2] : nullptr)};
    };
    cases.push_back(std::move(c));

    // The backward ops, forward-checked (they have no gradients of their own).
    AttrMap grad_attrs = s.attrs;
    grad_attrs.Set("kernel_shape", one_d ? std::vector<int64_t>{q.kw} : std::vector<int64_t>{q.kh, q.kw});
    OpCase gi;
    gi.name = absl::StrCat("ConvGradInput_", s.name);
    gi.op = "ConvGradInput";
    gi.attrs = grad_attrs;
    const Shape xs = XShape(q, one_d);
    gi.attrs.Set("input_shape", std::vector<int64_t>(xs.begin(), xs.end()));
    gi.inputs = {X("dY", YShape(q, q.m, one_d)), X("W", WShape(q, one_d))};
    gi.gradient = false;
    gi.ref = [q, one_d](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefConvGradInput(q, one_d, in[0], in[1])};
    };
    cases.push_back(std::move(gi));
    OpCase gw;
    gw.name = absl::StrCat("ConvGradWeight_", s.name);
    gw.op = "ConvGradWeight";
    gw.attrs = grad_attrs;
    gw.inputs = {X("dY", YShape(q, q.m, one_d)), X("X", XShape(q, one_d))};
    gw.gradient = false;
    gw.ref = [q, one_d](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefConvGradWeight(q, one_d, in[0], in[1])};
    };
    cases.push_back(std::move(gw));
  }
  return cases;
}

// TF32 (mpc_tf32 = 1, which the tf32 pass sets on f32 convolutions and their gradients):
// Conv, ConvGradInput and ConvGradWeight on fixed f32 operands (one f32 graph in every run
// dtype) against references on the operands rounded to TF32 (the bias stays f32), for a
// plain, a strided / asymmetrically padded, a grouped and a 1-D geometry. 8 input
// channels and 3x3 windows: 72 rounded products per output of the forward pass.
std::vector<OpCase> Tf32ConvCases() {
  std::vector<OpCase> cases;
  auto tf32 = [](OpCase& c) {
    c.attrs.Set("mpc_tf32", int64_t{1});
    c.out_dtypes = {DType::kF32};
    c.gradient = false;  // a kernel mode: the op's gradient is checked by the f32 cases
    c.tf32 = true;
  };
  std::vector<ConvSpec> specs;
  specs.push_back({"Basic3x3_Bias", Geo{2, 8, 6, 6, 6, 3, 3, 1}, false, true, {}});
  {
    Geo q{1, 8, 7, 6, 4, 3, 3, 1};
    q.sh = q.sw = 2;
    q.pt = 1, q.pl = 0, q.pb = 2, q.pr = 1;
    specs.push_back({"Stride2_AsymPads", q, false, false, {}});
  }
  {
    Geo q{2, 8, 5, 5, 6, 3, 3, 2};
    q.pt = q.pl = q.pb = q.pr = 1;
    specs.push_back({"Group2_Pads1_Bias", q, false, true, {}});
  }
  {
    Geo q{2, 8, 1, 9, 4, 1, 3, 1};
    q.sw = 2, q.pl = 1, q.pr = 1;
    specs.push_back({"Conv1D_Stride2_Pads", q, true, false, {}});
  }
  for (ConvSpec& s : specs) {
    s.attrs = ConvAttrs(s.q, s.one_d, true);
    const Geo q = s.q;
    const bool one_d = s.one_d, bias = s.bias;
    OpCase c;
    c.name = absl::StrCat("Conv_Tf32_", s.name);
    c.op = "Conv";
    c.attrs = s.attrs;
    c.inputs = {XTyped("X", XShape(q, one_d), DType::kF32), XTyped("W", WShape(q, one_d), DType::kF32)};
    if (bias) c.inputs.push_back(XTyped("B", {q.m}, DType::kF32));
    tf32(c);
    c.ref = [q, one_d, bias](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{
          RefConv(q, one_d, RefRoundToTf32(in[0]), RefRoundToTf32(in[1]), bias ? &in[2] : nullptr)};
    };
    cases.push_back(std::move(c));

    AttrMap grad_attrs = s.attrs;
    grad_attrs.Set("kernel_shape", one_d ? std::vector<int64_t>{q.kw} : std::vector<int64_t>{q.kh, q.kw});
    OpCase gi;
    gi.name = absl::StrCat("ConvGradInput_Tf32_", s.name);
    gi.op = "ConvGradInput";
    gi.attrs = grad_attrs;
    const Shape xs = XShape(q, one_d);
    gi.attrs.Set("input_shape", std::vector<int64_t>(xs.begin(), xs.end()));
    gi.inputs = {XTyped("dY", YShape(q, q.m, one_d), DType::kF32), XTyped("W", WShape(q, one_d), DType::kF32)};
    tf32(gi);
    gi.ref = [q, one_d](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefConvGradInput(q, one_d, RefRoundToTf32(in[0]), RefRoundToTf32(in[1]))};
    };
    cases.push_back(std::move(gi));
    OpCase gw;
    gw.name = absl::StrCat("ConvGradWeight_Tf32_", s.name);
    gw.op = "ConvGradWeight";
    gw.attrs = grad_attrs;
    gw.inputs = {XTyped("dY", YShape(q, q.m, one_d), DType::kF32), XTyped("X", XShape(q, one_d), DType::kF32)};
    tf32(gw);
    gw.ref = [q, one_d](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefConvGradWeight(q, one_d, RefRoundToTf32(in[0]), RefRoundToTf32(in[1]))};
    };
    cases.push_back(std::move(gw));
  }
  return cases;
}

// ---------------------------------------------------------------------------------
// Pooling. q.c is the channel count, q.m unused (= c), q.g = 1.

// Calls f(y_index, taps, count_with_pads) for every output element, where taps are the
// X indices of the window inside the input and count_with_pads counts the window's
// taps inside the explicitly padded input (count_include_pad's divisor).
void ForEachPoolWindow(const Geo& q, const std::function<void(int64_t, const std::vector<int64_t>&, int64_t)>& f) {
  const int64_t oh = q.OutH(), ow = q.OutW();
  for (int64_t p = 0; p < q.n * q.c; ++p) {
    for (int64_t y = 0; y < oh; ++y) {
      for (int64_t x = 0; x < ow; ++x) {
        std::vector<int64_t> taps;
        int64_t padded = 0;
        for (int64_t i = 0; i < q.kh; ++i) {
          for (int64_t j = 0; j < q.kw; ++j) {
            const int64_t ih = y * q.sh - q.pt + i * q.dh, iw = x * q.sw - q.pl + j * q.dw;
            padded += ih >= -q.pt && ih < q.h + q.pb && iw >= -q.pl && iw < q.w + q.pr;
            if (ih >= 0 && ih < q.h && iw >= 0 && iw < q.w) taps.push_back((p * q.h + ih) * q.w + iw);
          }
        }
        f((p * oh + y) * ow + x, taps, padded);
      }
    }
  }
}

// The first maximum of a window (row-major tap order); -1 for a window without input.
int64_t FirstMax(const Tensor& x, const std::vector<int64_t>& taps) {
  if (taps.empty()) return -1;
  int64_t best = taps[0];
  for (int64_t t : taps) {
    if (P(x)[t] > P(x)[best]) best = t;
  }
  return best;
}

Tensor RefMaxPool(const Geo& q, bool one_d, const Tensor& x) {
  Tensor y = F64(YShape(q, q.c, one_d));
  ForEachPoolWindow(q, [&](int64_t yi, const std::vector<int64_t>& taps, int64_t) {
    const int64_t i = FirstMax(x, taps);
    P(y)[yi] = i < 0 ? 0.0 : P(x)[i];
  });
  return y;
}

Tensor RefMaxPoolGrad(const Geo& q, bool one_d, const Tensor& dy, const Tensor& x) {
  Tensor dx = F64(XShape(q, one_d));
  ForEachPoolWindow(q, [&](int64_t yi, const std::vector<int64_t>& taps, int64_t) {
    const int64_t i = FirstMax(x, taps);
    if (i >= 0) P(dx)[i] += P(dy)[yi];
  });
  return dx;
}

Tensor RefAvgPool(const Geo& q, bool one_d, bool include_pad, const Tensor& x) {
  Tensor y = F64(YShape(q, q.c, one_d));
  ForEachPoolWindow(q, [&](int64_t yi, const std::vector<int64_t>& taps, int64_t padded) {
    double sum = 0;
    for (int64_t t : taps) sum += P(x)[t];
    const int64_t count = include_pad ? padded : static_cast<int64_t>(taps.size());
    P(y)[yi] = count == 0 ? 0.0 : sum / static_cast<double>(count);
  });
  return y;
}

Tensor RefAvgPoolGrad(const Geo& q, bool one_d, bool include_pad, const Tensor& dy) {
  Tensor dx = F64(XShape(q, one_d));
  ForEachPoolWindow(q, [&](int64_t yi, const std::vector<int64_t>& taps, int64_t padded) {
    const int64_t count = include_pad ? padded : static_cast<int64_t>(taps.size());
    for (int64_t t : taps) P(dx)[t] += P(dy)[yi] / static_cast<double>(count);
  });
  return dx;
}

struct PoolSpec {
  const char* name;
  Geo q;
  bool one_d = false;
  AttrMap attrs;  // kernel_shape, strides, pads / auto_pad, dilations, ceil_mode
};

AttrMap PoolAttrs(const Geo& q, bool one_d, bool pads = true) {
  AttrMap a = ConvAttrs(q, one_d, pads);
  a.Set("kernel_shape", one_d ? std::vector<int64_t>{q.kw} : std::vector<int64_t>{q.kh, q.kw});
  if (q.ceil) a.Set("ceil_mode", int64_t{1});
  return a;
}

Geo PoolGeo(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw, int64_t s) {
  Geo q{n, c, h, w, c, kh, kw, 1};
  q.sh = q.sw = s;
  return q;
}

std::vector<PoolSpec> PoolSpecs() {
  std::vector<PoolSpec> specs;
  auto add = [&](const char* name, Geo q, bool one_d = false) {
    specs.push_back(PoolSpec{name, q, one_d, PoolAttrs(q, one_d)});
    return &specs.back();
  };
  add("2x2_Stride2", PoolGeo(2, 3, 6, 6, 2, 2, 2));
  {
    Geo q = PoolGeo(1, 2, 7, 7, 3, 3, 2);  // overlapping windows
    q.pt = q.pl = q.pb = q.pr = 1;
    add("3x3_Stride2_Pads1", q);
  }
  {
    Geo q = PoolGeo(1, 2, 7, 6, 3, 3, 2);  // H: 4 windows (floor 3); W: 4 (floor 3)
    q.pt = 1, q.pl = 1, q.pb = 1, q.pr = 1;
    q.ceil = true;
    add("3x3_Stride2_Pads1_Ceil", q);
  }
  {
    // ceil_mode adds a last window that starts in the end padding: 4x4 outputs, the
    // last row and column see no input (ONNX keeps them; PyTorch would give 3x3).
    Geo q = PoolGeo(1, 2, 5, 5, 2, 2, 2);
    q.pt = q.pl = q.pb = q.pr = 1;
    q.ceil = true;
    add("2x2_Stride2_Pads1_CeilEmptyLastWindow", q);
  }
  {
    Geo q = PoolGeo(1, 2, 5, 6, 3, 2, 2);
    q.pt = 1, q.pl = 0, q.pb = 0, q.pr = 1;  // asymmetric
    add("3x2_Stride2_AsymPads", q);
  }
  {
    Geo q = PoolGeo(1, 2, 7, 7, 2, 2, 1);
    q.dh = q.dw = 2;
    add("2x2_Dilation2", q);
  }
  // Windows wholly inside the input with a kernel other than 2x2 / 3x3, overlapping (the
  // CPU's fast path with runtime window sizes and an accumulated gradient).
  add("2x3_Stride1_Full", PoolGeo(2, 2, 5, 6, 2, 3, 1));
  {
    // SAME_UPPER, 3x3 stride 2 on 5x6: out 3x3; pads H 1/1, W 0/1.
    Geo q = PoolGeo(1, 2, 5, 6, 3, 3, 2);
    q.pt = 1, q.pb = 1, q.pl = 0, q.pr = 1;
    PoolSpec* s = add("3x3_Stride2_AutoPadSameUpper", q);
    s->attrs = PoolAttrs(q, false, false);
    s->attrs.Set("auto_pad", std::string("SAME_UPPER"));
  }
  {
    Geo q = PoolGeo(1, 2, 6, 5, 3, 3, 2);
    PoolSpec* s = add("3x3_Stride2_AutoPadValid", q);
    s->attrs = PoolAttrs(q, false, false);
    s->attrs.Set("auto_pad", std::string("VALID"));
  }
  {
    Geo q = PoolGeo(2, 3, 1, 9, 1, 3, 2);
    q.pl = 1, q.pr = 1;
    add("1D_3_Stride2_Pads1", q, /*one_d=*/true);
  }
  // Rows of 16 or more windows take the CPU's vector path (kernels_pool.cc); the cases
  // above are narrower and take the window-by-window one.
  {
    Geo q = PoolGeo(1, 2, 9, 34, 3, 3, 2);  // ResNet's stem pool: 17 windows a row
    q.pt = q.pl = q.pb = q.pr = 1;
    add("3x3_Stride2_Pads1_Wide", q);
  }
  {
    Geo q = PoolGeo(1, 2, 6, 36, 3, 3, 2);  // ceil_mode: 18 windows, the last partly outside
    q.pt = q.pl = q.pb = q.pr = 1;
    q.ceil = true;
    add("3x3_Stride2_Pads1_Ceil_Wide", q);
  }
  {
    Geo q = PoolGeo(1, 2, 5, 40, 2, 2, 2);  // ceil_mode with a last window that sees no input
    q.pt = q.pl = q.pb = q.pr = 1;
    q.ceil = true;
    add("2x2_Stride2_Pads1_CeilEmptyLastWindow_Wide", q);
  }
  add("2x2_Stride2_Wide", PoolGeo(2, 2, 4, 34, 2, 2, 2));
  {
    Geo q = PoolGeo(1, 2, 7, 40, 3, 3, 2);
    q.dh = 2, q.dw = 3;  // dilated taps, padded: 18 windows a row
    q.pt = q.pl = q.pb = q.pr = 2;
    add("3x3_Stride2_Dilation2x3_Pads2_Wide", q);
  }
  {
    Geo q = PoolGeo(2, 3, 1, 40, 1, 3, 2);
    q.pl = 1, q.pr = 1;
    add("1D_3_Stride2_Pads1_Wide", q, /*one_d=*/true);
  }
  return specs;
}

// Max pooling over data full of ties (values from {-1, 0, 0.5, 1}, exact in every float
// dtype): the first maximum in row-major order takes the window and its gradient, in
// the disjoint 2x2/2 fast path and the overlapping general path alike, in narrow rows
// and in the wide rows of the vector path.
void AddMaxPoolTieCases(std::vector<OpCase>& cases) {
  const struct {
    const char* name;
    Geo q;
  } geos[] = {{"2x2_Stride2_Ties", PoolGeo(2, 3, 6, 6, 2, 2, 2)},
              {"3x3_Stride1_Ties", PoolGeo(1, 2, 6, 7, 3, 3, 1)},
              {"2x2_Stride2_Ties_Wide", PoolGeo(1, 2, 4, 34, 2, 2, 2)},
              {"3x3_Stride1_Ties_Wide", PoolGeo(1, 2, 5, 20, 3, 3, 1)}};
  for (const auto& [name, q] : geos) {
    const Shape xs = XShape(q, false), ys = YShape(q, q.c, false);
    std::vector<double> xv(static_cast<size_t>(NumElements(xs)));
    const double levels[] = {-1, 0, 0.5, 1};
    for (size_t i = 0; i < xv.size(); ++i) xv[i] = levels[(i * 7 + i / 5) % 4];
    In x = X("X", xs);
    x.role = Role::kFed;
    x.value = Tensor::FromVector<double>(xs, xv);
    OpCase c;
    c.name = absl::StrCat("MaxPool_", name);
    c.op = "MaxPool";
    c.attrs = PoolAttrs(q, false);
    c.inputs = {x};
    c.exact = true;
    c.gradient = false;  // ties: not differentiable
    c.ref = [q](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefMaxPool(q, false, in[0])}; };
    cases.push_back(c);
    OpCase g = c;
    g.name = absl::StrCat("MaxPoolGrad_", name);
    g.op = "MaxPoolGrad";
    g.inputs = {X("dY", ys), x};
    g.exact = false;
    g.ref = [q](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefMaxPoolGrad(q, false, in[0], in[1])}; };
    cases.push_back(g);
  }
}

std::vector<OpCase> PoolCases() {
  std::vector<OpCase> cases;
  AddMaxPoolTieCases(cases);
  for (const PoolSpec& s : PoolSpecs()) {
    const Geo q = s.q;
    const bool one_d = s.one_d;
    const Shape xs = XShape(q, one_d), ys = YShape(q, q.c, one_d);
    {
      OpCase c;
      c.name = absl::StrCat("MaxPool_", s.name);
      c.op = "MaxPool";
      c.attrs = s.attrs;
      c.inputs = {X("X", xs)};
      c.exact = true;  // a max selects one of its inputs
      c.ref = [q, one_d](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefMaxPool(q, one_d, in[0])}; };
      cases.push_back(std::move(c));
      OpCase g;
      g.name = absl::StrCat("MaxPoolGrad_", s.name);
      g.op = "MaxPoolGrad";
      g.attrs = s.attrs;
      g.inputs = {X("dY", ys), X("X", xs)};
      g.gradient = false;
      g.ref = [q, one_d](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefMaxPoolGrad(q, one_d, in[0], in[1])};
      };
      cases.push_back(std::move(g));
    }
    for (int include : {0, 1}) {
      OpCase c;
      c.name = absl::StrCat("AveragePool_", s.name, "_CountIncludePad", include);
      c.op = "AveragePool";
      c.attrs = s.attrs;
      c.attrs.Set("count_include_pad", int64_t{include});
      c.inputs = {X("X", xs)};
      c.ref = [q, one_d, include](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefAvgPool(q, one_d, include != 0, in[0])};
      };
      // Without pads both settings are the same op: check the gradient once.
      const bool padded = q.pt + q.pl + q.pb + q.pr > 0;
      c.gradient = include == 1 || padded;
      cases.push_back(std::move(c));
      OpCase g;
      g.name = absl::StrCat("AveragePoolGrad_", s.name, "_CountIncludePad", include);
      g.op = "AveragePoolGrad";
      g.attrs = s.attrs;
      g.attrs.Set("count_include_pad", int64_t{include});
      g.attrs.Set("input_shape", std::vector<int64_t>(xs.begin(), xs.end()));
      g.inputs = {X("dY", ys)};
      g.gradient = false;
      g.ref = [q, one_d, include](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefAvgPoolGrad(q, one_d, include != 0, in[0])};
      };
      cases.push_back(std::move(g));
    }
  }
  // Global pooling over 1-D and 2-D spatial extents.
  for (const Shape& xs : {Shape{2, 3, 4, 5}, Shape{2, 3, 7}, Shape{1, 4, 1, 1}}) {
    const std::string suffix = absl::StrCat("_Rank", xs.size(), xs.back() == 1 ? "_1x1" : "");
    for (bool is_max : {false, true}) {
      OpCase c;
      c.name = absl::StrCat(is_max ? "GlobalMaxPool" : "GlobalAveragePool", suffix);
      c.op = is_max ? "GlobalMaxPool" : "GlobalAveragePool";
      c.inputs = {X("X", xs)};
      c.exact = is_max;
      c.ref = [xs, is_max](const std::vector<Tensor>& in) {
        Shape ys(xs.size(), 1);
        ys[0] = xs[0];
        ys[1] = xs[1];
        Tensor y = F64(ys);
        const int64_t size = in[0].num_elements() / (xs[0] * xs[1]);
        for (int64_t p = 0; p < xs[0] * xs[1]; ++p) {
          double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t i = 0; i < size; ++i) {
            const double v = P(in[0])[p * size + i];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
          P(y)[p] = is_max ? acc : acc / static_cast<double>(size);
        }
        return std::vector<Tensor>{y};
      };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> ConvCases() {
  std::vector<OpCase> all = ConvCasesOnly();
  for (OpCase& c : Tf32ConvCases()) all.push_back(std::move(c));
  for (OpCase& c : PoolCases()) all.push_back(std::move(c));
  return all;
}

}  // namespace

MPC_REGISTER_OP_CASES(Conv, ConvCases);

}  // namespace mpc::opcases

// ---------------------------------------------------------------------------------
// Shape-inference errors: each names the node, the shapes and a fix. (Kept beside the
// cases so the conv family stays in one test file; the binary links gtest_main.)

namespace mpc {
namespace {

absl::Status AddConvLike(const std::string& op, const Shape& x, const std::vector<Shape>& more, AttrMap attrs) {
  Graph g;
  std::vector<Value*> ins{g.AddInput("x", DType::kF32, x)};
  for (size_t i = 0; i < more.size(); ++i) ins.push_back(g.AddInput(absl::StrCat("in", i), DType::kF32, more[i]));
  return g.AddNode(op, ins, std::move(attrs), "node7").status();
}

void ExpectError(const absl::Status& st, absl::StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(st.code(), code) << st;
  for (const std::string& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << p << " not in: " << st;
}

TEST(ConvShapeInference, ErrorsNameTheNodeTheShapesAndAFix) {
  ExpectError(AddConvLike("Conv", {1, 4, 5, 5}, {{6, 3, 3, 3}}, {}), absl::StatusCode::kInvalidArgument,
              {"node7", "Conv", "[1,4,5,5]", "[6,3,3,3]", "group=1", "W[1] = C/group"});
  AttrMap group3;
  group3.Set("group", int64_t{3});
  ExpectError(AddConvLike("Conv", {1, 6, 5, 5}, {{4, 2, 3, 3}}, group3), absl::StatusCode::kInvalidArgument,
              {"M=4", "group=3"});
  ExpectError(AddConvLike("Conv", {1, 2, 4, 4, 4}, {{3, 2, 3, 3, 3}}, {}), absl::StatusCode::kUnimplemented,
              {"node7", "[1,2,4,4,4]", "1-D and 2-D"});
  ExpectError(AddConvLike("Conv", {1, 2, 2, 2}, {{3, 2, 3, 3}}, {}), absl::StatusCode::kInvalidArgument,
              {"X [1,2,2,2]", "W [3,2,3,3]", "smaller than the kernel extent 3", "pad the input"});
  ExpectError(AddConvLike("Conv", {1, 2, 5, 5}, {{3, 2, 3, 3}, {4}}, {}), absl::StatusCode::kInvalidArgument,
              {"bias", "[4]", "must be [3]"});
  AttrMap both;
  both.Set("auto_pad", std::string("SAME_UPPER"));
  both.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  ExpectError(AddConvLike("Conv", {1, 2, 5, 5}, {{3, 2, 3, 3}}, both), absl::StatusCode::kInvalidArgument,
              {"auto_pad SAME_UPPER", "cannot be combined"});
  AttrMap bad_strides;
  bad_strides.Set("strides", std::vector<int64_t>{2});
  ExpectError(AddConvLike("Conv", {1, 2, 5, 5}, {{3, 2, 3, 3}}, bad_strides), absl::StatusCode::kInvalidArgument,
              {"strides [2]", "give 2 values"});
  AttrMap kernel;
  kernel.Set("kernel_shape", std::vector<int64_t>{2, 2});
  ExpectError(AddConvLike("Conv", {1, 2, 5, 5}, {{3, 2, 3, 3}}, kernel), absl::StatusCode::kInvalidArgument,
              {"kernel_shape [2,2]", "make it [3,3]"});
  AttrMap pool;
  pool.Set("kernel_shape", std::vector<int64_t>{3, 3});
  pool.Set("pads", std::vector<int64_t>{3, 0, 0, 0});
  ExpectError(AddConvLike("MaxPool", {1, 2, 5, 5}, {}, pool), absl::StatusCode::kInvalidArgument,
              {"node7", "MaxPool", "X [1,2,5,5]", "smaller than the kernel extent 3"});
  ExpectError(AddConvLike("AveragePool", {1, 2, 5, 5}, {}, {}), absl::StatusCode::kInvalidArgument,
              {"kernel_shape []", "one value per spatial axis"});
  AttrMap col_major = pool;
  col_major.Set("pads", std::vector<int64_t>{0, 0, 0, 0});
  col_major.Set("storage_order", int64_t{1});
  ExpectError(AddConvLike("MaxPool", {1, 2, 5, 5}, {}, col_major), absl::StatusCode::kUnimplemented, {"storage_order"});
  ExpectError(AddConvLike("GlobalAveragePool", {2, 3}, {}, {}), absl::StatusCode::kInvalidArgument,
              {"[2,3]", "rank >= 3"});
}

TEST(ConvShapeInference, GradOpsCheckTheirGradientShape) {
  AttrMap a;
  a.Set("kernel_shape", std::vector<int64_t>{3, 3});
  a.Set("input_shape", std::vector<int64_t>{1, 2, 5, 5});
  // The forward output for [1,2,5,5] with a 3x3 kernel is [1,3,3,3], not [1,3,4,4].
  ExpectError(AddConvLike("ConvGradInput", {1, 3, 4, 4}, {{3, 2, 3, 3}}, a), absl::StatusCode::kInvalidArgument,
              {"dY", "[1,3,4,4]", "[1,3,3,3]"});
  Graph g;
  Value* dy = g.AddInput("dy", DType::kF32, {1, 3, 3, 3});
  Value* w = g.AddInput("w", DType::kF32, {3, 2, 3, 3});
  auto node = g.AddNode("ConvGradInput", {dy, w}, a, "gi");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)->outputs[0]->shape, (Shape{1, 2, 5, 5}));
}

}  // namespace
}  // namespace mpc
