// The fp8 pass on a transformer's shapes (passes/fp8_batch_rows.h): Linear layers over a
// batched X[B, T, K] become 2-D GEMMs over B*T rows (forward with its bias as the Gemm's C,
// dX, and dW as one GEMM with no per-batch sum), attention's batched products of two
// activations stay in bf16 with the reason, every FP8 GEMM then lowers to an Fp8Gemm on a device with FP8 tensor cores, and
// the lowered program computes the emulated program's loss, gradients and FP8 state. The
// float64 reference of a folded Linear layer per recipe is in fp8_recipes_test.cc.
#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "base/status_macros.h"
#include "engine/executor.h"
#include "graph/graph_builder.h"
#include "graph/verifier.h"
#include "gtest/gtest.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/fp8.h"
#include "passes/fold_output_casts.h"
#include "passes/fp8_lower.h"
#include "passes/memory_plan.h"
#include "passes/pad_dims.h"
#include "passes/simplify.h"
#include "tests/passes/fp8_pass_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kBatch = 2, kTokens = 40, kWidth = 64, kHidden = 96;

// x[2, 40, 64] -> h = Relu(MatMul(x, w_in[64, 96]) + b_in) -> s = MatMul(h, h^T) [2, 40, 40]
// -> a = MatMul(s, h) -> y = x + (MatMul(a, w_out[96, 64]) + b_out) -> loss = sum(y * r):
// two Linear layers with biases around attention's two batched products, the second
// writing into an f32 residual stream. Rows: 2 * 40 = 80, a multiple of 16.
fp8_testing::Model Block() {
  fp8_testing::Model m;
  Graph& g = *m.g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {kBatch, kTokens, kWidth});
  Value* w_in = g.AddParameter("w_in", testing::RandomTensor(DType::kF32, {kWidth, kHidden}, 3, -0.2, 0.2));
  Value* w_out = g.AddParameter("w_out", testing::RandomTensor(DType::kF32, {kHidden, kWidth}, 4, -0.2, 0.2));
  Value* r = g.AddInput("r", DType::kF32, {kBatch, kTokens, kWidth});
  Value* b_in = g.AddParameter("b_in", testing::RandomTensor(DType::kF32, {kHidden}, 5, -0.5, 0.5));
  Value* b_out = g.AddParameter("b_out", testing::RandomTensor(DType::kF32, {kWidth}, 6, -0.5, 0.5));
  Value* h = b.Op("MatMul", {x, w_in});
  b.last_node()->name = "linear_in";
  h = b.Op("Relu", {b.Op("Add", {h, b_in})});
  Value* s = b.Op("MatMul", {h, b.Transpose(h, {0, 2, 1})});
  b.last_node()->name = "scores";
  Value* a = b.Op("MatMul", {s, h});
  b.last_node()->name = "mix";
  Value* y = b.Op("MatMul", {a, w_out});
  b.last_node()->name = "linear_out";
  y = b.Op("Add", {x, b.Op("Add", {y, b_out})});
  AttrMap keep;
  keep.Set("keepdims", int64_t{0});
  m.loss = b.Op("ReduceSum", {b.Op("Mul", {y, r})}, keep);
  g.SetOutputs({m.loss});
  EXPECT_TRUE(b.status().ok()) << b.status();
  return m;
}

Capabilities CpuCaps(bool fp8_tensor_cores) {
  Capabilities caps = CreateCpuBackend()->capabilities();
  caps.fp8 = fp8_tensor_cores;
  caps.fp8_group_scales = fp8_tensor_cores;
  return caps;
}

struct Compiled {
  fp8_testing::Model m = Block();
  CompileResults r;
  Capabilities caps;
};

