// The fp8 pass's just-in-time recipes (current, rowwise, block; passes/fp8.h): the scale
// rule on hand-picked amaxes, which quantizations each recipe inserts and along which axis,
// that they add no state, and — through the CPU executor — that a GEMM's forward product
// and both gradients equal a float64 reference that quantizes each operand of each GEMM by
// its own groups (written here from the recipe's definition, independent of the kernels).
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/float8.h"
#include "graph/float8_scaling.h"
#include "graph/float_convert.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "passes/simplify.h"
#include "tests/passes/fp8_pass_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using fp8_testing::Mlp;
using fp8_testing::Model;
using fp8_testing::PassRun;

TEST(Fp8DynamicScaleTest, ZeroNonFiniteTinyMarginFloorAndPowerOfTwo) {
  Fp8DynamicRecipe e4m3;
  EXPECT_EQ(Fp8DynamicScale(0.0f, e4m3), 1.0f);  // an all-zero group
  EXPECT_EQ(Fp8DynamicScale(NAN, e4m3), 1.0f);
  EXPECT_EQ(Fp8DynamicScale(INFINITY, e4m3), 1.0f);
  EXPECT_EQ(Fp8DynamicScale(448.0f, e4m3), 1.0f);
  EXPECT_EQ(Fp8DynamicScale(2.0f, e4m3), 224.0f);
  EXPECT_EQ(Fp8DynamicScale(1e-44f, e4m3), std::numeric_limits<float>::max());
  Fp8DynamicRecipe margin = e4m3;
  margin.margin = 2;
  EXPECT_EQ(Fp8DynamicScale(2.0f, margin), 56.0f);
  Fp8DynamicRecipe floor = e4m3;
  floor.amax_floor = 4.0f;
  EXPECT_EQ(Fp8DynamicScale(1e-3f, floor), 112.0f);
  EXPECT_EQ(Fp8DynamicScale(0.0f, floor), 112.0f);  // the floor lifts an all-zero group
  Fp8DynamicRecipe pow2 = e4m3;
  pow2.power_of_two = true;
  EXPECT_EQ(Fp8DynamicScale(3.0f, pow2), 128.0f);  // 149.3 rounded down
  EXPECT_EQ(Fp8DynamicScale(448.0f, pow2), 1.0f);
  EXPECT_EQ(Fp8DynamicScale(500.0f, pow2), 0.5f);  // 0.896 rounded down
  EXPECT_EQ(Fp8DynamicScale(1e-44f, pow2), std::ldexp(1.0f, 127));
  Fp8DynamicRecipe e5m2;
  e5m2.fp8_max = kF8E5M2Max;
  EXPECT_EQ(Fp8DynamicScale(57344.0f, e5m2), 1.0f);
}

// The normalized contraction axis each GEMM operand is quantized along.
int64_t AxisAttr(const Node* q) { return q->attrs.GetInt("axis", -99); }

