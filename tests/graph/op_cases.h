// The op-numerics case model shared by tests/graph/op_numerics_test.cc and the case
// tables (tests/graph/*_op_cases.cc): an OpCase is an op, its attributes, its inputs
// and a float64 reference written as plain loops. Each op family keeps its table in its
// own file and registers it with MPC_REGISTER_OP_CASES, so adding ops never touches the
// harness; AllCases() gathers every registered table (in family-name order). The
// graph-building and running half of the harness (MakeInputs, RunCase,
// RunGradientCase) is here too, shared with the CUDA conformance test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "engine/executor.h"
#include "graph/attributes.h"
#include "graph/dtype.h"
#include "graph/graph.h"
#include "graph/shape.h"
#include "graph/tensor.h"

namespace mpc::opcases {

constexpr double kF32Tol = 1e-5;   // docs/numerics.md: f32 vs an f64 reference
constexpr double kF64Tol = 1e-12;  // the f64 kernels are the gradient checks' reference
constexpr double kBf16Tol = 1e-2;  // docs/numerics.md: bf16 vs an f64 reference
constexpr double kF16Tol = 2e-3;   // docs/numerics.md: f16 vs an f64 reference
constexpr double kTf32Tol = 1e-3;  // docs/numerics.md: tf32 (a TF32 tensor core against the CPU)
// A TF32 case on the CPU against a reference on the TF32-rounded operands: the CPU
// emulates TF32 exactly (products exact in f32, f32 accumulation), so only f32 summation
// is left, as in an f32 GEMM; tighter than kF32Tol, so a missing operand rounding on
// either side (~1e-4) cannot pass.
constexpr double kTf32EmulationTol = 1e-6;
constexpr double kFdStep = 1e-6;
constexpr double kFdTol = 1e-6;  // |analytic - numeric| <= kFdTol * max(1, |numeric|)
constexpr int kFdMaxElements = 30;
constexpr uint64_t kRunSeed = 20240611;
constexpr int64_t kRunStep = 7;

// ---------------------------------------------------------------------------------
// Case description.

enum class Role {
  kFloat,  // random float data, a graph input; differentiated in gradient cases
  kConst,  // a graph constant (Reshape's shape, Dropout's ratio / training_mode)
  kFed,    // fixed data fed as a graph input, never differentiated (labels)
  kState,  // persistent state the op updates in place (master weights, optimizer
           // moments, loss scale, FP8 meta): a graph state value initialised with
           // `value`, or with random data like kFloat when `value` is empty; RunCase
           // returns its value after the step, after the node's outputs
};

struct In {
  std::string name;
  Shape shape;
  Role role = Role::kFloat;
  std::optional<DType> dtype;  // fixed dtype; unset: the run's float dtype
  double lo = -1, hi = 1;
  double min_abs = 0;  // |x| >= min_abs (Relu's kink, Div's denominators)
  Tensor value;        // kConst / kFed / kState: the data (cast to `dtype` or the float dtype)
  int same_as = -1;    // >= 0: this operand is the same value as input #same_as
};

inline In X(const std::string& name, Shape shape, double lo = -1, double hi = 1, double min_abs = 0) {
  In in;
  in.name = name;
  in.shape = std::move(shape);
  in.lo = lo;
  in.hi = hi;
  in.min_abs = min_abs;
  return in;
}
inline In XTyped(const std::string& name, Shape shape, DType dtype) {
  In in = X(name, std::move(shape));
  in.dtype = dtype;
  return in;
}
inline In SameAs(int index) {
  In in;
  in.same_as = index;
  return in;
}
// A float constant whose dtype follows the run (f32 graph: f32 constant).
inline In ConstFloat(const std::string& name, double v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.value = Tensor::FromVector<double>({}, {v});
  return in;
}
inline In ConstBool(const std::string& name, bool v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.dtype = DType::kBool;
  in.value = Tensor(DType::kBool, {});
  in.value.data<uint8_t>()[0] = v ? 1 : 0;
  return in;
}
inline In ConstInts(const std::string& name, const std::vector<int64_t>& v) {
  In in;
  in.name = name;
  in.role = Role::kConst;
  in.dtype = DType::kI64;
  in.value = Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v);
  return in;
}
inline In Labels(const std::string& name, const std::vector<int64_t>& v, DType dtype = DType::kI64) {
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.dtype = dtype;
  in.shape = {static_cast<int64_t>(v.size())};
  in.value = Tensor::FromVector<int64_t>(in.shape, v).CastTo(dtype);
  return in;
}

