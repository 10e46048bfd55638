// fuse-attention on the attention chains PyTorch 2.x exports (dynamo: Q and K^T each
// scaled, K^T as Reshape / 3-D Transpose / Reshape, a finfo.min causal mask added, the NaN
// guard; TorchScript: a Transpose, a Div, a padding mask with -inf; a boolean mask through
// Where; the opset-23 Attention expansion's causal keep-mask and guard; no mask at all):
// one FusedAttention with the chain's values on the CPU, forward and (through autodiff)
// backward for Q, K and V, with the mask recognised as causal, kept as Bias or dropped.
// Chains it must leave alone (a learned mask, dropout, head dim 4, the probabilities read
// elsewhere, a backend without fused attention) stay, each skip with its reason.
#include "passes/fuse_attention.h"

#include <functional>
#include <limits>
#include <map>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kB = 2, kH = 2, kS = 6, kD = 8;
const Shape kQkv = {kB, kH, kS, kD};

using Chain = std::function<Value*(GraphBuilder&, Graph&, Value* q, Value* k, Value* v)>;

std::unique_ptr<Graph> Build(const Chain& chain, int64_t d = kD) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  const Shape s = {kB, kH, kS, d};
  Value* q = g->AddInput("q", DType::kF32, s);
  Value* k = g->AddInput("k", DType::kF32, s);
  Value* v = g->AddInput("v", DType::kF32, s);
  Value* y = chain(b, *g, q, k, v);
  EXPECT_TRUE(b.status().ok()) << b.status();
  std::vector<Value*> outputs{y};  // y first, then any output the chain added
  outputs.insert(outputs.end(), g->outputs().begin(), g->outputs().end());
  g->SetOutputs(outputs);
  return g;
}

Capabilities FusedAttentionCaps() {
  Capabilities caps;
  caps.fused_attention = true;
  return caps;
}

// [.., S, S] constant: 0 on and below the diagonal, `masked` above.
Value* CausalMask(Graph& g, const Shape& shape, double masked) {
  Tensor t(DType::kF32, shape);
  const int64_t s = shape.back();
  for (int64_t e = 0; e < t.num_elements(); ++e) t.data<float>()[e] = e % s <= (e / s) % s ? 0.0f : float(masked);
  return g.AddConstant(g.UniqueName("causal_mask"), std::move(t));
}

// softmax(S) V with dynamo's NaN guard around the softmax.
Value* GuardedSoftmaxTimesV(GraphBuilder& b, Value* scores, Value* v) {
  Value* p = b.Op("Softmax", {scores});
  Value* is_nan = b.Op("Not", {b.Op("Equal", {p, p})});
  return b.Op("MatMul", {b.Op("Where", {is_nan, b.ScalarConstant(0.0, DType::kF32), p}), v});
}

// K^T the way dynamo writes it: Reshape to [B*H, S, D], Transpose(0, 2, 1), Reshape back.
Value* DynamoKT(GraphBuilder& b, Value* k) {
  const Shape& s = k->shape;
  return b.Reshape(b.Transpose(b.Reshape(k, {s[0] * s[1], s[2], s[3]}), {0, 2, 1}), {s[0], s[1], s[3], s[2]});
}

Tensor KeepMask() {
  Tensor keep(DType::kBool, {kB, 1, 1, kS});
  for (int64_t e = 0; e < keep.num_elements(); ++e) keep.data<uint8_t>()[e] = e % 4 != 3;
  return keep;
}

std::map<std::string, Tensor> Feeds() {
  return {{"q", testing::RandomTensor(DType::kF32, kQkv, 3, -2.0, 2.0)},
          {"k", testing::RandomTensor(DType::kF32, kQkv, 5, -2.0, 2.0)},
          {"v", testing::RandomTensor(DType::kF32, kQkv, 7, -1.0, 1.0)},
          {"keep", KeepMask()}};
}

std::vector<Tensor> RunCpu(const Graph& g, const std::vector<std::string>& outputs) {
  absl::StatusOr<std::vector<Tensor>> out = testing::RunOnce(g, testing::CpuBackend(), Feeds(), outputs);
  EXPECT_TRUE(out.ok()) << out.status();
  return out.ok() ? *out : std::vector<Tensor>();
}

std::vector<std::string> AddLossAndGradients(Graph& g) {
  absl::StatusOr<std::vector<std::string>> names = testing::AddLossAndGradients(g, {"q", "k", "v"});
  EXPECT_TRUE(names.ok()) << names.status();
  return names.ok() ? *names : std::vector<std::string>();
}

