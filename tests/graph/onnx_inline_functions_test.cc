// Tests for inlining ONNX local functions (graph/onnx_inline_functions.h): models built as
// ModelProtos with functions that nest, take attributes by reference (given by the call
// or defaulted by the function's IR-9 attribute_proto), come in overloads (IR 10), pass an
// input through, or leave an optional input out; and the malformed ones (recursion, a
// second opset, an output the body never computes), each refused naming the call. The
// IR 9/10 fields are written as unknown fields, as a newer exporter's file reaches
// Debian's ONNX 1.12 classes. Trained end to end from PyTorch's export_modules_as_functions
// files in tests/integration/export_corpus_test.cc (the ts18fn exports).
#include "graph/onnx_inline_functions.h"

#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"

namespace mpc {
namespace {

::testing::AssertionResult HasText(absl::string_view text, absl::string_view needle) {
  if (text.find(needle) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << needle << "' not found in: " << text;
}

onnx::NodeProto* AddNode(google::protobuf::RepeatedPtrField<onnx::NodeProto>* nodes, const std::string& op,
                         const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                         const std::string& domain = "", const std::string& name = "") {
  onnx::NodeProto* n = nodes->Add();
  n->set_op_type(op);
  n->set_domain(domain);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

onnx::AttributeProto FloatAttr(const std::string& name, float v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
  return a;
}

onnx::AttributeProto RefAttr(const std::string& name, const std::string& ref) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_ref_attr_name(ref);
  return a;
}

void AddUnknownBytes(google::protobuf::Message& m, int field, const std::string& bytes) {
  m.GetReflection()->MutableUnknownFields(&m)->AddLengthDelimited(field, bytes);
}

onnx::FunctionProto* AddFunction(onnx::ModelProto& m, const std::string& domain, const std::string& name,
                                 const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                                 int64_t opset = 18) {
  onnx::FunctionProto* f = m.add_functions();
  f->set_domain(domain);
  f->set_name(name);
  for (const auto& i : inputs) f->add_input(i);
  for (const auto& o : outputs) f->add_output(o);
  auto* op = f->add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  return f;
}

// x[2,4] -> (graph body added by each test) -> y[2,4], opset 18.
onnx::ModelProto Model() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  for (const auto& [domain, version] : std::vector<std::pair<std::string, int64_t>>{{"", 18}, {"custom", 1}}) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("functions");
  for (auto* list : {g->mutable_input(), g->mutable_output()}) {
    onnx::ValueInfoProto* v = list->Add();
    v->set_name(list == g->mutable_input() ? "x" : "y");
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
    tt->mutable_shape()->add_dim()->set_dim_value(4);
  }
  return m;
}

// custom.Act(X) = LeakyRelu(X, alpha = the call's `slope`, 0.5 when the call gives none).
void AddAct(onnx::ModelProto& m) {
  onnx::FunctionProto* act = AddFunction(m, "custom", "Act", {"X"}, {"Y"});
  act->add_attribute("slope");
  AddUnknownBytes(*act, 11, FloatAttr("slope", 0.5f).SerializeAsString());  // attribute_proto: the default
  *AddNode(act->mutable_node(), "LeakyRelu", {"X"}, {"Y"}, "", "leaky")->add_attribute() = RefAttr("alpha", "slope");
}

std::vector<const onnx::NodeProto*> NodesOf(const onnx::ModelProto& m, const std::string& op) {
  std::vector<const onnx::NodeProto*> out;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == op) out.push_back(&n);
  }
  return out;
}

