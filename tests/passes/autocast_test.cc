// Autocast pass tests on small graphs with golden expectations: which dtype each node
// gets and why, where casts go, and the user controls (levels, list edits, overrides).
#include "passes/autocast.h"

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/simplify.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

class AutocastTest : public ::testing::Test {
 protected:
  AutocastTest() : b_(&g_) { options_.precision = Precision::kBF16; }

  Value* Param(const std::string& name, Shape shape) {
    return g_.AddParameter(name, testing::RandomTensor(DType::kF32, shape, std::hash<std::string>()(name)));
  }
  Value* Gemm(Value* x, Value* w, const std::string& name) {
    Value* y = b_.Op("Gemm", {x, w});
    b_.last_node()->name = name;
    return y;
  }
  Value* Named(const std::string& op, std::vector<Value*> in, const std::string& name, AttrMap attrs = {}) {
    Value* y = b_.Op(op, std::move(in), std::move(attrs));
    b_.last_node()->name = name;
    return y;
  }
  void Run() {
    ASSERT_TRUE(b_.status().ok()) << b_.status();
    Capabilities caps;
    auto changed = AutocastPass(options_, caps, &result_).Run(g_);
    ASSERT_TRUE(changed.ok()) << changed.status();
  }
  const PaintDecision& Decision(const std::string& node) {
    for (const PaintDecision& d : result_.paint) {
      if (d.node == node) return d;
    }
    static PaintDecision none;
    ADD_FAILURE() << "no decision for " << node;
    return none;
  }
  DType DTypeOfNode(const std::string& node) { return g_.FindNode(node)->outputs[0]->dtype; }
  int CastCount() {
    int n = 0;
    for (const auto& node : g_.nodes()) n += node->op == "Cast";
    return n;
  }

  Graph g_;
  GraphBuilder b_;
  AutocastOptions options_;
  AutocastResult result_;
};

TEST_F(AutocastTest, AllowOpsRunInLowPrecisionWithF32Outputs) {
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* y = Gemm(x, Param("w", {8, 3}), "gemm");
  g_.SetOutputs({Named("Softmax", {y}, "softmax")});
  Run();
  EXPECT_EQ(Decision("gemm").dtype, DType::kBF16);
  EXPECT_NE(Decision("gemm").reason.find("allow list"), std::string::npos);
  EXPECT_EQ(DTypeOfNode("gemm"), DType::kBF16);
  EXPECT_EQ(Decision("softmax").dtype, DType::kF32);
  EXPECT_EQ(DTypeOfNode("softmax"), DType::kF32);
  EXPECT_EQ(result_.casts_inserted, 3);  // x and w to bf16, gemm's output back to f32
}

TEST_F(AutocastTest, DenyUpstreamOfInferOpsKeepsThemF32) {
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* s = Named("LogSoftmax", {x}, "log_softmax");
  Value* a = Named("Add", {s, Param("bias", {8})}, "add");
  Value* t = Named("Tanh", {a}, "tanh");
  g_.SetOutputs({Gemm(t, Param("w", {8, 3}), "gemm")});
  Run();
  EXPECT_EQ(Decision("add").dtype, DType::kF32);
  EXPECT_EQ(Decision("add").reason, "downstream of deny op 'log_softmax'");
  EXPECT_EQ(Decision("tanh").dtype, DType::kF32);
  EXPECT_EQ(Decision("tanh").reason, "downstream of deny op 'add'");
  EXPECT_EQ(Decision("gemm").dtype, DType::kBF16);
}

// Attention: scores = Q·K, scaled, softmax, times V. Softmax reduces in f32 inside its
// kernels, so the chain stays bf16 with no cast on either side of it.
TEST_F(AutocastTest, SoftmaxBetweenAttentionMatMulsStaysLowPrecision) {
  Value* q = g_.AddInput("q", DType::kF32, {2, 4, 8});
  Value* k = Param("k", {2, 8, 4});
  Value* v = Param("v", {2, 4, 8});
  Value* scores = Named("MatMul", {q, k}, "qk");
  Value* scaled = Named("Mul", {scores, Param("scale", {1})}, "scale");
  Value* probs = Named("Softmax", {scaled}, "softmax");
  g_.SetOutputs({Named("MatMul", {probs, v}, "pv")});
  Run();
  for (const char* n : {"qk", "scale", "softmax", "pv"}) EXPECT_EQ(DTypeOfNode(n), DType::kBF16) << n;
  EXPECT_NE(Decision("softmax").reason.find("reduces in f32"), std::string::npos) << Decision("softmax").reason;
  EXPECT_EQ(g_.FindNode("softmax")->inputs[0]->producer->name, "scale");
  EXPECT_EQ(g_.FindNode("pv")->inputs[0]->producer->name, "softmax");
}

