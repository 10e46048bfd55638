// bf16 and f16 GEMMs on the CPU backend against docs/numerics.md's definition of a
// low-precision GEMM: operands rounded to the format, products accumulated in f32, the
// output rounded to the output dtype.
//   *F32Output   Cast(f32 -> bf16/f16) operands into a Gemm/MatMul with
//                mpc_output_dtype = f32, so no output rounding is involved: the result
//                must match a float64 product of the rounded operands to 1e-6 relative
//                (only the f32 accumulation order differs).
//   *LowOutput   the same with a bf16/f16 output: against the float64 result rounded to
//                the format (RNE), at least 99.9% of the elements are bit-identical and
//                the rest within 1 ulp of the format. The data is sign-structured so no
//                output is a cancelling sum (see SignedByColumn): with cancellation the
//                f32 accumulation error, ~2^-24 of the sum of |products|, can exceed an
//                ulp of a tiny result for *any* f32-accumulating implementation.
// Plus: the output-dtype attribute's inference and errors, and the gradient through a
// Gemm whose output dtype differs from its operands'.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/float_convert.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::RandomTensor;

constexpr int64_t kOnnxFloat = 1;
constexpr double kF32OutputTol = 1e-6;

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

absl::StatusOr<std::unique_ptr<Executor>> Compile(const Graph& graph) { return testing::ExecutorFor(graph, Cpu()); }

// The f64 value of a tensor rounded to `dtype` the way a Cast kernel rounds it.
Tensor RoundedF64(const Tensor& f32, DType dtype) { return f32.CastTo(dtype).CastTo(DType::kF64); }

// Rounds a double straight to the nearest bf16/f16 value (ties to even), in double:
// the exact rounding of the exact product, no intermediate f32 step.
double RoundToFormat(double v, DType dtype) {
  if (v == 0 || !std::isfinite(v)) return v;
  const int mantissa_bits = dtype == DType::kBF16 ? 8 : 11;  // significant bits
  const int min_exponent = dtype == DType::kBF16 ? -126 : -14;
  int e;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  const int spacing_exp = std::max(e - 1, min_exponent) - (mantissa_bits - 1);
  return std::ldexp(std::nearbyint(std::ldexp(v, -spacing_exp)), spacing_exp);
}

uint16_t FormatBits(double v, DType dtype) {
  return dtype == DType::kBF16 ? FloatToBf16(static_cast<float>(v)) : FloatToHalf(static_cast<float>(v));
}

// Distance in units of the format's last place between two 16-bit patterns.
int64_t UlpDistance(uint16_t a, uint16_t b) {
  auto ordered = [](uint16_t h) -> int64_t { return (h & 0x8000) ? -int64_t(h & 0x7fff) : int64_t(h & 0x7fff); };
  return std::abs(ordered(a) - ordered(b));
}

// Operand data for the bit-exactness checks: magnitudes in [0.25, 1), every element of
// output column j's operands signed s_j (+ for even j, - for odd j). Then every output
// is alpha * (a sum of same-signed products) + beta * (same-signed C): no cancellation,
// the f32 accumulation error stays below ~K * 2^-24 relative, far under half an ulp of
// bf16/f16, and only results within that distance of a rounding boundary may differ.
// Half the outputs are negative, so a ReLU epilogue still zeroes something.
// `col_axis`: the axis of `shape` that indexes the output column (-1: none, positive).
Tensor SignedByColumn(const Shape& shape, uint64_t seed, int col_axis) {
  Tensor t = RandomTensor(DType::kF32, shape, seed, 0.25, 1.0);
  if (col_axis < 0) return t;
  const auto strides = RowMajorStrides(shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    const int64_t col = (i / strides[col_axis]) % shape[col_axis];
    if (col % 2) t.data<float>()[i] = -t.data<float>()[i];
  }
  return t;
}

// ---------------------------------------------------------------------------------
// Gemm.

enum class Bias { kNone, kRow, kFull };

struct GemmCase {
  DType dtype;
  bool ta, tb;
  Bias bias;
  float alpha, beta;
  bool relu;
};

