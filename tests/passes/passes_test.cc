// Pass tests on small graphs with golden expectations: memory planning, simplify
// (CSE, identity folding, DCE), epilogue fusion, update fusion, and the pipeline's contract
// (verification, error prefixes, disabling, dumps).
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "graph/graph_builder.h"
#include "graph/multi_tensor_update.h"
#include "gtest/gtest.h"
#include "passes/attach_loss.h"
#include "passes/autocast.h"
#include "passes/autodiff.h"
#include "passes/fuse_epilogues.h"
#include "passes/fuse_updates.h"
#include "passes/memory_plan.h"
#include "passes/optimizer.h"
#include "passes/pass_pipeline.h"
#include "passes/set_mode.h"
#include "passes/simplify.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// x[B,in] -> Gemm -> Relu -> Gemm -> Relu -> Gemm -> logits, plus a loss.
struct Mlp {
  std::unique_ptr<Graph> graph = std::make_unique<Graph>();
  Value* loss = nullptr;
};

Mlp ThreeLayerMlp(int64_t batch = 32) {
  Mlp m;
  Graph& g = *m.graph;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {batch, 64});
  Value* labels = g.AddInput("labels", DType::kI64, {batch});
  Value* h = x;
  const int64_t widths[] = {64, 128, 96, 10};
  for (int i = 0; i < 3; ++i) {
    Value* w =
        g.AddParameter("w" + std::to_string(i), testing::RandomTensor(DType::kF32, {widths[i + 1], widths[i]}, i + 1));
    Value* bias = g.AddParameter("b" + std::to_string(i), testing::RandomTensor(DType::kF32, {widths[i + 1]}, i + 11));
    AttrMap attrs;
    attrs.Set("transB", int64_t{1});
    h = b.Op("Gemm", {h, w, bias}, attrs);
    if (i < 2) h = b.Op("Relu", {h});
  }
  m.loss = b.Op("SoftmaxCrossEntropyLoss", {h, labels});
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({m.loss});
  return m;
}

TEST(MemoryPlanTest, PeakIsBelowTheSumOfBuffersOnAThreeLayerMlp) {
  Mlp m = ThreeLayerMlp();
  CompileResults r;
  r.loss.loss = m.loss;
  OptimizerOptions adamw;
  adamw.kind = OptimizerOptions::Kind::kAdamW;
  ASSERT_TRUE(AutodiffPass(&r.loss, &r.autodiff).Run(*m.graph).ok());
  ASSERT_TRUE(OptimizerPass(adamw, &r.autodiff, &r.loss_scaling, &r.optimizer).Run(*m.graph).ok());
  ASSERT_TRUE(MemoryPlanPass(&r.memory_plan).Run(*m.graph).ok());
  const MemoryPlanResult& info = r.memory_plan;
  const MemoryPlan& plan = info.plan;
  EXPECT_GT(plan.peak_bytes, 0);
  EXPECT_LT(plan.peak_bytes, plan.total_activation_bytes);
  // Validity: two activations alive at the same time never share bytes.
  std::map<const Node*, int> pos;
  for (size_t i = 0; i < info.order.size(); ++i) pos[info.order[i]] = static_cast<int>(i);
  struct Span {
    int first, last;
    int64_t lo, hi;
    std::string name;
  };
  std::vector<Span> spans;
  for (const auto& [v, offset] : plan.offsets) {
    int last = pos[v->producer];
    for (const Node* c : v->consumers) last = std::max(last, pos[c]);
    if (m.graph->IsOutput(v)) last = static_cast<int>(info.order.size());
    spans.push_back({pos[v->producer], last, offset, offset + static_cast<int64_t>(v->bytes()), v->name});
    EXPECT_EQ(offset % kArenaAlignment, 0) << v->name;
    EXPECT_LE(offset + static_cast<int64_t>(v->bytes()), plan.peak_bytes) << v->name;
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    for (size_t j = i + 1; j < spans.size(); ++j) {
      const Span& a = spans[i];
      const Span& b = spans[j];
      const bool live_together = a.first <= b.last && b.first <= a.last;
      const bool bytes_overlap = a.lo < b.hi && b.lo < a.hi;
      EXPECT_FALSE(live_together && bytes_overlap) << a.name << " and " << b.name;
    }
  }
}

