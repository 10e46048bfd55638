// fp8 pass tests: the quantize kernel against a float64 reference of the OCP rounding
// (written here, independent of graph/float8.h), the delayed-scaling update on hand-made
// histories, which GEMMs the pass converts and with which formats, the evaluation
// variant, and the device check.
#include "passes/fp8.h"

#include <cmath>
#include <limits>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/float8_scaling.h"
#include "graph/float_convert.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/pad_dims.h"
#include "passes/simplify.h"
#include "tests/passes/fp8_pass_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using fp8_testing::Mlp;
using fp8_testing::Model;
using fp8_testing::PassRun;

// ---- Reference OCP FP8 rounding in float64 ----

// The non-negative finite values of a format, in code order (code == index).
std::vector<double> Representable(int exp_bits, int man_bits, int bias, int max_code) {
  std::vector<double> v;
  for (int c = 0; c <= max_code; ++c) {
    const int e = c >> man_bits, m = c & ((1 << man_bits) - 1);
    const double frac = static_cast<double>(m) / (1 << man_bits);
    v.push_back(e == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1.0 + frac, e - bias));
  }
  (void)exp_bits;
  return v;
}

const std::vector<double>& E4M3Values() {
  static const auto* v = new std::vector<double>(Representable(4, 3, 7, 0x7E));  // up to 448
  return *v;
}
const std::vector<double>& E5M2Values() {
  static const auto* v = new std::vector<double>(Representable(5, 2, 15, 0x7B));  // up to 57344
  return *v;
}

// Nearest representable value, ties to the even code; magnitudes at or past the largest
// finite value saturate to it (E5M2 keeps an infinity infinite; E4M3 has none).
double RefRound(double y, bool e4m3) {
  if (std::isnan(y)) return y;
  const auto& vals = e4m3 ? E4M3Values() : E5M2Values();
  const double a = std::fabs(y), sign = std::signbit(y) ? -1.0 : 1.0;
  if (std::isinf(a) && !e4m3) return y;
  if (a >= vals.back()) return sign * vals.back();
  size_t i = std::upper_bound(vals.begin(), vals.end(), a) - vals.begin() - 1;  // vals[i] <= a < vals[i+1]
  const double lo = a - vals[i], hi = vals[i + 1] - a;
  const size_t pick = lo < hi ? i : hi < lo ? i + 1 : (i % 2 == 0 ? i : i + 1);
  return sign * vals[pick];
}

TEST(Fp8ReferenceTest, TableIsTheOcpFormats) {
  EXPECT_EQ(E4M3Values().back(), 448.0);
  EXPECT_EQ(E4M3Values()[1], std::ldexp(1.0, -9));
  EXPECT_EQ(E5M2Values().back(), 57344.0);
  EXPECT_EQ(E5M2Values()[1], std::ldexp(1.0, -16));
}

// Runs one Fp8Quantize on the CPU backend; returns q, and the history slot 0 in `amax`.
std::vector<float> Quantize(const Tensor& x, float scale, bool e4m3, float* amax) {
  Graph g;
  Value* xv = g.AddInput("x", x.dtype(), x.shape());
  Value* s = g.AddState("s", Tensor::Scalar(scale));
  Value* si = g.AddState("si", Tensor::Scalar(1.0f / scale));
  Value* h = g.AddState("h", Tensor(DType::kF32, {4}));
  AttrMap attrs;
  attrs.Set("format", std::string(e4m3 ? "e4m3" : "e5m2"));
  auto node = g.AddNode("Fp8Quantize", {xv, s, si, h}, attrs, "q");
  EXPECT_TRUE(node.ok()) << node.status();
  auto backend = CreateCpuBackend();
  auto kernel = backend->CreateKernel(**node);
  EXPECT_TRUE(kernel.ok()) << kernel.status();
  Tensor xs = x, ss = s->data, sis = si->data, hs = h->data;
  Tensor q(DType::kF32, x.shape());
  KernelContext ctx;
  ctx.inputs = {{xs.raw(), x.dtype(), x.shape()},
                {ss.raw(), DType::kF32, {}},
                {sis.raw(), DType::kF32, {}},
                {hs.raw(), DType::kF32, {4}}};
  ctx.outputs = {{q.raw(), DType::kF32, x.shape()}};
  EXPECT_TRUE((*kernel)->Run(ctx).ok());
  *amax = hs.data<float>()[0];
  return std::vector<float>(q.data<float>(), q.data<float>() + q.num_elements());
}

