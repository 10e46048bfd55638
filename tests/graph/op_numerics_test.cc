// Op numerics, after ggml's test-backend-ops: one table of cases (op, attributes,
// inputs, a float64 reference written here as plain loops) and one harness that runs
// every case twice:
//   OpForward   the op on the CPU backend in f32, f64, bf16 and f16 against the
//               reference, with DESIGN.md's tolerances (||out - ref|| / ||ref||: f32
//               < 1e-5, bf16 < 1e-2, f16 < 2e-3; NaN never passes). A bf16/f16 run
//               rounds the inputs to the format first and the reference computes in
//               f64 from those rounded values, so the check measures the kernel alone;
//               and, sharper, every bf16/f16 output element must be within 1 ulp of
//               the reference rounded to the format ("compute in f32, round once");
//   OpGradient  the op in f64 under a scalar loss L = sum(out * R) (R fixed, random),
//               autodiff's gradient of L against central finite differences.
// Backward-only ops (ReluGrad, SoftmaxGrad, ReduceSumTo...) have forward cases too, so
// the kernels autocast paints for the backward pass are checked in every dtype.
// OpCoverage fails when an op in the registry has no forward case, or is
// differentiable and has no gradient case. The OpHarness* suites check that the
// checks themselves can fail (a wrong reference, a wrong gradient, a missing op).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::RandomTensor;
using ::mpc::testing::RelativeError;

constexpr double kF32Tol = 1e-5;   // DESIGN.md: f32 vs an f64 reference
constexpr double kF64Tol = 1e-12;  // the f64 kernels are the gradient checks' reference
constexpr double kBf16Tol = 1e-2;  // DESIGN.md: bf16 vs an f64 reference
constexpr double kF16Tol = 2e-3;   // DESIGN.md: f16 vs an f64 reference
constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;    // |analytic - numeric| <= kFdTol * max(1, |numeric|)
constexpr int kFdMaxElements = 30;
constexpr uint64_t kRunSeed = 20240611;
constexpr int64_t kRunStep = 7;

// ---------------------------------------------------------------------------------
// Case description.

enum class Role {
  kFloat,  // random float data, a graph input; differentiated in gradient cases
  kConst,  // a graph constant (Reshape's shape, Dropout's ratio / training_mode)
  kFed,    // fixed data fed as a graph input, never differentiated (labels)
};

struct In {
  std::string name;
  Shape shape;
  Role role = Role::kFloat;
  std::optional<DType> dtype;  // fixed dtype; unset: the run's float dtype
  double lo = -1, hi = 1;
  double min_abs = 0;  // |x| >= min_abs (Relu's kink, Div's denominators)
  Tensor value;        // kConst / kFed: the data (cast to `dtype` or the float dtype)
  int same_as = -1;    // >= 0: this operand is the same value as input #same_as
};

In X(const std::string& name, Shape shape, double lo = -1, double hi = 1, double min_abs = 0) {
  In in;
  in.name = name;
  in.shape = std::move(shape);
  in.lo = lo;
  in.hi = hi;
  in.min_abs = min_abs;
  return in;
}
In XTyped(const std::string& name, Shape shape, DType dtype) {
  In in = X(name, std::move(shape));
  in.dtype = dtype;
  return in;
}
In SameAs(int index) {
  In in;
  in.same_as = index;
  return in;
}
// A float constant whose dtype follows the run (f32 graph: f32 constant).
In ConstFloat(const std::string& name, double v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.value = Tensor::FromVector<double>({}, {v});
  return in;
}
In ConstBool(const std::string& name, bool v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.dtype = DType::kBool;
  in.value = Tensor(DType::kBool, {});
  in.value.data<uint8_t>()[0] = v ? 1 : 0;
  return in;
}
In ConstInts(const std::string& name, const std::vector<int64_t>& v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.dtype = DType::kI64;
  in.value = Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
  return in;
}
In Labels(const std::string& name, const std::vector<int64_t>& v, DType dtype = DType::kI64) {
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.dtype = dtype;
  in.shape = {static_cast<int64_t>(v.size())};
  in.value = Tensor::FromVector<int64_t>(in.shape, v).CastTo(dtype);
  return in;
}

// A fixed bool tensor fed as a graph input (DropoutGrad's mask): every third element 0.
In Mask(const std::string& name, const Shape& shape) {
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.dtype = DType::kBool;
  in.shape = shape;
  in.value = Tensor(DType::kBool, shape);
  for (int64_t i = 0; i < in.value.num_elements(); ++i) in.value.data<uint8_t>()[i] = i % 3 != 0;
  return in;
}

// The reference gets every input as f64 (the exact values the kernel saw) and returns
// every checked output as f64.
using RefFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& in)>;

struct OpCase {
  std::string name;  // unique, [A-Za-z0-9_]
  std::string op;
  AttrMap attrs;
  std::vector<In> inputs;
  RefFn ref;                                 // null: gradient-only case
  std::vector<std::optional<DType>> out_dtypes;  // per checked output; unset: float dtype
  bool exact = false;                        // data movement: must match bit for bit
  bool gradient = true;
  std::vector<int> loss_outputs = {0};       // outputs that feed the loss in gradient cases
  double fd_step = kFdStep;

  bool forward() const { return static_cast<bool>(ref); }
};

// gtest prints parameters of failing tests; a case prints as its name.
void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// ---------------------------------------------------------------------------------
// float64 references: plain loops over index vectors, independent of the kernels.

Tensor F64(const Shape& s) { return Tensor(DType::kF64, s); }
const double* P(const Tensor& t) { return t.data<double>(); }
double* P(Tensor& t) { return t.data<double>(); }

std::vector<int64_t> Unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

int64_t Ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

// Offset in a tensor of shape `in` of the element an output index (right-aligned,
// numpy broadcasting) reads.
int64_t BroadcastOffset(const std::vector<int64_t>& out_idx, const Shape& in) {
  const size_t lead = out_idx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : out_idx[lead + d]);
  return flat;
}

Shape RefBroadcastShape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor RefBinary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape shape = RefBroadcastShape(a.shape(), b.shape());
  Tensor y = F64(shape);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const auto idx = Unravel(i, shape);
    P(y)[i] = f(P(a)[BroadcastOffset(idx, a.shape())], P(b)[BroadcastOffset(idx, b.shape())]);
  }
  return y;
}