struct Spelling {
  const char* name;
  Chain chain;
  bool causal, biased;
  double scale;
};

TEST(FuseAttentionTest, ExportedChainsBecomeOneFusedAttentionWithTheirValuesAndGradients) {
  const double half_root = std::sqrt(1.0 / std::sqrt(double(kD)));  // dynamo scales Q and K^T by this each
  const std::vector<Spelling> spellings = {
      {"Dynamo_ScaledOperands_FinfoMinCausalMask_NanGuard",
       [&](GraphBuilder& b, Graph& g, Value* q, Value* k, Value* v) {
         Value* c = b.ScalarConstant(half_root, DType::kF32);
         Value* s = b.Op("MatMul", {b.Mul(q, c), b.Mul(DynamoKT(b, k), c)});
         Value* masked = b.Add(s, CausalMask(g, {kB, 1, kS, kS}, -std::numeric_limits<float>::max()));
         return GuardedSoftmaxTimesV(b, masked, v);
       },
       true, false, half_root * half_root},
      {"TorchScript_Transpose_Div_PaddingMask",
       [](GraphBuilder& b, Graph& g, Value* q, Value* k, Value* v) {
         Tensor pad(DType::kF32, {kB, 1, 1, kS});
         for (int64_t e = 0; e < pad.num_elements(); ++e) {
           pad.data<float>()[e] = e % 5 == 4 ? -std::numeric_limits<float>::infinity() : 0.0f;
         }
         Value* s = b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})});
         Value* scaled = b.Op("Div", {s, b.ScalarConstant(std::sqrt(double(kD)), DType::kF32)});
         Value* masked = b.Add(g.AddConstant("pad", std::move(pad)), scaled);
         return b.Op("MatMul", {b.Op("Softmax", {masked}), v});
       },
       false, true, 1 / std::sqrt(double(kD))},
      {"BooleanMaskInput_Where",
       [](GraphBuilder& b, Graph& g, Value* q, Value* k, Value* v) {
         Value* keep = g.AddInput("keep", DType::kBool, {kB, 1, 1, kS});
         Value* s = b.Mul(b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})}), b.ScalarConstant(0.25, DType::kF32));
         Value* masked = b.Op("Where", {keep, s, b.ScalarConstant(-std::numeric_limits<double>::infinity(), DType::kF32)});
         return b.Op("MatMul", {b.Op("Softmax", {masked}), v});
       },
       false, true, 0.25},
      {"Attention23_EqualGuard_ConstantCausalKeep",
       [](GraphBuilder& b, Graph& g, Value* q, Value* k, Value* v) {
         Tensor keep(DType::kBool, {kS, kS});
         for (int64_t e = 0; e < keep.num_elements(); ++e) keep.data<uint8_t>()[e] = e % kS <= e / kS;
         Value* s = b.Mul(b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})}), b.ScalarConstant(0.3, DType::kF32));
         Value* masked = b.Op("Where", {g.AddConstant("tril", std::move(keep)), s,
                                        b.ScalarConstant(-std::numeric_limits<double>::infinity(), DType::kF32)});
         Value* p = b.Op("Softmax", {masked});
         Value* guarded = b.Op("Where", {b.Op("Equal", {p, p}), p, b.ScalarConstant(0.0, DType::kF32)});
         return b.Op("MatMul", {guarded, v});
       },
       true, false, 0.3},
      {"NoMask_NoScale_ComputedKT",
       [](GraphBuilder& b, Graph&, Value* q, Value* k, Value* v) {
         Value* kt = b.Reshape(k, {kB, kH, kD, kS});  // not a transpose: the pass transposes it back
         return b.Op("MatMul", {b.Op("Softmax", {b.Op("MatMul", {q, kt})}), v});
       },
       false, false, 1.0},
  };
  for (const Spelling& s : spellings) {
    SCOPED_TRACE(s.name);
    std::unique_ptr<Graph> before = Build(s.chain), after = Build(s.chain);
    FuseAttentionResult result;
    const Capabilities caps = FusedAttentionCaps();
    absl::StatusOr<bool> changed = FuseAttentionPass(caps, DType::kF32, &result).Run(*after);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_TRUE(*changed);
    EXPECT_EQ(testing::CountOps(*after, "FusedAttention"), 1);
    EXPECT_EQ(testing::CountOps(*after, "Softmax"), 0);
    EXPECT_EQ(testing::CountOps(*after, "MatMul"), 0);
    ASSERT_EQ(result.fused.size(), 1u);
    EXPECT_TRUE(result.skipped.empty());
    EXPECT_EQ(result.fused[0].causal, s.causal);
    EXPECT_EQ(result.fused[0].biased, s.biased);
    EXPECT_NEAR(result.fused[0].scale, s.scale, 1e-6);

    const std::string y_before = before->outputs()[0]->name, y_after = after->outputs()[0]->name;
    EXPECT_LT(testing::RelativeError(RunCpu(*after, {y_after})[0], RunCpu(*before, {y_before})[0]), 1e-5);

    const std::vector<std::string> names_before = AddLossAndGradients(*before);
    const std::vector<std::string> names_after = AddLossAndGradients(*after);
    EXPECT_EQ(testing::CountOps(*after, "FusedAttentionGrad"), 1);
    const std::vector<Tensor> want = RunCpu(*before, names_before), got = RunCpu(*after, names_after);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_LT(testing::RelativeError(got[i], want[i]), 1e-5) << names_after[i];
    }
  }
}