TEST(OnnxInlineFunctions, NestedCallsTakeAttributesFromTheCallOrTheDefault) {
  onnx::ModelProto m = Model();
  AddAct(m);
  // custom.Block(X) = Act(Act(X, slope = 0.1) + X): one call gives the slope, one defaults.
  onnx::FunctionProto* block = AddFunction(m, "custom", "Block", {"X"}, {"Y"});
  *AddNode(block->mutable_node(), "Act", {"X"}, {"a"}, "custom", "act1")->add_attribute() = FloatAttr("slope", 0.1f);
  AddNode(block->mutable_node(), "Add", {"a", "X"}, {"s"}, "", "add");
  AddNode(block->mutable_node(), "Act", {"s"}, {"Y"}, "custom", "act2");
  // Two calls of Block: internal names must not collide.
  AddNode(m.mutable_graph()->mutable_node(), "Block", {"x"}, {"h"}, "custom", "b1");
  AddNode(m.mutable_graph()->mutable_node(), "Block", {"h"}, {"y"}, "custom", "b2");
  ASSERT_TRUE(CallsLocalFunctions(m));

  ASSERT_TRUE(InlineLocalFunctions(m, "model.onnx").ok());
  EXPECT_EQ(m.functions_size(), 0);
  EXPECT_FALSE(CallsLocalFunctions(m));
  ASSERT_EQ(m.graph().node_size(), 6);
  const auto leaky = NodesOf(m, "LeakyRelu");
  ASSERT_EQ(leaky.size(), 4u);
  std::vector<float> alphas;
  for (const auto* n : leaky) {
    ASSERT_EQ(n->attribute_size(), 1);
    EXPECT_EQ(n->attribute(0).name(), "alpha");
    EXPECT_TRUE(n->attribute(0).ref_attr_name().empty());
    alphas.push_back(n->attribute(0).f());
  }
  EXPECT_EQ(alphas, (std::vector<float>{0.1f, 0.5f, 0.1f, 0.5f}));
  // Wiring: b1 reads x and writes h; b2 reads h and writes y; internals are prefixed.
  EXPECT_EQ(leaky[0]->input(0), "x");
  EXPECT_EQ(leaky[0]->name(), "b1/act1/leaky");
  EXPECT_EQ(leaky[0]->output(0), "b1/a");  // the inner call's output, renamed under the outer call
  EXPECT_EQ(leaky[1]->output(0), "h");
  EXPECT_EQ(leaky[2]->input(0), "h");
  EXPECT_EQ(leaky[3]->output(0), "y");
  const auto adds = NodesOf(m, "Add");
  ASSERT_EQ(adds.size(), 2u);
  EXPECT_EQ(adds[0]->input(1), "x");
  EXPECT_EQ(adds[1]->input(1), "h");
  EXPECT_NE(adds[0]->output(0), adds[1]->output(0));

  auto graph = ImportOnnxModel(m, ImportOptions{}, "inlined");
  ASSERT_TRUE(graph.ok()) << graph.status();
}

TEST(OnnxInlineFunctions, ImportInlinesFilesAndModelsInMemory) {
  onnx::ModelProto m = Model();
  AddAct(m);
  AddNode(m.mutable_graph()->mutable_node(), "Act", {"x"}, {"y"}, "custom", "act");
  auto in_memory = ImportOnnxModel(m, ImportOptions{}, "in memory");
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  auto from_bytes = ImportOnnxBytes(m.SerializeAsString(), ImportOptions{}, "bytes");
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
  for (const Graph* g : {in_memory->get(), from_bytes->get()}) {
    ASSERT_FALSE(g->nodes().empty());
    for (const auto& node : g->nodes()) EXPECT_EQ(node->name.rfind("act/leaky", 0), 0u) << node->name;
  }
}

TEST(OnnxInlineFunctions, OverloadsAreToldApart) {
  onnx::ModelProto m = Model();
  onnx::FunctionProto* relu = AddFunction(m, "custom", "Act", {"X"}, {"Y"});
  AddUnknownBytes(*relu, 13, "relu");  // FunctionProto.overload
  AddNode(relu->mutable_node(), "Relu", {"X"}, {"Y"});
  onnx::FunctionProto* sigmoid = AddFunction(m, "custom", "Act", {"X"}, {"Y"});
  AddUnknownBytes(*sigmoid, 13, "sigmoid");
  AddNode(sigmoid->mutable_node(), "Sigmoid", {"X"}, {"Y"});
  AddUnknownBytes(*AddNode(m.mutable_graph()->mutable_node(), "Act", {"x"}, {"h"}, "custom", "a"), 16, "sigmoid");
  AddUnknownBytes(*AddNode(m.mutable_graph()->mutable_node(), "Act", {"h"}, {"y"}, "custom", "b"), 16, "relu");
  ASSERT_TRUE(InlineLocalFunctions(m, "model.onnx").ok());
  ASSERT_EQ(m.graph().node_size(), 2);
  EXPECT_EQ(m.graph().node(0).op_type(), "Sigmoid");
  EXPECT_EQ(m.graph().node(1).op_type(), "Relu");
}