std::string GemmCaseName(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  const char* bias = c.bias == Bias::kNone ? "NoC" : c.bias == Bias::kRow ? "RowC" : "FullC";
  return absl::StrCat(DTypeName(c.dtype), "_tA", c.ta, "_tB", c.tb, "_", bias, c.alpha != 1.0f ? "_Alpha" : "",
                      c.beta != 1.0f ? "_Beta" : "", c.relu ? "_Relu" : "");
}

std::vector<GemmCase> GemmCases() {
  std::vector<GemmCase> cases;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (Bias bias : {Bias::kNone, Bias::kRow, Bias::kFull}) {
          for (float alpha : {1.0f, 0.7f}) {
            const float beta = bias == Bias::kFull ? 1.3f : 1.0f;
            cases.push_back({dtype, ta != 0, tb != 0, bias, alpha, beta, false});
          }
        }
      }
    }
    // The fused-epilogue form: bias row + ReLU post-op, and ReLU after a full C.
    cases.push_back({dtype, false, true, Bias::kRow, 1.0f, 1.0f, true});
    cases.push_back({dtype, true, false, Bias::kFull, 0.7f, 1.3f, true});
  }
  return cases;
}

struct GemmRun {
  Tensor out;                // what the kernel produced
  std::vector<Tensor> in64;  // the operands as the kernel saw them (rounded), in f64
  DType out_dtype;
  std::vector<Tensor> unrounded64;  // the f32 graph inputs, in f64
};

// Y = Gemm(Cast(A), Cast(B), Cast(C)) with f32 graph inputs; output f32 or the format.
// `f32_output`: signed uniform data and an f32 output; otherwise the no-cancellation
// data of SignedByColumn and an output in the format.
absl::StatusOr<GemmRun> RunGemm(const GemmCase& c, int64_t m, int64_t k, int64_t n, bool f32_output) {
  Graph graph;
  GraphBuilder b(&graph, "t/");
  const Shape a_shape = c.ta ? Shape{k, m} : Shape{m, k}, b_shape = c.tb ? Shape{n, k} : Shape{k, n};
  std::vector<Tensor> feeds;
  if (f32_output) {
    feeds = {RandomTensor(DType::kF32, a_shape, 11), RandomTensor(DType::kF32, b_shape, 12)};
    if (c.bias == Bias::kRow) feeds.push_back(RandomTensor(DType::kF32, {n}, 13));
    if (c.bias == Bias::kFull) feeds.push_back(RandomTensor(DType::kF32, {m, n}, 13));
  } else {
    feeds = {SignedByColumn(a_shape, 11, -1), SignedByColumn(b_shape, 12, c.tb ? 0 : 1)};
    if (c.bias == Bias::kRow) feeds.push_back(SignedByColumn({n}, 13, 0));
    if (c.bias == Bias::kFull) feeds.push_back(SignedByColumn({m, n}, 13, 1));
  }
  std::vector<Value*> operands;
  const char* names[] = {"A", "B", "C"};
  for (size_t i = 0; i < feeds.size(); ++i) {
    operands.push_back(b.Cast(graph.AddInput(names[i], DType::kF32, feeds[i].shape()), c.dtype));
  }
  AttrMap attrs;
  if (c.ta) attrs.Set("transA", int64_t{1});
  if (c.tb) attrs.Set("transB", int64_t{1});
  if (c.alpha != 1.0f) attrs.Set("alpha", c.alpha);
  if (c.beta != 1.0f) attrs.Set("beta", c.beta);
  if (c.relu) attrs.Set("mpc_activation", std::string("Relu"));
  if (f32_output) attrs.Set("mpc_output_dtype", kOnnxFloat);
  auto node = graph.AddNode("Gemm", operands, attrs, "gemm");
  if (!node.ok()) return node.status();
  graph.SetOutputs({(*node)->outputs[0]});
  auto ex = Compile(graph);
  if (!ex.ok()) return ex.status();
  for (size_t i = 0; i < feeds.size(); ++i) {
    if (absl::Status st = (*ex)->SetInput(names[i], feeds[i]); !st.ok()) return st;
  }
  if (absl::Status st = (*ex)->Run(1, 0); !st.ok()) return st;
  auto out = (*ex)->Fetch((*node)->outputs[0]->name);
  if (!out.ok()) return out.status();
  GemmRun run{std::move(*out), {}, (*node)->outputs[0]->dtype};
  for (const Tensor& t : feeds) {
    run.in64.push_back(RoundedF64(t, c.dtype));
    run.unrounded64.push_back(t.CastTo(DType::kF64));
  }
  return run;
}