Tensor RefUnary(const Tensor& x, const std::function<double(double)>& f) {
  Tensor y = F64(x.shape());
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = f(P(x)[i]);
  return y;
}

Tensor RefGemm(const Tensor& a, const Tensor& b, const Tensor* c, double alpha, double beta, bool ta, bool tb) {
  const int64_t m = ta ? a.shape()[1] : a.shape()[0], k = ta ? a.shape()[0] : a.shape()[1];
  const int64_t n = tb ? b.shape()[0] : b.shape()[1];
  Tensor y = F64({m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? P(a)[p * m + i] : P(a)[i * k + p];
        const double bv = tb ? P(b)[j * k + p] : P(b)[p * n + j];
        acc += av * bv;
      }
      double v = alpha * acc;
      if (c) v += beta * P(*c)[BroadcastOffset({i, j}, c->shape())];
      P(y)[i * n + j] = v;
    }
  }
  return y;
}

Tensor RefMatMul(const Tensor& a, const Tensor& b) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const Shape a_batch(as.begin(), as.end() - 2), b_batch(bs.begin(), bs.end() - 2);
  Shape shape = RefBroadcastShape(a_batch, b_batch);
  const Shape batch = shape;
  shape.push_back(m);
  shape.push_back(n);
  Tensor y = F64(shape);
  for (int64_t bi = 0; bi < NumElements(batch); ++bi) {
    const auto idx = Unravel(bi, batch);
    const double* am = P(a) + BroadcastOffset(idx, a_batch) * m * k;
    const double* bm = P(b) + BroadcastOffset(idx, b_batch) * k * n;
    double* ym = P(y) + bi * m * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0;
        for (int64_t p = 0; p < k; ++p) acc += am[i * k + p] * bm[p * n + j];
        ym[i * n + j] = acc;
      }
    }
  }
  return y;
}

Tensor RefSoftmax(const Tensor& x, int64_t axis, bool log) {
  const Shape& s = x.shape();
  const int rank = static_cast<int>(s.size());
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  Tensor y = F64(s);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    auto idx = Unravel(i, s);
    const double xi = P(x)[i];
    double mx = -INFINITY;
    for (int64_t d = 0; d < s[ax]; ++d) {
      idx[ax] = d;
      mx = std::max(mx, P(x)[Ravel(idx, s)]);
    }
    double sum = 0;
    for (int64_t d = 0; d < s[ax]; ++d) {
      idx[ax] = d;
      sum += std::exp(P(x)[Ravel(idx, s)] - mx);
    }
    P(y)[i] = log ? (xi - mx) - std::log(sum) : std::exp(xi - mx) / sum;
  }
  return y;
}

Tensor RefTranspose(const Tensor& x, std::vector<int64_t> perm) {
  const Shape& s = x.shape();
  if (perm.empty()) {
    for (int64_t i = static_cast<int64_t>(s.size()) - 1; i >= 0; --i) perm.push_back(i);
  }
  Shape out;
  for (int64_t p : perm) out.push_back(s[p]);
  Tensor y = F64(out);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const auto oi = Unravel(i, out);
    std::vector<int64_t> ii(s.size());
    for (size_t d = 0; d < perm.size(); ++d) ii[perm[d]] = oi[d];
    P(y)[i] = P(x)[Ravel(ii, s)];
  }
  return y;
}

Tensor RefReshape(const Tensor& x, const Shape& shape) {
  Tensor y = F64(shape);
  std::memcpy(y.raw(), x.raw(), y.bytes());
  return y;
}

// ONNX SoftmaxCrossEntropyLoss without weights: {loss, log_prob}.
std::vector<Tensor> RefSce(const Tensor& scores, const Tensor& labels, bool mean, std::optional<int64_t> ignore) {
  const int64_t n = scores.shape()[0], c = scores.shape()[1];
  Tensor log_prob = F64(scores.shape());
  double total = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, P(scores)[i * c + j]);
    for (int64_t j = 0; j < c; ++j) sum += std::exp(P(scores)[i * c + j] - mx);
    for (int64_t j = 0; j < c; ++j) P(log_prob)[i * c + j] = P(scores)[i * c + j] - mx - std::log(sum);
    const int64_t label = static_cast<int64_t>(P(labels)[i]);
    if (ignore && label == *ignore) continue;
    total -= P(log_prob)[i * c + label];
    ++counted;
  }
  Tensor loss = F64({});
  P(loss)[0] = mean ? total / counted : total;
  return {loss, log_prob};
}

Tensor RefMse(const Tensor& p, const Tensor& t) {
  double sum = 0;
  for (int64_t i = 0; i < p.num_elements(); ++i) sum += (P(p)[i] - P(t)[i]) * (P(p)[i] - P(t)[i]);
  Tensor y = F64({});
  P(y)[0] = sum / static_cast<double>(p.num_elements());
  return y;
}

// SoftmaxGrad: y * (dy - sum(dy * y));  LogSoftmaxGrad: dy - exp(y) * sum(dy), along axis.
Tensor RefSoftmaxGrad(const Tensor& dy, const Tensor& y, int64_t axis, bool log) {
  const Shape& s = y.shape();
  const int rank = static_cast<int>(s.size());
  const int ax = static_cast<int>(axis < 0 ? axis + rank : axis);
  Tensor dx = F64(s);
  for (int64_t i = 0; i < dx.num_elements(); ++i) {
    auto idx = Unravel(i, s);
    double sum = 0;
    for (int64_t d = 0; d < s[ax]; ++d) {
      idx[ax] = d;
      const int64_t k = Ravel(idx, s);
      sum += log ? P(dy)[k] : P(dy)[k] * P(y)[k];
    }
    P(dx)[i] = log ? P(dy)[i] - std::exp(P(y)[i]) * sum : P(y)[i] * (P(dy)[i] - sum);
  }
  return dx;
}

