// The op-numerics cases of the core ops: Gemm, MatMul (also in TF32), the broadcasting
// binaries, the activations, softmax, shape ops, dropout, losses and the backward-only ops.
#include <map>
#include <tuple>

#include "tests/graph/op_cases.h"

namespace mpc::opcases {
namespace {

std::vector<OpCase> GemmCases() {
  std::vector<OpCase> cases;
  const int64_t m = 3, k = 5, n = 4;
  struct Bias {
    const char* name;
    std::optional<Shape> shape;
  };
  const std::vector<Bias> biases = {{"none", std::nullopt}, {"N", Shape{n}},     {"1N", Shape{1, n}},
                                    {"M1", Shape{m, 1}},    {"MN", Shape{m, n}}, {"scalar", Shape{}}};
  const std::vector<std::pair<double, double>> scales = {{1.0, 1.0}, {0.7, 1.0}, {1.0, -1.3}, {0.7, 1.3}, {1.0, 0.0}};
  for (int ta = 0; ta < 2; ++ta) {
    for (int tb = 0; tb < 2; ++tb) {
      for (const Bias& bias : biases) {
        for (auto [alpha, beta] : scales) {
          if (!bias.shape && beta != 1.0) continue;  // beta means nothing without C
          if (beta == 0.0 && bias.name != std::string("MN")) continue;
          OpCase c;
          c.name = absl::StrCat("Gemm_tA", ta, "_tB", tb, "_C", bias.name, "_alpha", Num(alpha), "_beta", Num(beta));
          c.op = "Gemm";
          if (ta) c.attrs.Set("transA", int64_t{1});
          if (tb) c.attrs.Set("transB", int64_t{1});
          if (alpha != 1.0) c.attrs.Set("alpha", static_cast<float>(alpha));
          if (beta != 1.0) c.attrs.Set("beta", static_cast<float>(beta));
          c.inputs = {X("A", ta ? Shape{k, m} : Shape{m, k}), X("B", tb ? Shape{n, k} : Shape{k, n})};
          if (bias.shape) c.inputs.push_back(X("C", *bias.shape));
          // The kernel sees alpha/beta as f32 attributes; so does the reference.
          const double fa = static_cast<float>(alpha), fb = static_cast<float>(beta);
          const bool has_c = bias.shape.has_value();
          c.ref = [=](const std::vector<Tensor>& in) {
            return std::vector<Tensor>{RefGemm(in[0], in[1], has_c ? &in[2] : nullptr, fa, fb, ta, tb)};
          };
          cases.push_back(std::move(c));
        }
      }
    }
  }
  {
    // mpc_output_dtype = 1: the product in f32 whatever the operands' dtype. Gemm is
    // linear in each operand, so a large FD step is exact and survives the f32 output.
    OpCase c;
    c.name = "Gemm_tA0_tB1_CN_OutputF32";
    c.op = "Gemm";
    c.attrs.Set("transB", int64_t{1});
    c.attrs.Set("mpc_output_dtype", int64_t{1});
    c.inputs = {X("A", {m, k}), X("B", {n, k}), X("C", {n})};
    c.out_dtypes = {DType::kF32};
    c.fd_step = 0.25;
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefGemm(in[0], in[1], &in[2], 1.0, 1.0, false, true)};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> MatMulCases() {
  std::vector<OpCase> cases;
  const std::vector<std::tuple<const char*, Shape, Shape>> shapes = {
      {"2D", {3, 5}, {5, 4}},
      {"3Dx2D", {2, 3, 5}, {5, 4}},
      {"2Dx3D", {3, 5}, {2, 5, 4}},
      {"Batched3D", {2, 3, 5}, {2, 5, 4}},
      {"Batched4D", {2, 2, 3, 5}, {2, 2, 5, 4}},
      {"BroadcastBatch", {2, 1, 3, 5}, {3, 5, 4}},
      {"BroadcastBatchOne", {2, 3, 5}, {1, 5, 4}},
  };
  for (const auto& [name, a, b] : shapes) {
    OpCase c;
    c.name = absl::StrCat("MatMul_", name);
    c.op = "MatMul";
    c.inputs = {X("A", a), X("B", b)};
    c.ref = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefMatMul(in[0], in[1])}; };
    cases.push_back(std::move(c));
  }
  // Permuted operands and results (mpc_perm_*, set by fold-batch-transposes; CPU only):
  // attention's head layouts. A, B stored [B, T, H, D] and read as [B, H, T, D] (B also
  // transposed: K^T), the product stored back as [B, T, H, D]; the trans flags composed
  // with a perm; a column-major view of A; f32 output. Forward only: MatMul has no
  // gradient rule for the perms (they are set after autodiff).
  struct Permuted {
    const char* name;
    Shape a, b;
    std::vector<int64_t> perm_a, perm_b, perm_y;
    bool ta = false, tb = false, f32_out = false;
  };
  const std::vector<Permuted> permuted = {
      {"QKt", {2, 5, 3, 4}, {2, 5, 3, 4}, {0, 2, 1, 3}, {0, 2, 3, 1}, {}},
      {"PV_ResultHeadsLast", {2, 3, 5, 5}, {2, 5, 3, 4}, {}, {0, 2, 1, 3}, {0, 2, 1, 3}},
      {"TransFlagsAndPerms", {2, 5, 3, 4}, {2, 3, 6, 5}, {0, 2, 1, 3}, {}, {0, 2, 1, 3}, true, true},
      {"ColumnMajorA_F32Out", {2, 3, 4, 5}, {2, 3, 4, 6}, {0, 1, 3, 2}, {}, {1, 0, 2, 3}, false, false, true},
  };
  for (const Permuted& v : permuted) {
    OpCase c;
    c.name = absl::StrCat("MatMul_Permuted_", v.name);
    c.op = "MatMul";
    if (!v.perm_a.empty()) c.attrs.Set("mpc_perm_a", v.perm_a);
    if (!v.perm_b.empty()) c.attrs.Set("mpc_perm_b", v.perm_b);
    if (!v.perm_y.empty()) c.attrs.Set("mpc_perm_y", v.perm_y);
    if (v.ta) c.attrs.Set("mpc_trans_a", int64_t{1});
    if (v.tb) c.attrs.Set("mpc_trans_b", int64_t{1});
    if (v.f32_out) {
      c.attrs.Set("mpc_output_dtype", int64_t{1});
      c.out_dtypes = {DType::kF32};
    }
    c.inputs = {X("A", v.a), X("B", v.b)};
    c.gradient = false;
    c.ref = [v](const std::vector<Tensor>& in) {
      auto view = [](const Tensor& t, const std::vector<int64_t>& perm, bool trans) {
        std::vector<int64_t> p = perm;
        if (p.empty()) {
          for (size_t i = 0; i < t.shape().size(); ++i) p.push_back(static_cast<int64_t>(i));
        }
        if (trans) std::swap(p[p.size() - 1], p[p.size() - 2]);
        return RefTranspose(t, p);
      };
      Tensor y = RefMatMul(view(in[0], v.perm_a, v.ta), view(in[1], v.perm_b, v.tb));
      return std::vector<Tensor>{v.perm_y.empty() ? y : RefTranspose(y, v.perm_y)};
    };
    cases.push_back(std::move(c));
  }
  for (const auto& [name, a, b] : std::vector<std::tuple<const char*, Shape, Shape>>{
           {"Batched3D_OutputF32", {2, 3, 5}, {2, 5, 4}}, {"BroadcastBatch_OutputF32", {2, 1, 3, 5}, {3, 5, 4}}}) {
    OpCase c;  // see Gemm_tA0_tB1_CN_OutputF32
    c.name = absl::StrCat("MatMul_", name);
    c.op = "MatMul";
    c.attrs.Set("mpc_output_dtype", int64_t{1});
    c.inputs = {X("A", a), X("B", b)};
    c.out_dtypes = {DType::kF32};
    c.fd_step = 0.25;
    c.ref = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefMatMul(in[0], in[1])}; };
    cases.push_back(std::move(c));
  }
  return cases;
}