TEST(Fp8QuantizeTest, QuantizeDequantizeMatchesFloat64OcpReference) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> xs;
  for (int i = 0; i < 20000; ++i) xs.push_back(normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20));
  // Exact ties, zeros, tiny values, and values that saturate.
  for (float v : {0.0f, -0.0f, 1.0625f, 1.1875f, -1.0625f, 0.001953125f * 1.5f, 1e-30f, 300.0f, 470.0f, 1e6f, -1e6f,
                  60000.0f, 1e30f, -1e38f, std::numeric_limits<float>::infinity()}) {
    xs.push_back(v);
  }
  const Tensor x = Tensor::FromVector<float>({static_cast<int64_t>(xs.size())}, xs);
  double true_amax = 0;
  for (float v : xs) true_amax = std::max(true_amax, static_cast<double>(std::fabs(v)));
  for (bool e4m3 : {true, false}) {
    for (float scale : {1.0f, 0.37f, 3.0f, 448.0f / 2.5f, 1.0f / 3.0f, 1e-6f, 1e5f}) {
      float amax = 0;
      const std::vector<float> q = Quantize(x, scale, e4m3, &amax);
      EXPECT_EQ(amax, static_cast<float>(true_amax));
      const double scale_inv = static_cast<double>(1.0f / scale);
      int saturated = 0;
      for (size_t i = 0; i < xs.size(); ++i) {
        // The scaled value is an f32 (as on the GPU); the dequantized value is the f32
        // product of the FP8 value and scale_inv (exact in double, then rounded once).
        const double y = static_cast<double>(xs[i] * scale);
        const double r = RefRound(y, e4m3);
        saturated += std::fabs(r) == (e4m3 ? 448.0 : 57344.0);
        const float want = static_cast<float>(r * scale_inv);
        if (std::isnan(want)) {
          ASSERT_TRUE(std::isnan(q[i]));
        } else {
          ASSERT_EQ(q[i], want) << "x=" << xs[i] << " scale=" << scale << (e4m3 ? " e4m3" : " e5m2");
        }
      }
      if (scale >= 1e5f) {
        EXPECT_GT(saturated, 100);
      }
    }
  }
}

TEST(Fp8QuantizeTest, Bf16InputsAndAmaxAccumulation) {
  const Tensor x = testing::RandomTensor(DType::kBF16, {64, 48}, 3, -5.0, 5.0);
  float amax = 0;
  const std::vector<float> q = Quantize(x, 448.0f / 5.0f, true, &amax);
  double want_amax = 0;
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const float v = static_cast<float>(x.GetAsDouble(i));
    want_amax = std::max(want_amax, static_cast<double>(std::fabs(v)));
    ASSERT_EQ(q[i],
              static_cast<float>(RefRound(v * (448.0f / 5.0f), true) * static_cast<double>(1.0f / (448.0f / 5.0f))));
  }
  EXPECT_EQ(amax, static_cast<float>(want_amax));
}

// ---- The delayed-scaling update ----

struct Meta {
  std::vector<float> history;
  float scale = 1, scale_inv = 1;
  float Update(const Fp8ScaleRecipe& r) {
    return UpdateFp8Meta(history.data(), static_cast<int64_t>(history.size()), &scale, &scale_inv, r);
  }
};

Fp8ScaleRecipe Recipe(bool most_recent = false, int margin = 0, float floor = 0, float fp8_max = 448.0f) {
  Fp8ScaleRecipe r;
  r.fp8_max = fp8_max;
  r.margin = margin;
  r.most_recent = most_recent;
  r.amax_floor = floor;
  return r;
}

