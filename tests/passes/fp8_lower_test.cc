// fp8-lower tests: the Fp8Cast kernel against graph/float8.h's rounding (random inputs,
// saturation, NaN, transposed layout) and against Fp8Quantize; the Fp8Gemm kernel
// against the emulated quantize + f32 GEMM; the structure of a lowered training graph
// (one Fp8Gemm per FP8 GEMM in the TN layout, the amax recorded once per quantization as
// before, every reader of the FP8 meta ordered before the scale update); what stays
// emulated and why; and a lowered forward + backward program on the CPU against the
// emulated one over several steps of delayed scaling.
#include "passes/fp8_lower.h"

#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "backends/cpu/cpu_backend.h"
#include "base/status_macros.h"
#include "engine/executor.h"
#include "graph/float8.h"
#include "graph/graph_builder.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/fp8.h"
#include "passes/memory_plan.h"
#include "passes/pad_dims.h"
#include "passes/simplify.h"
#include "tests/passes/fp8_pass_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

// Runs one node of `g` on the CPU over host tensors (inputs in place: state is mutated).
absl::Status RunNode(const Node& node, std::vector<Tensor*> inputs, std::vector<Tensor*> outputs) {
  auto kernel = Cpu().CreateKernel(node);
  if (!kernel.ok()) return kernel.status();
  KernelContext ctx;
  for (Tensor* t : inputs)
    ctx.inputs.push_back({t ? t->raw() : nullptr, t ? t->dtype() : DType::kF32, t ? t->shape() : Shape{}});
  for (Tensor* t : outputs) ctx.outputs.push_back({t->raw(), t->dtype(), t->shape()});
  return (*kernel)->Run(ctx);
}

// ---- Fp8Cast ----

struct CastResult {
  Tensor codes;
  float amax_slot = 0;
};

CastResult Cast(const Tensor& x, float scale, bool e4m3, bool transpose, float slot0 = 0) {
  Graph g;
  Value* xv = g.AddInput("x", x.dtype(), x.shape());
  Value* s = g.AddState("s", Tensor::Scalar(scale));
  Value* h = g.AddState("h", Tensor(DType::kF32, {3}));
  AttrMap attrs;
  attrs.Set("format", std::string(e4m3 ? "e4m3" : "e5m2"));
  attrs.Set("transpose", int64_t{transpose});
  auto node = g.AddNode("Fp8Cast", {xv, s, h}, attrs, "cast");
  EXPECT_TRUE(node.ok()) << node.status();
  CastResult r;
  r.codes = Tensor((*node)->outputs[0]->dtype, (*node)->outputs[0]->shape);
  Tensor xs = x, ss = Tensor::Scalar(scale), hs(DType::kF32, {3});
  hs.data<float>()[0] = slot0;
  absl::Status st = RunNode(**node, {&xs, &ss, &hs}, {&r.codes});
  EXPECT_TRUE(st.ok()) << st;
  r.amax_slot = hs.data<float>()[0];
  return r;
}

std::vector<float> InterestingValues() {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v;
  for (int i = 0; i < 4000; ++i) v.push_back(normal(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 40) - 20));
  const float inf = std::numeric_limits<float>::infinity();
  for (float s : {0.0f, -0.0f, 1.0625f, -1.1875f, 0.001953125f * 1.5f, 1e-30f, 300.0f, 470.0f, -500.0f, 1e6f, 60000.0f,
                  -61440.0f, 1e30f, -1e38f, inf, -inf}) {
    v.push_back(s);
  }
  while (v.size() % 64 != 0) v.push_back(0.5f);
  return v;
}