// Conv -> BatchNormalization -> Conv: the normalization reads and writes bf16, while its
// scale, bias and running statistics stay f32 operands (no cast) and so do its statistics
// outputs.
TEST_F(AutocastTest, BatchNormBetweenConvsIsBf16WithF32StatisticsOperands) {
  Value* x = g_.AddInput("x", DType::kF32, {2, 3, 6, 6});
  Value* h = Named("Conv", {x, Param("w1", {4, 3, 3, 3})}, "conv1");
  std::vector<Value*> stats;
  for (const char* name : {"scale", "bias", "mean", "var"}) stats.push_back(Param(name, {4}));
  AttrMap attrs;
  attrs.Set("mpc_training", static_cast<int64_t>(1));
  attrs.Set("training_mode", static_cast<int64_t>(1));
  Value* bn = Named("BatchNormalization", {h, stats[0], stats[1], stats[2], stats[3]}, "bn", attrs);
  g_.SetOutputs({Named("Conv", {bn, Param("w2", {2, 4, 3, 3})}, "conv2")});
  Run();
  EXPECT_EQ(DTypeOfNode("bn"), DType::kBF16);
  EXPECT_NE(Decision("bn").reason.find("reduces in f32"), std::string::npos) << Decision("bn").reason;
  const Node* node = g_.FindNode("bn");
  EXPECT_EQ(node->inputs[0]->producer->name, "conv1");  // no cast between
  for (int i = 1; i < 5; ++i) {
    EXPECT_EQ(node->inputs[i]->dtype, DType::kF32) << i;
    EXPECT_EQ(node->inputs[i]->producer, nullptr) << i;  // the parameter itself, not a cast of it
  }
  for (size_t i = 1; i < node->outputs.size(); ++i) EXPECT_EQ(node->outputs[i]->dtype, DType::kF32) << i;
}

TEST_F(AutocastTest, InferOpsBetweenAllowOpsJoinWithoutCastsBetween) {
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* h = Gemm(x, Param("w1", {8, 8}), "gemm1");
  Value* a = Named("Add", {h, Param("b1", {8})}, "add");
  Value* t = Named("Tanh", {a}, "tanh");
  Value* y = Gemm(t, Param("w2", {8, 3}), "gemm2");
  g_.SetOutputs({y});
  Run();
  for (const char* n : {"gemm1", "add", "tanh", "gemm2"}) EXPECT_EQ(DTypeOfNode(n), DType::kBF16) << n;
  EXPECT_NE(Decision("add").reason.find("between allow ops 'gemm1' and 'gemm2'"), std::string::npos)
      << Decision("add").reason;
  // Nothing between gemm1 and gemm2 is a cast: each op reads its producer directly.
  EXPECT_EQ(g_.FindNode("add")->inputs[0]->producer->name, "gemm1");
  EXPECT_EQ(g_.FindNode("tanh")->inputs[0]->producer->name, "add");
  EXPECT_EQ(g_.FindNode("gemm2")->inputs[0]->producer->name, "tanh");
}

TEST_F(AutocastTest, ClearOpsFollowTheirNeighbours) {
  Value* x = g_.AddInput("x", DType::kF32, {4, 2, 4});
  Value* flat = Named("Flatten", {x}, "flatten");  // feeds a GEMM: low precision
  Value* h = Gemm(flat, Param("w", {8, 6}), "gemm");
  Value* r = Named("Relu", {h}, "relu");  // fed by a GEMM: low precision
  Value* s = Named("Softmax", {Named("Identity", {x}, "identity")}, "softmax");
  Value* r2 = Named("Relu", {s}, "relu_after_softmax");  // fed by deny: f32
  g_.SetOutputs({r, r2});
  Run();
  EXPECT_EQ(DTypeOfNode("flatten"), DType::kBF16);
  EXPECT_EQ(DTypeOfNode("relu"), DType::kBF16);
  EXPECT_EQ(DTypeOfNode("identity"), DType::kF32);
  EXPECT_EQ(DTypeOfNode("relu_after_softmax"), DType::kF32);
}