// d(SoftmaxCrossEntropyLoss)/dscores for an incoming dloss: scale * (softmax - onehot),
// ignored rows zero, scale = dloss / counted rows (mean) or dloss (sum).
Tensor RefSceGrad(const Tensor& dloss, const Tensor& scores, const Tensor& labels, bool mean,
                  std::optional<int64_t> ignore) {
  const int64_t n = scores.shape()[0], c = scores.shape()[1];
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) counted += !(ignore && static_cast<int64_t>(P(labels)[i]) == *ignore);
  const double scale = mean ? P(dloss)[0] / counted : P(dloss)[0];
  Tensor dx = F64(scores.shape());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(P(labels)[i]);
    if (ignore && label == *ignore) continue;
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < c; ++j) mx = std::max(mx, P(scores)[i * c + j]);
    for (int64_t j = 0; j < c; ++j) sum += std::exp(P(scores)[i * c + j] - mx);
    for (int64_t j = 0; j < c; ++j) {
      P(dx)[i * c + j] = scale * (std::exp(P(scores)[i * c + j] - mx) / sum - (j == label ? 1.0 : 0.0));
    }
  }
  return dx;
}

// Sum of x over the axes along which `shape` broadcasts to x's shape.
Tensor RefReduceSumTo(const Tensor& x, const Shape& shape) {
  Tensor y = F64(shape);
  for (int64_t i = 0; i < x.num_elements(); ++i) P(y)[BroadcastOffset(Unravel(i, x.shape()), shape)] += P(x)[i];
  return y;
}

Tensor RefBroadcastTo(const Tensor& x, const Shape& shape) {
  Tensor y = F64(shape);
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = P(x)[BroadcastOffset(Unravel(i, shape), x.shape())];
  return y;
}

// Rounds a double straight to the nearest bf16/f16 value (ties to even), kept in double.
double RoundToFormat(double v, DType dtype) {
  if (v == 0 || !std::isfinite(v)) return v;
  const int mantissa_bits = dtype == DType::kBF16 ? 8 : 11;  // significant bits
  const int min_exponent = dtype == DType::kBF16 ? -126 : -14;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int spacing_exp = std::max(e - 1, min_exponent) - (mantissa_bits - 1);
  return std::ldexp(std::nearbyint(std::ldexp(v, -spacing_exp)), spacing_exp);
}

Tensor Ones(const Shape& s) {
  Tensor y = F64(s);
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = 1;
  return y;
}

// ---------------------------------------------------------------------------------
// The case table.

std::string Num(double v) {  // 0.7 -> "0p7", -1.3 -> "m1p3"
  std::string s = absl::StrCat(v);
  for (char& ch : s) {
    if (ch == '.') ch = 'p';
    if (ch == '-') ch = 'm';
  }
  return s;
}