TEST(OnnxInlineFunctions, PassedThroughOutputsAndMissingOptionalInputs) {
  onnx::ModelProto m = Model();
  // custom.Clamp(X, Lo, Hi) -> (Clip(X, Lo, Hi), X): the call leaves Lo out and reads both outputs.
  onnx::FunctionProto* f = AddFunction(m, "custom", "Clamp", {"X", "Lo", "Hi"}, {"Y", "X"});
  AddNode(f->mutable_node(), "Clip", {"X", "Lo", "Hi"}, {"Y"});
  onnx::TensorProto* hi = m.mutable_graph()->add_initializer();
  hi->set_name("hi");
  hi->set_data_type(onnx::TensorProto::FLOAT);
  hi->add_float_data(0.25f);
  AddNode(m.mutable_graph()->mutable_node(), "Clamp", {"x", "", "hi"}, {"c", "same"}, "custom", "clamp");
  AddNode(m.mutable_graph()->mutable_node(), "Add", {"c", "same"}, {"y"});
  ASSERT_TRUE(InlineLocalFunctions(m, "model.onnx").ok());
  ASSERT_EQ(m.graph().node_size(), 3);
  const onnx::NodeProto& clip = m.graph().node(0);
  EXPECT_EQ(clip.op_type(), "Clip");
  ASSERT_EQ(clip.input_size(), 3);
  EXPECT_EQ(clip.input(0), "x");
  EXPECT_EQ(clip.input(1), "");
  EXPECT_EQ(clip.input(2), "hi");
  EXPECT_EQ(clip.output(0), "c");
  const onnx::NodeProto& identity = m.graph().node(1);
  EXPECT_EQ(identity.op_type(), "Identity");
  EXPECT_EQ(identity.input(0), "x");
  EXPECT_EQ(identity.output(0), "same");
  auto graph = ImportOnnxModel(m, ImportOptions{}, "inlined");
  ASSERT_TRUE(graph.ok()) << graph.status();
}

TEST(OnnxInlineFunctions, RecursionIsRefusedNamingTheCall) {
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "custom", "Loop", {"X"}, {"Y"});
  AddNode(f->mutable_node(), "Loop", {"X"}, {"Y"}, "custom", "again");
  AddNode(m.mutable_graph()->mutable_node(), "Loop", {"x"}, {"y"}, "custom", "outer");
  const absl::Status status = InlineLocalFunctions(m, "model.onnx");
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(HasText(status.message(), "model.onnx: node 'outer/again'"));
  EXPECT_TRUE(HasText(status.message(), "custom.Loop"));
  EXPECT_TRUE(HasText(status.message(), "calls itself"));
}

TEST(OnnxInlineFunctions, ABodyAtAnotherOpsetIsRefused) {
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "custom", "Act", {"X"}, {"Y"}, /*opset=*/17);
  AddNode(f->mutable_node(), "Relu", {"X"}, {"Y"});
  AddNode(m.mutable_graph()->mutable_node(), "Act", {"x"}, {"y"}, "custom", "act");
  auto graph = ImportOnnxBytes(m.SerializeAsString(), ImportOptions{}, "model.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(HasText(graph.status().message(), "node 'act'"));
  EXPECT_TRUE(HasText(graph.status().message(), "imports ONNX opset 17 and the model opset 18"));
  EXPECT_TRUE(HasText(graph.status().message(), "onnx.version_converter"));
}

TEST(OnnxInlineFunctions, AnOutputTheBodyNeverComputesIsRefused) {
  // What PyTorch's TorchScript exporter writes for torchvision's SwinTransformerBlock.
  onnx::ModelProto m = Model();
  onnx::FunctionProto* f = AddFunction(m, "custom", "Block", {"X"}, {"Y", "pad"});
  AddNode(f->mutable_node(), "Relu", {"X"}, {"Y"});
  AddNode(m.mutable_graph()->mutable_node(), "Block", {"x"}, {"y", "p"}, "custom", "block");
  const absl::Status status = InlineLocalFunctions(m, "model.onnx");
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(HasText(status.message(), "the function's output 'pad' (output 1) is neither computed"));
  EXPECT_TRUE(HasText(status.message(), "export_modules_as_functions"));
}

}  // namespace
}  // namespace mpc