TEST(SimplifyTest, CseMergesIdenticalNodesAndConstants) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4, 4});
  Value* c1 = b.ScalarConstant(2.0, DType::kF32);
  Value* c2 = b.ScalarConstant(2.0, DType::kF32);
  Value* y1 = b.Mul(x, c1);
  Value* y2 = b.Mul(x, c2);  // same op, equal constant: must merge with y1
  Value* out = b.Add(y1, y2);
  g.SetOutputs({out});
  ASSERT_EQ(g.nodes().size(), 3u);
  auto changed = EliminateCommonSubexpressions(g);
  ASSERT_TRUE(changed.ok() && *changed);
  EXPECT_EQ(g.nodes().size(), 2u);
  const Node* add = g.outputs()[0]->producer;
  EXPECT_EQ(add->inputs[0], add->inputs[1]);
  EXPECT_EQ(g.ValuesOfKind(ValueKind::kConstant).size(), 1u);
}

TEST(SimplifyTest, DceRemovesNodesThatReachNoOutputButKeepsSideEffects) {
  Mlp m = ThreeLayerMlp();
  GraphBuilder b(m.graph.get());
  b.Op("Tanh", {m.graph->inputs()[0]});  // dead
  const size_t before = m.graph->nodes().size();
  auto changed = EliminateDeadCode(*m.graph);
  ASSERT_TRUE(changed.ok() && *changed);
  EXPECT_EQ(m.graph->nodes().size(), before - 1);
  EXPECT_FALSE(*EliminateDeadCode(*m.graph));  // idempotent
}

TEST(SimplifyTest, IdentityAndNoOpCastAreFolded) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {3});
  Value* y = b.Op("Identity", {x});
  AttrMap to_f32;
  to_f32.Set("to", int64_t{1});
  Value* z = b.Op("Cast", {y}, to_f32);
  g.SetOutputs({b.Op("Relu", {z})});
  ASSERT_TRUE(*FoldIdentities(g));
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.nodes()[0]->inputs[0], x);
}

TEST(FuseEpiloguesTest, GemmFollowedBySoleReluIsFused) {
  Mlp m = ThreeLayerMlp();
  auto changed = FuseEpiloguesPass().Run(*m.graph);
  ASSERT_TRUE(changed.ok() && *changed);
  int relus = 0, fused = 0;
  for (const auto& n : m.graph->nodes()) {
    relus += n->op == "Relu";
    fused += n->op == "Gemm" && n->attrs.GetString("mpc_activation", "") == "Relu";
  }
  EXPECT_EQ(relus, 0);
  EXPECT_EQ(fused, 2);
}

class FailingPass : public Pass {
 public:
  std::string_view name() const override { return "always-fails"; }
  absl::StatusOr<bool> Run(Graph&) override { return absl::InvalidArgumentError("boom"); }
};

class BreakingPass : public Pass {
 public:
  std::string_view name() const override { return "breaks-graph"; }
  absl::StatusOr<bool> Run(Graph& g) override {
    g.nodes()[0]->outputs[0]->shape = {999};  // lie about a shape
    return true;
  }
};

TEST(PassPipelineTest, ErrorsArePrefixedWithThePassName) {
  Mlp m = ThreeLayerMlp();
  PassPipeline p;
  p.Add(std::make_unique<FailingPass>());
  auto r = p.Run(*m.graph);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "pass 'always-fails': boom");
}

TEST(PassPipelineTest, VerifierRunsAfterAChangingPass) {
  Mlp m = ThreeLayerMlp();
  PassPipeline p;
  p.Add(std::make_unique<BreakingPass>());
  auto r = p.Run(*m.graph);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'breaks-graph' left an invalid graph"), std::string::npos) << r.status();
}

TEST(PassPipelineTest, DisabledPassesAreSkippedAndReported) {
  Mlp m = ThreeLayerMlp();
  PipelineOptions options;
  options.disabled = {"always-fails"};
  PassPipeline p(options);
  p.Add(std::make_unique<FailingPass>());
  p.Add(std::make_unique<FuseEpiloguesPass>());
  auto r = p.Run(*m.graph);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_TRUE((*r)[0].skipped);
  EXPECT_TRUE((*r)[1].changed);
}

