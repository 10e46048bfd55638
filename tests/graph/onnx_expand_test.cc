// ONNX ops imported by expansion (graph/onnx_expand.h): Clip, HardSigmoid, HardSwish and
// constant-mode Pad, each built as a one-node ONNX model, imported and run on the CPU
// backend against a float64 reference on fresh random inputs (values straddling the
// kinks, NaN passing through), and their gradients against finite differences; the
// forms mpc cannot take (non-constant bounds, reflect padding, negative pads) are
// Unimplemented errors that name the node.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <functional>

#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "graph/onnx_import.h"
#include "gtest/gtest.h"
#include "passes/autodiff.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

void AddInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
             const Shape& shape) {
  onnx::ValueInfoProto* info = list->Add();
  info->set_name(name);
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

void AddInitializer(onnx::GraphProto* g, const std::string& name, const std::vector<float>& floats,
                    const std::vector<int64_t>& ints = {}, const Shape& dims = {}) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  for (int64_t d : dims) t->add_dims(d);
  if (!ints.empty()) {
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t v : ints) t->add_int64_data(v);
  } else {
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (float v : floats) t->add_float_data(v);
  }
}

// y = op(x, extra inputs...) with x [2, 3, 4, 5].
struct OneNode {
  onnx::ModelProto model;
  onnx::NodeProto* node;
};

OneNode Build(const std::string& op, const Shape& out_shape) {
  OneNode m;
  m.model.set_ir_version(8);
  m.model.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.model.mutable_graph();
  g->set_name("expand");
  AddInfo(g->mutable_input(), "x", {2, 3, 4, 5});
  AddInfo(g->mutable_output(), "y", out_shape);
  m.node = g->add_node();
  m.node->set_op_type(op);
  m.node->set_name("the_" + op);
  m.node->add_input("x");
  m.node->add_output("y");
  return m;
}

absl::StatusOr<Tensor> RunModel(const onnx::ModelProto& model, const Tensor& x) {
  ImportOptions options;
  options.batch_size = 2;
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, ImportOnnxModel(model, options, "expand.onnx"));
  MPC_ASSIGN_OR_RETURN(auto ex, testing::ExecutorFor(*g, testing::CpuBackend()));
  MPC_RETURN_IF_ERROR(ex->SetInput("x", x));
  MPC_RETURN_IF_ERROR(ex->Run(0, 0));
  return ex->Fetch("y");
}

Tensor RandomX(uint64_t seed) {
  Tensor x = testing::RandomTensor(DType::kF32, {2, 3, 4, 5}, seed, -4, 4);
  x.data<float>()[7] = NAN;  // NaN passes through every one of them
  return x;
}

void ExpectElementwise(const onnx::ModelProto& model, const std::function<double(double)>& reference, uint64_t seed) {
  const Tensor x = RandomX(seed);
  auto y = RunModel(model, x);
  ASSERT_TRUE(y.ok()) << y.status();
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    const double want = reference(x.data<float>()[i]);
    const double got = y->data<float>()[i];
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got)) << i;
    } else {
      EXPECT_NEAR(got, want, 1e-6 * (1 + std::abs(want))) << "x = " << x.data<float>()[i];
    }
  }
}

double Clamp(double v, double lo, double hi) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); }

TEST(OnnxExpandTest, ClipWithBothOneOrNoBounds) {
  struct Case {
    bool lo, hi;
  };
  for (const Case c : {Case{true, true}, Case{true, false}, Case{false, true}, Case{false, false}}) {
    OneNode m = Build("Clip", {2, 3, 4, 5});
    m.node->add_input(c.lo ? "lo" : "");
    if (c.hi) m.node->add_input("hi");
    if (c.lo) AddInitializer(m.model.mutable_graph(), "lo", {-1.5f});
    if (c.hi) AddInitializer(m.model.mutable_graph(), "hi", {6.0f / 3});
    ExpectElementwise(
        m.model, [&](double v) { return Clamp(v, c.lo ? -1.5 : -INFINITY, c.hi ? 2.0 : INFINITY); }, 11);
  }
}

TEST(OnnxExpandTest, HardSigmoidAndHardSwish) {
  OneNode sigmoid = Build("HardSigmoid", {2, 3, 4, 5});
  auto* alpha = sigmoid.node->add_attribute();
  alpha->set_name("alpha");
  alpha->set_type(onnx::AttributeProto::FLOAT);
  alpha->set_f(0.3f);
  ExpectElementwise(
      sigmoid.model, [](double v) { return Clamp(double(0.3f) * v + 0.5, 0, 1); }, 12);
  OneNode swish = Build("HardSwish", {2, 3, 4, 5});
  ExpectElementwise(
      swish.model, [](double v) { return v * Clamp(v / 6 + 0.5, 0, 1); }, 13);
}