std::vector<OpCase> GemmCases() {
  std::vector<OpCase> cases;
  const int64_t m = 3, k = 5, n = 4;
  struct Bias {
    const char* name;
    std::optional<Shape> shape;
  };
  const std::vector<Bias> biases = {{"none", std::nullopt}, {"N", Shape{n}},       {"1N", Shape{1, n}},
                                    {"M1", Shape{m, 1}},    {"MN", Shape{m, n}},   {"scalar", Shape{}}};
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

std::vector<OpCase> BinaryCases() {
  std::vector<OpCase> cases;
  const std::vector<std::tuple<const char*, Shape, Shape>> shapes = {
      {"Same", {3, 4}, {3, 4}},         {"RowBias", {3, 4}, {4}},        {"Row1N", {3, 4}, {1, 4}},
      {"Column", {3, 4}, {3, 1}},       {"Scalar", {3, 4}, {}},          {"ScalarLhs", {}, {3, 4}},
      {"RowLhs", {4}, {3, 4}},          {"Outer", {3, 1}, {1, 4}},       {"Rank3Column", {2, 3, 4}, {3, 1}},
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
        {{3, 4, 5}, -1, "Rank3_AxisM1"}, {{3, 4, 5}, 0, "Rank3_Axis0"}, {{3, 4, 5}, 1, "Rank3_Axis1"},
        {{3, 4, 5}, 2, "Rank3_Axis2"},   {{4, 6}, std::nullopt, "Rank2_DefaultAxis"}, {{4, 6}, 0, "Rank2_Axis0"},
    };
    for (const auto& [shape, axis, name] : variants) {
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

std::vector<OpCase> ShapeCases() {
  std::vector<OpCase> cases;
  const Shape x3 = {2, 3, 4};
  // Reshape: target (with -1 and 0) -> expected shape, written out by hand.
  const std::vector<std::tuple<const char*, std::vector<int64_t>, Shape>> reshapes = {
      {"Minus1", {-1}, {24}},           {"Zero_Minus1", {0, -1}, {2, 12}}, {"Minus1_4", {-1, 4}, {6, 4}},
      {"4_Zero_Minus1", {4, 0, -1}, {4, 3, 2}}, {"Zero_Zero_4", {0, 0, 4}, {2, 3, 4}}, {"Explicit", {6, 2, 2}, {6, 2, 2}},
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
      {"Axis0", 0, {1, 24}}, {"Axis1", 1, {2, 12}}, {"Axis2", 2, {6, 4}},
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
      {"Perm201", x3, {2, 0, 1}}, {"Perm120", x3, {1, 2, 0}}, {"Perm021", x3, {0, 2, 1}},
      {"Perm102", x3, {1, 0, 2}}, {"Rank3Default", x3, {}},  {"Rank2Default", {3, 5}, {}},
      {"Rank4Perm3120", {2, 3, 4, 5}, {3, 1, 2, 0}},
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
  for (auto [name, from, to] : std::vector<std::tuple<const char*, DType, DType>>{
           {"F32ToBf16", DType::kF32, DType::kBF16}, {"F32ToF16", DType::kF32, DType::kF16},
           {"F64ToBf16", DType::kF64, DType::kBF16}, {"F64ToF16", DType::kF64, DType::kF16},
           {"Bf16ToF32", DType::kBF16, DType::kF32}, {"F16ToF32", DType::kF16, DType::kF32},
           {"Bf16ToF64", DType::kBF16, DType::kF64}, {"F16ToF64", DType::kF16, DType::kF64}}) {
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
    const std::vector<double> values = {1 + half_ulp + tiny, -(1 + half_ulp + tiny), 1 + 3 * half_ulp - tiny,
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
  for (auto [name, ratio, by_attr] : std::vector<std::tuple<const char*, double, bool>>{
           {"Dropout_Train_MpcTraining_Ratio0p3", 0.3, true}, {"Dropout_Train_TrainingModeInput_Ratio0p5", 0.5, false}}) {
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
// paints them like any op, so each must hold DESIGN.md's tolerance in every dtype.
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
                Labels("labels", ignore ? std::vector<int64_t>{0, -100, 4, 1, -100, 3}
                                        : std::vector<int64_t>{0, 3, 4, 1, 2, 3})};
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
      return std::vector<Tensor>{RefBinary(in[0], in[1], [scale](double dy, double m) { return m != 0 ? dy * scale : 0.0; })};
    };
    add(std::move(c));
  }
  for (const auto& [name, from, to] : std::vector<std::tuple<const char*, Shape, Shape>>{
           {"RowsToRow", {4, 5}, {5}}, {"ToColumn", {2, 3, 4}, {3, 1}}, {"ToScalar", {3, 4}, {}},
           {"Rank3To1N", {2, 3, 4}, {1, 4}}}) {
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

const std::vector<OpCase>& AllCases() {
  static const std::vector<OpCase>* cases = [] {
    auto* all = new std::vector<OpCase>();
    for (auto family : {GemmCases, MatMulCases, BinaryCases, UnaryCases, SoftmaxCases, ShapeCases, DropoutCases,
                        LossCases, BackwardOpCases}) {
      for (OpCase& c : family()) all->push_back(std::move(c));
    }
    return all;
  }();
  return *cases;
}

std::vector<OpCase> ForwardCases() {
  std::vector<OpCase> out;
  for (const OpCase& c : AllCases()) {
    if (c.forward()) out.push_back(c);
  }
  return out;
}

std::vector<OpCase> GradientCases() {
  std::vector<OpCase> out;
  for (const OpCase& c : AllCases()) {
    if (c.gradient) out.push_back(c);
  }
  return out;
}

// ---------------------------------------------------------------------------------
// The harness.

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

Tensor Materialize(const In& in, DType float_dtype, uint64_t seed) {
  const DType dtype = in.dtype.value_or(float_dtype);
  if (in.role != Role::kFloat) return in.value.dtype() == dtype ? in.value : in.value.CastTo(dtype);
  Tensor x = RandomTensor(DType::kF64, in.shape, seed, in.lo, in.hi);
  if (in.min_abs > 0) {
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      double& v = x.data<double>()[i];
      v += std::copysign(in.min_abs, v);
    }
  }
  return dtype == DType::kF64 ? x : x.CastTo(dtype);
}

// One op node over freshly generated inputs.
struct OpGraph {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Node* node = nullptr;
  std::vector<Value*> values;  // per input spec
  std::vector<Tensor> data;    // per input spec: what is fed (or baked in)
};

absl::StatusOr<OpGraph> BuildOpGraph(const OpCase& c, DType float_dtype) {
  OpGraph g;
  const uint64_t base = HashName(c.name) ^ (float_dtype == DType::kF64 ? 0x5151 : 0);
  std::vector<Value*> operands;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    if (in.same_as >= 0) {
      g.values.push_back(g.values[in.same_as]);
      g.data.push_back(g.data[in.same_as]);
    } else {
      Tensor t = Materialize(in, float_dtype, base + 7919 * (i + 1));
      Value* v = in.role == Role::kConst ? g.graph->AddConstant(in.name, t)
                                         : g.graph->AddInput(in.name, t.dtype(), t.shape());
      g.values.push_back(v);
      g.data.push_back(std::move(t));
    }
  }
  auto node = g.graph->AddNode(c.op, g.values, c.attrs, c.name);
  if (!node.ok()) return node.status();
  g.node = *node;
  return g;
}

absl::StatusOr<std::unique_ptr<Executor>> Compile(const Graph& graph) {
  CompileInfo info;
  auto order = graph.TopologicalOrder();
  if (!order.ok()) return order.status();
  info.order = *order;
  auto plan = PlanMemory(graph, info.order);
  if (!plan.ok()) return plan.status();
  info.plan = *plan;
  return Executor::Create(graph, info, Cpu());
}

absl::Status Feed(Executor& ex, const OpGraph& g, const OpCase& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].same_as >= 0 || c.inputs[i].role == Role::kConst) continue;
    absl::Status st = ex.SetInput(g.values[i]->name, g.data[i]);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

struct ForwardRun {
  std::vector<Tensor> inputs;   // as f64, for the reference
  std::vector<Tensor> outputs;  // every output of the node
};

absl::StatusOr<ForwardRun> RunForward(const OpCase& c, DType float_dtype) {
  auto built = BuildOpGraph(c, float_dtype);
  if (!built.ok()) return built.status();
  OpGraph& g = *built;
  g.graph->SetOutputs(g.node->outputs);
  auto ex = Compile(*g.graph);
  if (!ex.ok()) return ex.status();
  if (absl::Status st = Feed(**ex, g, c); !st.ok()) return st;
  if (absl::Status st = (*ex)->Run(kRunSeed, kRunStep); !st.ok()) return st;
  ForwardRun run;
  for (const Tensor& t : g.data) run.inputs.push_back(t.CastTo(DType::kF64));
  for (Value* out : g.node->outputs) {
    auto t = (*ex)->Fetch(out->name);
    if (!t.ok()) return t.status();
    run.outputs.push_back(std::move(*t));
  }
  return run;
}

// Checks outputs[i] against ref[i]: dtype, shape, no NaN, relative error below tol
// (tol 0: bit-exact values).
::testing::AssertionResult CompareOutputs(const std::vector<Tensor>& got, const std::vector<Tensor>& ref,
                                          const std::vector<DType>& dtypes, double tol) {
  if (got.size() < ref.size()) {
    return ::testing::AssertionFailure() << "the op produced " << got.size() << " outputs, the reference "
                                         << ref.size();
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    if (got[i].dtype() != dtypes[i]) {
      return ::testing::AssertionFailure() << "output " << i << " has dtype " << DTypeName(got[i].dtype())
                                           << ", expected " << DTypeName(dtypes[i]);
    }
    if (got[i].shape() != ref[i].shape()) {
      return ::testing::AssertionFailure() << "output " << i << " has shape " << ShapeToString(got[i].shape())
                                           << ", the reference " << ShapeToString(ref[i].shape());
    }
    for (int64_t k = 0; k < got[i].num_elements(); ++k) {
      if (!std::isfinite(got[i].GetAsDouble(k))) {
        return ::testing::AssertionFailure() << "output " << i << " element " << k << " is "
                                             << got[i].GetAsDouble(k);
      }
    }
    const double err = RelativeError(got[i], ref[i]);
    if (!(err <= tol)) {
      std::ostringstream worst;
      double max_diff = -1;
      for (int64_t k = 0; k < ref[i].num_elements(); ++k) {
        const double d = std::abs(got[i].GetAsDouble(k) - ref[i].GetAsDouble(k));
        if (d > max_diff) {
          max_diff = d;
          worst.str("");
          worst << "element " << k << ": got " << got[i].GetAsDouble(k) << ", reference " << ref[i].GetAsDouble(k);
        }
      }
      return ::testing::AssertionFailure() << "output " << i << ": relative error " << err << " > " << tol
                                           << "; worst " << worst.str();
    }
  }
  return ::testing::AssertionSuccess();
}

// A 16-bit kernel computes in f32 from its (already rounded) inputs and rounds each
// output once, so every element is the f64 reference rounded to the format, give or
// take one ulp where the f32 evaluation lands across a rounding boundary. An f16/bf16
// accumulator, or a second rounding, shows up here long before the norm tolerance.
::testing::AssertionResult CheckRoundedOnce(const std::vector<Tensor>& got, const std::vector<Tensor>& ref,
                                            DType dtype) {
  auto ordered = [](uint16_t h) -> int64_t { return (h & 0x8000) ? -int64_t(h & 0x7fff) : int64_t(h & 0x7fff); };
  for (size_t i = 0; i < ref.size(); ++i) {
    if (got[i].dtype() != dtype) continue;  // fixed-dtype outputs (masks, f32 products)
    for (int64_t k = 0; k < ref[i].num_elements(); ++k) {
      const double want = RoundToFormat(ref[i].GetAsDouble(k), dtype);
      const Tensor want_t = Tensor::FromVector<double>({}, {want}).CastTo(dtype);  // exact: want is in the format
      const int64_t ulps = std::abs(ordered(got[i].data<uint16_t>()[k]) - ordered(want_t.data<uint16_t>()[0]));
      if (ulps > 1) {
        return ::testing::AssertionFailure() << "output " << i << " element " << k << ": got " << got[i].GetAsDouble(k)
                                             << ", the reference " << ref[i].GetAsDouble(k) << " rounds to " << want
                                             << " (" << ulps << " ulp apart)";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// DESIGN.md's tolerance for a run in `float_dtype` (f64: the reference dtype itself).
double Tolerance(DType float_dtype) {
  switch (float_dtype) {
    case DType::kF64: return kF64Tol;
    case DType::kBF16: return kBf16Tol;
    case DType::kF16: return kF16Tol;
    default: return kF32Tol;
  }
}

::testing::AssertionResult CheckForward(const OpCase& c, DType float_dtype) {
  auto run = RunForward(c, float_dtype);
  if (!run.ok()) return ::testing::AssertionFailure() << run.status();
  const std::vector<Tensor> ref = c.ref(run->inputs);
  std::vector<DType> dtypes;
  for (size_t i = 0; i < ref.size(); ++i) {
    dtypes.push_back(i < c.out_dtypes.size() && c.out_dtypes[i] ? *c.out_dtypes[i] : float_dtype);
  }
  // Kernels compute in at least f32 from the inputs they are given (the reference sees
  // the same values), so the error is set by the outputs' dtype: an f32 product of bf16
  // operands (mpc_output_dtype) is held to f32's tolerance, in an f64 run as well.
  double tol = 0;
  for (DType d : dtypes) {
    if (IsFloating(d)) tol = std::max(tol, Tolerance(d));
  }
  ::testing::AssertionResult close = CompareOutputs(run->outputs, ref, dtypes, c.exact ? 0.0 : tol);
  if (!close || (float_dtype != DType::kBF16 && float_dtype != DType::kF16)) return close;
  return CheckRoundedOnce(run->outputs, ref, float_dtype);
}

struct GradSample {
  std::string input;
  int64_t index;
  double analytic, numeric;
};

// Up to kFdMaxElements element indices of a tensor: all of them, or a seeded sample
// that always includes the first and the last.
std::vector<int64_t> SampleIndices(int64_t n, uint64_t seed) {
  std::vector<int64_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  if (n <= kFdMaxElements) return all;
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  std::vector<int64_t> picked(all.begin(), all.begin() + kFdMaxElements - 1);
  picked.push_back(n - 1);
  std::sort(picked.begin(), picked.end());
  return picked;
}

absl::StatusOr<std::vector<GradSample>> RunGradientCheck(const OpCase& c) {
  auto built = BuildOpGraph(c, DType::kF64);
  if (!built.ok()) return built.status();
  OpGraph& g = *built;
  Graph& graph = *g.graph;

  // L = sum_k sum(out_k * R_k), in f64 (outputs of other dtypes are cast first).
  GraphBuilder b(&graph, "loss/");
  Value* loss = nullptr;
  for (int k : c.loss_outputs) {
    Value* y = b.Cast(g.node->outputs.at(k), DType::kF64);
    Value* r = graph.AddConstant(absl::StrCat("R", k),
                                 RandomTensor(DType::kF64, g.node->outputs.at(k)->shape, HashName(c.name) + 31 * k));
    Value* term = b.ReduceSumTo(b.Mul(y, r), {});
    loss = loss ? b.Add(loss, term) : term;
  }
  if (!b.status().ok()) return b.status();

  std::vector<int> wrt_specs;
  std::vector<Value*> wrt;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].role == Role::kFloat && c.inputs[i].same_as < 0) {
      wrt_specs.push_back(static_cast<int>(i));
      wrt.push_back(g.values[i]);
    }
  }
  auto grads = BuildGradients(graph, loss, wrt);
  if (!grads.ok()) return grads.status();
  std::vector<Value*> outputs{loss};
  for (size_t j = 0; j < wrt.size(); ++j) {
    if (!(*grads)[j]) {
      return absl::InternalError(absl::StrCat("BuildGradients returned no gradient for input '", wrt[j]->name,
                                              "', but the loss depends on it"));
    }
    if ((*grads)[j]->dtype != wrt[j]->dtype || (*grads)[j]->shape != wrt[j]->shape) {
      return absl::InternalError(absl::StrCat("gradient of '", wrt[j]->name, "' is ",
                                              DTypeName((*grads)[j]->dtype), ShapeToString((*grads)[j]->shape)));
    }
    outputs.push_back((*grads)[j]);
  }
  graph.SetOutputs(outputs);
  auto ex = Compile(graph);
  if (!ex.ok()) return ex.status();
  Executor& e = **ex;
  if (absl::Status st = Feed(e, g, c); !st.ok()) return st;
  if (absl::Status st = e.Run(kRunSeed, kRunStep); !st.ok()) return st;
  std::vector<Tensor> analytic;
  for (size_t j = 0; j < wrt.size(); ++j) {
    auto t = e.Fetch((*grads)[j]->name);
    if (!t.ok()) return t.status();
    analytic.push_back(std::move(*t));
  }

  auto loss_at = [&](const std::string& name, const Tensor& x) -> absl::StatusOr<double> {
    if (absl::Status st = e.SetInput(name, x); !st.ok()) return st;
    if (absl::Status st = e.Run(kRunSeed, kRunStep); !st.ok()) return st;
    auto l = e.Fetch(loss->name);
    if (!l.ok()) return l.status();
    return l->GetAsDouble(0);
  };

  std::vector<GradSample> samples;
  for (size_t j = 0; j < wrt.size(); ++j) {
    const int s = wrt_specs[j];
    const Tensor& x0 = g.data[s];
    const std::string& name = g.values[s]->name;
    for (int64_t idx : SampleIndices(x0.num_elements(), HashName(c.name) + j)) {
      Tensor xp = x0.CastTo(DType::kF64), xm = x0.CastTo(DType::kF64);
      xp.data<double>()[idx] += c.fd_step;
      xm.data<double>()[idx] -= c.fd_step;
      // Perturb in the input's own dtype and divide by the step actually taken.
      xp = xp.CastTo(x0.dtype());
      xm = xm.CastTo(x0.dtype());
      const double step = xp.GetAsDouble(idx) - xm.GetAsDouble(idx);
      auto lp = loss_at(name, xp);
      if (!lp.ok()) return lp.status();
      auto lm = loss_at(name, xm);
      if (!lm.ok()) return lm.status();
      samples.push_back({c.inputs[s].name, idx, analytic[j].GetAsDouble(idx), (*lp - *lm) / step});
    }
    if (absl::Status st = e.SetInput(name, x0); !st.ok()) return st;
  }
  return samples;
}

::testing::AssertionResult JudgeGradients(const std::vector<GradSample>& samples, double tol) {
  if (samples.empty()) return ::testing::AssertionFailure() << "no gradient samples";
  int bad = 0;
  double largest = 0;
  std::ostringstream msg;
  for (const GradSample& s : samples) {
    largest = std::max(largest, std::abs(s.numeric));
    const bool ok = std::isfinite(s.analytic) && std::isfinite(s.numeric) &&
                    std::abs(s.analytic - s.numeric) <= tol * std::max(1.0, std::abs(s.numeric));
    if (!ok && ++bad <= 10) {
      msg << "\n  d/d " << s.input << "[" << s.index << "]: analytic " << s.analytic << ", numeric " << s.numeric;
    }
  }
  if (bad) {
    return ::testing::AssertionFailure() << bad << " of " << samples.size()
                                         << " gradient elements differ from central differences:" << msg.str();
  }
  // A check where every derivative is zero proves nothing.
  if (largest < 1e-3) return ::testing::AssertionFailure() << "degenerate case: every numeric derivative is ~0";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckGradient(const OpCase& c) {
  auto samples = RunGradientCheck(c);
  if (!samples.ok()) return ::testing::AssertionFailure() << samples.status();
  return JudgeGradients(*samples, kFdTol);
}

std::string CaseName(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

// ---------------------------------------------------------------------------------
// Forward: every case in f32, bf16 and f16 (DESIGN.md tolerances) and in f64 (the
// reference dtype the gradient checks run in).

class OpForward : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpForward, F32MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kF32)); }
TEST_P(OpForward, F64MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kF64)); }
TEST_P(OpForward, Bf16MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kBF16)); }
TEST_P(OpForward, F16MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kF16)); }