TEST(PassPipelineTest, UnknownDisabledPassIsAnError) {
  Mlp m = ThreeLayerMlp();
  PipelineOptions options;
  options.disabled = {"no-such-pass"};
  PassPipeline p(options);
  p.Add(std::make_unique<FuseEpiloguesPass>());
  EXPECT_FALSE(p.Run(*m.graph).ok());
}

TEST(PassPipelineTest, DumpsGraphsAfterMatchingPasses) {
  Mlp m = ThreeLayerMlp();
  PipelineOptions options;
  options.dump_after = "fuse";
  options.dump_dir = testing::MakeTempDir("dumps");
  PassPipeline p(options);
  p.Add(std::make_unique<SimplifyPass>());
  p.Add(std::make_unique<FuseEpiloguesPass>());
  ASSERT_TRUE(p.Run(*m.graph).ok());
  EXPECT_FALSE(std::filesystem::exists(options.dump_dir + "/01-simplify.txt"));
  EXPECT_TRUE(std::filesystem::exists(options.dump_dir + "/02-fuse-epilogues.txt"));
  EXPECT_TRUE(std::filesystem::exists(options.dump_dir + "/02-fuse-epilogues.dot"));
}

TEST(AutodiffTest, UpdatesAreOrderedAfterEveryReaderOfTheirParameter) {
  Mlp m = ThreeLayerMlp();
  CompileResults r;
  r.loss.loss = m.loss;
  OptimizerOptions sgd;
  sgd.momentum = 0.9f;
  ASSERT_TRUE(AutodiffPass(&r.loss, &r.autodiff).Run(*m.graph).ok());
  ASSERT_EQ(r.autodiff.param_grads.size(), 6u);
  ASSERT_TRUE(OptimizerPass(sgd, &r.autodiff, &r.loss_scaling, &r.optimizer).Run(*m.graph).ok());
  auto order = m.graph->TopologicalOrder();
  ASSERT_TRUE(order.ok());
  std::map<const Node*, size_t> pos;
  for (size_t i = 0; i < order->size(); ++i) pos[(*order)[i]] = i;
  for (const auto& n : m.graph->nodes()) {
    if (n->op != "SgdUpdate") continue;
    for (const Node* reader : n->inputs[0]->consumers) {
      if (reader != n.get()) EXPECT_LT(pos[reader], pos[n.get()]) << reader->name << " vs " << n->name;
    }
  }
}

// Under bf16 autocast each weight is read through one shared Cast per step; the optimizer
// pass replaces it by a persistent bf16 copy that the update rewrites (lowp_copy=1).
// The three-layer MLP through autocast (bf16), autodiff and the optimizer pass: SGD with
// momentum 0.9, or AdamW with weight decay 0.05.
struct Bf16Training {
  Mlp m = ThreeLayerMlp();
  CompileResults r;
  Capabilities caps;
};

void CompileBf16Training(Bf16Training& t, bool sgd) {
  AutocastOptions bf16;
  bf16.precision = Precision::kBF16;
  OptimizerOptions opt;
  if (sgd) {
    opt.momentum = 0.9f;
  } else {
    opt.kind = OptimizerOptions::Kind::kAdamW;
    opt.weight_decay = 0.05f;
  }
  CompileResults& r = t.r;
  r.loss.loss = t.m.loss;
  ASSERT_TRUE(AutocastPass(bf16, t.caps, &r.autocast).Run(*t.m.graph).ok());
  ASSERT_TRUE(AutodiffPass(&r.loss, &r.autodiff).Run(*t.m.graph).ok());
  ASSERT_TRUE(OptimizerPass(opt, &r.autodiff, &r.loss_scaling, &r.optimizer).Run(*t.m.graph).ok());
}