TEST(OnnxExpandTest, ConstantPadOnTwoAxes) {
  OneNode m = Build("Pad", {2, 3, 7, 6});
  m.node->add_input("pads");
  m.node->add_input("value");
  AddInitializer(m.model.mutable_graph(), "pads", {}, {0, 0, 1, 0, 0, 0, 2, 1}, {8});
  AddInitializer(m.model.mutable_graph(), "value", {0.25f});
  const Tensor x = RandomX(14);
  auto y = RunModel(m.model, x);
  ASSERT_TRUE(y.ok()) << y.status();
  ASSERT_EQ(y->shape(), (Shape{2, 3, 7, 6}));
  for (int64_t n = 0; n < 6; ++n) {
    for (int64_t h = 0; h < 7; ++h) {
      for (int64_t w = 0; w < 6; ++w) {
        const bool inside = h >= 1 && h < 5 && w < 5;
        const float want = inside ? x.data<float>()[(n * 4 + h - 1) * 5 + w] : 0.25f;
        const float got = y->data<float>()[(n * 7 + h) * 6 + w];
        if (std::isnan(want)) {
          EXPECT_TRUE(std::isnan(got));
        } else {
          EXPECT_EQ(got, want) << n << " " << h << " " << w;
        }
      }
    }
  }
}

// d(sum(w * op(x)))/dx against central differences, away from the kinks.
TEST(OnnxExpandTest, GradientsMatchFiniteDifferences) {
  for (const std::string op : {"Clip", "HardSwish", "HardSigmoid", "Pad"}) {
    SCOPED_TRACE(op);
    const bool pad = op == "Pad";
    OneNode m = Build(op, pad ? Shape{2, 3, 5, 7} : Shape{2, 3, 4, 5});
    if (op == "Clip") {
      m.node->add_input("lo");
      m.node->add_input("hi");
      AddInitializer(m.model.mutable_graph(), "lo", {-1.0f});
      AddInitializer(m.model.mutable_graph(), "hi", {1.0f});
    }
    if (pad) {
      m.node->add_input("pads");
      AddInitializer(m.model.mutable_graph(), "pads", {}, {0, 0, 0, 1, 0, 0, 1, 1}, {8});
    }
    ImportOptions options;
    options.batch_size = 2;
    auto g = ImportOnnxModel(m.model, options, "expand.onnx");
    ASSERT_TRUE(g.ok()) << g.status();
    Graph& graph = **g;
    // Differentiate a weighted sum of the output (f32, as imported).
    Value* x = graph.FindValue("x");
    Value* y = graph.FindValue("y");
    ASSERT_TRUE(x && y);
    const Tensor weights = testing::RandomTensor(DType::kF32, y->shape, 15);
    Value* w = graph.AddConstant("w", weights);
    GraphBuilder b(&graph);
    AttrMap keep;
    keep.Set("keepdims", int64_t{0});
    Value* loss = b.Op("ReduceSum", {b.Mul(y, w)}, std::move(keep));
    ASSERT_TRUE(b.status().ok()) << b.status();
    auto grads = BuildGradients(graph, loss, {x});
    ASSERT_TRUE(grads.ok()) << grads.status();
    graph.SetOutputs({loss, (*grads)[0]});
    auto ex = testing::ExecutorFor(graph, testing::CpuBackend());
    ASSERT_TRUE(ex.ok()) << ex.status();
    Tensor xv = testing::RandomTensor(DType::kF32, {2, 3, 4, 5}, 16, -3, 3);
    // Keep away from the kinks (Clip at +-1, HardSigmoid/HardSwish at -3/+3 and 2.5/-2.5 for 0.2).
    for (int64_t i = 0; i < xv.num_elements(); ++i) {
      float& v = xv.data<float>()[i];
      for (float kink : {-3.0f, -2.5f, -1.0f, 1.0f, 2.5f, 3.0f}) {
        if (std::abs(v - kink) < 0.05f) v += 0.1f;
      }
    }
    auto eval = [&](const Tensor& in) {
      EXPECT_TRUE((*ex)->SetInput("x", in).ok());
      EXPECT_TRUE((*ex)->Run(0, 0).ok());
      return std::make_pair((*(*ex)->Fetch(loss->name)).GetAsDouble(0), *(*ex)->Fetch((*grads)[0]->name));
    };
    const Tensor analytic = eval(xv).second;
    for (int64_t i = 0; i < xv.num_elements(); i += 7) {
      Tensor plus = xv, minus = xv;
      const float h = 1e-2f;
      plus.data<float>()[i] += h;
      minus.data<float>()[i] -= h;
      const double numeric = (eval(plus).first - eval(minus).first) / (2.0 * h);
      EXPECT_NEAR(analytic.data<float>()[i], numeric, 2e-3 * (1 + std::abs(numeric))) << op << " [" << i << "]";
    }
  }
}

TEST(OnnxExpandTest, FormsMpcCannotTakeAreUnimplementedAndNamed) {
  OneNode reflect = Build("Pad", {2, 3, 4, 7});
  reflect.node->add_input("pads");
  AddInitializer(reflect.model.mutable_graph(), "pads", {}, {0, 0, 0, 1, 0, 0, 0, 1}, {8});
  auto* mode = reflect.node->add_attribute();
  mode->set_name("mode");
  mode->set_type(onnx::AttributeProto::STRING);
  mode->set_s("reflect");
  const Tensor x = RandomX(17);
  auto r = RunModel(reflect.model, x);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("node 'the_Pad' (Pad): mode 'reflect' is not supported"), std::string::npos)
      << r.status();

  OneNode crop = Build("Pad", {2, 3, 4, 4});
  crop.node->add_input("pads");
  AddInitializer(crop.model.mutable_graph(), "pads", {}, {0, 0, 0, 0, 0, 0, 0, -1}, {8});
  auto c = RunModel(crop.model, x);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("negative pads"), std::string::npos) << c.status();
}

}  // namespace
}  // namespace mpc