// A fixed bool tensor fed as a graph input (DropoutGrad's mask): every third element 0.
inline In Mask(const std::string& name, const Shape& shape) {
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
  RefFn ref;                                     // null: gradient-only case
  std::vector<std::optional<DType>> out_dtypes;  // per checked output; unset: float dtype
  bool exact = false;                            // data movement: must match bit for bit
  bool gradient = true;
  std::vector<int> loss_outputs = {0};  // outputs that feed the loss in gradient cases
  double fd_step = kFdStep;
  // The node runs in TF32 (attribute mpc_tf32 = 1, f32 operands): the reference rounds
  // its operands with RefRoundToTf32, the CPU is held to kTf32EmulationTol and another
  // backend, against the CPU, to kTf32Tol.
  bool tf32 = false;

  bool forward() const { return static_cast<bool>(ref); }
};

// gtest prints parameters of failing tests; a case prints as its name.
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

inline uint64_t HashName(const std::string& s) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return h;
}

// ---------------------------------------------------------------------------------
// float64 references: plain loops over index vectors, independent of the kernels.

inline Tensor F64(const Shape& s) { return Tensor(DType::kF64, s); }
inline const double* P(const Tensor& t) { return t.data<double>(); }
inline double* P(Tensor& t) { return t.data<double>(); }

inline std::vector<int64_t> Unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int d = static_cast<int>(s.size()) - 1; d >= 0; --d) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}

inline int64_t Ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t flat = 0;
  for (size_t d = 0; d < s.size(); ++d) flat = flat * s[d] + idx[d];
  return flat;
}

// Offset in a tensor of shape `in` of the element an output index (right-aligned,
// numpy broadcasting) reads.
inline int64_t BroadcastOffset(const std::vector<int64_t>& out_idx, const Shape& in) {
  const size_t lead = out_idx.size() - in.size();
  int64_t flat = 0;
  for (size_t d = 0; d < in.size(); ++d) flat = flat * in[d] + (in[d] == 1 ? 0 : out_idx[lead + d]);
  return flat;
}

inline Shape RefBroadcastShape(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    const int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    const int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

inline Tensor RefBinary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape shape = RefBroadcastShape(a.shape(), b.shape());
  Tensor y = F64(shape);
  for (int64_t i = 0; i < y.num_elements(); ++i) {
    const auto idx = Unravel(i, shape);
    P(y)[i] = f(P(a)[BroadcastOffset(idx, a.shape())], P(b)[BroadcastOffset(idx, b.shape())]);
  }
  return y;
}

inline Tensor RefUnary(const Tensor& x, const std::function<double(double)>& f) {
  Tensor y = F64(x.shape());
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = f(P(x)[i]);
  return y;
}