TEST_F(AutocastTest, UserOverrideWinsAndTheReportSaysSo) {
  options_.node_overrides.push_back({"gemm2|tan.*", "f32"});
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* t = Named("Tanh", {Gemm(x, Param("w1", {8, 8}), "gemm1")}, "tanh");
  g_.SetOutputs({Gemm(t, Param("w2", {8, 3}), "gemm2")});
  Run();
  EXPECT_EQ(DTypeOfNode("gemm1"), DType::kBF16);
  EXPECT_EQ(DTypeOfNode("gemm2"), DType::kF32);
  EXPECT_EQ(DTypeOfNode("tanh"), DType::kF32);
  EXPECT_EQ(Decision("gemm2").reason, "user override (pattern 'gemm2|tan.*')");
}

TEST_F(AutocastTest, TensorCoresOnlyConvertsOnlyAllowOps) {
  options_.tensor_cores_only = true;
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* t = Named("Tanh", {Gemm(x, Param("w1", {8, 8}), "gemm1")}, "tanh");
  g_.SetOutputs({Gemm(t, Param("w2", {8, 3}), "gemm2")});
  Run();
  EXPECT_EQ(DTypeOfNode("gemm1"), DType::kBF16);
  EXPECT_EQ(DTypeOfNode("tanh"), DType::kF32);
  EXPECT_EQ(DTypeOfNode("gemm2"), DType::kBF16);
}

TEST_F(AutocastTest, ListEditsMoveOpsAndOverlapIsRejected) {
  options_.add_deny.push_back("Tanh");
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* t = Named("Tanh", {Gemm(x, Param("w1", {8, 8}), "gemm1")}, "tanh");
  g_.SetOutputs({Gemm(t, Param("w2", {8, 3}), "gemm2")});
  Run();
  EXPECT_EQ(DTypeOfNode("tanh"), DType::kF32);
  EXPECT_NE(Decision("tanh").reason.find("deny list"), std::string::npos);

  AutocastOptions bad = options_;
  bad.add_allow.push_back("Tanh");
  AutocastResult result;
  Capabilities caps;
  auto r = AutocastPass(bad, caps, &result).Run(g_);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("must not overlap"), std::string::npos) << r.status();
}

TEST_F(AutocastTest, ParametersAreCastOncePerStepAndNoCastChainsRemain) {
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  Value* w = Param("w", {8, 8});
  Value* h1 = Gemm(x, w, "gemm1");
  Value* h2 = Gemm(h1, w, "gemm2");  // the same weight used twice
  // A model cast to f32 followed by an allow op: must not become Cast(Cast(...)).
  AttrMap to_f32;
  to_f32.Set("to", int64_t{1});
  Value* c = Named("Cast", {h2}, "model_cast", to_f32);
  g_.SetOutputs({Gemm(c, w, "gemm3")});
  Run();
  int weight_casts = 0;
  for (const auto& n : g_.nodes()) weight_casts += n->op == "Cast" && n->inputs[0] == w;
  EXPECT_EQ(weight_casts, 1);
  ASSERT_TRUE(SimplifyPass().Run(g_).ok());
  for (const auto& n : g_.nodes()) {
    if (n->op != "Cast") continue;
    const Node* producer = n->inputs[0]->producer;
    EXPECT_FALSE(producer && producer->op == "Cast") << n->name << " reads cast " << producer->name;
  }
}

TEST_F(AutocastTest, BackendWithoutKernelKeepsNodeF32) {
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  g_.SetOutputs({Gemm(x, Param("w", {8, 3}), "gemm")});
  Capabilities caps;
  caps.device = "fake";
  caps.has_kernel = [](const std::string& op, DType d) { return d != DType::kBF16; };
  ASSERT_TRUE(AutocastPass(options_, caps, &result_).Run(g_).ok());
  EXPECT_EQ(DTypeOfNode("gemm"), DType::kF32);
  EXPECT_EQ(Decision("gemm").reason, "the fake backend has no bf16 kernel");
}

TEST_F(AutocastTest, F32PrecisionChangesNothingButExplainsEveryNode) {
  options_.precision = Precision::kF32;
  Value* x = g_.AddInput("x", DType::kF32, {4, 8});
  g_.SetOutputs({Gemm(x, Param("w", {8, 3}), "gemm")});
  Run();
  EXPECT_EQ(CastCount(), 0);
  EXPECT_EQ(Decision("gemm").dtype, DType::kF32);
}

}  // namespace
}  // namespace mpc