INSTANTIATE_TEST_SUITE_P(, OpForward, ::testing::ValuesIn(ForwardCases()), CaseName);

// Gradient: every differentiable case in f64 against central differences.

class OpGradient : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradient, MatchesCentralDifferences) { EXPECT_TRUE(CheckGradient(GetParam())); }

INSTANTIATE_TEST_SUITE_P(, OpGradient, ::testing::ValuesIn(GradientCases()), CaseName);

// ---------------------------------------------------------------------------------
// Dropout in training mode: random, so checked by its properties, not a reference.

struct DropoutRun {
  Tensor x, y, mask;
};

class DropoutProgram {
 public:
  // Dropout(x, ratio, training_mode) on a [rows, cols] input.
  DropoutProgram(DType dtype, double ratio, bool by_attr, int64_t rows = 100, int64_t cols = 100) {
    x_ = RandomTensor(dtype, {rows, cols}, 77 + static_cast<uint64_t>(ratio * 1000), 0.1, 2.0);
    Value* x = graph_.AddInput("x", dtype, {rows, cols});
    Value* r = graph_.AddConstant("ratio", Tensor::FromVector<double>({}, {ratio}).CastTo(dtype));
    Tensor mode(DType::kBool, {});
    mode.data<uint8_t>()[0] = by_attr ? 0 : 1;  // with the attribute, it must override the input
    Value* m = graph_.AddConstant("training_mode", mode);
    AttrMap attrs;
    if (by_attr) attrs.Set("mpc_training", int64_t{1});
    auto node = graph_.AddNode("Dropout", {x, r, m}, attrs, "dropout");
    EXPECT_TRUE(node.ok()) << node.status();
    node_ = *node;
    graph_.SetOutputs(node_->outputs);
    auto ex = Compile(graph_);
    EXPECT_TRUE(ex.ok()) << ex.status();
    ex_ = std::move(*ex);
    EXPECT_TRUE(ex_->SetInput("x", x_).ok());
  }