TEST(Fp8ScaleUpdateTest, ZeroAndNonFiniteAmaxKeepTheOldScale) {
  Meta zero{{0, 0, 0, 0}, 2.0f, 0.5f};
  zero.Update(Recipe());
  EXPECT_EQ(zero.scale, 2.0f);
  EXPECT_EQ(zero.scale_inv, 0.5f);
  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    for (bool most_recent : {false, true}) {
      Meta m{{bad, 3, 5, 1}, 4.0f, 0.25f};
      m.Update(Recipe(most_recent));
      EXPECT_EQ(m.scale, 4.0f) << bad;
      EXPECT_EQ(m.scale_inv, 0.25f);
      // The non-finite amax does not stay in the window to freeze later updates.
      EXPECT_EQ(m.history, (std::vector<float>{0, 5, 1, 0}));
    }
  }
  Meta nan_in_window{{1, std::numeric_limits<float>::quiet_NaN(), 2, 0}, 4.0f, 0.25f};
  nan_in_window.Update(Recipe());
  EXPECT_EQ(nan_in_window.scale, 4.0f);
}

TEST(Fp8ScaleUpdateTest, GrowingAndShrinkingAmaxWithMaxAndMostRecent) {
  // Growing: this step's amax 4 is the largest.
  Meta grow{{4, 1, 2, 0.5f}};
  EXPECT_EQ(grow.Update(Recipe()), 4.0f);
  EXPECT_EQ(grow.scale, 448.0f / 4.0f);
  EXPECT_EQ(grow.scale_inv, 1.0f / (448.0f / 4.0f));
  // Shrinking: MAX remembers the window's 2, MOST_RECENT follows 0.5.
  Meta shrink_max{{0.5f, 2, 1, 0}};
  shrink_max.Update(Recipe());
  EXPECT_EQ(shrink_max.scale, 224.0f);
  Meta shrink_recent{{0.5f, 2, 1, 0}};
  shrink_recent.Update(Recipe(/*most_recent=*/true));
  EXPECT_EQ(shrink_recent.scale, 896.0f);
  // E5M2 (gradients in HYBRID) uses its own maximum; f32 arithmetic like TE.
  Meta e5m2{{3, 0, 0, 0}};
  e5m2.Update(Recipe(false, 0, 0, 57344.0f));
  EXPECT_EQ(e5m2.scale, 57344.0f / 3.0f);
}

TEST(Fp8ScaleUpdateTest, MarginFloorAndTinyAmax) {
  Meta margin{{4, 0, 0, 0}};
  margin.Update(Recipe(false, /*margin=*/1));
  EXPECT_EQ(margin.scale, 56.0f);  // (448 / 4) / 2
  Meta floor{{1e-3f, 0, 0, 0}};
  EXPECT_EQ(floor.Update(Recipe(false, 0, /*floor=*/0.01f)), 0.01f);
  EXPECT_EQ(floor.scale, 448.0f / 0.01f);
  Meta above_floor{{2, 0, 0, 0}};
  above_floor.Update(Recipe(false, 0, 0.01f));
  EXPECT_EQ(above_floor.scale, 224.0f);
  // 448 / 1e-38 overflows f32: the scale becomes the largest finite float, never inf.
  Meta tiny{{1e-38f, 0, 0, 0}};
  tiny.Update(Recipe());
  EXPECT_EQ(tiny.scale, std::numeric_limits<float>::max());
  EXPECT_TRUE(std::isfinite(tiny.scale_inv));
}

TEST(Fp8ScaleUpdateTest, HistoryOfFourRollsAndMaxCoversTheLastFourSteps) {
  Meta m{{0, 0, 0, 0}};
  const float amaxes[] = {1, 8, 2, 3, 4, 5, 0.25f};
  const float want_max[] = {1, 8, 8, 8, 8, 5, 5};  // max over the last four steps
  for (int step = 0; step < 7; ++step) {
    EXPECT_EQ(m.history[0], 0.0f) << "slot 0 is free at the start of a step";
    m.history[0] = amaxes[step];  // what the step's quantizations record
    EXPECT_EQ(m.Update(Recipe()), want_max[step]) << "step " << step;
    EXPECT_EQ(m.scale, 448.0f / want_max[step]);
    EXPECT_EQ(m.history.back(), amaxes[step]) << "the newest amax rolls to the last slot";
  }
  Meta recent{{0, 0, 0, 0}};
  for (float a : amaxes) {
    recent.history[0] = a;
    recent.Update(Recipe(true));
    EXPECT_EQ(recent.scale, 448.0f / a);
  }
  Meta one{{0}};
  one.history[0] = 7;
  one.Update(Recipe());
  EXPECT_EQ(one.scale, 64.0f);
  EXPECT_EQ(one.history[0], 0.0f);
}