absl::Status Compile(Compiled& c, Fp8Recipe recipe, bool lower) {
  AutocastOptions autocast;
  autocast.precision = Precision::kFP8;
  Fp8Options fp8;
  fp8.enabled = true;
  fp8.recipe = recipe;
  fp8.include_first_last = true;
  fp8.amax_history_len = 4;
  c.caps = CpuCaps(lower);
  c.r.loss.loss = c.m.loss;
  Graph& g = *c.m.g;
  MPC_RETURN_IF_ERROR(AutocastPass(autocast, c.caps, &c.r.autocast).Run(g).status());
  MPC_RETURN_IF_ERROR(PadDimsPass(PadDimsOptions{}, c.caps, &c.r.pad_dims).Run(g).status());
  MPC_RETURN_IF_ERROR(AutodiffPass(&c.r.loss, &c.r.autodiff).Run(g).status());
  MPC_RETURN_IF_ERROR(Fp8Pass(fp8, c.caps, &c.r.autocast, &c.r.autodiff, &c.r.fp8).Run(g).status());
  MPC_RETURN_IF_ERROR(
      Fp8LowerPass(true, fp8.fast_accumulation_forward, c.caps, &c.r.fp8, &c.r.fp8_lower).Run(g).status());
  return VerifyGraph(g);
}

const Fp8Recipe kRecipes[] = {Fp8Recipe::kDelayed, Fp8Recipe::kCurrent, Fp8Recipe::kRowwise, Fp8Recipe::kBlock};

TEST(Fp8BatchRowsTest, LinearLayersBecomeTwoDimensionalGemmsAndAttentionProductsStayBf16) {
  for (const Fp8Recipe recipe : kRecipes) {
    SCOPED_TRACE(Fp8RecipeName(recipe));
    Compiled c;
    ASSERT_TRUE(Compile(c, recipe, /*lower=*/false).ok());
    std::map<std::string, std::string> forward_of;
    for (const auto& gemm : c.r.fp8.gemms) forward_of[gemm.node] = gemm.forward_node;
    // Each Linear layer: its forward GEMM, dX and dW; linear_in has no dX (autodiff's, read
    // by nothing since x is an input, is removed rather than converted).
    ASSERT_EQ(forward_of.size(), 5u);
    EXPECT_EQ(forward_of.at("linear_in"), "linear_in");
    EXPECT_EQ(forward_of.at("linear_out"), "linear_out");
    ASSERT_EQ(c.r.fp8.skipped.size(), 2u);
    for (const auto& [node, why] : c.r.fp8.skipped) {
      EXPECT_TRUE(node == "scores" || node == "mix") << node;
      EXPECT_NE(why.find("batched product of two activations"), std::string::npos) << why;
    }
    int fp8_gemms = 0;
    for (const auto& n : c.m.g->nodes()) {
      if (n->op == "ReduceSumTo") {
        // No weight gradient summed over the batch: the sum is inside the dW GEMM.
        EXPECT_NE(n->outputs[0]->shape, (Shape{kWidth, kHidden})) << n->name;
        EXPECT_NE(n->outputs[0]->shape, (Shape{kHidden, kWidth})) << n->name;
      }
      if (!n->attrs.Has("mpc_fp8")) continue;
      ++fp8_gemms;
      if (n->name == "linear_in") {
        // The bf16 bias is the forward Gemm's C, added before the product's one rounding
        // (the Cast after the f32 product).
        EXPECT_EQ(n->op, "Gemm");
        ASSERT_EQ(n->inputs.size(), 3u);
        EXPECT_EQ(n->inputs[2]->shape, (Shape{kHidden}));
        ASSERT_EQ(n->outputs[0]->consumers.size(), 1u);
        EXPECT_EQ(n->outputs[0]->consumers[0]->op, "Cast");
      }
      if (n->name == "linear_out") {
        // Summed into the f32 residual stream: the f32 bias stays an f32 Add (an FP8 GEMM
        // with an f32 output takes only a bf16 bias on cuBLASLt).
        EXPECT_EQ(n->op, "MatMul");
        EXPECT_EQ(n->inputs.size(), 2u);
      }
      EXPECT_EQ(n->inputs[0]->shape.size(), 2u) << n->name;
      EXPECT_EQ(n->inputs[1]->shape.size(), 2u) << n->name;
      const int64_t rows = kBatch * kTokens;
      const Shape out = n->outputs[0]->shape;
      const bool weight_gradient = out == Shape{kWidth, kHidden} || out == Shape{kHidden, kWidth};
      // dW contracts the rows; the others produce them.
      EXPECT_EQ(weight_gradient ? n->inputs[1]->shape[0] : out[0], rows) << n->name;
    }
    EXPECT_EQ(fp8_gemms, 5);
  }
}