inline Tensor RefGemm(const Tensor& a, const Tensor& b, const Tensor* c, double alpha, double beta, bool ta, bool tb) {
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

inline Tensor RefMatMul(const Tensor& a, const Tensor& b) {
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

inline Tensor RefSoftmax(const Tensor& x, int64_t axis, bool log) {
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

inline Tensor RefTranspose(const Tensor& x, std::vector<int64_t> perm) {
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

inline Tensor RefReshape(const Tensor& x, const Shape& shape) {
  Tensor y = F64(shape);
  std::memcpy(y.raw(), x.raw(), y.bytes());
  return y;
}

// ONNX SoftmaxCrossEntropyLoss without weights: {loss, log_prob}.
inline std::vector<Tensor> RefSce(const Tensor& scores, const Tensor& labels, bool mean,
                                  std::optional<int64_t> ignore) {
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

inline Tensor RefMse(const Tensor& p, const Tensor& t) {
  double sum = 0;
  for (int64_t i = 0; i < p.num_elements(); ++i) sum += (P(p)[i] - P(t)[i]) * (P(p)[i] - P(t)[i]);
  Tensor y = F64({});
  P(y)[0] = sum / static_cast<double>(p.num_elements());
  return y;
}

// SoftmaxGrad: y * (dy - sum(dy * y));  LogSoftmaxGrad: dy - exp(y) * sum(dy), along axis.
inline Tensor RefSoftmaxGrad(const Tensor& dy, const Tensor& y, int64_t axis, bool log) {
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
inline Tensor RefSceGrad(const Tensor& dloss, const Tensor& scores, const Tensor& labels, bool mean,
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
inline Tensor RefReduceSumTo(const Tensor& x, const Shape& shape) {
  Tensor y = F64(shape);
  for (int64_t i = 0; i < x.num_elements(); ++i) P(y)[BroadcastOffset(Unravel(i, x.shape()), shape)] += P(x)[i];
  return y;
}

inline Tensor RefBroadcastTo(const Tensor& x, const Shape& shape) {
  Tensor y = F64(shape);
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = P(x)[BroadcastOffset(Unravel(i, shape), x.shape())];
  return y;
}

// Rounds a double straight to the nearest bf16/f16 value (ties to even), kept in double.
inline double RoundToFormat(double v, DType dtype) {
  if (v == 0 || !std::isfinite(v)) return v;
  const int mantissa_bits = dtype == DType::kBF16 ? 8 : 11;  // significant bits
  const int min_exponent = dtype == DType::kBF16 ? -126 : -14;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int spacing_exp = std::max(e - 1, min_exponent) - (mantissa_bits - 1);
  return std::ldexp(std::nearbyint(std::ldexp(v, -spacing_exp)), spacing_exp);
}

// Rounds a double to the nearest TF32 value (8-bit exponent as f32, 11 significant bits;
// ties to even; subnormals on f32's grid; inf past the largest value's halfway point), kept
// in double: the reference's own TF32, written from the format, not graph/float_convert.h.
inline double RefRoundToTf32(double v) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int spacing_exp = std::max(e - 1, -126) - 10;
  const double r = std::ldexp(std::nearbyint(std::ldexp(v, -spacing_exp)), spacing_exp);
  return std::fabs(r) >= std::ldexp(1.0, 128) ? std::copysign(INFINITY, r) : r;
}
inline Tensor RefRoundToTf32(const Tensor& x) {
  Tensor y = F64(x.shape());
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = RefRoundToTf32(P(x)[i]);
  return y;
}

inline Tensor Ones(const Shape& s) {
  Tensor y = F64(s);
  for (int64_t i = 0; i < y.num_elements(); ++i) P(y)[i] = 1;
  return y;
}

// ---------------------------------------------------------------------------------
// The case table.

inline std::string Num(double v) {  // 0.7 -> "0p7", -1.3 -> "m1p3"
  std::string s = absl::StrCat(v);
  for (char& ch : s) {
    if (ch == '.') ch = 'p';
    if (ch == '-') ch = 'm';
  }
  return s;
}
// ---------------------------------------------------------------------------------
// Case registration.

using CaseTable = std::vector<OpCase> (*)();
// The cases of one registered family (tables that derive cases from another family's).
std::vector<OpCase> FamilyCases(const std::string& family);
// Registers a family's table under `family` (unique); returns true so it can
// initialise a static.
bool RegisterCaseTable(const char* family, CaseTable table);
// Every registered case, built once.
const std::vector<OpCase>& AllCases();

// ---------------------------------------------------------------------------------
// Running a case on a backend (op_case_util.cc): the harness op_numerics_test (CPU
// against the f64 reference) and tests/gpu/cuda_conformance_test (CUDA against the
// CPU) share, so both run exactly the same one-node graphs.

// The seed op_numerics_test draws a case's random inputs from in a `float_dtype` run.
uint64_t CaseSeed(const OpCase& c, DType float_dtype);

// The data for every input spec of a run in `float_dtype`: kFloat inputs (and kState
// ones without a value) uniform in [lo, hi] (pushed away from 0 by min_abs) drawn from
// `seed` (input i from seed + 7919 * (i + 1)), then cast to the input's dtype;
// kConst/kFed/kState their fixed values cast to the input's dtype; a same_as spec
// repeats the data of the spec it names.
std::vector<Tensor> MakeInputs(const OpCase& c, DType float_dtype, uint64_t seed);

// One op node whose operands are the case's inputs: kConst specs become graph
// constants holding their data, kState specs graph state initialised with it, the
// others graph inputs fed with it (Feed).
struct OpGraph {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Node* node = nullptr;
  std::vector<Value*> values;  // per input spec
  std::vector<Tensor> data;    // per input spec: what is fed (or baked in)
};

// `inputs` from MakeInputs (one per spec). The graph's outputs are left unset.
absl::StatusOr<OpGraph> BuildOpGraph(const OpCase& c, const std::vector<Tensor>& inputs);

// Graph -> topological order -> PlanMemory -> Executor on `backend`.
absl::StatusOr<std::unique_ptr<Executor>> CompileOn(const Graph& graph, Backend& backend);

// Copies every fed (kFloat, kFed; not repeated) input of `g` into the executor.
absl::Status Feed(Executor& ex, const OpGraph& g, const OpCase& c);

// Runs the case's node once (seed kRunSeed, step kRunStep) on `backend` over `inputs`
// and returns every output of the node, then the value after the step of every kState
// input (in spec order), on the host.
absl::StatusOr<std::vector<Tensor>> RunCase(const OpCase& c, Backend& backend, const std::vector<Tensor>& inputs);

// The case's node under a scalar loss L = sum_k sum(cast(out_k, loss_dtype) * R_k) over
// c.loss_outputs (R_k fixed random, seeded by the case name, in loss_dtype), and
// autodiff's gradients of L with respect to every kFloat, non-repeated input. The
// graph's outputs are {loss, gradients...}.
struct GradientGraph {
  OpGraph g;
  Value* loss = nullptr;
  std::vector<int> wrt_specs;  // the input spec each gradient belongs to
  std::vector<Value*> grads;   // dL/d input, same dtype and shape as the input
};
absl::StatusOr<GradientGraph> BuildGradientGraph(const OpCase& c, const std::vector<Tensor>& inputs, DType loss_dtype);

// R_k of that loss for output k (of `shape`), in f64: the weights BuildGradientGraph uses.
Tensor LossWeights(const OpCase& c, int k, const Shape& shape);

// Runs BuildGradientGraph's program once on `backend`: {loss, gradients...} on the host.
absl::StatusOr<std::vector<Tensor>> RunGradientCase(const OpCase& c, Backend& backend,
                                                    const std::vector<Tensor>& inputs, DType loss_dtype);

}  // namespace mpc::opcases

#define MPC_OP_CASES_CONCAT_(a, b) a##b
#define MPC_OP_CASES_CONCAT(a, b) MPC_OP_CASES_CONCAT_(a, b)
// MPC_REGISTER_OP_CASES(Conv, ConvCases) at namespace scope in a case-table file.
#define MPC_REGISTER_OP_CASES(family, table) \
  static const bool MPC_OP_CASES_CONCAT(kRegistered_, family) = ::mpc::opcases::RegisterCaseTable(#family, table)