TEST(Fp8CastTest, CodesAreFloat8RoundingOfTheScaledValueWithSaturation) {
  const std::vector<float> v = InterestingValues();
  const int64_t rows = 64, cols = static_cast<int64_t>(v.size()) / 64;
  const Tensor x = Tensor::FromVector<float>({rows, cols}, v);
  float want_amax = 0;
  for (float f : v) want_amax = std::max(want_amax, std::fabs(f));
  for (bool e4m3 : {true, false}) {
    for (float scale : {1.0f, 0.37f, 448.0f / 2.5f, 1e-6f, 1e5f}) {
      for (bool transpose : {false, true}) {
        const CastResult r = Cast(x, scale, e4m3, transpose);
        ASSERT_EQ(r.codes.dtype(), e4m3 ? DType::kF8E4M3 : DType::kF8E5M2);
        ASSERT_EQ(r.codes.shape(), transpose ? (Shape{cols, rows}) : (Shape{rows, cols}));
        int saturated = 0;
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            const float scaled = v[i * cols + j] * scale;
            const uint8_t want = e4m3 ? FloatToF8E4M3(scaled) : FloatToF8E5M2(scaled);
            const uint8_t got = r.codes.data<uint8_t>()[transpose ? j * rows + i : i * cols + j];
            ASSERT_EQ(got, want) << "x=" << v[i * cols + j] << " scale=" << scale << (e4m3 ? " e4m3" : " e5m2")
                                 << (transpose ? " transposed" : "");
            saturated += (got & 0x7f) == (e4m3 ? 0x7e : 0x7b);
          }
        }
        if (scale >= 1e5f) EXPECT_GT(saturated, 100);
        EXPECT_EQ(r.amax_slot, want_amax);
      }
    }
  }
  // Infinity: E4M3 saturates it to ±448, E5M2 keeps it.
  const Tensor inf =
      Tensor::FromVector<float>({2}, {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()});
  EXPECT_EQ(Cast(inf, 1.0f, true, false).codes.data<uint8_t>()[0], 0x7e);
  EXPECT_EQ(Cast(inf, 1.0f, true, false).codes.data<uint8_t>()[1], 0xfe);
  EXPECT_EQ(Cast(inf, 1.0f, false, false).codes.data<uint8_t>()[0], 0x7c);
  EXPECT_EQ(Cast(inf, 1.0f, false, false).codes.data<uint8_t>()[1], 0xfc);
}

TEST(Fp8CastTest, NanGivesTheNanCodeAndAStickyNanAmax) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::FromVector<float>({2, 2}, {1.0f, -nan, 3.0f, -2.0f});
  const CastResult e4 = Cast(x, 1.0f, true, false);
  EXPECT_EQ(e4.codes.data<uint8_t>()[1], 0xff);  // -NaN keeps its sign
  EXPECT_TRUE(std::isnan(e4.amax_slot));
  const CastResult e5 = Cast(x, 1.0f, false, true);
  EXPECT_EQ(e5.codes.data<uint8_t>()[2], 0xfe);  // transposed: x[0,1] lands at [1,0]
  EXPECT_TRUE(std::isnan(e5.amax_slot));
  // A NaN already in the slot sticks; a larger amax wins over a smaller slot, not a larger.
  const Tensor y = Tensor::FromVector<float>({2}, {1.0f, -2.0f});
  EXPECT_TRUE(std::isnan(Cast(y, 1.0f, true, false, nan).amax_slot));
  EXPECT_EQ(Cast(y, 1.0f, true, false, 1.5f).amax_slot, 2.0f);
  EXPECT_EQ(Cast(y, 1.0f, true, false, 5.0f).amax_slot, 5.0f);
}

// The codes dequantize to exactly what Fp8Quantize yields: the lowering multiplies the
// emulation's values. bf16 input, both formats.
TEST(Fp8CastTest, DequantizedCodesEqualFp8Quantize) {
  const Tensor x = testing::RandomTensor(DType::kBF16, {48, 32}, 5, -6.0, 6.0);
  for (bool e4m3 : {true, false}) {
    const float scale = e4m3 ? 448.0f / 6.0f * 1.3f : 57344.0f / 6.0f / 3.0f, scale_inv = 1.0f / scale;
    Graph g;
    Value* xv = g.AddInput("x", DType::kBF16, x.shape());
    Value* s = g.AddState("s", Tensor::Scalar(scale));
    Value* si = g.AddState("si", Tensor::Scalar(scale_inv));
    AttrMap attrs;
    attrs.Set("format", std::string(e4m3 ? "e4m3" : "e5m2"));
    auto q = g.AddNode("Fp8Quantize", {xv, s, si}, attrs, "q");
    ASSERT_TRUE(q.ok()) << q.status();
    Tensor xs = x, ss = Tensor::Scalar(scale), sis = Tensor::Scalar(scale_inv), qv(DType::kF32, x.shape());
    ASSERT_TRUE(RunNode(**q, {&xs, &ss, &sis}, {&qv}).ok());
    const CastResult r = Cast(x, scale, e4m3, false);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      const uint8_t c = r.codes.data<uint8_t>()[i];
      const float deq = (e4m3 ? F8E4M3ToFloat(c) : F8E5M2ToFloat(c)) * scale_inv;
      ASSERT_EQ(deq, qv.data<float>()[i]) << i;
    }
  }
}