// float64 alpha * op(A) op(B) + beta * C (then ReLU) from the rounded operands.
Tensor ReferenceGemm(const GemmCase& c, const std::vector<Tensor>& in, int64_t m, int64_t k, int64_t n) {
  const double* a = in[0].data<double>();
  const double* b = in[1].data<double>();
  const double* cc = in.size() > 2 ? in[2].data<double>() : nullptr;
  Tensor y(DType::kF64, {m, n});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[c.ta ? p * m + i : i * k + p] * b[c.tb ? j * k + p : p * n + j];
      // alpha and beta are f32 attributes; the kernel sees exactly these values.
      double v = static_cast<double>(c.alpha) * acc;
      if (cc) v += static_cast<double>(c.beta) * cc[c.bias == Bias::kRow ? j : i * n + j];
      y.data<double>()[i * n + j] = c.relu && v < 0 ? 0.0 : v;
    }
  }
  return y;
}

// ||got - ref|| / ||ref|| with NaN failing.
double RelErr(const Tensor& got, const Tensor& ref) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < ref.num_elements(); ++i) {
    const double g = got.GetAsDouble(i), r = ref.GetAsDouble(i);
    if (!std::isfinite(g)) return INFINITY;
    diff += (g - r) * (g - r);
    norm += r * r;
  }
  return std::sqrt(diff / norm);
}

// Low-precision output vs the f64 reference rounded to the format: counts of elements
// bit-identical and within one ulp; anything further fails outright.
::testing::AssertionResult CheckRoundedOutput(const Tensor& got, const Tensor& ref, DType dtype) {
  if (got.dtype() != dtype) {
    return ::testing::AssertionFailure() << "output dtype " << DTypeName(got.dtype()) << ", expected "
                                         << DTypeName(dtype);
  }
  const int64_t n = ref.num_elements();
  int64_t identical = 0;
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t g = got.data<uint16_t>()[i];
    const uint16_t r = FormatBits(RoundToFormat(ref.data<double>()[i], dtype), dtype);
    if (g == r) {
      ++identical;
    } else if (UlpDistance(g, r) > 1) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << got.GetAsDouble(i) << ", reference " << ref.data<double>()[i]
             << " rounds to " << RoundToFormat(ref.data<double>()[i], dtype) << " (" << UlpDistance(g, r)
             << " ulp apart)";
    }
  }
  if (identical < static_cast<int64_t>(std::ceil(0.999 * n))) {
    return ::testing::AssertionFailure() << "only " << identical << " of " << n << " elements bit-identical";
  }
  return ::testing::AssertionSuccess() << identical << " of " << n << " bit-identical";
}

class LowPrecisionGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(LowPrecisionGemm, F32OutputMatchesF64ReferenceOfRoundedOperands) {
  const GemmCase& c = GetParam();
  const int64_t m = 37, k = 61, n = 53;
  auto run = RunGemm(c, m, k, n, /*f32_output=*/true);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->out.dtype(), DType::kF32);
  ASSERT_EQ(run->out.shape(), (Shape{m, n}));
  const Tensor ref = ReferenceGemm(c, run->in64, m, k, n);
  const double err = RelErr(run->out, ref);
  EXPECT_LT(err, kF32OutputTol);
  // And the result is not the one from unrounded operands: the operands were rounded.
  EXPECT_GT(err, 0.0) << "suspiciously exact";
}