TEST(Fp8RecipesPassTest, EachRecipeQuantizesEveryGemmOperandAlongItsContractionAxisWithoutState) {
  for (Fp8Recipe recipe : {Fp8Recipe::kCurrent, Fp8Recipe::kRowwise, Fp8Recipe::kBlock}) {
    SCOPED_TRACE(Fp8RecipeName(recipe));
    Model m = Mlp({256, 160, 48, 16}, /*with_loss=*/true, /*batch=*/8);
    PassRun r;
    r.fp8.recipe = recipe;
    r.fp8.include_first_last = true;
    r.caps = CreateCpuBackend()->capabilities();
    auto changed = r.Compile(m);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_EQ(r.results.fp8.recipe, Fp8RecipeName(recipe));
    EXPECT_EQ(r.Fp8Nodes(true), (std::vector<std::string>{"gemm0", "gemm1", "gemm2"}));
    // dX and dW of each (autodiff differentiates the graph input x too).
    EXPECT_EQ(r.Fp8Nodes(false).size(), 9u);
    EXPECT_EQ(testing::CountOps(*m.g, "Fp8Quantize"), 0);
    EXPECT_EQ(testing::CountOps(*m.g, "Fp8UpdateScales"), 0);
    EXPECT_TRUE(r.results.fp8.tensors.empty());
    for (const auto& v : m.g->values()) EXPECT_EQ(v->name.find(".fp8_"), std::string::npos) << v->name;

    for (const auto& n : m.g->nodes()) {
      if (!n->attrs.Has("mpc_fp8")) continue;
      for (int i = 0; i < 2; ++i) {
        const Node* q = n->inputs[i]->producer;
        ASSERT_NE(q, nullptr);
        const bool transposed = q->op == "Transpose";
        if (transposed) q = q->inputs[0]->producer;
        ASSERT_EQ(q->op, "Fp8QuantizeDynamic") << n->name << " operand " << i;
        const std::string gran = q->attrs.GetString("granularity", "");
        if (recipe == Fp8Recipe::kCurrent) {
          EXPECT_EQ(gran, "tensor");
          continue;
        }
        if (gran == "blocks") {
          // Only weights, and a transposed use reads the forward blocks.
          EXPECT_EQ(recipe, Fp8Recipe::kBlock);
          EXPECT_EQ(q->inputs[0]->shape.size(), 2u);
          continue;
        }
        EXPECT_FALSE(transposed) << n->name << ": a row or tile quantization is never reused transposed";
        EXPECT_EQ(gran, recipe == Fp8Recipe::kRowwise ? "rows" : "tiles");
        // Gemm: operand 0 contracts axis transA ? 0 : 1; operand 1 axis transB ? 1 : 0.
        const int64_t trans = n->attrs.GetInt(i == 0 ? "transA" : "transB", 0);
        const int64_t want = n->op == "Gemm" ? (i == 0 ? (trans ? 0 : 1) : (trans ? 1 : 0))
                                             : static_cast<int64_t>(n->inputs[i]->shape.size()) - (i == 0 ? 1 : 2);
        EXPECT_EQ(AxisAttr(q), want) << n->name << " operand " << i;
      }
    }
    for (const auto& g : r.results.fp8.gemms) {
      EXPECT_NE(g.scaling_a, "delayed");
      EXPECT_NE(g.scaling_b, "delayed");
    }
  }
}