// ---- Fp8Gemm ----

// Fp8Gemm over codes against Fp8Quantize + f32 Gemm + Cast over the same tensors, every
// transA/transB combination, bf16 output with a bf16 bias and f32 output without.
TEST(Fp8GemmTest, EqualsTheEmulatedQuantizeGemmCast) {
  const int64_t m = 32, n = 48, k = 64;
  for (int layout = 0; layout < 4; ++layout) {
    for (bool bf16_out : {true, false}) {
      const bool ta = layout & 1, tb = layout & 2;
      const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
      const Tensor a = testing::RandomTensor(DType::kF32, as, 21 + layout, -3.0, 3.0);
      const Tensor b = testing::RandomTensor(DType::kF32, bs, 31 + layout, -0.5, 0.5);
      const Tensor bias = testing::RandomTensor(DType::kBF16, {n}, 41);
      const float sa = 448.0f / 3.0f * 0.9f, sb = 57344.0f / 0.5f / 7.0f;  // b as an E5M2 gradient
      // Lowered: codes, then Fp8Gemm.
      const CastResult ca = Cast(a, sa, true, false), cb = Cast(b, sb, false, false);
      Graph g;
      Value* av = g.AddInput("a", ca.codes.dtype(), ca.codes.shape());
      Value* bv = g.AddInput("b", cb.codes.dtype(), cb.codes.shape());
      Value* sav = g.AddInput("sa", DType::kF32, {});
      Value* sbv = g.AddInput("sb", DType::kF32, {});
      Value* biasv = g.AddInput("bias", DType::kBF16, {n});
      AttrMap attrs;
      attrs.Set("transA", int64_t{ta});
      attrs.Set("transB", int64_t{tb});
      attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(bf16_out ? DType::kBF16 : DType::kF32)));
      std::vector<Value*> ins{av, bv, sav, sbv};
      if (bf16_out) ins.push_back(biasv);
      auto node = g.AddNode("Fp8Gemm", ins, attrs, "g");
      ASSERT_TRUE(node.ok()) << node.status();
      ASSERT_EQ((*node)->outputs[0]->shape, (Shape{m, n}));
      Tensor a_codes = ca.codes, b_codes = cb.codes, sai = Tensor::Scalar(1.0f / sa), sbi = Tensor::Scalar(1.0f / sb),
             bias_t = bias;
      Tensor y((*node)->outputs[0]->dtype, {m, n});
      std::vector<Tensor*> inputs{&a_codes, &b_codes, &sai, &sbi};
      if (bf16_out) inputs.push_back(&bias_t);
      ASSERT_TRUE(RunNode(**node, inputs, {&y}).ok());

      // Emulated: dequantized f32 operands (what Fp8Quantize yields), f32 Gemm with the
      // f32 bias, one rounding.
      Tensor qa(DType::kF32, as), qb(DType::kF32, bs);
      for (int64_t i = 0; i < qa.num_elements(); ++i)
        qa.data<float>()[i] = F8E4M3ToFloat(a_codes.data<uint8_t>()[i]) * (1.0f / sa);
      for (int64_t i = 0; i < qb.num_elements(); ++i)
        qb.data<float>()[i] = F8E5M2ToFloat(b_codes.data<uint8_t>()[i]) * (1.0f / sb);
      Graph e;
      Value* qav = e.AddInput("qa", DType::kF32, as);
      Value* qbv = e.AddInput("qb", DType::kF32, bs);
      Value* cv = e.AddInput("c", DType::kF32, {n});
      AttrMap gattrs;
      gattrs.Set("transA", int64_t{ta});
      gattrs.Set("transB", int64_t{tb});
      std::vector<Value*> eins{qav, qbv};
      if (bf16_out) eins.push_back(cv);
      auto gemm = e.AddNode("Gemm", eins, gattrs, "gemm");
      ASSERT_TRUE(gemm.ok()) << gemm.status();
      Tensor c = bias.CastTo(DType::kF32), p(DType::kF32, {m, n});
      std::vector<Tensor*> einputs{&qa, &qb};
      if (bf16_out) einputs.push_back(&c);
      ASSERT_TRUE(RunNode(**gemm, einputs, {&p}).ok());
      const Tensor want = bf16_out ? p.CastTo(DType::kBF16) : p;
      int exact = 0;
      for (int64_t i = 0; i < m * n; ++i) {
        const double got = y.GetAsDouble(i), w = want.GetAsDouble(i);
        exact += got == w;
        // Only the f32 summation order may differ: one bf16 ulp, or f32 rounding.
        ASSERT_LE(std::fabs(got - w), std::fabs(w) * (bf16_out ? std::ldexp(1.0, -8) : 1e-5) + 1e-6)
            << "layout " << layout << " element " << i;
      }
      EXPECT_GE(exact, m * n * 95 / 100) << "layout " << layout;
    }
  }
}