TEST_P(LowPrecisionGemm, LowOutputIsTheRoundedF64Reference) {
  const GemmCase& c = GetParam();
  // ~20k outputs, so the 0.1% allowance is a count of about 20, not a fraction of one.
  const int64_t m = 131, k = 61, n = 157;
  auto run = RunGemm(c, m, k, n, /*f32_output=*/false);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->out.shape(), (Shape{m, n}));
  EXPECT_TRUE(CheckRoundedOutput(run->out, ReferenceGemm(c, run->in64, m, k, n), c.dtype));
  // The check is sharp enough to see the operand rounding: against the product of the
  // unrounded operands it fails.
  EXPECT_FALSE(CheckRoundedOutput(run->out, ReferenceGemm(c, run->unrounded64, m, k, n), c.dtype));
}

INSTANTIATE_TEST_SUITE_P(, LowPrecisionGemm, ::testing::ValuesIn(GemmCases()), GemmCaseName);

// ---------------------------------------------------------------------------------
// MatMul: B a single matrix (batch folded into M), equal batch dims (oneDNN batched),
// and a broadcast batch (the loop).

struct MatMulCase {
  DType dtype;
  const char* name;
  Shape a, b;
};

std::vector<MatMulCase> MatMulCases() {
  std::vector<MatMulCase> cases;
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    cases.push_back({dtype, "Fold", {3, 37, 61}, {61, 53}});
    cases.push_back({dtype, "Batched", {2, 3, 37, 61}, {2, 3, 61, 53}});
    cases.push_back({dtype, "BroadcastBatch", {2, 1, 37, 61}, {3, 61, 53}});
  }
  return cases;
}

absl::StatusOr<GemmRun> RunMatMul(const MatMulCase& c, bool f32_output) {
  Graph graph;
  GraphBuilder b(&graph, "t/");
  const int b_cols = static_cast<int>(c.b.size()) - 1;
  const Tensor fa = f32_output ? RandomTensor(DType::kF32, c.a, 21) : SignedByColumn(c.a, 21, -1);
  const Tensor fb = f32_output ? RandomTensor(DType::kF32, c.b, 22) : SignedByColumn(c.b, 22, b_cols);
  Value* a = b.Cast(graph.AddInput("A", DType::kF32, c.a), c.dtype);
  Value* w = b.Cast(graph.AddInput("B", DType::kF32, c.b), c.dtype);
  AttrMap attrs;
  if (f32_output) attrs.Set("mpc_output_dtype", kOnnxFloat);
  auto node = graph.AddNode("MatMul", {a, w}, attrs, "matmul");
  if (!node.ok()) return node.status();
  graph.SetOutputs({(*node)->outputs[0]});
  auto ex = Compile(graph);
  if (!ex.ok()) return ex.status();
  if (absl::Status st = (*ex)->SetInput("A", fa); !st.ok()) return st;
  if (absl::Status st = (*ex)->SetInput("B", fb); !st.ok()) return st;
  if (absl::Status st = (*ex)->Run(1, 0); !st.ok()) return st;
  auto out = (*ex)->Fetch((*node)->outputs[0]->name);
  if (!out.ok()) return out.status();
  return GemmRun{std::move(*out), {RoundedF64(fa, c.dtype), RoundedF64(fb, c.dtype)}, (*node)->outputs[0]->dtype};
}