TEST(Fp8RecipesPassTest, EvaluationProgramAndDeviceWithoutTheKernel) {
  Model m = Mlp({32, 64, 48, 16}, /*with_loss=*/false);
  PassRun r;
  r.fp8.recipe = Fp8Recipe::kRowwise;
  r.caps = CreateCpuBackend()->capabilities();
  ASSERT_TRUE(r.Compile(m).ok());
  EXPECT_EQ(r.Fp8Nodes(false), (std::vector<std::string>{"gemm1"}));
  EXPECT_EQ(testing::CountOps(*m.g, "Fp8QuantizeDynamic"), 2);

  Model m2 = Mlp({32, 64, 48, 16});
  PassRun gpu;
  gpu.fp8.recipe = Fp8Recipe::kBlock;
  gpu.caps.device = "cuda:0 (H100)";
  gpu.caps.fp8 = true;
  gpu.caps.has_kernel = [](const std::string& op, DType) { return op != "Fp8QuantizeDynamic"; };
  auto s = gpu.Compile(m2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("recipe 'block'"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("fallback_to_bf16"), std::string::npos) << s.status();
}

// A NaN or an inf makes its group's amax non-finite: that group is quantized with scale 1
// (the NaN stays NaN, an inf saturates in E4M3), every other group as without it — in each
// of the CPU kernel's layouts (runs, columns, blocks), above its threading threshold.
TEST(Fp8RecipesPassTest, ANonFiniteValueGivesItsGroupScaleOneAndLeavesTheOthers) {
  constexpr int64_t R = 300, C = 140;
  const Tensor clean = testing::RandomTensor(DType::kF32, {R, C}, 77, -0.01, 0.01);
  for (const float bad : {NAN, INFINITY}) {
    Tensor dirty = clean;
    dirty.data<float>()[150 * C + 70] = bad;
    for (const auto& [granularity, axis] : std::vector<std::pair<std::string, int64_t>>{
             {"rows", 1}, {"rows", 0}, {"tiles", 1}, {"tiles", 0}, {"blocks", 1}, {"tensor", 0}}) {
      SCOPED_TRACE(granularity + " axis " + std::to_string(axis) + (std::isnan(bad) ? " NaN" : " inf"));
      const std::vector<float> want = fp8_testing::QuantizeDynamicOnCpu(clean, granularity, axis);
      const std::vector<float> got = fp8_testing::QuantizeDynamicOnCpu(dirty, granularity, axis);
      auto in_bad_group = [&](int64_t r, int64_t c) {
        if (granularity == "tensor") return true;
        if (granularity == "rows") return axis == 1 ? r == 150 : c == 70;
        if (granularity == "tiles") return axis == 1 ? (r == 150 && c / 128 == 0) : (c == 70 && r / 128 == 1);
        return r / 128 == 1 && c / 128 == 0;
      };
      int64_t scale_one = 0;
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t c = 0; c < C; ++c) {
          const size_t i = static_cast<size_t>(r * C + c);
          if (r == 150 && c == 70) {
            if (std::isnan(bad)) {
              EXPECT_TRUE(std::isnan(got[i]));
            } else {
              EXPECT_EQ(got[i], kF8E4M3Max);  // inf * 1 saturates
            }
          } else if (in_bad_group(r, c)) {
            ASSERT_EQ(got[i], RoundToF8E4M3(clean.data<float>()[i])) << r << "," << c;  // scale 1
            ++scale_one;
          } else {
            ASSERT_EQ(got[i], want[i]) << r << "," << c;
          }
        }
      }
      EXPECT_GT(scale_one, 0);
    }
  }
}

// ---- One GEMM through the executor against float64 ----

enum class Groups { kTensor, kRows, kTiles, kBlocks };

// Quantize-dequantize of a row-major [rows, cols] matrix whose groups run along `axis`
// (0: down a column, 1: along a row), the recipe's rules restated: amax per group, scale
// (fp8_max / amax) in f32, round to nearest even with saturation (graph/float8.h's rounding
// is checked against the OCP tables in fp8_test.cc), times 1/scale in f32.
std::vector<double> RefQuantize(const std::vector<float>& x, int64_t rows, int64_t cols, Groups groups, int axis,
                                bool e4m3) {
  auto key = [&](int64_t r, int64_t c) -> std::pair<int64_t, int64_t> {
    switch (groups) {
      case Groups::kTensor:
        return {0, 0};
      case Groups::kRows:
        return axis == 1 ? std::make_pair(r, int64_t{0}) : std::make_pair(int64_t{0}, c);
      case Groups::kTiles:
        return axis == 1 ? std::make_pair(r, c / 128) : std::make_pair(r / 128, c);
      case Groups::kBlocks:
        return {r / 128, c / 128};
    }
    return {0, 0};
  };
  std::map<std::pair<int64_t, int64_t>, float> amax;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) amax[key(r, c)] = std::max(amax[key(r, c)], std::fabs(x[r * cols + c]));
  }
  const float fp8_max = e4m3 ? kF8E4M3Max : kF8E5M2Max;
  std::vector<double> q(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float a = amax[key(r, c)];
      const float scale = a > 0 ? fp8_max / a : 1.0f;
      const float v = x[r * cols + c] * scale;
      q[r * cols + c] = (e4m3 ? RoundToF8E4M3(v) : RoundToF8E5M2(v)) * (1.0f / scale);
    }
  }
  return q;
}

std::vector<float> Bf16Values(int64_t n, uint64_t seed, double lo, double hi) {
  const Tensor t = testing::RandomTensor(DType::kF32, {n}, seed, lo, hi);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = RoundToBf16(t.data<float>()[i]);
  return v;
}