// ---- The pass ----

using fp8_testing::Model;

// x[B,in] -> (Gemm(transB=1) -> Relu)* -> Gemm -> SoftmaxCrossEntropyLoss; Gemm i is "gemm<i>".
Model Mlp(const std::vector<int64_t>& widths, int64_t batch, bool with_loss = true) {
  return fp8_testing::Mlp(widths, with_loss, batch);
}

// One MLP through the passes by hand, as the training pipeline runs them (the evaluation
// pipeline when the model has no loss).
struct Compiled {
  Model m;
  Precision precision = Precision::kFP8;
  Fp8Options fp8;
  CompileResults r;
  Capabilities caps;
  std::vector<Fp8LowerDecision> decisions;

  // The passes up to the emulation: autocast, pad-dims, (autodiff), fp8.
  absl::Status Emulate() {
    AutocastOptions autocast;
    autocast.precision = precision;
    fp8.enabled = precision == Precision::kFP8;
    r.loss.loss = m.loss;
    MPC_RETURN_IF_ERROR(AutocastPass(autocast, caps, &r.autocast).Run(*m.g).status());
    MPC_RETURN_IF_ERROR(PadDimsPass(PadDimsOptions{}, caps, &r.pad_dims).Run(*m.g).status());
    if (m.loss) MPC_RETURN_IF_ERROR(AutodiffPass(&r.loss, &r.autodiff).Run(*m.g).status());
    return Fp8Pass(fp8, caps, &r.autocast, m.loss ? &r.autodiff : nullptr, &r.fp8).Run(*m.g).status();
  }
  absl::StatusOr<bool> Lower() {
    auto changed =
        Fp8LowerPass(precision == Precision::kFP8, fp8.fast_accumulation_forward, caps, &r.fp8, &r.fp8_lower).Run(*m.g);
    decisions = r.fp8_lower.decisions;
    return changed;
  }
};

// The CPU's capabilities claiming FP8 tensor cores: what forces the lowering on the CPU.
Capabilities CpuWithFp8(bool fp8) {
  Capabilities caps = Cpu().capabilities();
  caps.fp8 = fp8;
  caps.fp8_group_scales = fp8;
  return caps;
}

// autocast, pad-dims, (autodiff), fp8, then fp8-lower (which acts only when `lower`).
absl::Status CompileMlp(Compiled& c, bool lower, bool include_first_last = true) {
  c.fp8.include_first_last = include_first_last;
  c.fp8.amax_history_len = 4;
  c.caps = CpuWithFp8(lower);
  MPC_RETURN_IF_ERROR(c.Emulate());
  MPC_RETURN_IF_ERROR(c.Lower().status());
  return VerifyGraph(*c.m.g);
}

int Count(const Graph& g, const std::string& op) {
  int n = 0;
  for (const auto& node : g.nodes()) n += node->op == op;
  return n;
}

// Per amax history: the nodes that record into it (Fp8Quantize / Fp8Cast).
std::map<std::string, int> Recorders(const Graph& g) {
  std::map<std::string, int> out;
  for (const auto& n : g.nodes()) {
    const int slot = n->op == "Fp8Quantize" ? 3 : n->op == "Fp8Cast" ? 2 : -1;
    if (slot >= 0 && static_cast<int>(n->inputs.size()) > slot && n->inputs[slot]) ++out[n->inputs[slot]->name];
  }
  return out;
}