// float64 batched product with numpy broadcasting over the batch dims (rank 3/4 here).
Tensor ReferenceMatMul(const Tensor& a, const Tensor& b) {
  const Shape& as = a.shape();
  const Shape& bs = b.shape();
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const size_t rank = std::max(as.size(), bs.size());
  Shape batch(rank - 2);
  auto dim = [&](const Shape& s, size_t d) {  // right-aligned batch dim d of s, 1 if absent
    const size_t lead = rank - s.size();
    return d < lead ? int64_t{1} : s[d - lead];
  };
  for (size_t d = 0; d + 2 < rank; ++d) batch[d] = std::max(dim(as, d), dim(bs, d));
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor y(DType::kF64, out_shape);
  for (int64_t bi = 0; bi < NumElements(batch); ++bi) {
    int64_t rem = bi, ao = 0, bo = 0, astride = 1, bstride = 1;
    for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      const int64_t da = dim(as, d), db = dim(bs, d);
      ao += (da == 1 ? 0 : idx) * astride;
      bo += (db == 1 ? 0 : idx) * bstride;
      astride *= da;
      bstride *= db;
    }
    const double* am = a.data<double>() + ao * m * k;
    const double* bm = b.data<double>() + bo * k * n;
    double* ym = y.data<double>() + bi * m * n;
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

class LowPrecisionMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(LowPrecisionMatMul, F32OutputMatchesF64ReferenceOfRoundedOperands) {
  auto run = RunMatMul(GetParam(), /*f32_output=*/true);
  ASSERT_TRUE(run.ok()) << run.status();
  ASSERT_EQ(run->out.dtype(), DType::kF32);
  const Tensor ref = ReferenceMatMul(run->in64[0], run->in64[1]);
  ASSERT_EQ(run->out.shape(), ref.shape());
  EXPECT_LT(RelErr(run->out, ref), kF32OutputTol);
}

TEST_P(LowPrecisionMatMul, LowOutputIsTheRoundedF64Reference) {
  auto run = RunMatMul(GetParam(), /*f32_output=*/false);
  ASSERT_TRUE(run.ok()) << run.status();
  const Tensor ref = ReferenceMatMul(run->in64[0], run->in64[1]);
  ASSERT_EQ(run->out.shape(), ref.shape());
  EXPECT_TRUE(CheckRoundedOutput(run->out, ref, GetParam().dtype));
}

INSTANTIATE_TEST_SUITE_P(, LowPrecisionMatMul, ::testing::ValuesIn(MatMulCases()),
                         [](const ::testing::TestParamInfo<MatMulCase>& info) {
                           return absl::StrCat(DTypeName(info.param.dtype), "_", info.param.name);
                         });

// ---------------------------------------------------------------------------------
// mpc_output_dtype: inference and errors.

TEST(GemmOutputDType, InferenceAllowsF32OrTheInputDType) {
  for (const char* op : {"Gemm", "MatMul"}) {
    for (DType in : {DType::kBF16, DType::kF16, DType::kF32}) {
      for (auto [code, want] : std::vector<std::pair<int64_t, DType>>{{1, DType::kF32}, {DTypeToOnnx(in), in}}) {
        Graph graph;
        Value* a = graph.AddInput("A", in, {3, 5});
        Value* b = graph.AddInput("B", in, {5, 4});
        AttrMap attrs;
        attrs.Set("mpc_output_dtype", code);
        auto node = graph.AddNode(op, {a, b}, attrs, "p");
        ASSERT_TRUE(node.ok()) << op << " " << DTypeName(in) << ": " << node.status();
        EXPECT_EQ((*node)->outputs[0]->dtype, want);
        EXPECT_EQ((*node)->outputs[0]->shape, (Shape{3, 4}));
      }
    }
  }
}

TEST(GemmOutputDType, RejectsOtherDTypesWithAMessage) {
  // f16 output from bf16 operands, an integer type, and a code that is no ONNX type.
  for (int64_t code : {int64_t{10}, int64_t{7}, int64_t{999}}) {
    Graph graph;
    Value* a = graph.AddInput("A", DType::kBF16, {3, 5});
    Value* b = graph.AddInput("B", DType::kBF16, {5, 4});
    AttrMap attrs;
    attrs.Set("mpc_output_dtype", code);
    auto node = graph.AddNode("Gemm", {a, b}, attrs, "proj");
    ASSERT_FALSE(node.ok()) << code;
    const std::string msg(node.status().message());
    EXPECT_NE(msg.find("mpc_output_dtype"), std::string::npos) << msg;
    EXPECT_NE(msg.find("proj"), std::string::npos) << msg;
  }
}

// The gradient through a bf16 Gemm with an f32 output: dY (f32) is cast to bf16 for
// the backward GEMMs, and every gradient has its input's dtype. L = sum(Y * R) over
// f32 inputs cast to bf16, so dL/dA = R op(B)^T (through the Cast's gradient), which
// the bf16 backward GEMM must give to bf16 accuracy.
TEST(GemmOutputDType, GradientCastsDyToTheOperandDType) {
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const int64_t m = 6, k = 7, n = 5;
    Graph graph;
    GraphBuilder b(&graph, "t/");
    Value* a32 = graph.AddInput("A", DType::kF32, {m, k});
    Value* w32 = graph.AddInput("W", DType::kF32, {n, k});
    Value* c32 = graph.AddInput("C", DType::kF32, {n});
    AttrMap attrs;
    attrs.Set("transB", int64_t{1});
    attrs.Set("mpc_output_dtype", kOnnxFloat);
    auto node = graph.AddNode("Gemm", {b.Cast(a32, dtype), b.Cast(w32, dtype), b.Cast(c32, dtype)}, attrs, "fc");
    ASSERT_TRUE(node.ok()) << node.status();
    Value* y = (*node)->outputs[0];
    ASSERT_EQ(y->dtype, DType::kF32);
    const Tensor r = RandomTensor(DType::kF32, {m, n}, 5);
    Value* loss = b.ReduceSumTo(b.Mul(y, graph.AddConstant("R", r)), {});
    ASSERT_TRUE(b.status().ok()) << b.status();
    auto grads = BuildGradients(graph, loss, {a32, w32, c32});
    ASSERT_TRUE(grads.ok()) << grads.status();
    for (int i = 0; i < 3; ++i) {
      ASSERT_NE((*grads)[i], nullptr);
      EXPECT_EQ((*grads)[i]->dtype, DType::kF32);
    }
    // The backward Gemms take operands of the forward operands' dtype.
    for (const auto& n : graph.nodes()) {
      if (n->op == "Gemm" && n->name != "fc") EXPECT_EQ(n->inputs[0]->dtype, dtype) << n->name;
    }
    graph.SetOutputs({loss, (*grads)[0], (*grads)[1], (*grads)[2]});
    auto ex = Compile(graph);
    ASSERT_TRUE(ex.ok()) << ex.status();
    const Tensor fa = RandomTensor(DType::kF32, {m, k}, 1), fw = RandomTensor(DType::kF32, {n, k}, 2),
                 fc = RandomTensor(DType::kF32, {n}, 3);
    ASSERT_TRUE((*ex)->SetInput("A", fa).ok());
    ASSERT_TRUE((*ex)->SetInput("W", fw).ok());
    ASSERT_TRUE((*ex)->SetInput("C", fc).ok());
    ASSERT_TRUE((*ex)->Run(1, 0).ok());
    auto da = (*ex)->Fetch((*grads)[0]->name);
    auto dw = (*ex)->Fetch((*grads)[1]->name);
    auto dc = (*ex)->Fetch((*grads)[2]->name);
    ASSERT_TRUE(da.ok() && dw.ok() && dc.ok());
    // dA = R W (W stored [n, k]), dW = R^T A, dC = column sums of R.
    const Tensor w64 = RoundedF64(fw, dtype), a64 = RoundedF64(fa, dtype);
    Tensor da_ref(DType::kF64, {m, k}), dw_ref(DType::kF64, {n, k}), dc_ref(DType::kF64, {n});
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const double rv = r.data<float>()[i * n + j];
        for (int64_t p = 0; p < k; ++p) {
          da_ref.data<double>()[i * k + p] += rv * w64.data<double>()[j * k + p];
          dw_ref.data<double>()[j * k + p] += rv * a64.data<double>()[i * k + p];
        }
        dc_ref.data<double>()[j] += rv;
      }
    }
    // dY is rounded to the format before the backward GEMMs: the format's tolerance.
    const double tol = dtype == DType::kBF16 ? 1e-2 : 2e-3;
    EXPECT_LT(RelErr(*da, da_ref), tol) << DTypeName(dtype);
    EXPECT_LT(RelErr(*dw, dw_ref), tol) << DTypeName(dtype);
    // dC is reduced from the f32 dY and rounded once to C's dtype.
    EXPECT_LT(RelErr(*dc, dc_ref), tol) << DTypeName(dtype);
  }
}

}  // namespace
}  // namespace mpc