TEST(Fp8ScaleUpdateTest, KernelUpdatesEveryTensorWithItsFormat) {
  Graph g;
  std::vector<Value*> ins;
  for (int t = 0; t < 2; ++t) {
    ins.push_back(g.AddState("s" + std::to_string(t), Tensor::Scalar(1)));
    ins.push_back(g.AddState("si" + std::to_string(t), Tensor::Scalar(1)));
    ins.push_back(g.AddState("h" + std::to_string(t), Tensor(DType::kF32, {2})));
    ins.push_back(g.AddState("a" + std::to_string(t), Tensor::Scalar(0)));
  }
  AttrMap attrs;
  attrs.Set("fp8_max", std::vector<float>{448.0f, 57344.0f});
  attrs.Set("margin", int64_t{0});
  attrs.Set("algo", std::string("max"));
  attrs.Set("amax_floor", 0.0f);
  auto node = g.AddNode("Fp8UpdateScales", ins, attrs, "u");
  ASSERT_TRUE(node.ok()) << node.status();
  auto backend = CreateCpuBackend();
  auto kernel = backend->CreateKernel(**node);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  std::vector<float> s{1, 1}, si{1, 1}, h0{2, 1}, h1{16, 0}, a{0, 0};
  KernelContext ctx;
  ctx.inputs = {{&s[0], DType::kF32, {}},      {&si[0], DType::kF32, {}}, {h0.data(), DType::kF32, {2}},
                {&a[0], DType::kF32, {}},      {&s[1], DType::kF32, {}},  {&si[1], DType::kF32, {}},
                {h1.data(), DType::kF32, {2}}, {&a[1], DType::kF32, {}}};
  ASSERT_TRUE((*kernel)->Run(ctx).ok());
  EXPECT_EQ(s[0], 224.0f);
  EXPECT_EQ(si[0], 1.0f / 224.0f);
  EXPECT_EQ(s[1], 3584.0f);
  EXPECT_EQ(a[0], 2.0f);
  EXPECT_EQ(a[1], 16.0f);
  EXPECT_EQ(h0, (std::vector<float>{0, 2}));
}

// ---- The pass ----

TEST(Fp8PassTest, FirstAndLastGemmStayBf16ByDefault) {
  Model m = Mlp({32, 64, 48, 16});
  PassRun r;
  auto changed = r.Compile(m);
  ASSERT_TRUE(changed.ok() && *changed) << changed.status();
  EXPECT_EQ(r.Fp8Nodes(true), (std::vector<std::string>{"gemm1"}));
  EXPECT_NE(r.SkipReason("gemm0").find("first GEMM"), std::string::npos);
  EXPECT_NE(r.SkipReason("gemm2").find("last GEMM"), std::string::npos);
  // gemm1 and its two backward GEMMs (dX, dW): the gradient operand is E5M2 (HYBRID).
  ASSERT_EQ(r.results.fp8.gemms.size(), 3u);
  for (const auto& d : r.results.fp8.gemms) {
    EXPECT_EQ(d.forward_node, "gemm1");
    const Node* n = m.g->FindNode(d.node);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(n->attrs.GetInt("mpc_fp8", 0), 1);
    EXPECT_EQ(n->inputs[0]->producer->op == "Fp8Quantize" || n->inputs[0]->producer->op == "Transpose", true);
    if (d.node == "gemm1") {
      EXPECT_EQ(d.format_a, "e4m3");
      EXPECT_EQ(d.format_b, "e4m3");
    } else {
      EXPECT_TRUE((d.format_a == "e5m2") != (d.format_b == "e5m2")) << d.node;
    }
  }
  // input, weight, grad_output; each quantized once (backward reuses the forward ones).
  EXPECT_EQ(r.results.fp8.tensors, (std::vector<std::string>{"gemm1/input", "gemm1/weight", "gemm1/grad_output"}));
  EXPECT_EQ(testing::CountOps(*m.g, "Fp8Quantize"), 3);
  EXPECT_EQ(testing::CountOps(*m.g, "Fp8UpdateScales"), 1);
  const Node* update = nullptr;
  for (const auto& n : m.g->nodes()) {
    if (n->op == "Fp8UpdateScales") update = n.get();
  }
  EXPECT_EQ(update->control_deps.size(), 3u);  // after every quantization
  for (const char* suffix : {".fp8_scale", ".fp8_scale_inv", ".fp8_amax_history", ".fp8_last_amax"}) {
    const Value* v = m.g->FindValue(std::string("gemm1/weight") + suffix);
    ASSERT_NE(v, nullptr) << suffix;
    EXPECT_EQ(v->kind, ValueKind::kState);
  }
  EXPECT_EQ(m.g->FindValue("gemm1/weight.fp8_amax_history")->shape, (Shape{1024}));
  // The forward product is cast back to bf16 under its old name; the rest is unchanged.
  const Node* g1 = m.g->FindNode("gemm1");
  EXPECT_EQ(g1->outputs[0]->dtype, DType::kF32);
  ASSERT_EQ(g1->outputs[0]->consumers.size(), 1u);
  EXPECT_EQ(g1->outputs[0]->consumers[0]->op, "Cast");
  EXPECT_EQ(g1->outputs[0]->consumers[0]->outputs[0]->dtype, DType::kBF16);
  EXPECT_EQ(m.g->FindNode("gemm0")->inputs[0]->dtype, DType::kBF16);
}