TEST(Fp8LowerPassTest, EveryFp8GemmBecomesOneTnFp8GemmAndEachAmaxIsRecordedOnce) {
  Compiled emulated{Mlp({32, 64, 48, 16}, 16)}, lowered{Mlp({32, 64, 48, 16}, 16)};
  ASSERT_TRUE(CompileMlp(emulated, false).ok());
  ASSERT_TRUE(CompileMlp(lowered, true).ok());
  const Graph& g = *lowered.m.g;
  // gemm0, gemm1, gemm2 with their backward GEMMs; gemm0's dX is dead (x needs no
  // gradient), so it is removed instead of lowered.
  ASSERT_EQ(lowered.r.fp8.gemms.size(), 9u);
  ASSERT_EQ(lowered.decisions.size(), 9u);
  int removed = 0;
  for (const auto& d : lowered.decisions) {
    if (!d.lowered && d.reason.find("unused") != std::string::npos) {
      ++removed;
      EXPECT_EQ(g.FindNode(d.node), nullptr) << d.node;
      continue;
    }
    EXPECT_TRUE(d.lowered) << d.node << ": " << d.reason;
  }
  EXPECT_EQ(removed, 1);
  EXPECT_EQ(Count(g, "Fp8Quantize"), 0);
  EXPECT_EQ(Count(g, "Fp8Gemm"), 8);
  // What the compile report shows: 8 lowered, none emulated (the dead dX is removed).
  EXPECT_EQ(lowered.r.fp8_lower.lowered.size(), 8u);
  EXPECT_TRUE(lowered.r.fp8_lower.emulated.empty());
  for (const auto& n : g.nodes()) {
    EXPECT_FALSE((n->op == "Gemm" || n->op == "MatMul") && n->attrs.Has("mpc_fp8")) << n->name << " left emulated";
  }
  for (const auto& d : lowered.r.fp8.gemms) {
    const Node* n = g.FindNode(d.node);
    if (!n) continue;  // the dead one
    ASSERT_EQ(n->op, "Fp8Gemm") << d.node;
    EXPECT_EQ(n->attrs.GetInt("transA", -1), 0);
    EXPECT_EQ(n->attrs.GetInt("transB", -1), 1);
    EXPECT_EQ(n->outputs[0]->dtype, DType::kBF16) << "the emulated GEMM's Cast is folded in";
    for (int i = 0; i < 2; ++i) {
      const Node* cast = n->inputs[i]->producer;
      ASSERT_NE(cast, nullptr);
      EXPECT_EQ(cast->op, "Fp8Cast");
      // Each operand is dequantized by the scale_inv of the tensor it was cast with.
      EXPECT_EQ(n->inputs[2 + i]->name, cast->inputs[1]->name + "_inv");
    }
    EXPECT_EQ(DTypeName(n->inputs[0]->dtype), "f8" + d.format_a);
    EXPECT_EQ(DTypeName(n->inputs[1]->dtype), "f8" + d.format_b);
    // The product keeps its name: what consumed the emulated result consumes this.
    EXPECT_NE(emulated.m.g->FindValue(n->outputs[0]->name), nullptr) << n->outputs[0]->name;
  }
  // One Fp8Cast per tensor and layout: X and W plain (forward) and transposed (dW, dX);
  // dY plain (dX) and transposed (dW); gemm0 has no dX, so neither W^T nor plain dY.
  std::set<std::string> casts;
  for (const auto& n : g.nodes()) {
    if (n->op == "Fp8Cast") casts.insert(n->name);
  }
  std::set<std::string> want;
  for (const char* gemm : {"gemm0", "gemm1", "gemm2"}) {
    for (const char* t : {"/input/cast", "/input/cast_t", "/weight/cast", "/weight/cast_t", "/grad_output/cast",
                          "/grad_output/cast_t"}) {
      const std::string name = std::string("fp8_lower/") + gemm + t;
      if (std::string(gemm) == "gemm0" &&
          (name.find("weight/cast_t") != std::string::npos ||
           name.find("grad_output/cast") != std::string::npos && name.find("cast_t") == std::string::npos)) {
        continue;
      }
      want.insert(name);
    }
  }
  EXPECT_EQ(casts, want);
  // The amax: as many recorders per history as the emulation had (one quantization each).
  const std::map<std::string, int> before = Recorders(*emulated.m.g), after = Recorders(g);
  EXPECT_EQ(before.size(), 9u);
  EXPECT_EQ(after, before);
  for (const auto& [history, n] : after) EXPECT_EQ(n, 1) << history;
  // Every reader of the meta (Fp8Cast: scale, history; Fp8Gemm: scale_inv) runs before
  // the update rewrites it.
  const Node* update = nullptr;
  for (const auto& n : g.nodes()) {
    if (n->op == "Fp8UpdateScales") update = n.get();
  }
  ASSERT_NE(update, nullptr);
  std::set<const Node*> deps(update->control_deps.begin(), update->control_deps.end());
  for (const auto& n : g.nodes()) {
    if (n->op == "Fp8Cast" || n->op == "Fp8Gemm") EXPECT_TRUE(deps.count(n.get())) << n->name;
  }
  EXPECT_TRUE(g.TopologicalOrder().ok());
}