// TF32 (attribute mpc_tf32 = 1, which the tf32 pass sets on f32 GEMMs): the operands are
// fixed f32, so every run dtype builds the same f32 graph, and the reference rounds A and
// B to TF32 (C is not rounded: the epilogue is f32) and sums in f64. Every layout path of
// the CPU kernels: Gemm with each transpose, bias row, full C with alpha/beta and the ReLU
// epilogue; MatMul folded (2-D B), batched and broadcast (the loop). K = 64 so each output
// sums enough rounded products for a missing rounding to show far above the tolerance.
std::vector<OpCase> Tf32Cases() {
  std::vector<OpCase> cases;
  const int64_t m = 12, k = 64, n = 20;
  struct GemmVariant {
    const char* name;
    bool ta, tb;
    std::optional<Shape> c_shape;
    double alpha, beta;
    bool relu;
  };
  for (const GemmVariant& v : {GemmVariant{"tA0_tB0_CN", false, false, Shape{n}, 1.0, 1.0, false},
                               GemmVariant{"tA1_tB0_Cnone", true, false, std::nullopt, 1.0, 1.0, false},
                               GemmVariant{"tA0_tB1_C1N_Relu", false, true, Shape{1, n}, 1.0, 1.0, true},
                               GemmVariant{"tA1_tB1_CMN_alpha0p7_beta1p3", true, true, Shape{m, n}, 0.7, 1.3, false}}) {
    OpCase c;
    c.name = absl::StrCat("Gemm_Tf32_", v.name);
    c.op = "Gemm";
    c.attrs.Set("mpc_tf32", int64_t{1});
    if (v.ta) c.attrs.Set("transA", int64_t{1});
    if (v.tb) c.attrs.Set("transB", int64_t{1});
    if (v.alpha != 1.0) c.attrs.Set("alpha", static_cast<float>(v.alpha));
    if (v.beta != 1.0) c.attrs.Set("beta", static_cast<float>(v.beta));
    if (v.relu) c.attrs.Set("mpc_activation", std::string("Relu"));
    c.inputs = {XTyped("A", v.ta ? Shape{k, m} : Shape{m, k}, DType::kF32),
                XTyped("B", v.tb ? Shape{n, k} : Shape{k, n}, DType::kF32)};
    if (v.c_shape) c.inputs.push_back(XTyped("C", *v.c_shape, DType::kF32));
    c.out_dtypes = {DType::kF32};
    c.gradient = false;  // a kernel mode: the op's gradient is checked by the f32 cases
    c.tf32 = true;
    const double fa = static_cast<float>(v.alpha), fb = static_cast<float>(v.beta);
    const bool has_c = v.c_shape.has_value(), ta = v.ta, tb = v.tb, relu = v.relu;
    c.ref = [=](const std::vector<Tensor>& in) {
      Tensor y = RefGemm(RefRoundToTf32(in[0]), RefRoundToTf32(in[1]), has_c ? &in[2] : nullptr, fa, fb, ta, tb);
      if (relu) y = RefUnary(y, [](double x) { return x > 0 ? x : 0.0; });
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  for (const auto& [name, a, b] :
       std::vector<std::tuple<const char*, Shape, Shape>>{{"3Dx2D", {2, m, k}, {k, n}},
                                                          {"Batched3D", {2, m, k}, {2, k, n}},
                                                          {"BroadcastBatch", {2, 1, m, k}, {3, k, n}}}) {
    OpCase c;
    c.name = absl::StrCat("MatMul_Tf32_", name);
    c.op = "MatMul";
    c.attrs.Set("mpc_tf32", int64_t{1});
    c.inputs = {XTyped("A", a, DType::kF32), XTyped("B", b, DType::kF32)};
    c.out_dtypes = {DType::kF32};
    c.gradient = false;
    c.tf32 = true;
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefMatMul(RefRoundToTf32(in[0]), RefRoundToTf32(in[1]))};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> BinaryCases() {
  std::vector<OpCase> cases;
  const std::vector<std::tuple<const char*, Shape, Shape>> shapes = {
      {"Same", {3, 4}, {3, 4}},   {"RowBias", {3, 4}, {4}},  {"Row1N", {3, 4}, {1, 4}},
      {"Column", {3, 4}, {3, 1}}, {"Scalar", {3, 4}, {}},    {"ScalarLhs", {}, {3, 4}},
      {"RowLhs", {4}, {3, 4}},    {"Outer", {3, 1}, {1, 4}}, {"Rank3Column", {2, 3, 4}, {3, 1}},
  };
  const std::vector<std::pair<const char*, std::function<double(double, double)>>> ops = {
      {"Add", [](double a, double b) { return a + b; }},
      {"Sub", [](double a, double b) { return a - b; }},
      {"Mul", [](double a, double b) { return a * b; }},
      {"Div", [](double a, double b) { return a / b; }},
  };
  for (const auto& [op, f] : ops) {
    for (const auto& [name, a, b] : shapes) {
      OpCase c;
      c.name = absl::StrCat(op, "_", name);
      c.op = op;
      const bool div = std::string(op) == "Div";
      c.inputs = {X("a", a), div ? X("b", b, -1.5, 1.5, 0.5) : X("b", b)};
      c.ref = [f = f](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefBinary(in[0], in[1], f)}; };
      cases.push_back(std::move(c));
    }
    if (std::string(op) == "Add" || std::string(op) == "Mul") {
      // The same value on both sides: the gradients of the two uses must be summed.
      OpCase c;
      c.name = absl::StrCat(op, "_SameOperandTwice");
      c.op = op;
      c.inputs = {X("a", {3, 4}), SameAs(0)};
      c.ref = [f = f](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefBinary(in[0], in[0], f)}; };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> UnaryCases() {
  std::vector<OpCase> cases;
  struct U {
    const char* op;
    std::function<double(double)> f;
    double lo, hi, min_abs;
    bool exact;
  };
  const std::vector<U> ops = {
      {"Neg", [](double x) { return -x; }, -1, 1, 0, true},
      {"Relu", [](double x) { return x > 0 ? x : 0.0; }, -1, 1, 0.1, true},
      {"Sigmoid", [](double x) { return 1.0 / (1.0 + std::exp(-x)); }, -6, 6, 0, false},
      {"Tanh", [](double x) { return std::tanh(x); }, -3, 3, 0, false},
      {"Silu", [](double x) { return x / (1.0 + std::exp(-x)); }, -6, 6, 0, false},
      {"Identity", [](double x) { return x; }, -1, 1, 0, true},
  };
  for (const U& u : ops) {
    for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}}) {
      OpCase c;
      c.name = absl::StrCat(u.op, "_Rank", shape.size());
      c.op = u.op;
      c.inputs = {X("x", shape, u.lo, u.hi, u.min_abs)};
      c.exact = u.exact;
      c.ref = [f = u.f](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefUnary(in[0], f)}; };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<OpCase> SoftmaxCases() {
  std::vector<OpCase> cases;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    const bool log = std::string(op) == "LogSoftmax";
    const std::vector<std::tuple<Shape, std::optional<int64_t>, const char*>> variants = {
        {{3, 4, 5}, -1, "Rank3_AxisM1"},
        {{3, 4, 5}, 0, "Rank3_Axis0"},
        {{3, 4, 5}, 1, "Rank3_Axis1"},
        {{3, 4, 5}, 2, "Rank3_Axis2"},
        {{4, 6}, std::nullopt, "Rank2_DefaultAxis"},
        {{4, 6}, 0, "Rank2_Axis0"},
        // Rows longer than a vector and not a multiple of one, enough of them to be
        // split between threads (the 16-bit softmax's row loops; Softmax only: over 257
        // values f32 central differences of LogSoftmax miss the 1e-5 tolerance).
        {{48, 3, 257}, -1, "Rank3_LongRows_Threaded"},
    };
    for (const auto& [shape, axis, name] : variants) {
      if (log && shape.back() == 257) continue;
      OpCase c;
      c.name = absl::StrCat(op, "_", name);
      c.op = op;
      if (axis) c.attrs.Set("axis", *axis);
      c.inputs = {X("x", shape, -3, 3)};
      const int64_t ax = axis.value_or(-1);
      c.ref = [ax, log](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefSoftmax(in[0], ax, log)}; };
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

// A fed causal keep mask [1, 1, t, t]: row i keeps columns 0..i.
In CausalKeep(int64_t t) {
  In in = Mask("keep", {1, 1, t, t});
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < t; ++j) in.value.data<uint8_t>()[i * t + j] = j <= i;
  }
  return in;
}

// MaskedSoftmax: softmax(where(keep, scale * x, -inf)) over the last axis, keep broadcast.
Tensor RefMaskedSoftmax(const Tensor& x, const Tensor* keep, double scale) {
  const Shape& s = x.shape();
  const int64_t dim = s.back(), rows = x.num_elements() / dim;
  Tensor y = F64(s);
  std::vector<double> w(dim);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    for (int64_t d = 0; d < dim; ++d) {
      const int64_t i = r * dim + d;
      const bool kept = !keep || P(*keep)[BroadcastOffset(Unravel(i, s), keep->shape())] != 0;
      w[d] = kept ? scale * P(x)[i] : -INFINITY;
      mx = std::max(mx, w[d]);
    }
    double sum = 0;
    for (int64_t d = 0; d < dim; ++d) sum += std::exp(w[d] - mx);
    for (int64_t d = 0; d < dim; ++d) P(y)[r * dim + d] = std::exp(w[d] - mx) / sum;
  }
  return y;
}

// The attention softmax (passes/fuse_softmax.h) and its gradient's cases: a causal mask
// broadcast over batch and heads, a mask as large as x, one shared by every row, one flag
// per row (stride 0 along it), none; rows with tails after 16-lane blocks, split between
// threads. Every row keeps at least one element (a fully masked row is NaN: tested in
// tests/passes/fuse_softmax_test.cc).
std::vector<OpCase> MaskedSoftmaxCases() {
  std::vector<OpCase> cases;
  struct Variant {
    const char* name;
    Shape x;
    std::optional<In> keep;
    double scale;
  };
  In per_row = Mask("keep", {1, 4, 1});
  for (int64_t i = 0; i < 4; ++i) per_row.value.data<uint8_t>()[i] = 1;
  const std::vector<Variant> variants = {
      {"Causal_Scaled", {2, 3, 5, 5}, CausalKeep(5), 0.35},
      {"FullMask_Rank2", {4, 7}, Mask("keep", {4, 7}), 1.7},
      {"SharedRowMask_LongRows_Threaded", {48, 3, 257}, Mask("keep", {257}), 0.9},
      {"Causal_Threaded", {2, 8, 70, 70}, CausalKeep(70), 0.2},
      {"OneFlagPerRow", {3, 4, 6}, per_row, 0.8},
      {"NoMask", {3, 4, 6}, std::nullopt, 0.5},
  };
  for (const Variant& v : variants) {
    OpCase c;
    c.name = absl::StrCat("MaskedSoftmax_", v.name);
    c.op = "MaskedSoftmax";
    c.attrs.Set("scale", static_cast<float>(v.scale));
    c.inputs = {X("x", v.x, -4, 4)};
    if (v.keep) c.inputs.push_back(*v.keep);
    // The reference scales by the f32 attribute the kernels read.
    const double scale = static_cast<float>(v.scale);
    c.ref = [scale](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefMaskedSoftmax(in[0], in.size() > 1 ? &in[1] : nullptr, scale)};
    };
    cases.push_back(std::move(c));
  }
  for (const auto& [name, shape] :
       std::vector<std::pair<const char*, Shape>>{{"Rank3", {2, 4, 3}}, {"LongRows", {6, 257}}}) {
    OpCase c;
    c.name = absl::StrCat("MaskedSoftmaxGrad_", name);
    c.op = "MaskedSoftmaxGrad";
    c.attrs.Set("scale", 0.3f);
    c.gradient = false;
    c.inputs = {X("dy", shape), X("y", shape, 0.0, 0.6)};
    c.ref = [](const std::vector<Tensor>& in) {
      Tensor dx = RefSoftmaxGrad(in[0], in[1], -1, false);
      for (int64_t i = 0; i < dx.num_elements(); ++i) P(dx)[i] *= static_cast<double>(0.3f);
      return std::vector<Tensor>{dx};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> ShapeCases() {
  std::vector<OpCase> cases;
  const Shape x3 = {2, 3, 4};
  // Reshape: target (with -1 and 0) -> expected shape, written out by hand.
  const std::vector<std::tuple<const char*, std::vector<int64_t>, Shape>> reshapes = {
      {"Minus1", {-1}, {24}},
      {"Zero_Minus1", {0, -1}, {2, 12}},
      {"Minus1_4", {-1, 4}, {6, 4}},
      {"4_Zero_Minus1", {4, 0, -1}, {4, 3, 2}},
      {"Zero_Zero_4", {0, 0, 4}, {2, 3, 4}},
      {"Explicit", {6, 2, 2}, {6, 2, 2}},
  };
  for (const auto& [name, target, expected] : reshapes) {
    OpCase c;
    c.name = absl::StrCat("Reshape_", name);
    c.op = "Reshape";
    c.inputs = {X("x", x3), ConstInts("shape", target)};
    c.exact = true;
    c.ref = [e = expected](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefReshape(in[0], e)}; };
    cases.push_back(std::move(c));
  }
  const std::vector<std::tuple<const char*, std::optional<int64_t>, Shape>> flattens = {
      {"Axis0", 0, {1, 24}}, {"Axis1", 1, {2, 12}},  {"Axis2", 2, {6, 4}},
      {"Axis3", 3, {24, 1}}, {"AxisM1", -1, {6, 4}}, {"DefaultAxis", std::nullopt, {2, 12}},
  };
  for (const auto& [name, axis, expected] : flattens) {
    OpCase c;
    c.name = absl::StrCat("Flatten_", name);
    c.op = "Flatten";
    if (axis) c.attrs.Set("axis", *axis);
    c.inputs = {X("x", x3)};
    c.exact = true;
    c.ref = [e = expected](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefReshape(in[0], e)}; };
    cases.push_back(std::move(c));
  }
  const std::vector<std::tuple<const char*, Shape, std::vector<int64_t>>> transposes = {
      {"Perm201", x3, {2, 0, 1}},
      {"Perm120", x3, {1, 2, 0}},
      {"Perm021", x3, {0, 2, 1}},
      {"Perm102", x3, {1, 0, 2}},
      {"Rank3Default", x3, {}},
      {"Rank2Default", {3, 5}, {}},
      {"Rank4Perm3120", {2, 3, 4, 5}, {3, 1, 2, 0}},
      // Attention's head split and its backward transposes: the kernel's row-copy (0213),
      // tiled (0231) and element-gather (0312) paths.
      {"HeadSplit0213", {2, 5, 3, 4}, {0, 2, 1, 3}},
      {"KeyTranspose0231", {2, 5, 3, 4}, {0, 2, 3, 1}},
      {"KeyTransposeBack0312", {2, 3, 4, 5}, {0, 3, 1, 2}},
      // Size-1 axes moving; all of them size 1 but one.
      {"UnitAxes2301", {1, 3, 1, 4}, {2, 3, 0, 1}},
      {"OnlyUnitAxesMove", {1, 6, 1}, {2, 1, 0}},
      // Above the threading threshold (36864 elements): rows split across threads.
      {"HeadSplitThreaded", {4, 96, 6, 16}, {0, 2, 1, 3}},
      {"KeyTransposeBackThreaded", {4, 6, 16, 96}, {0, 3, 1, 2}},
  };
  for (const auto& [name, shape, perm] : transposes) {
    OpCase c;
    c.name = absl::StrCat("Transpose_", name);
    c.op = "Transpose";
    if (!perm.empty()) c.attrs.Set("perm", perm);
    c.inputs = {X("x", shape)};
    c.exact = true;
    c.ref = [p = perm](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefTranspose(in[0], p)}; };
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "Cast_F32ToF64";
    c.op = "Cast";
    c.attrs.Set("to", int64_t{11});
    c.inputs = {XTyped("x", {3, 4}, DType::kF32)};
    c.out_dtypes = {DType::kF64};
    c.exact = true;
    c.fd_step = 1e-3;  // the loss is linear in x; the step only has to survive f32 rounding
    c.ref = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0]}; };
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "Cast_F64ToF32";
    c.op = "Cast";
    c.attrs.Set("to", int64_t{1});
    c.inputs = {XTyped("x", {3, 4}, DType::kF64)};
    c.out_dtypes = {DType::kF32};
    c.exact = true;  // round to nearest even, i.e. C++'s double -> float
    // L depends on x only through round_f32(x): a step far above f32's spacing keeps
    // the difference quotient within ~2.4e-7 of the derivative.
    c.fd_step = 0.25;
    c.ref = [](const std::vector<Tensor>& in) {
      Tensor y = F64(in[0].shape());
      for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = static_cast<float>(P(in[0])[i]);
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  // The casts autocast inserts, to and from the 16-bit formats: bit-exact RNE. From
  // f64 the kernel must round once (no double rounding through f32). Forward only:
  // the Cast gradient is covered above, and a finite difference cannot resolve the
  // 16-bit rounding.
  for (auto [name, from, to] :
       std::vector<std::tuple<const char*, DType, DType>>{{"F32ToBf16", DType::kF32, DType::kBF16},
                                                          {"F32ToF16", DType::kF32, DType::kF16},
                                                          {"F64ToBf16", DType::kF64, DType::kBF16},
                                                          {"F64ToF16", DType::kF64, DType::kF16},
                                                          {"Bf16ToF32", DType::kBF16, DType::kF32},
                                                          {"F16ToF32", DType::kF16, DType::kF32},
                                                          {"Bf16ToF64", DType::kBF16, DType::kF64},
                                                          {"F16ToF64", DType::kF16, DType::kF64}}) {
    OpCase c;
    c.name = absl::StrCat("Cast_", name);
    c.op = "Cast";
    c.attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(to)));
    c.inputs = {XTyped("x", {4, 7}, from)};
    c.out_dtypes = {to};
    c.exact = true;
    c.gradient = false;
    c.ref = [to = to](const std::vector<Tensor>& in) {
      Tensor y = F64(in[0].shape());
      for (int64_t i = 0; i < y.num_elements(); ++i) {
        const double x = P(in[0])[i];
        P(y)[i] = to == DType::kBF16 || to == DType::kF16 ? RoundToFormat(x, to) : x;
      }
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  // f64 values just past a 16-bit halfway point by less than f32 can see: rounding
  // through f32 first lands on the tie and rounds it the wrong way.
  for (auto [name, to] : std::vector<std::tuple<const char*, DType>>{{"F64ToBf16_NearTies", DType::kBF16},
                                                                     {"F64ToF16_NearTies", DType::kF16}}) {
    const double half_ulp = std::ldexp(1.0, to == DType::kBF16 ? -8 : -11);  // at 1.0
    const double tiny = std::ldexp(1.0, -40);
    const std::vector<double> values = {1 + half_ulp + tiny, -(1 + half_ulp + tiny),    1 + 3 * half_ulp - tiny,
                                        1 + half_ulp - tiny, 0.5 + half_ulp / 2 + tiny, 1 + half_ulp};
    OpCase c;
    c.name = absl::StrCat("Cast_", name);
    c.op = "Cast";
    c.attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(to)));
    In x;
    x.name = "x";
    x.role = Role::kConst;
    x.dtype = DType::kF64;
    x.value = Tensor::FromVector<double>({static_cast<int64_t>(values.size())}, values);
    c.inputs = {x};
    c.out_dtypes = {to};
    c.exact = true;
    c.gradient = false;
    c.ref = [to = to](const std::vector<Tensor>& in) {
      Tensor y = F64(in[0].shape());
      for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = RoundToFormat(P(in[0])[i], to);
      return std::vector<Tensor>{y};
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> DropoutCases() {
  std::vector<OpCase> cases;
  auto identity = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0], Ones(in[0].shape())}; };
  // Evaluation mode (and ratio 0 in training): output == input, mask all true.
  {
    OpCase c;
    c.name = "Dropout_Eval_DataOnly";
    c.op = "Dropout";
    c.inputs = {X("x", {4, 5})};
    c.ref = identity;
    c.out_dtypes = {std::nullopt, DType::kBool};
    c.exact = true;
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "Dropout_Eval_Ratio";
    c.op = "Dropout";
    c.inputs = {X("x", {4, 5}), ConstFloat("ratio", 0.3)};
    c.ref = identity;
    c.out_dtypes = {std::nullopt, DType::kBool};
    c.exact = true;
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "Dropout_Eval_TrainingModeFalse";
    c.op = "Dropout";
    c.inputs = {X("x", {4, 5}), ConstFloat("ratio", 0.3), ConstBool("training_mode", false)};
    c.ref = identity;
    c.out_dtypes = {std::nullopt, DType::kBool};
    c.exact = true;
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "Dropout_Eval_MpcTrainingOverridesMode";
    c.op = "Dropout";
    c.attrs.Set("mpc_training", int64_t{0});
    c.inputs = {X("x", {4, 5}), ConstFloat("ratio", 0.3), ConstBool("training_mode", true)};
    c.ref = identity;
    c.out_dtypes = {std::nullopt, DType::kBool};
    c.exact = true;
    cases.push_back(std::move(c));
  }
  {
    OpCase c;
    c.name = "Dropout_Train_RatioZero";
    c.op = "Dropout";
    c.attrs.Set("mpc_training", int64_t{1});
    c.inputs = {X("x", {4, 5}), ConstFloat("ratio", 0.0), ConstBool("training_mode", true)};
    c.ref = identity;
    c.out_dtypes = {std::nullopt, DType::kBool};
    c.exact = true;
    cases.push_back(std::move(c));
  }
  // Training mode: the mask is a function of (seed, node, step, element), fixed for a
  // run, so the output is linear in x and finite differences apply. Gradient only; the
  // forward semantics have their own tests (OpForwardDropout).
  for (auto [name, ratio, by_attr] :
       std::vector<std::tuple<const char*, double, bool>>{{"Dropout_Train_MpcTraining_Ratio0p3", 0.3, true},
                                                          {"Dropout_Train_TrainingModeInput_Ratio0p5", 0.5, false}}) {
    OpCase c;
    c.name = name;
    c.op = "Dropout";
    if (by_attr) c.attrs.Set("mpc_training", int64_t{1});
    c.inputs = {X("x", {10, 10}), ConstFloat("ratio", ratio)};
    if (!by_attr) c.inputs.push_back(ConstBool("training_mode", true));
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<OpCase> LossCases() {
  std::vector<OpCase> cases;
  struct S {
    const char* name;
    std::string reduction;
    std::optional<int64_t> ignore;
    std::vector<int64_t> labels;
    DType label_dtype;
  };
  const std::vector<S> sces = {
      {"Mean", "mean", std::nullopt, {0, 3, 4, 1, 2, 3}, DType::kI64},
      {"Sum", "sum", std::nullopt, {0, 3, 4, 1, 2, 3}, DType::kI64},
      {"Mean_I32Labels", "mean", std::nullopt, {4, 0, 1, 1, 2, 3}, DType::kI32},
      {"Mean_IgnoreIndexM100", "mean", -100, {0, -100, 4, 1, -100, 3}, DType::kI64},
      {"Sum_IgnoreIndexM100", "sum", -100, {0, -100, 4, 1, -100, 3}, DType::kI64},
      {"Mean_IgnoreIndexInRange", "mean", 3, {0, 3, 4, 1, 2, 3}, DType::kI64},
  };
  for (const S& s : sces) {
    OpCase c;
    c.name = absl::StrCat("SoftmaxCrossEntropyLoss_", s.name);
    c.op = "SoftmaxCrossEntropyLoss";
    c.attrs.Set("reduction", s.reduction);
    if (s.ignore) c.attrs.Set("ignore_index", *s.ignore);
    c.inputs = {X("scores", {6, 5}, -2, 2), Labels("labels", s.labels, s.label_dtype)};
    const bool mean = s.reduction == "mean";
    const auto ignore = s.ignore;
    c.ref = [mean, ignore](const std::vector<Tensor>& in) { return RefSce(in[0], in[1], mean, ignore); };
    cases.push_back(std::move(c));
  }
  for (const Shape& shape : {Shape{3, 4}, Shape{2, 3, 4}}) {
    OpCase c;
    c.name = absl::StrCat("MeanSquaredError_Rank", shape.size());
    c.op = "MeanSquaredError";
    c.inputs = {X("pred", shape), X("target", shape)};
    c.ref = [](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefMse(in[0], in[1])}; };
    cases.push_back(std::move(c));
  }
  return cases;
}