  DropoutRun Run(uint64_t seed, int64_t step) {
    EXPECT_TRUE(ex_->Run(seed, step).ok());
    DropoutRun run{x_, *ex_->Fetch(node_->outputs[0]->name), *ex_->Fetch(node_->outputs[1]->name)};
    return run;
  }

 private:
  Graph graph_;
  Node* node_ = nullptr;
  std::unique_ptr<Executor> ex_;
  Tensor x_;
};

int64_t CountDifferent(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) n += a.GetAsDouble(i) != b.GetAsDouble(i);
  return n;
}

class OpForwardDropoutTraining : public ::testing::TestWithParam<std::tuple<DType, double, bool>> {};

TEST_P(OpForwardDropoutTraining, KeepsScaledValuesAtTheExpectedRate) {
  const auto [dtype, p, by_attr] = GetParam();
  DropoutProgram program(dtype, p, by_attr);
  const DropoutRun run = program.Run(kRunSeed, kRunStep);
  ASSERT_EQ(run.mask.dtype(), DType::kBool);
  const int64_t n = run.x.num_elements();
  // The kernel may compute x * (1/(1-p)): allow the one rounding that adds (none in f64
  // beyond the last bit; exact when 1/(1-p) is a power of two). bf16/f16 round the
  // f32 product once to the format.
  const double ulp = dtype == DType::kF32    ? std::ldexp(1.0, -23)
                     : dtype == DType::kBF16 ? std::ldexp(1.0, -7)
                     : dtype == DType::kF16  ? std::ldexp(1.0, -10)
                                             : std::ldexp(1.0, -51);
  const double p_stored = Tensor::FromVector<double>({}, {p}).CastTo(dtype).GetAsDouble(0);
  int64_t kept = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = run.x.GetAsDouble(i), y = run.y.GetAsDouble(i);
    const bool keep = run.mask.GetAsDouble(i) != 0;
    kept += keep;
    if (keep) {
      const double want = x / (1.0 - p_stored);
      const bool exact_scale = p == 0.5;
      const bool ok = exact_scale ? y == want : std::abs(y - want) <= 2 * ulp * std::abs(want);
      if (!ok && ++bad <= 5) ADD_FAILURE() << "kept element " << i << ": y=" << y << ", x/(1-p)=" << want;
    } else if (y != 0.0) {
      if (++bad <= 5) ADD_FAILURE() << "dropped element " << i << " is " << y << ", not 0";
    }
  }
  EXPECT_EQ(bad, 0);
  // Kept fraction within 3 sigma of 1 - p.
  const double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 3 * sigma) << "kept " << kept << " of " << n;

  // Same seed and step: the same mask and output; another step or seed: another mask.
  const DropoutRun again = program.Run(kRunSeed, kRunStep);
  EXPECT_EQ(CountDifferent(again.mask, run.mask), 0);
  EXPECT_EQ(CountDifferent(again.y, run.y), 0);
  DropoutProgram twin(dtype, p, by_attr);  // a separately built identical program
  EXPECT_EQ(CountDifferent(twin.Run(kRunSeed, kRunStep).mask, run.mask), 0);
  // Two independent masks differ in about 2p(1-p) of the elements.
  const double expected_diff = 2 * p * (1 - p) * n;
  const double diff_sigma = std::sqrt(expected_diff * (1 - 2 * p * (1 - p)));
  const int64_t step_diff = CountDifferent(program.Run(kRunSeed, kRunStep + 1).mask, run.mask);
  const int64_t seed_diff = CountDifferent(program.Run(kRunSeed + 1, kRunStep).mask, run.mask);
  EXPECT_NEAR(static_cast<double>(step_diff), expected_diff, 4 * diff_sigma) << "another step";
  EXPECT_NEAR(static_cast<double>(seed_diff), expected_diff, 4 * diff_sigma) << "another seed";
}