TEST(Fp8PassTest, IncludeFirstLastExcludeRegexAndE4M3Format) {
  Model m = Mlp({32, 64, 48, 16});
  PassRun r;
  r.fp8.include_first_last = true;
  r.fp8.exclude.push_back("gemm[1]");
  r.fp8.e4m3_gradients = true;
  ASSERT_TRUE(r.Compile(m).ok());
  EXPECT_EQ(r.Fp8Nodes(true), (std::vector<std::string>{"gemm0", "gemm2"}));
  EXPECT_NE(r.SkipReason("gemm1").find("fp8.exclude 'gemm[1]'"), std::string::npos);
  for (const auto& d : r.results.fp8.gemms) {
    EXPECT_EQ(d.format_a, "e4m3");
    EXPECT_EQ(d.format_b, "e4m3");
  }
}

TEST(Fp8PassTest, DimsNotMultiplesOf16AreSkippedUnlessPadded) {
  Model m = Mlp({32, 40, 48, 16});
  PassRun r;
  r.fp8.include_first_last = true;
  ASSERT_TRUE(r.Compile(m).ok());
  EXPECT_EQ(r.Fp8Nodes(true), (std::vector<std::string>{"gemm2"}));
  EXPECT_NE(r.SkipReason("gemm0").find("N=40"), std::string::npos);
  EXPECT_NE(r.SkipReason("gemm1").find("K=40"), std::string::npos);

  Model padded = Mlp({32, 40, 48, 10});
  PassRun p;
  p.fp8.include_first_last = true;
  p.pad.multiple = 16;
  ASSERT_TRUE(p.Compile(padded).ok());
  EXPECT_EQ(p.Fp8Nodes(true), (std::vector<std::string>{"gemm0", "gemm1", "gemm2"}));
}

TEST(Fp8PassTest, EvaluationQuantizesWithTheCurrentScalesOnly) {
  Model m = Mlp({32, 64, 48, 16}, /*with_loss=*/false);
  PassRun r;
  ASSERT_TRUE(r.Compile(m).ok());
  EXPECT_EQ(r.Fp8Nodes(false), (std::vector<std::string>{"gemm1"}));
  EXPECT_EQ(testing::CountOps(*m.g, "Fp8UpdateScales"), 0);
  for (const auto& n : m.g->nodes()) {
    if (n->op == "Fp8Quantize") {
      EXPECT_EQ(n->inputs.size(), 3u);  // no amax history
    }
  }
  EXPECT_NE(m.g->FindValue("gemm1/input.fp8_scale"), nullptr);
  EXPECT_EQ(m.g->FindValue("gemm1/input.fp8_amax_history"), nullptr);
}