// Backward-only ops, forward-checked (they have no gradients of their own). Autocast
// paints them like any op, so each must hold docs/numerics.md's tolerance in every dtype.
std::vector<OpCase> BackwardOpCases() {
  std::vector<OpCase> cases;
  auto add = [&](OpCase c) {
    c.gradient = false;
    cases.push_back(std::move(c));
  };
  const Shape s = {3, 5};
  {
    OpCase c;
    c.name = "ReluGrad_Rank2";
    c.op = "ReluGrad";
    c.inputs = {X("dy", s), X("y", s, -1, 1, 0.1)};
    c.exact = true;
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefBinary(in[0], in[1], [](double dy, double y) { return y > 0 ? dy : 0.0; })};
    };
    add(std::move(c));
  }
  {
    OpCase c;
    c.name = "SigmoidGrad_Rank2";
    c.op = "SigmoidGrad";
    c.inputs = {X("dy", s), X("y", s, 0.05, 0.95)};
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefBinary(in[0], in[1], [](double dy, double y) { return dy * y * (1 - y); })};
    };
    add(std::move(c));
  }
  {
    OpCase c;
    c.name = "SiluGrad_Rank2";
    c.op = "SiluGrad";
    c.inputs = {X("dy", s), X("x", s, -6, 6)};
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefBinary(in[0], in[1], [](double dy, double x) {
        const double sig = 1.0 / (1.0 + std::exp(-x));
        return dy * sig * (1 + x * (1 - sig));
      })};
    };
    add(std::move(c));
  }
  {
    OpCase c;
    c.name = "TanhGrad_Rank2";
    c.op = "TanhGrad";
    c.inputs = {X("dy", s), X("y", s, -0.95, 0.95)};
    c.ref = [](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefBinary(in[0], in[1], [](double dy, double y) { return dy * (1 - y * y); })};
    };
    add(std::move(c));
  }
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
    const bool log = std::string(op) == "LogSoftmaxGrad";
    for (int64_t axis : {-1, 1}) {
      OpCase c;
      c.name = absl::StrCat(op, "_Rank3_Axis", Num(static_cast<double>(axis)));
      c.op = op;
      c.attrs.Set("axis", axis);
      // y as the forward op would give it: probabilities, or log-probabilities.
      c.inputs = {X("dy", {2, 4, 3}), log ? X("y", {2, 4, 3}, -3, -0.05) : X("y", {2, 4, 3}, 0.05, 0.6)};
      c.ref = [axis, log](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{RefSoftmaxGrad(in[0], in[1], axis, log)};
      };
      add(std::move(c));
    }
  }
  for (auto [name, mean, ignore] : std::vector<std::tuple<const char*, bool, std::optional<int64_t>>>{
           {"Mean", true, std::nullopt}, {"Sum_IgnoreIndexM100", false, -100}}) {
    OpCase c;
    c.name = absl::StrCat("SoftmaxCrossEntropyGrad_", name);
    c.op = "SoftmaxCrossEntropyGrad";
    c.attrs.Set("reduction", std::string(mean ? "mean" : "sum"));
    if (ignore) c.attrs.Set("ignore_index", *ignore);
    c.inputs = {X("dloss", {}, 0.5, 1.5), X("scores", {6, 5}, -2, 2),
                Labels("labels",
                       ignore ? std::vector<int64_t>{0, -100, 4, 1, -100, 3} : std::vector<int64_t>{0, 3, 4, 1, 2, 3})};
    c.ref = [mean = mean, ignore = ignore](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{RefSceGrad(in[0], in[1], in[2], mean, ignore)};
    };
    add(std::move(c));
  }
  {
    OpCase c;
    c.name = "MeanSquaredErrorGrad_Rank2";
    c.op = "MeanSquaredErrorGrad";
    c.inputs = {X("dloss", {}, 0.5, 1.5), X("pred", s), X("target", s)};
    c.ref = [](const std::vector<Tensor>& in) {
      const double scale = 2 * P(in[0])[0] / static_cast<double>(in[1].num_elements());
      return std::vector<Tensor>{RefBinary(in[1], in[2], [scale](double p, double t) { return scale * (p - t); })};
    };
    add(std::move(c));
  }
  {
    OpCase c;
    c.name = "DropoutGrad_Ratio0p3";
    c.op = "DropoutGrad";
    c.attrs.Set("ratio", 0.3f);
    c.inputs = {X("dy", s), Mask("mask", s)};
    c.ref = [](const std::vector<Tensor>& in) {
      const double scale = 1.0 / (1.0 - static_cast<double>(0.3f));  // the attribute is f32
      return std::vector<Tensor>{
          RefBinary(in[0], in[1], [scale](double dy, double m) { return m != 0 ? dy * scale : 0.0; })};
    };
    add(std::move(c));
  }
  for (const auto& [name, from, to] :
       std::vector<std::tuple<const char*, Shape, Shape>>{{"RowsToRow", {4, 5}, {5}},
                                                          {"ToColumn", {2, 3, 4}, {3, 1}},
                                                          {"ToScalar", {3, 4}, {}},
                                                          {"Rank3To1N", {2, 3, 4}, {1, 4}},
                                                          // 900 rows: the row-chunked path (256 a chunk, the last short)
                                                          {"ManyRowsToRow", {3, 300, 20}, {20}}}) {
    OpCase c;
    c.name = absl::StrCat("ReduceSumTo_", name);
    c.op = "ReduceSumTo";
    c.attrs.Set("shape", std::vector<int64_t>(to.begin(), to.end()));
    c.inputs = {X("x", from)};
    c.ref = [to = to](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefReduceSumTo(in[0], to)}; };
    add(std::move(c));
    OpCase bc;
    bc.name = absl::StrCat("BroadcastTo_", name);
    bc.op = "BroadcastTo";
    bc.attrs.Set("shape", std::vector<int64_t>(from.begin(), from.end()));
    bc.inputs = {X("x", to)};
    bc.exact = true;
    bc.ref = [from = from](const std::vector<Tensor>& in) { return std::vector<Tensor>{RefBroadcastTo(in[0], from)}; };
    add(std::move(bc));
  }
  return cases;
}

std::vector<OpCase> CoreCases() {
  std::vector<OpCase> all;
  for (auto family : {GemmCases, MatMulCases, Tf32Cases, BinaryCases, UnaryCases, SoftmaxCases, MaskedSoftmaxCases,
                      ShapeCases, DropoutCases, LossCases, BackwardOpCases}) {
    for (OpCase& c : family()) all.push_back(std::move(c));
  }
  return all;
}

}  // namespace

MPC_REGISTER_OP_CASES(Core, CoreCases);

}  // namespace mpc::opcases