std::string DropoutName(const ::testing::TestParamInfo<std::tuple<DType, double, bool>>& info) {
  const auto [dtype, p, by_attr] = info.param;
  return absl::StrCat(DTypeName(dtype), "_Ratio", Num(p), by_attr ? "_MpcTrainingAttr" : "_TrainingModeInput");
}

INSTANTIATE_TEST_SUITE_P(, OpForwardDropoutTraining,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF64, DType::kBF16, DType::kF16),
                                            ::testing::Values(0.1, 0.3, 0.5, 0.8), ::testing::Bool()),
                         DropoutName);

// ---------------------------------------------------------------------------------
// Coverage: every ONNX-domain op in the registry (plus mpc's MeanSquaredError) has a
// forward case, and a gradient case when it is differentiable. The covered lists are
// the case tables above.

std::vector<std::string> MissingCoverage(const std::vector<std::string>& ops, const std::vector<OpCase>& cases) {
  std::set<std::string> forward, gradient;
  for (const OpCase& c : cases) {
    if (c.forward()) forward.insert(c.op);
    if (c.gradient) gradient.insert(c.op);
  }
  std::vector<std::string> missing;
  for (const std::string& op : ops) {
    const OpDef* def = OpRegistry::Global().Find(op);
    if (!def) {
      missing.push_back(absl::StrCat(op, " (not in the registry)"));
      continue;
    }
    if (!forward.count(op)) missing.push_back(absl::StrCat(op, " (no forward case)"));
    if (def->grad && !gradient.count(op)) missing.push_back(absl::StrCat(op, " (no gradient case)"));
  }
  return missing;
}

std::vector<std::string> RequiredOps() {
  std::vector<std::string> ops = OpRegistry::Global().OpNames();
  ops.push_back("MeanSquaredError");
  return ops;
}

TEST(OpCoverage, EveryRegisteredOpHasForwardAndGradientCases) {
  const std::vector<std::string> ops = RequiredOps();
  ASSERT_GE(ops.size(), 15u) << "the registry lists suspiciously few ops: " << absl::StrJoin(ops, " ");
  const std::vector<std::string> missing = MissingCoverage(ops, AllCases());
  EXPECT_TRUE(missing.empty()) << "ops without numerics cases in op_numerics_test.cc: "
                               << absl::StrJoin(missing, ", ");
}