// Accumulation: the forward GEMMs' Fp8Gemms accumulate fast (fast_accum = 1, which the
// CUDA kernel passes to cuBLASLt as FAST_ACCUM), the backward ones (dX, dW) promote, each
// decision saying which and why; with fp8.fast_accumulation_forward false none is fast.
TEST(Fp8LowerPassTest, OnlyTheForwardGemmsAccumulateFast) {
  for (const bool fast_forward : {true, false}) {
    SCOPED_TRACE(fast_forward ? "fast forward" : "no fast accumulation");
    Compiled c{Mlp({32, 64, 48, 16}, 16)};
    c.fp8.fast_accumulation_forward = fast_forward;
    ASSERT_TRUE(CompileMlp(c, true).ok());
    std::map<std::string, bool> forward;
    for (const auto& gemm : c.r.fp8.gemms) forward[gemm.node] = gemm.forward_node == gemm.node;
    int fast = 0, promoted = 0;
    for (const auto& d : c.decisions) {
      if (!d.lowered) continue;
      const Node* n = c.m.g->FindNode(d.node);
      ASSERT_NE(n, nullptr) << d.node;
      const bool want = fast_forward && forward.at(d.node);
      EXPECT_EQ(d.fast_accumulation, want) << d.node << ": " << d.accumulation;
      EXPECT_EQ(n->attrs.GetInt("fast_accum", 0), want ? 1 : 0) << d.node;
      EXPECT_NE(d.accumulation.find(want                     ? "fast: a forward GEMM"
                                    : forward.at(d.node)     ? "fast_accumulation_forward is false"
                                                             : "promoted: a backward GEMM"),
                std::string::npos)
          << d.node << ": " << d.accumulation;
      (want ? fast : promoted)++;
    }
    EXPECT_EQ(fast, fast_forward ? 3 : 0) << "the three forward GEMMs";
    EXPECT_EQ(promoted, fast_forward ? 5 : 8) << "dW of each layer, dX of the last two";
  }
}

// The just-in-time recipes lower too: each Fp8QuantizeDynamic becomes Fp8CastDynamics
// (one per layout), every GEMM an Fp8Gemm whose operand scalings are cuBLASLt's pairs —
// current: per tensor; rowwise: rows x rows; block: 1x128 tiles x 128x128 blocks for the
// forward and dX, tiles x tiles for dW — and block-scaled GEMMs never accumulate fast.
TEST(Fp8LowerPassTest, JustInTimeRecipesLowerToGroupScaledFp8Gemms) {
  for (const Fp8Recipe recipe : {Fp8Recipe::kCurrent, Fp8Recipe::kRowwise, Fp8Recipe::kBlock}) {
    SCOPED_TRACE(Fp8RecipeName(recipe));
    Compiled c{Mlp({32, 64, 48, 16}, 16)};
    c.fp8.recipe = recipe;
    ASSERT_TRUE(CompileMlp(c, true).ok());
    std::map<std::string, bool> forward;
    for (const auto& gemm : c.r.fp8.gemms) forward[gemm.node] = gemm.forward_node == gemm.node;
    int lowered = 0, fast = 0;
    for (const auto& d : c.decisions) {
      if (d.reason.find("dead code") != std::string::npos) continue;  // the first layer's dX
      ASSERT_TRUE(d.lowered) << d.node << ": " << d.reason;
      ++lowered;
      fast += d.fast_accumulation;
      const Node* n = c.m.g->FindNode(d.node);
      ASSERT_NE(n, nullptr) << d.node;
      ASSERT_EQ(n->op, "Fp8Gemm");
      const std::string a = n->attrs.GetString("a_scaling", "tensor"), b = n->attrs.GetString("b_scaling", "tensor");
      switch (recipe) {
        case Fp8Recipe::kCurrent:
          EXPECT_EQ(a + "x" + b, "tensorxtensor") << d.node;
          break;
        case Fp8Recipe::kRowwise:
          EXPECT_EQ(a + "x" + b, "rowsxrows") << d.node;
          break;
        default: {
          // dW = dY^T X reads no weight: tiles x tiles; the others read the weight's blocks.
          const bool weight_gradient = !forward.at(d.node) && b == "tiles";
          EXPECT_EQ(a + "x" + b, weight_gradient ? "tilesxtiles" : "tilesxblocks") << d.node;
          EXPECT_FALSE(d.fast_accumulation) << d.node;
          if (forward.at(d.node)) EXPECT_NE(d.accumulation.find("block-scaled"), std::string::npos) << d.accumulation;
        }
      }
    }
    EXPECT_EQ(lowered, 8);
    EXPECT_EQ(fast, recipe == Fp8Recipe::kBlock ? 0 : 3) << "the forward GEMMs, unless block-scaled";
    EXPECT_EQ(Count(*c.m.g, "Fp8QuantizeDynamic"), 0);
    EXPECT_GT(Count(*c.m.g, "Fp8CastDynamic"), 0);
    EXPECT_EQ(Count(*c.m.g, "Fp8Cast"), 0);
  }
  // An FP8 device without cuBLASLt's scale modes (sm_89): current lowers, rowwise stays
  // emulated with the reason.
  for (const Fp8Recipe recipe : {Fp8Recipe::kCurrent, Fp8Recipe::kRowwise}) {
    Compiled c{Mlp({32, 64, 48, 16}, 16)};
    c.fp8.recipe = recipe;
    c.fp8.amax_history_len = 4;
    c.fp8.include_first_last = true;
    c.caps = CpuWithFp8(true);
    c.caps.fp8_group_scales = false;
    ASSERT_TRUE(c.Emulate().ok());
    ASSERT_TRUE(c.Lower().ok());
    ASSERT_EQ(c.decisions.size(), 9u);
    for (const auto& d : c.decisions) {
      if (d.reason.find("dead code") != std::string::npos) continue;
      EXPECT_EQ(d.lowered, recipe == Fp8Recipe::kCurrent) << d.node;
      if (!d.lowered) EXPECT_NE(d.reason.find("group scales"), std::string::npos) << d.reason;
    }
  }
}