TEST(FuseAttentionTest, ChainsTheFusedOpCannotTakeStayWithTheirReason) {
  struct Case {
    const char* what;
    Chain chain;
    int64_t d;
    const char* reason;  // a part of the skip's reason; null: not an attention chain, no skip
  };
  const std::vector<Case> cases = {
      {"a mask computed from a parameter (a learned position bias)",
       [](GraphBuilder& b, Graph& g, Value* q, Value* k, Value* v) {
         Value* bias = g.AddParameter("rel_pos_bias", testing::RandomTensor(DType::kF32, {1, kH, kS, kS}, 1));
         Value* s = b.Add(b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})}), bias);
         return b.Op("MatMul", {b.Op("Softmax", {s}), v});
       },
       kD, "parameter 'rel_pos_bias'"},
      {"dropout on the probabilities",
       [](GraphBuilder& b, Graph&, Value* q, Value* k, Value* v) {
         Value* p = b.Op("Softmax", {b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})})});
         return b.Op("MatMul", {b.Op("Dropout", {p}), v});
       },
       kD, "dropout"},
      {"head dim 4",
       [](GraphBuilder& b, Graph&, Value* q, Value* k, Value* v) {
         return b.Op("MatMul", {b.Op("Softmax", {b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})})}), v});
       },
       4, "head dim 4"},
      {"the probabilities also an output",
       [](GraphBuilder& b, Graph& g, Value* q, Value* k, Value* v) {
         Value* p = b.Op("Softmax", {b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})})});
         g.AddOutput(p);
         return b.Op("MatMul", {p, v});
       },
       kD, nullptr},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    std::unique_ptr<Graph> g = Build(c.chain, c.d);
    FuseAttentionResult result;
    const Capabilities caps = FusedAttentionCaps();
    absl::StatusOr<bool> changed = FuseAttentionPass(caps, DType::kF32, &result).Run(*g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(*changed);
    EXPECT_EQ(testing::CountOps(*g, "FusedAttention"), 0);
    if (c.reason) {
      ASSERT_EQ(result.skipped.size(), 1u);
      EXPECT_NE(result.skipped[0].reason.find(c.reason), std::string::npos) << result.skipped[0].reason;
    } else {
      EXPECT_TRUE(result.skipped.empty());
    }
  }
}

TEST(FuseAttentionTest, ABackendWithoutFusedAttentionOrItsDtypeKeepsTheChain) {
  const Chain chain = [](GraphBuilder& b, Graph&, Value* q, Value* k, Value* v) {
    return b.Op("MatMul", {b.Op("Softmax", {b.Op("MatMul", {q, b.Transpose(k, {0, 1, 3, 2})})}), v});
  };
  Capabilities cpu_like;  // the CPU: kernels for every dtype, but its own attention path
  Capabilities no_f32 = FusedAttentionCaps();
  no_f32.has_kernel = [](const std::string& op, DType dtype) { return op != "FusedAttention" || dtype != DType::kF32; };
  for (const Capabilities* caps : {&cpu_like, &no_f32}) {
    std::unique_ptr<Graph> g = Build(chain);
    absl::StatusOr<bool> changed = FuseAttentionPass(*caps, DType::kF32, nullptr).Run(*g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(*changed);
    EXPECT_EQ(testing::CountOps(*g, "Softmax"), 1);
  }
  // The same backend fuses when autocast will run attention in bf16.
  std::unique_ptr<Graph> g = Build(chain);
  absl::StatusOr<bool> changed = FuseAttentionPass(no_f32, AttentionComputeDType(Precision::kBF16), nullptr).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
}

}  // namespace
}  // namespace mpc