// One step of the block on the CPU, emulated or lowered: the loss, both weight gradients
// and the FP8 state afterwards.
struct Step {
  double loss = 0;
  fp8_testing::Floats grads, meta;
  int fp8_gemms = 0;
};

Step RunStep(Fp8Recipe recipe, bool lower) {
  Compiled c;
  Step s;
  const absl::Status compiled = Compile(c, recipe, lower);
  EXPECT_TRUE(compiled.ok()) << compiled;
  if (!compiled.ok()) return s;
  Graph& g = *c.m.g;
  for (const auto& n : g.nodes()) s.fp8_gemms += n->op == "Fp8Gemm";
  for (const auto& [param, grad] : c.r.autodiff.param_grads) g.AddOutput(grad);
  EXPECT_TRUE(SimplifyPass().Run(g).ok());
  EXPECT_TRUE(MemoryPlanPass(&c.r.memory_plan).Run(g).ok());
  auto backend = CreateCpuBackend();
  auto ex = Executor::Create(g, c.r.memory_plan, *backend);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return s;
  const Shape shape{kBatch, kTokens, kWidth};
  EXPECT_TRUE((*ex)->SetInput("x", testing::RandomTensor(DType::kF32, shape, 21, -2.0, 2.0)).ok());
  EXPECT_TRUE((*ex)->SetInput("r", testing::RandomTensor(DType::kF32, shape, 22, -0.1, 0.1)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  s.loss = (*ex)->Fetch(c.m.loss->name)->GetAsDouble(0);
  s.grads = fp8_testing::FetchGradients(**ex, c.r.autodiff);
  s.meta = fp8_testing::ReadFp8State(**ex, c.r.fp8);
  return s;
}

TEST(Fp8BatchRowsTest, EveryLinearGemmLowersAndTheLoweredStepEqualsTheEmulatedOne) {
  for (const Fp8Recipe recipe : kRecipes) {
    SCOPED_TRACE(Fp8RecipeName(recipe));
    {
      Compiled c;
      ASSERT_TRUE(Compile(c, recipe, /*lower=*/true).ok());
      ASSERT_EQ(c.r.fp8_lower.decisions.size(), 5u);
      for (const auto& d : c.r.fp8_lower.decisions) EXPECT_TRUE(d.lowered) << d.node << ": " << d.reason;
    }
    const Step emulated = RunStep(recipe, false), lowered = RunStep(recipe, true);
    EXPECT_EQ(emulated.fp8_gemms, 0);
    EXPECT_EQ(lowered.fp8_gemms, 5);
    EXPECT_LE(std::fabs(lowered.loss - emulated.loss), 1e-6 * std::fabs(emulated.loss))
        << lowered.loss << " vs " << emulated.loss;
    ASSERT_EQ(lowered.grads.size(), 4u);  // both weights and both biases
    for (const auto& [name, want] : emulated.grads) {
      // The same f32 products; bf16 results where oneDNN's summation order differs by a bit.
      EXPECT_LE(fp8_testing::RelativeRms(lowered.grads.at(name), want), 1e-2) << name;
      EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](float v) { return v != 0; })) << name << " is all zeros";
    }
    EXPECT_EQ(lowered.meta, emulated.meta) << "the FP8 state (scales, amax histories) must be identical";
  }
}

// loss = sum(v * v), the model's only output.
void SetSumOfSquaresLoss(fp8_testing::Model& m, GraphBuilder& b, Value* v) {
  AttrMap keep;
  keep.Set("keepdims", int64_t{0});
  m.loss = b.Op("ReduceSum", {b.Op("Mul", {v, v})}, keep);
  m.g->SetOutputs({m.loss});
}