TEST(Fp8PassTest, DeviceWithoutFp8FailsOrFallsBackToBf16) {
  Model m = Mlp({32, 64, 48, 16});
  PassRun r;
  r.caps.device = "cuda:0 (old GPU)";
  r.caps.fp8 = false;
  r.caps.has_kernel = [](const std::string& op, DType) { return op != "Fp8Quantize"; };
  auto s = r.Compile(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("no FP8 support"), std::string::npos) << s.status();
  EXPECT_NE(s.status().message().find("fallback_to_bf16"), std::string::npos);

  Model m2 = Mlp({32, 64, 48, 16});
  PassRun f;
  f.caps = r.caps;
  f.fp8.fallback_to_bf16 = true;
  auto changed = f.Compile(m2);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_TRUE(f.results.fp8.gemms.empty());
  EXPECT_NE(f.results.fp8.fallback.find("left in bf16"), std::string::npos);
  EXPECT_EQ(testing::CountOps(*m2.g, "Fp8Quantize"), 0);

  // The CPU emulates FP8 exactly: no error although caps.fp8 is false.
  Model m3 = Mlp({32, 64, 48, 16});
  PassRun c;
  c.caps = CreateCpuBackend()->capabilities();
  ASSERT_TRUE(c.Compile(m3).ok());
  EXPECT_EQ(c.Fp8Nodes(true).size(), 1u);
}

TEST(Fp8PassTest, BadRecipeFieldsAreErrorsWithTheFieldPath) {
  for (int which = 0; which < 3; ++which) {
    Model m = Mlp({32, 64, 48, 16});
    PassRun r;
    if (which == 0) r.fp8.amax_history_len = 0;
    if (which == 1) r.fp8.margin = -1;
    if (which == 2) r.fp8.exclude.push_back("gemm[");
    auto s = r.Compile(m);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("spec field fp8."), std::string::npos) << s.status();
  }
}

// End to end through the executor: a converted GEMM computes the product of the FP8
// operands (bf16 autocast, then E4M3 with the initial scale 1) accumulated in f32, plus
// the bias, rounded once to bf16 — checked against a float64 reference built from the
// reference rounding above (f32 vs f64 accumulation may move a result by one bf16 ulp).
TEST(Fp8PassTest, ConvertedGemmComputesTheFp8Product) {
  Model m;
  GraphBuilder b(m.g.get());
  Value* x = m.g->AddInput("x", DType::kF32, {16, 64});
  const Tensor wt = testing::RandomTensor(DType::kF32, {32, 64}, 5, -0.5, 0.5);
  const Tensor bt = testing::RandomTensor(DType::kF32, {32}, 6);
  AttrMap attrs;
  attrs.Set("transB", int64_t{1});
  Value* y = b.Op("Gemm", {x, m.g->AddParameter("w", wt), m.g->AddParameter("b", bt)}, attrs);
  b.last_node()->name = "gemm";
  m.g->SetOutputs({y});
  PassRun r;
  r.fp8.include_first_last = true;
  r.caps = CreateCpuBackend()->capabilities();
  ASSERT_TRUE(r.Compile(m).ok());
  ASSERT_EQ(r.Fp8Nodes(true), (std::vector<std::string>{"gemm"}));
  ASSERT_TRUE(SimplifyPass().Run(*m.g).ok());
  ASSERT_TRUE(MemoryPlanPass(&r.results.memory_plan).Run(*m.g).ok());
  auto backend = CreateCpuBackend();
  auto ex = Executor::Create(*m.g, r.results.memory_plan, *backend);
  ASSERT_TRUE(ex.ok()) << ex.status();
  const Tensor xt = testing::RandomTensor(DType::kF32, {16, 64}, 7, -3.0, 3.0);
  ASSERT_TRUE((*ex)->SetInput("x", xt).ok());
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  auto out = (*ex)->Fetch(m.g->outputs()[0]->name);
  ASSERT_TRUE(out.ok()) << out.status();
  auto q = [](float v) { return RefRound(static_cast<double>(RoundToBf16(v)), true); };
  int exact = 0;
  for (int i = 0; i < 16; ++i) {
    for (int j = 0; j < 32; ++j) {
      double acc = RoundToBf16(bt.data<float>()[j]);
      for (int k = 0; k < 64; ++k) acc += q(xt.data<float>()[i * 64 + k]) * q(wt.data<float>()[j * 64 + k]);
      const float want = RoundToBf16(static_cast<float>(acc));
      const float got = static_cast<float>(out->GetAsDouble(i * 32 + j));
      exact += got == want;
      ASSERT_LE(std::fabs(got - want), std::fabs(want) * std::ldexp(1.0, -7) + 1e-30) << i << "," << j;
    }
  }
  EXPECT_GE(exact, 16 * 32 * 95 / 100);
}

}  // namespace
}  // namespace mpc