TEST(OptimizerTest, UpdatesWriteTheLowPrecisionCopyInsteadOfACastPerStep) {
  for (bool sgd : {false, true}) {
    SCOPED_TRACE(sgd ? "SgdUpdate" : "AdamWUpdate");
    Bf16Training t;
    CompileBf16Training(t, sgd);
    Mlp& m = t.m;
    int updates_with_copy = 0;
    for (const auto& n : m.graph->nodes()) {
      // No Cast reads a master weight any more.
      if (n->op == "Cast") EXPECT_NE(n->inputs[0]->kind, ValueKind::kParameter) << n->name;
      if (n->op != "SgdUpdate" && n->op != "AdamWUpdate") continue;
      const Value* param = n->inputs[0];
      const Value* copy = m.graph->FindValue(param->name + ".lowp");
      if (!copy) continue;  // a parameter autocast left in f32 (none here, see the count)
      ++updates_with_copy;
      EXPECT_EQ(n->attrs.GetInt("lowp_copy", 0), 1);
      EXPECT_EQ(n->inputs.back(), copy);  // not gated: the copy is the last input
      EXPECT_EQ(copy->kind, ValueKind::kState);
      EXPECT_EQ(copy->dtype, DType::kBF16);
      // Initialised from the initial weight, rounded once.
      const Tensor expected = param->data.CastTo(DType::kBF16);
      EXPECT_EQ(std::memcmp(copy->data.raw(), expected.raw(), expected.bytes()), 0);
      // Every other reader of the copy runs before the update rewrites it.
      for (const Node* reader : copy->consumers) {
        if (reader == n.get()) continue;
        EXPECT_NE(std::find(n->control_deps.begin(), n->control_deps.end(), reader), n->control_deps.end())
            << reader->name;
      }
    }
    EXPECT_EQ(updates_with_copy, 6);  // weights and biases: the bf16 Gemms read both
  }
}

// fuse-updates: the six per-parameter updates of a bf16 MLP become one MultiAdamWUpdate
// that carries every parameter's inputs in the documented layout and still runs after
// every reader of every parameter and of every bf16 copy.
TEST(FuseUpdatesTest, OneMultiTensorUpdateForAllParametersAfterEveryReader) {
  for (bool sgd : {false, true}) {
    SCOPED_TRACE(sgd ? "sgd" : "adamw");
    Bf16Training t;
    CompileBf16Training(t, sgd);
    Mlp& m = t.m;
    const CompileResults& r = t.r;
    auto changed = FuseUpdatesPass().Run(*m.graph);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_TRUE(*changed);
    std::vector<const Node*> multi;
    for (const auto& n : m.graph->nodes()) {
      EXPECT_NE(n->op, "SgdUpdate");
      EXPECT_NE(n->op, "AdamWUpdate");
      if (IsMultiTensorUpdate(*n)) multi.push_back(n.get());
    }
    ASSERT_EQ(multi.size(), 1u);
    const Node& fused = *multi[0];
    EXPECT_EQ(fused.op, sgd ? "MultiSgdUpdate" : "MultiAdamWUpdate");
    if (!sgd) EXPECT_FLOAT_EQ(fused.attrs.GetFloat("weight_decay", 0), 0.05f);
    EXPECT_FALSE(fused.attrs.Has("lowp_copy"));
    EXPECT_EQ(fused.attrs.GetInts("lowp_copies", {}), std::vector<int64_t>(6, 1));
    auto layout = MultiUpdateLayoutOf(fused);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(fused.inputs[layout->lr], r.optimizer.learning_rate);
    ASSERT_EQ(layout->tensors.size(), r.autodiff.param_grads.size());
    auto order = m.graph->TopologicalOrder();
    ASSERT_TRUE(order.ok()) << order.status();
    std::map<const Node*, size_t> pos;
    for (size_t i = 0; i < order->size(); ++i) pos[(*order)[i]] = i;
    for (size_t t = 0; t < layout->tensors.size(); ++t) {
      const UpdateTensorInputs& in = layout->tensors[t];
      const auto& [param, grad] = r.autodiff.param_grads[t];
      EXPECT_EQ(fused.inputs[in.param], param);  // parameters in graph order
      EXPECT_EQ(fused.inputs[in.grad], grad);
      const Value* copy = fused.inputs[in.lowp_copy];
      EXPECT_EQ(copy->name, param->name + ".lowp");
      if (sgd) {
        EXPECT_EQ(fused.inputs[in.momentum_buf]->name, param->name + ".momentum");
      } else {
        EXPECT_EQ(fused.inputs[in.m]->name, param->name + ".adam_m");
        EXPECT_EQ(fused.inputs[in.v]->name, param->name + ".adam_v");
        EXPECT_EQ(fused.inputs[in.step]->name, param->name + ".adam_step");
      }
      for (const Value* written : std::vector<const Value*>{param, copy}) {
        for (const Node* reader : written->consumers) {
          if (reader != &fused) EXPECT_LT(pos[reader], pos[&fused]) << reader->name << " reads " << written->name;
        }
      }
    }
  }
}