// A Linear layer without a bias whose output an f32 op reads (autocast's Cast to f32 in
// front of LayerNormalization, which it keeps in f32): fold-output-casts drops the bf16
// round trip through the Reshape back to [B, T, N], emulated (the f32 product goes to the
// Reshape) and lowered (the Fp8Gemm writes f32), so both compute the same f32 values.
TEST(Fp8BatchRowsTest, AnF32ReaderGetsTheF32ProductThroughTheReshape) {
  for (const bool lower : {false, true}) {
    SCOPED_TRACE(lower ? "lowered" : "emulated");
    fp8_testing::Model m;
    Graph& g = *m.g;
    GraphBuilder b(&g);
    Value* x = g.AddInput("x", DType::kF32, {kBatch, kTokens, kWidth});
    Value* w = g.AddParameter("w", testing::RandomTensor(DType::kF32, {kWidth, kWidth}, 7, -0.2, 0.2));
    Value* scale = g.AddParameter("scale", testing::RandomTensor(DType::kF32, {kWidth}, 8, 0.5, 1.5));
    Value* y = b.Op("MatMul", {x, w});
    b.last_node()->name = "linear";
    Value* normed = b.OpN("LayerNormalization", {y, scale}, {})[0];
    SetSumOfSquaresLoss(m, b, normed);
    ASSERT_TRUE(b.status().ok()) << b.status();
    fp8_testing::PassRun r;
    r.fp8.include_first_last = true;
    r.caps = CpuCaps(lower);
    ASSERT_TRUE(r.Compile(m).ok());
    if (lower) ASSERT_TRUE(Fp8LowerPass(true, true, r.caps, &r.results.fp8, &r.results.fp8_lower).Run(g).ok());
    ASSERT_TRUE(SimplifyPass().Run(g).ok());
    ASSERT_TRUE(FoldOutputCastsPass().Run(g).ok());
    ASSERT_TRUE(VerifyGraph(g).ok());
    const Node* linear = g.FindNode("linear");
    ASSERT_NE(linear, nullptr);
    EXPECT_EQ(linear->op, lower ? "Fp8Gemm" : "MatMul");
    EXPECT_EQ(linear->outputs[0]->dtype, DType::kF32);
    ASSERT_EQ(linear->outputs[0]->consumers.size(), 1u);
    const Node* view = linear->outputs[0]->consumers[0];
    EXPECT_EQ(view->op, "Reshape");
    EXPECT_EQ(view->outputs[0]->dtype, DType::kF32);
    // Read by LayerNormalization (and its gradient, which reads the same input), no Cast.
    int layer_norms = 0;
    for (const Node* reader : view->outputs[0]->consumers) {
      EXPECT_NE(reader->op, "Cast");
      layer_norms += reader->op == "LayerNormalization";
    }
    EXPECT_EQ(layer_norms, 1);
  }
}

// A batched weight ([E, K, N] experts, or [1, K, N]) is no activation: its GEMM stays
// eligible for FP8 (emulated: no FP8 GEMM takes batches), and says nothing of attention.
TEST(Fp8BatchRowsTest, BatchedWeightsAreNotAttentionProducts) {
  fp8_testing::Model m;
  Graph& g = *m.g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {kBatch, kTokens, kWidth});
  Value* experts = g.AddParameter("experts", testing::RandomTensor(DType::kF32, {kBatch, kWidth, kHidden}, 9));
  Value* y = b.Op("MatMul", {x, experts});
  b.last_node()->name = "experts";
  SetSumOfSquaresLoss(m, b, y);
  ASSERT_TRUE(b.status().ok()) << b.status();
  fp8_testing::PassRun r;
  r.fp8.include_first_last = true;
  r.caps = CpuCaps(false);
  ASSERT_TRUE(r.Compile(m).ok());
  EXPECT_EQ(r.SkipReason("experts"), "");
  EXPECT_EQ(r.Fp8Nodes(/*forward_only=*/true), std::vector<std::string>{"experts"});
}

}  // namespace
}  // namespace mpc