TEST(Fp8LowerPassTest, OffWithoutFp8TensorCoresAndNotFp8Precision) {
  Compiled c{Mlp({32, 64, 48, 16}, 16)};
  ASSERT_TRUE(CompileMlp(c, /*lower=*/false).ok());
  EXPECT_TRUE(c.decisions.empty());
  EXPECT_EQ(Count(*c.m.g, "Fp8Gemm"), 0);
  EXPECT_EQ(Count(*c.m.g, "Fp8Quantize"), 9);

  Compiled bf16{Mlp({32, 64, 48, 16}, 16)};
  bf16.precision = Precision::kBF16;
  bf16.caps = CpuWithFp8(true);
  ASSERT_TRUE(bf16.Emulate().ok());
  auto changed = bf16.Lower();
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(Fp8LowerPassTest, BatchNotAMultipleOf16AndMissingKernelsStayEmulated) {
  // Batch 24: every GEMM has the batch as M (forward, dX) or K (dW), so all stay
  // emulated, with the reason.
  Compiled c{Mlp({32, 64, 48, 16}, 24)};
  ASSERT_TRUE(CompileMlp(c, true).ok());
  ASSERT_EQ(c.decisions.size(), 9u);
  int dims = 0;
  for (const auto& d : c.decisions) {
    EXPECT_FALSE(d.lowered) << d.node;
    dims += d.reason.find("multiples of 16") != std::string::npos;
  }
  EXPECT_EQ(dims, 8);  // and gemm0's dead dX
  EXPECT_EQ(c.r.fp8_lower.emulated.size(), 8u);
  EXPECT_TRUE(c.r.fp8_lower.lowered.empty());
  EXPECT_EQ(Count(*c.m.g, "Fp8Gemm"), 0);
  EXPECT_EQ(Count(*c.m.g, "Fp8Cast"), 0);

  // A device with FP8 but no Fp8Gemm kernel (yet): everything stays emulated, and says why.
  Compiled k{Mlp({32, 64, 48, 16}, 16)};
  k.fp8.include_first_last = true;
  k.caps = CpuWithFp8(false);
  ASSERT_TRUE(k.Emulate().ok());
  k.caps.fp8 = true;
  k.caps.device = "cuda:0 (test)";
  k.caps.has_kernel = [](const std::string& op, DType) { return op != "Fp8Gemm"; };
  auto changed = k.Lower();
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  ASSERT_EQ(k.decisions.size(), 9u);
  int no_kernel = 0;
  for (const auto& d : k.decisions) no_kernel += d.reason.find("no Fp8Gemm kernel") != std::string::npos;
  EXPECT_EQ(no_kernel, 8);
  EXPECT_EQ(Count(*k.m.g, "Fp8Quantize"), 9);
}

TEST(Fp8LowerPassTest, EvaluationGraphLowersWithoutRecording) {
  Compiled c{Mlp({32, 64, 48, 16}, 16, /*with_loss=*/false)};
  ASSERT_TRUE(CompileMlp(c, true).ok());
  EXPECT_EQ(Count(*c.m.g, "Fp8Gemm"), 3);
  EXPECT_EQ(Count(*c.m.g, "Fp8Quantize"), 0);
  EXPECT_EQ(Count(*c.m.g, "Fp8Cast"), 6);  // X and W of each GEMM, plain
  for (const auto& n : c.m.g->nodes()) {
    if (n->op == "Fp8Cast") {
      EXPECT_EQ(n->inputs.size(), 2u) << "no amax history in evaluation";
      EXPECT_EQ(n->attrs.GetInt("transpose", 0), 0);
    }
  }
}

// The lowered program against the emulated one on the CPU: forward and backward of the
// MLP over 6 steps of delayed scaling (the scale update runs every step, so steps 2.. use
// scales computed from the amaxes both programs recorded). The products are the same
// f32 values; only oneDNN's summation order for the other layouts may differ.
struct TrainRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<float>> grads, meta;
};