// Updates with different hyper-parameters stay apart; a group of one stays a single update.
TEST(FuseUpdatesTest, GroupsByAttributesAndLeavesALoneUpdateAlone) {
  Graph g;
  Value* lr = g.AddInput("lr", DType::kF32, {});
  auto add_update = [&](const std::string& name, float beta1) {
    Value* p = g.AddParameter(name, testing::RandomTensor(DType::kF32, {4, 3}, 1));
    Value* grad = g.AddInput(name + ".grad", DType::kF32, {4, 3});
    Value* m = g.AddState(name + ".m", Tensor(DType::kF32, {4, 3}));
    Value* v = g.AddState(name + ".v", Tensor(DType::kF32, {4, 3}));
    Value* step = g.AddState(name + ".step", Tensor::Scalar(0.0f));
    AttrMap attrs;
    attrs.Set("beta1", beta1);
    auto node = g.AddNode("AdamWUpdate", {p, grad, lr, m, v, step}, attrs, "update/" + name);
    ASSERT_TRUE(node.ok()) << node.status();
  };
  add_update("a", 0.9f);
  add_update("b", 0.8f);
  add_update("c", 0.9f);
  auto changed = FuseUpdatesPass().Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  std::map<std::string, int> ops;
  for (const auto& n : g.nodes()) {
    ++ops[n->op];
    if (n->op == "MultiAdamWUpdate") {
      EXPECT_FLOAT_EQ(n->attrs.GetFloat("beta1", 0), 0.9f);
      auto layout = MultiUpdateLayoutOf(*n);
      ASSERT_TRUE(layout.ok()) << layout.status();
      ASSERT_EQ(layout->tensors.size(), 2u);
      EXPECT_EQ(n->inputs[layout->tensors[0].param]->name, "a");
      EXPECT_EQ(n->inputs[layout->tensors[1].param]->name, "c");
    }
    if (n->op == "AdamWUpdate") EXPECT_EQ(n->inputs[0]->name, "b");
  }
  EXPECT_EQ(ops, (std::map<std::string, int>{{"AdamWUpdate", 1}, {"MultiAdamWUpdate", 1}}));
}

// Two parameters sharing a step counter would advance it once in the CUDA kernel (every
// block reads the counters before any advances) but twice on the CPU: rejected.
TEST(FuseUpdatesTest, MultiUpdateSharingStateIsAnError) {
  Graph g;
  Value* lr = g.AddInput("lr", DType::kF32, {});
  Value* step = g.AddState("shared.step", Tensor::Scalar(0.0f));
  std::vector<Value*> inputs{lr};
  for (const char* name : {"a", "b"}) {
    inputs.push_back(g.AddParameter(name, testing::RandomTensor(DType::kF32, {4}, 1)));
    inputs.push_back(g.AddInput(std::string(name) + ".grad", DType::kF32, {4}));
    inputs.push_back(g.AddState(std::string(name) + ".m", Tensor(DType::kF32, {4})));
    inputs.push_back(g.AddState(std::string(name) + ".v", Tensor(DType::kF32, {4})));
    inputs.push_back(step);
  }
  AttrMap attrs;
  attrs.Set("lowp_copies", std::vector<int64_t>{0, 0});
  auto node = g.AddNode("MultiAdamWUpdate", inputs, attrs, "update/shared");
  ASSERT_FALSE(node.ok());
  EXPECT_NE(std::string(node.status().message()).find("updates 'shared.step' twice"), std::string::npos)
      << node.status();
}

// A multi-tensor update whose inputs do not match its attributes is rejected by name.
TEST(FuseUpdatesTest, MultiUpdateWithTheWrongInputCountIsAnError) {
  Graph g;
  Value* lr = g.AddInput("lr", DType::kF32, {});
  Value* p = g.AddParameter("w", testing::RandomTensor(DType::kF32, {4}, 1));
  Value* grad = g.AddInput("w.grad", DType::kF32, {4});
  AttrMap attrs;
  attrs.Set("lowp_copies", std::vector<int64_t>{0, 0});  // two parameters, inputs for one
  auto node = g.AddNode("MultiSgdUpdate", {lr, p, grad}, attrs, "update/bad");
  ASSERT_FALSE(node.ok());
  EXPECT_NE(std::string(node.status().message()).find("'update/bad' has 3 inputs"), std::string::npos) << node.status();
}

}  // namespace
}  // namespace mpc