TEST(OpCoverage, CasesNameRegisteredOpsAndUniqueNames) {
  std::set<std::string> names;
  for (const OpCase& c : AllCases()) {
    EXPECT_NE(OpRegistry::Global().Find(c.op), nullptr) << c.name << " tests unknown op " << c.op;
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    EXPECT_TRUE(c.forward() || c.gradient) << c.name << " checks nothing";
  }
}

TEST(OpCoverage, RequiredVariantsArePresent) {
  std::set<std::string> names;
  for (const OpCase& c : AllCases()) names.insert(c.name);
  for (const char* required :
       {"Gemm_tA0_tB0_CN_alpha1_beta1", "Gemm_tA0_tB1_C1N_alpha0p7_beta1", "Gemm_tA1_tB0_CMN_alpha0p7_beta1p3",
        "Gemm_tA1_tB1_Cnone_alpha1_beta1", "MatMul_BroadcastBatch", "MatMul_Batched3D", "Div_Column",
        "Softmax_Rank3_Axis1", "LogSoftmax_Rank3_Axis0", "Reshape_Zero_Minus1", "Flatten_Axis0", "Transpose_Perm201",
        "Cast_F32ToF64", "Cast_F64ToF32", "Dropout_Eval_Ratio", "Dropout_Train_MpcTraining_Ratio0p3",
        "SoftmaxCrossEntropyLoss_Mean_IgnoreIndexM100", "MeanSquaredError_Rank2"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
}

// ---------------------------------------------------------------------------------
// The checks themselves must be able to fail.

const OpCase& FindCase(const std::string& name) {
  for (const OpCase& c : AllCases()) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return AllCases().front();
}

TEST(OpForwardHarness, RejectsAWrongReference) {
  OpCase c = FindCase("Gemm_tA1_tB0_CMN_alpha0p7_beta1p3");
  ASSERT_TRUE(CheckForward(c, DType::kF32));
  const RefFn good = c.ref;
  c.ref = [good](const std::vector<Tensor>& in) {  // off by 1e-4 relative: above f32 tolerance
    std::vector<Tensor> out = good(in);
    for (int64_t i = 0; i < out[0].num_elements(); ++i) P(out[0])[i] *= 1 + 1e-4;
    return out;
  };
  EXPECT_FALSE(CheckForward(c, DType::kF32));
  c.ref = [good](const std::vector<Tensor>& in) {  // a transposed-operand mistake
    std::vector<Tensor> out = good(in);
    std::swap(P(out[0])[0], P(out[0])[1]);
    return out;
  };
  EXPECT_FALSE(CheckForward(c, DType::kF32));
  Tensor nan = F64({2});
  P(nan)[0] = NAN;
  P(nan)[1] = 1;
  EXPECT_FALSE(CompareOutputs({nan}, {Ones({2})}, {DType::kF64}, 1.0));
}

TEST(OpForwardHarness, RoundedOnceCatchesWhatTheNormToleranceLetsThrough) {
  const OpCase& c = FindCase("Softmax_Rank3_Axis1");
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto run = RunForward(c, dtype);
    ASSERT_TRUE(run.ok()) << run.status();
    const std::vector<Tensor> ref = c.ref(run->inputs);
    ASSERT_TRUE(CheckRoundedOnce(run->outputs, ref, dtype));
    // One element off by three ulps of the format (a bf16 accumulator, a double
    // rounding): far inside the norm tolerance, caught by the rounding check.
    std::vector<Tensor> off = ref;
    P(off[0])[7] *= 1 + 3 * std::ldexp(1.0, dtype == DType::kBF16 ? -7 : -10);
    EXPECT_TRUE(CompareOutputs(run->outputs, off, {dtype}, Tolerance(dtype))) << DTypeName(dtype);
    EXPECT_FALSE(CheckRoundedOnce(run->outputs, off, dtype)) << DTypeName(dtype);
  }
}

TEST(OpGradientHarness, RejectsAWrongGradient) {
  const OpCase& c = FindCase("Softmax_Rank3_Axis1");
  auto samples = RunGradientCheck(c);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_TRUE(JudgeGradients(*samples, kFdTol));
  std::vector<GradSample> scaled = *samples;  // 1e-4 relative error in every element
  for (GradSample& s : scaled) s.analytic *= 1 + 1e-4;
  EXPECT_FALSE(JudgeGradients(scaled, kFdTol));
  std::vector<GradSample> one_off = *samples;  // a single wrong element
  one_off[one_off.size() / 2].analytic += 1e-5;
  EXPECT_FALSE(JudgeGradients(one_off, kFdTol));
  std::vector<GradSample> zeros = *samples;  // nothing to compare
  for (GradSample& s : zeros) s.analytic = s.numeric = 0;
  EXPECT_FALSE(JudgeGradients(zeros, kFdTol));
  // The finite differences themselves are sharp: analytic and numeric agree far below
  // the tolerance on a smooth op.
  double worst = 0;
  for (const GradSample& s : *samples) worst = std::max(worst, std::abs(s.analytic - s.numeric));
  EXPECT_LT(worst, 1e-8);
}

TEST(OpCoverageHarness, ReportsAnOpWithoutCases) {
  std::vector<OpCase> without_tanh;
  for (const OpCase& c : AllCases()) {
    if (c.op != "Tanh") without_tanh.push_back(c);
  }
  const auto missing = MissingCoverage(RequiredOps(), without_tanh);
  EXPECT_EQ(missing, (std::vector<std::string>{"Tanh (no forward case)", "Tanh (no gradient case)"}));
  std::vector<OpCase> forward_only;
  for (OpCase c : AllCases()) {
    if (c.op == "Relu") c.gradient = false;
    forward_only.push_back(c);
  }
  EXPECT_EQ(MissingCoverage(RequiredOps(), forward_only), std::vector<std::string>{"Relu (no gradient case)"});
  EXPECT_EQ(MissingCoverage({"NoSuchOp"}, AllCases()), std::vector<std::string>{"NoSuchOp (not in the registry)"});
}

}  // namespace
}  // namespace mpc