TrainRun Train(bool lower) {
  Compiled c{Mlp({32, 64, 48, 16}, 16)};
  EXPECT_TRUE(CompileMlp(c, lower).ok());
  Graph& g = *c.m.g;
  EXPECT_EQ(Count(g, "Fp8Gemm"), lower ? 8 : 0);
  for (const auto& [param, grad] : c.r.autodiff.param_grads) g.AddOutput(grad);
  EXPECT_TRUE(SimplifyPass().Run(g).ok());
  EXPECT_TRUE(MemoryPlanPass(&c.r.memory_plan).Run(g).ok());
  auto ex = Executor::Create(g, c.r.memory_plan, Cpu());
  EXPECT_TRUE(ex.ok()) << ex.status();
  TrainRun r;
  for (int step = 0; step < 6; ++step) {
    EXPECT_TRUE((*ex)->SetInput("x", testing::RandomTensor(DType::kF32, {16, 32}, 100 + step, -2.0, 2.0)).ok());
    std::vector<int64_t> labels(16);
    for (int i = 0; i < 16; ++i) labels[i] = (i * 7 + step) % 16;
    EXPECT_TRUE((*ex)->SetInput("labels", Tensor::FromVector<int64_t>({16}, labels)).ok());
    EXPECT_TRUE((*ex)->Run(0, step).ok());
    r.losses.push_back((*ex)->Fetch(c.m.loss->name)->GetAsDouble(0));
  }
  r.grads = fp8_testing::FetchGradients(**ex, c.r.autodiff);
  r.meta = fp8_testing::ReadFp8State(**ex, c.r.fp8);
  return r;
}

TEST(Fp8LowerNumericsTest, LoweredProgramMatchesTheEmulationOverSteps) {
  const TrainRun emulated = Train(false), lowered = Train(true);
  ASSERT_EQ(lowered.losses.size(), emulated.losses.size());
  double worst = 0;
  for (size_t i = 0; i < emulated.losses.size(); ++i) {
    const double rel = std::fabs(lowered.losses[i] - emulated.losses[i]) / std::fabs(emulated.losses[i]);
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-6) << "step " << i << ": " << lowered.losses[i] << " vs " << emulated.losses[i];
  }
  double grad_worst = 0;
  for (const auto& [name, want] : emulated.grads) {
    grad_worst = std::max(grad_worst, fp8_testing::RelativeRms(lowered.grads.at(name), want));
  }
  std::printf("lowered vs emulated: worst loss rel diff %.3g, worst gradient rel diff (bf16) %.3g\n", worst,
              grad_worst);
  EXPECT_LE(grad_worst, 1e-2);
  EXPECT_EQ(lowered.meta, emulated.meta) << "the FP8 meta (scales, amax histories) must be identical";
  EXPECT_NE(lowered.meta.at("gemm1/grad_output.fp8_scale")[0], 1.0f) << "the scales moved";
  EXPECT_EQ(lowered.meta.size(), 9u * 4u);
}

}  // namespace
}  // namespace mpc