// a [m, k] times b^T (b stored [n, k]) in float64, rounded to bf16 as the GEMM's output is.
std::vector<float> RefProductBf16(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
                                  int64_t k, bool b_transposed) {
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p) acc += a[i * k + p] * (b_transposed ? b[j * k + p] : b[p * n + j]);
      y[i * n + j] = RoundToBf16(static_cast<float>(acc));
    }
  }
  return y;
}

std::vector<double> Transposed(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<double> t(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  }
  return t;
}

// Y = X W^T, loss = sum(Y * R): so dY = R, dX = R W and dW = R^T X, each a GEMM the
// recipe quantizes. `batched`: X is [2, 72, K] and Y = MatMul(X, W^T stored [K, N]), a
// transformer's Linear layer; the fp8 pass folds the batch into 144 rows, so the reference
// is the same as for the Gemm over X [144, K] (W's groups are the same on its transpose),
// and the weight gradient's 1x128 tiles and column scales span both batch entries.
void ExpectForwardAndGradientsMatchFloat64(bool batched) {
  // M and N past 128: the backward GEMMs' tiles along M and N are not whole rows, and W
  // has partial 128x128 blocks in both directions.
  constexpr int64_t M = 144, N = 160, K = 256;
  const std::vector<float> xv = Bf16Values(M * K, 31, -3, 3), wv = Bf16Values(N * K, 32, -0.5, 0.5),
                           rv = Bf16Values(M * N, 33, -1e-3, 1e-3);
  const Shape x_shape = batched ? Shape{2, M / 2, K} : Shape{M, K}, y_shape = batched ? Shape{2, M / 2, N} : Shape{M, N};
  std::vector<float> w_kn(N * K);  // W^T, [K, N]
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t k = 0; k < K; ++k) w_kn[k * N + n] = wv[n * K + k];
  }
  for (Fp8Recipe recipe : {Fp8Recipe::kCurrent, Fp8Recipe::kRowwise, Fp8Recipe::kBlock}) {
    SCOPED_TRACE(Fp8RecipeName(recipe));
    const bool e4m3_grads = recipe == Fp8Recipe::kBlock;
    Model m;
    GraphBuilder b(m.g.get());
    Value* x = m.g->AddParameter("x", Tensor::FromVector<float>(x_shape, xv));
    Value* w = batched ? m.g->AddParameter("w", Tensor::FromVector<float>({K, N}, w_kn))
                       : m.g->AddParameter("w", Tensor::FromVector<float>({N, K}, wv));
    Value* rin = m.g->AddInput("r", DType::kF32, y_shape);
    AttrMap attrs;
    if (!batched) attrs.Set("transB", int64_t{1});
    Value* y = b.Op(batched ? "MatMul" : "Gemm", {x, w}, attrs);
    b.last_node()->name = "gemm";
    AttrMap keep;
    keep.Set("keepdims", int64_t{0});
    m.loss = b.Op("ReduceSum", {b.Op("Mul", {y, rin})}, keep);
    m.g->SetOutputs({m.loss});
    ASSERT_TRUE(b.status().ok()) << b.status();
    PassRun r;
    r.fp8.recipe = recipe;
    r.fp8.include_first_last = true;
    r.fp8.e4m3_gradients = e4m3_grads;
    r.caps = CreateCpuBackend()->capabilities();
    ASSERT_TRUE(r.Compile(m).ok());
    ASSERT_EQ(r.Fp8Nodes(false).size(), 3u);
    std::vector<Value*> outs{m.loss, r.results.autodiff.param_grads[0].second,
                             r.results.autodiff.param_grads[1].second};
    ASSERT_EQ(r.results.autodiff.param_grads[0].first, x);
    // The forward product: the value the Gemm's cast back to the compute dtype writes.
    Value* fwd = nullptr;
    for (const auto& n : m.g->nodes()) {
      if (n->name == "gemm") fwd = n->outputs[0]->consumers.empty() ? nullptr : n->outputs[0]->consumers[0]->outputs[0];
    }
    ASSERT_NE(fwd, nullptr);
    outs.push_back(fwd);
    m.g->SetOutputs(outs);
    ASSERT_TRUE(SimplifyPass().Run(*m.g).ok());
    ASSERT_TRUE(MemoryPlanPass(&r.results.memory_plan).Run(*m.g).ok());
    auto backend = CreateCpuBackend();
    auto ex = Executor::Create(*m.g, r.results.memory_plan, *backend);
    ASSERT_TRUE(ex.ok()) << ex.status();
    ASSERT_TRUE((*ex)->SetInput("r", Tensor::FromVector<float>(y_shape, rv)).ok());
    ASSERT_TRUE((*ex)->Run(0, 0).ok());

    const Groups act = recipe == Fp8Recipe::kCurrent   ? Groups::kTensor
                       : recipe == Fp8Recipe::kRowwise ? Groups::kRows
                                                       : Groups::kTiles;
    const Groups weight = recipe == Fp8Recipe::kBlock ? Groups::kBlocks : act;
    // Y = Q(X along K) Q(W along K)^T; dX = Q(dY along N) Q(W along N); dW = Q(dY along M)^T Q(X along M).
    const std::vector<float> want_y =
        RefProductBf16(RefQuantize(xv, M, K, act, 1, true), RefQuantize(wv, N, K, weight, 1, true), M, N, K, true);
    const std::vector<float> want_dx = RefProductBf16(RefQuantize(rv, M, N, act, 1, e4m3_grads),
                                                      RefQuantize(wv, N, K, weight, 0, true), M, K, N, false);
    const std::vector<double> dy_t = Transposed(RefQuantize(rv, M, N, act, 0, e4m3_grads), M, N);  // [N, M]
    const std::vector<double> x_cols = RefQuantize(xv, M, K, act, 0, true);                        // [M, K]
    const std::vector<float> want_dw = RefProductBf16(dy_t, x_cols, N, K, M, false);

    const std::vector<std::pair<const char*, const std::vector<float>*>> checks{
        {"dX", &want_dx}, {"dW", &want_dw}, {"Y", &want_y}};
    for (size_t c = 0; c < checks.size(); ++c) {
      auto got = (*ex)->Fetch(m.g->outputs()[c + 1]->name);
      ASSERT_TRUE(got.ok()) << got.status();
      const std::vector<float>& want = *checks[c].second;
      ASSERT_EQ(got->num_elements(), static_cast<int64_t>(want.size())) << checks[c].first;
      // The batched form's weight gradient is W^T's, [K, N]; the reference is W's, [N, K].
      const bool transposed = batched && c == 1;
      int exact = 0;
      float largest = 0;
      for (float w : want) largest = std::max(largest, std::fabs(w));
      for (size_t i = 0; i < want.size(); ++i) {
        const size_t at = transposed ? (i % K) * N + i / K : i;
        const float g = static_cast<float>(got->GetAsDouble(static_cast<int64_t>(at)));
        exact += g == want[i];
        // f32 against float64 accumulation: one bf16 ulp, or (where the sum cancels) a
        // little of the tensor's scale.
        ASSERT_LE(std::fabs(g - want[i]), std::fabs(want[i]) * std::ldexp(1.0, -7) + largest * std::ldexp(1.0, -14))
            << checks[c].first << " element " << i << ": got " << g << ", want " << want[i];
      }
      EXPECT_GE(exact, static_cast<int>(want.size()) * 95 / 100) << checks[c].first;
    }
  }
}

TEST(Fp8RecipesPassTest, ForwardProductAndBothGradientsMatchFloat64PerRecipe) {
  ExpectForwardAndGradientsMatchFloat64(/*batched=*/false);
}

TEST(Fp8RecipesPassTest, BatchedLinearLayerMatchesFloat64OverRowsSpanningTheBatch) {
  ExpectForwardAndGradientsMatchFloat64(/*batched=*/true);
}

}  // namespace
}  // namespace mpc