namespace mpc {
namespace {

// attach-loss from its options alone: softmax cross-entropy on per-position labels (the
// labels input [batch, T] is flattened to the logits' [batch*T] rows), and the error
// when the logits are not [batch*T, classes].
TEST(AttachLossTest, PerPositionLabelsAreFlattenedToTheLogitsRows) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {6, 5});  // batch 2 x 3 positions, 5 classes
  g.SetOutputs({b.Op("Relu", {x})});
  g.outputs()[0]->producer->name = "head";
  ASSERT_TRUE(g.RenameValue(g.outputs()[0], "logits").ok());
  AttachLossOptions o;
  o.logits = "logits";
  o.batch_size = 2;
  o.label_row = {3};
  LossResult r;
  auto changed = AttachLossPass(o, &r).Run(g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_NE(r.loss, nullptr);
  EXPECT_EQ(g.outputs(), std::vector<Value*>{r.loss});
  EXPECT_EQ(r.labels->shape, (Shape{2, 3}));
  EXPECT_EQ(r.loss->producer->op, "SoftmaxCrossEntropyLoss");
  EXPECT_EQ(r.loss->producer->inputs[1]->shape, (Shape{6}));

  Graph g2;
  GraphBuilder b2(&g2);
  Value* y = g2.AddInput("y", DType::kF32, {4, 5});
  g2.SetOutputs({b2.Op("Relu", {y})});
  ASSERT_TRUE(g2.RenameValue(g2.outputs()[0], "logits").ok());
  auto bad = AttachLossPass(o, &r).Run(g2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("flatten the model's logits"), std::string::npos) << bad.status();
}

// Logits as a language model or a segmentation head returns them, [batch, T, classes] or
// [batch, classes, H, W], are flattened (classes moved last first) to the labels' rows, as
// PyTorch users flatten them in the loss call.
TEST(AttachLossTest, SequenceAndSegmentationLogitsAreFlattenedHere) {
  for (const bool classes_first : {false, true}) {
    Graph g;
    GraphBuilder b(&g);
    Value* x = g.AddInput("x", DType::kF32, classes_first ? Shape{2, 5, 3, 4} : Shape{2, 3, 5});
    g.SetOutputs({b.Op("Relu", {x})});
    ASSERT_TRUE(g.RenameValue(g.outputs()[0], "logits").ok());
    AttachLossOptions o;
    o.logits = "logits";
    o.batch_size = 2;
    o.label_row = classes_first ? Shape{3, 4} : Shape{3};
    LossResult r;
    auto changed = AttachLossPass(o, &r).Run(g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    const Value* scores = r.loss->producer->inputs[0];
    EXPECT_EQ(scores->shape, (Shape{classes_first ? 24 : 6, 5}));
    EXPECT_EQ(scores->producer->op, "Reshape");
    EXPECT_EQ(r.loss->producer->inputs[1]->shape, (Shape{classes_first ? 24 : 6}));
    if (classes_first) EXPECT_EQ(scores->producer->inputs[0]->producer->op, "Transpose");
  }
}

// set-mode and select-outputs: the mode attribute on every Dropout, whatever the model
// said, and only the named outputs kept.
TEST(SetModeTest, ModeAttributeOnDropoutAndOnlyTheSelectedOutputsRemain) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {4, 8});
  Value* d = b.Op("Dropout", {x});
  Value* t = b.Op("Tanh", {x});
  g.SetOutputs({d, t});
  ASSERT_TRUE(*SetModePass(false).Run(g));
  EXPECT_EQ(d->producer->attrs.GetInt("mpc_training", -1), 0);
  ASSERT_TRUE(*SetModePass(true).Run(g));
  EXPECT_EQ(d->producer->attrs.GetInt("mpc_training", -1), 1);
  ASSERT_TRUE(*SelectOutputsPass({t->name}).Run(g));
  EXPECT_EQ(g.outputs(), std::vector<Value*>{t});
  EXPECT_FALSE(SelectOutputsPass({"nope"}).Run(g).ok());
}

}  // namespace
}  // namespace mpc
