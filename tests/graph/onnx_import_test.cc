// Tests for ONNX import and export: models are built as ModelProtos in C++ (a small
// MLP with a dynamic batch), written in binary and text form, broken in the ways real
// files break (garbage, truncation, unsupported ops and opsets, dynamic dims), and
// round-tripped through export. The repo's torch-exported models are imported too.
#include "graph/onnx_import.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/file_util.h"
#include "graph/onnx_export.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// Substring check whose failure message shows the whole text (no gmock dependency).
::testing::AssertionResult HasText(absl::string_view text, absl::string_view needle) {
  if (text.find(needle) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << needle << "' not found in: " << text;
}

constexpr int kOnnxFloat = onnx::TensorProto::FLOAT;
constexpr int kOnnxInt64 = onnx::TensorProto::INT64;

// A tensor initializer; raw=true stores raw_data, otherwise the typed float_data field.
void AddFloatInitializer(onnx::GraphProto* g, const std::string& name, const Tensor& t, bool raw) {
  onnx::TensorProto* init = g->add_initializer();
  init->set_name(name);
  init->set_data_type(kOnnxFloat);
  for (int64_t d : t.shape()) init->add_dims(d);
  if (raw) {
    init->set_raw_data(t.raw(), t.bytes());
  } else {
    for (int64_t i = 0; i < t.num_elements(); ++i) init->add_float_data(t.data<float>()[i]);
  }
}

// dims: a non-negative number is static, -1 means dim_param "N", -2 means dim_param "S".
void AddTensorInfo(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
                   int elem_type, const std::vector<int64_t>& dims) {
  onnx::ValueInfoProto* info = list->Add();
  info->set_name(name);
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  auto* shape = tt->mutable_shape();
  for (int64_t d : dims) {
    auto* dim = shape->add_dim();
    if (d >= 0)
      dim->set_dim_value(d);
    else
      dim->set_dim_param(d == -1 ? "N" : "S");
  }
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                         const std::vector<std::string>& inputs, const std::vector<std::string>& outputs) {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : inputs) n->add_input(i);
  for (const auto& o : outputs) n->add_output(o);
  return n;
}

void AddIntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void AddFloatAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

onnx::ModelProto EmptyModel(int64_t opset = 17) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("mpc-test");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  m.mutable_graph()->set_name("test");
  return m;
}

struct MlpWeights {
  Tensor w1 = testing::RandomTensor(DType::kF32, {32, 16}, 1);
  Tensor b1 = testing::RandomTensor(DType::kF32, {32}, 2);
  Tensor w2 = testing::RandomTensor(DType::kF32, {4, 32}, 3);
  Tensor b2 = testing::RandomTensor(DType::kF32, {4}, 4);
};

// x[N,16] -> Gemm(transB=1) -> Relu -> Gemm(transB=1) -> y[N,4]. The Relu has no name,
// b1 uses typed float_data, the rest raw_data.
onnx::ModelProto MakeMlp(const MlpWeights& w, int64_t opset = 17) {
  onnx::ModelProto m = EmptyModel(opset);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 16});
  AddFloatInitializer(g, "w1", w.w1, true);
  AddFloatInitializer(g, "b1", w.b1, false);
  AddFloatInitializer(g, "w2", w.w2, true);
  AddFloatInitializer(g, "b2", w.b2, true);
  onnx::NodeProto* fc1 = AddNode(g, "Gemm", "fc1", {"x", "w1", "b1"}, {"h1"});
  AddFloatAttr(fc1, "alpha", 1.0f);
  AddIntAttr(fc1, "transB", 1);
  AddNode(g, "Relu", "", {"h1"}, {"a1"});
  AddIntAttr(AddNode(g, "Gemm", "fc2", {"a1", "w2", "b2"}, {"y"}), "transB", 1);
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 4});
  return m;
}

std::string WriteFile(const std::string& dir, const std::string& name, const std::string& data) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.bytes()); }

ImportOptions Batch(int64_t n) {
  ImportOptions o;
  o.batch_size = n;
  return o;
}

TEST(OnnxImport, MlpValuesShapesAndParameters) {
  MlpWeights w;
  auto graph = ImportOnnxModel(MakeMlp(w), Batch(8), "mlp.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& g = **graph;

  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.inputs()[0]->name, "x");
  EXPECT_EQ(g.inputs()[0]->shape, (Shape{8, 16}));
  EXPECT_EQ(g.inputs()[0]->kind, ValueKind::kInput);

  const auto params = g.ValuesOfKind(ValueKind::kParameter);
  ASSERT_EQ(params.size(), 4u);
  const std::pair<const char*, const Tensor*> expected[] = {{"w1", &w.w1}, {"b1", &w.b1}, {"w2", &w.w2}, {"b2", &w.b2}};
  for (const auto& [name, tensor] : expected) {
    const Value* v = g.FindValue(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->kind, ValueKind::kParameter) << name;
    EXPECT_EQ(v->dtype, DType::kF32) << name;
    EXPECT_EQ(v->shape, tensor->shape()) << name;
    EXPECT_EQ(Bytes(v->data), Bytes(*tensor)) << name;
  }

  ASSERT_EQ(g.nodes().size(), 3u);
  const Node* fc1 = g.FindNode("fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->op, "Gemm");
  EXPECT_EQ(fc1->attrs.GetInt("transB", 0), 1);
  EXPECT_EQ(fc1->attrs.GetFloat("alpha", 0.0f), 1.0f);
  EXPECT_FALSE(fc1->attrs.Has("transA"));
  ASSERT_EQ(fc1->inputs.size(), 3u);
  EXPECT_EQ(fc1->inputs[0], g.inputs()[0]);
  EXPECT_EQ(fc1->inputs[1], g.FindValue("w1"));
  EXPECT_EQ(fc1->outputs[0]->shape, (Shape{8, 32}));

  // An unnamed node is called "<op>_<index in the ONNX graph>".
  const Node* relu = g.FindNode("Relu_1");
  ASSERT_NE(relu, nullptr);
  EXPECT_EQ(relu->op, "Relu");
  EXPECT_EQ(relu->inputs[0], fc1->outputs[0]);

  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0]->name, "y");
  EXPECT_EQ(g.outputs()[0]->shape, (Shape{8, 4}));
  EXPECT_EQ(g.outputs()[0]->dtype, DType::kF32);
}

TEST(OnnxImport, BinaryAndTextFiles) {
  const std::string dir = testing::MakeTempDir("onnx_files");
  MlpWeights w;
  const onnx::ModelProto m = MakeMlp(w);

  const std::string binary = WriteFile(dir, "mlp.onnx", m.SerializeAsString());
  auto g1 = ImportOnnxFile(binary, Batch(3));
  ASSERT_TRUE(g1.ok()) << g1.status();
  EXPECT_EQ((*g1)->outputs()[0]->shape, (Shape{3, 4}));

  std::string text;
  ASSERT_TRUE(google::protobuf::TextFormat::PrintToString(m, &text));
  const std::string text_path = WriteFile(dir, "mlp.onnxtxt", text);
  auto g2 = ImportOnnxFile(text_path, Batch(3));
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ((*g2)->nodes().size(), 3u);
  EXPECT_EQ(Bytes((*g2)->FindValue("w2")->data), Bytes(w.w2));
}

TEST(OnnxImport, TextWithSyntaxErrorReportsLine) {
  const std::string dir = testing::MakeTempDir("onnx_text_error");
  const std::string path = WriteFile(dir, "bad.onnxtxt", "ir_version: 8\ngraph {\n  nodee { }\n}\n");
  auto g = ImportOnnxFile(path, Batch(1));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(g.status().message(), path));
  EXPECT_TRUE(HasText(g.status().message(), "line 3"));
}

TEST(OnnxImport, GarbageFileIsInvalidArgument) {
  const std::string dir = testing::MakeTempDir("onnx_garbage");
  std::string garbage = "this is not a model";
  garbage += std::string("\x00\xff\x13\x37\xde\xad\xbe\xef", 8);
  const std::string path = WriteFile(dir, "garbage.onnx", garbage);
  auto g = ImportOnnxFile(path, Batch(1));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(g.status().message(), path));
  EXPECT_TRUE(HasText(g.status().message(), "not an ONNX model"));
}

TEST(OnnxImport, TruncatedBinaryIsInvalidArgument) {
  const std::string dir = testing::MakeTempDir("onnx_truncated");
  const std::string full = MakeMlp(MlpWeights()).SerializeAsString();
  const std::string path = WriteFile(dir, "truncated.onnx", full.substr(0, full.size() / 2));
  auto g = ImportOnnxFile(path, Batch(1));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(g.status().message(), path));
}

TEST(OnnxImport, EmptyFileIsInvalidArgument) {
  const std::string dir = testing::MakeTempDir("onnx_empty");
  const std::string path = WriteFile(dir, "empty.onnx", "");
  auto g = ImportOnnxFile(path, Batch(1));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(g.status().message(), path));
}

TEST(OnnxImport, MissingFileIsNotFound) {
  const std::string path = testing::MakeTempDir("onnx_missing") + "/nope.onnx";
  auto g = ImportOnnxFile(path, Batch(1));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(HasText(g.status().message(), path));
}

TEST(OnnxImport, UnsupportedOpNamesOpNodeOpsetAndFile) {
  onnx::ModelProto m = EmptyModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 3, 8, 8});
  AddFloatInitializer(g, "k", testing::RandomTensor(DType::kF32, {4, 3, 3, 3}, 5), true);
  AddNode(g, "Relu", "", {"x"}, {"r"});
  AddNode(g, "ConvTranspose", "ConvTranspose_3", {"r", "k"}, {"y"});
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 4, 6, 6});
  const std::string dir = testing::MakeTempDir("onnx_unsupported");
  const std::string path = WriteFile(dir, "conv.onnx", m.SerializeAsString());

  auto graph = ImportOnnxFile(path, Batch(2));
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg(graph.status().message());
  EXPECT_TRUE(HasText(msg, path));
  EXPECT_TRUE(HasText(msg, "'ConvTranspose_3'"));
  EXPECT_TRUE(HasText(msg, "op 'ConvTranspose'"));
  EXPECT_TRUE(HasText(msg, "opset 17"));
  EXPECT_TRUE(HasText(msg, "Gemm"));  // the supported set is listed
}

// A float Range whose start, limit and delta are initializers (as exporters write position
// ids): those are configuration, not weights to train, so they import as constants.
TEST(OnnxImport, FloatRangeOfInitializersIsConstantNotTrainable) {
  onnx::ModelProto m = EmptyModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 5});
  AddFloatInitializer(g, "start", Tensor::FromVector<float>({}, {0.5f}), false);
  AddFloatInitializer(g, "limit", Tensor::FromVector<float>({}, {5.5f}), true);
  AddFloatInitializer(g, "delta", Tensor::FromVector<float>({}, {1.0f}), false);
  AddNode(g, "Range", "positions", {"start", "limit", "delta"}, {"r"});
  AddNode(g, "Add", "", {"x", "r"}, {"y"});
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 5});
  auto graph = ImportOnnxModel(m, Batch(2), "range.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_TRUE((*graph)->ValuesOfKind(ValueKind::kParameter).empty());
  const Value* y = (*graph)->outputs()[0];
  EXPECT_EQ(y->shape, (Shape{2, 5}));
}

// A model with several missing ops names all of them at once, with counts and a first node.
TEST(OnnxImport, EveryUnsupportedOpIsListedInOneError) {
  onnx::ModelProto m = EmptyModel(17);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 8});
  AddNode(g, "Softplus", "softplus_a", {"x"}, {"a"});
  AddNode(g, "Relu", "", {"a"}, {"b"});
  AddNode(g, "Selu", "selu", {"b"}, {"c"});
  AddNode(g, "Softplus", "softplus_b", {"c"}, {"y"});
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 8});
  auto graph = ImportOnnxModel(m, Batch(2), "mobile.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_EQ(graph.status().code(), absl::StatusCode::kUnimplemented);
  const std::string msg(graph.status().message());
  EXPECT_TRUE(HasText(msg, "mobile.onnx")) << msg;
  EXPECT_TRUE(HasText(msg, "2 ops")) << msg;
  EXPECT_TRUE(HasText(msg, "'Softplus' (2 nodes, first 'softplus_a')")) << msg;
  EXPECT_TRUE(HasText(msg, "'Selu' (1 node: 'selu')")) << msg;
  EXPECT_FALSE(HasText(msg, "'Relu' (")) << msg;                 // supported ops are not among the missing
  EXPECT_LT(msg.find("'Softplus'"), msg.find("'Selu'")) << msg;  // in the order of first use
}

TEST(OnnxImport, OldOpsetRejectedWithFix) {
  // At opset 11 Gemm means its opset-11 definition, older than any mpc reads.
  auto g = ImportOnnxModel(MakeMlp(MlpWeights(), 11), Batch(1), "old.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(g.status().message(), "old.onnx"));
  EXPECT_TRUE(HasText(g.status().message(), "opset 11"));
  EXPECT_TRUE(HasText(g.status().message(), "Gemm at opset 11 means a definition older than opset 13"));
  EXPECT_TRUE(HasText(g.status().message(), "opset_version between 13 and 23"));

  // The same check runs when reading a file, before the ONNX checker; opsets past 23 are
  // refused whole.
  const std::string dir = testing::MakeTempDir("onnx_old_opset");
  const std::string path = WriteFile(dir, "new.onnx", MakeMlp(MlpWeights(), 24).SerializeAsString());
  auto f = ImportOnnxFile(path, Batch(1));
  ASSERT_FALSE(f.ok());
  EXPECT_TRUE(HasText(f.status().message(), "opset 24; mpc reads opsets up to 23"));
}

// Opsets 18-23 are read op by op: the same MLP at every opset, from files (so past Debian's
// ONNX 1.12 checker, which knows opsets up to 17 and IR version 8), with the IR version
// current exporters write.
TEST(OnnxImport, OpsetsThirteenToTwentyThreeAreRead) {
  const std::string dir = testing::MakeTempDir("onnx_new_opsets");
  for (int64_t opset = 13; opset <= 23; ++opset) {
    onnx::ModelProto m = MakeMlp(MlpWeights(), opset);
    m.set_ir_version(opset >= 21 ? 10 : 8);
    const std::string path = WriteFile(dir, absl::StrCat("mlp", opset, ".onnx"), m.SerializeAsString());
    auto g = ImportOnnxFile(path, Batch(3));
    ASSERT_TRUE(g.ok()) << "opset " << opset << ": " << g.status();
    EXPECT_EQ((*g)->outputs()[0]->shape, (Shape{3, 4}));
  }
}

// Gelu is an ONNX op from opset 20: read there, refused where it does not exist yet.
TEST(OnnxImport, GeluIsReadFromOpsetTwenty) {
  auto model = [](int64_t opset) {
    onnx::ModelProto m = EmptyModel(opset);
    onnx::GraphProto* g = m.mutable_graph();
    AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 8});
    auto* gelu = AddNode(g, "Gelu", "gelu", {"x"}, {"y"});
    auto* a = gelu->add_attribute();
    a->set_name("approximate");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s("tanh");
    AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 8});
    return m;
  };
  auto at20 = ImportOnnxModel(model(20), Batch(2), "gelu20.onnx");
  ASSERT_TRUE(at20.ok()) << at20.status();
  EXPECT_EQ((*at20)->outputs()[0]->producer->op, "Gelu");
  auto at18 = ImportOnnxModel(model(18), Batch(2), "gelu18.onnx");
  ASSERT_FALSE(at18.ok());
  EXPECT_TRUE(HasText(at18.status().message(), "Gelu does not exist at opset 18; ONNX introduced it at opset 20"));
}

// Opset 18's forms: ReduceMean's axes as an input, Pad's axes input, and CastLike.
TEST(OnnxImport, OpsetEighteenInputForms) {
  onnx::ModelProto m = EmptyModel(18);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 4, 6});
  auto* axes = g->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(kOnnxInt64);
  axes->add_dims(1);
  axes->add_int64_data(-1);
  auto* pads = g->add_initializer();
  pads->set_name("pads");
  pads->set_data_type(kOnnxInt64);
  pads->add_dims(2);
  pads->add_int64_data(1);
  pads->add_int64_data(2);
  AddNode(g, "Pad", "pad", {"x", "pads", "", "axes"}, {"padded"});  // the last axis: 6 -> 9
  AddIntAttr(AddNode(g, "ReduceMean", "mean", {"padded", "axes"}, {"m"}), "keepdims", 1);
  AddNode(g, "CastLike", "like", {"m", "x"}, {"y"});
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 4, 1});
  auto graph = ImportOnnxModel(m, Batch(2), "opset18.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Value* padded = (*graph)->FindValue("padded");
  ASSERT_NE(padded, nullptr);
  EXPECT_EQ(padded->shape, (Shape{2, 4, 9}));
  EXPECT_EQ((*graph)->outputs()[0]->shape, (Shape{2, 4, 1}));
  EXPECT_TRUE((*graph)->ValuesOfKind(ValueKind::kParameter).empty());
}

TEST(OnnxImport, ForeignDomainRejected) {
  onnx::ModelProto m = EmptyModel();
  auto* ms = m.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {2, 3});
  AddNode(g, "FusedGemm", "fg", {"x"}, {"y"})->set_domain("com.microsoft");
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {2, 3});
  auto graph = ImportOnnxModel(m, Batch(1), "ms.onnx");
  ASSERT_FALSE(graph.ok());
  EXPECT_TRUE(HasText(graph.status().message(), "'fg'"));
  EXPECT_TRUE(HasText(graph.status().message(), "com.microsoft"));
}

TEST(OnnxImport, DynamicNonBatchDimRejected) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  auto* dim =
      m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(1);
  dim->set_dim_param("features");
  auto g = ImportOnnxModel(m, Batch(8), "dyn.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(HasText(g.status().message(), "'x'"));
  EXPECT_TRUE(HasText(g.status().message(), "axis 1"));
  EXPECT_TRUE(HasText(g.status().message(), "features"));
}

// A sequence exported with dynamic_axes: the data's extent binds the symbol, the Shape ->
// Gather -> Concat -> Reshape arithmetic on it folds, and a second input naming the same
// symbol gets the same size.
TEST(OnnxImport, SymbolicDimsBindFromTheDataShape) {
  onnx::ModelProto m = EmptyModel(18);
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, -2, 4});  // [N, S, 4]
  AddTensorInfo(g->mutable_input(), "bias", kOnnxFloat, {-2, 4});   // [S, 4]: S from x
  auto* idx = g->add_initializer();
  idx->set_name("one");
  idx->set_data_type(kOnnxInt64);
  idx->add_dims(1);
  idx->add_int64_data(1);
  auto* minus = g->add_initializer();
  minus->set_name("minus_one");
  minus->set_data_type(kOnnxInt64);
  minus->add_dims(1);
  minus->add_int64_data(-1);
  AddNode(g, "Add", "add", {"x", "bias"}, {"h"});
  AddNode(g, "Shape", "shape", {"h"}, {"s"});
  AddIntAttr(AddNode(g, "Gather", "seq", {"s", "one"}, {"seq_len"}), "axis", 0);
  AddIntAttr(AddNode(g, "Concat", "target", {"minus_one", "seq_len"}, {"target_shape"}), "axis", 0);
  AddNode(g, "Reshape", "flat", {"h", "target_shape"}, {"y"});
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, -2});
  ImportOptions options = Batch(2);
  options.input_rows["x"] = Shape{5, 4};
  auto graph = ImportOnnxModel(m, options, "dynamic_seq.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ((*graph)->FindValue("x")->shape, (Shape{2, 5, 4}));
  EXPECT_EQ((*graph)->FindValue("bias")->shape, (Shape{5, 4}));
  EXPECT_EQ((*graph)->outputs()[0]->shape, (Shape{8, 5}));
  EXPECT_EQ((*graph)->FindValue("target_shape")->kind, ValueKind::kConstant);

  // Without data for it the symbol cannot be bound, and the error says how to give it.
  auto unbound = ImportOnnxModel(m, Batch(2), "dynamic_seq.onnx");
  ASSERT_FALSE(unbound.ok());
  EXPECT_TRUE(HasText(unbound.status().message(), "no data shape was given for this input"));
}

TEST(OnnxImport, UnsetLeadingDimIsBatch) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->Clear();
  auto g = ImportOnnxModel(m, Batch(5), "mlp.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ((*g)->inputs()[0]->shape, (Shape{5, 16}));
}

TEST(OnnxImport, ConstantNodeFeedsReshape) {
  onnx::ModelProto m = EmptyModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 4, 4});
  onnx::NodeProto* c = AddNode(g, "Constant", "shape_const", {}, {"shape"});
  auto* a = c->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(kOnnxInt64);
  a->mutable_t()->add_dims(2);
  a->mutable_t()->add_int64_data(-1);
  a->mutable_t()->add_int64_data(16);
  AddNode(g, "Reshape", "flat", {"x", "shape"}, {"y"});
  onnx::NodeProto* s = AddNode(g, "Constant", "", {}, {"scale"});
  auto* sa = s->add_attribute();
  sa->set_name("value_float");
  sa->set_type(onnx::AttributeProto::FLOAT);
  sa->set_f(0.5f);
  AddNode(g, "Mul", "scaled", {"y", "scale"}, {"z"});
  AddTensorInfo(g->mutable_output(), "z", kOnnxFloat, {-1, 16});

  auto graph = ImportOnnxModel(m, Batch(8), "reshape.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& gr = **graph;
  EXPECT_EQ(gr.nodes().size(), 2u);  // Constants are folded into values
  const Value* shape = gr.FindValue("shape");
  ASSERT_NE(shape, nullptr);
  EXPECT_EQ(shape->kind, ValueKind::kConstant);
  EXPECT_EQ(shape->dtype, DType::kI64);
  ASSERT_EQ(shape->data.num_elements(), 2);
  EXPECT_EQ(shape->data.data<int64_t>()[0], -1);
  EXPECT_EQ(shape->data.data<int64_t>()[1], 16);
  const Value* scale = gr.FindValue("scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->kind, ValueKind::kConstant);
  EXPECT_EQ(scale->shape, Shape{});
  EXPECT_EQ(scale->data.data<float>()[0], 0.5f);
  EXPECT_EQ(gr.FindNode("flat")->outputs[0]->shape, (Shape{8, 16}));
  EXPECT_EQ(gr.outputs()[0]->shape, (Shape{8, 16}));
}

TEST(OnnxImport, ConfigInitializersAreConstantsAndAbsentInputsNull) {
  // Dropout(x, ratio, "") with the ratio a float initializer: it configures the op, so it
  // must be a constant (readable by inference, never trained). The empty name is an
  // absent optional input.
  onnx::ModelProto m = EmptyModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddTensorInfo(g->mutable_input(), "x", kOnnxFloat, {-1, 6});
  AddFloatInitializer(g, "ratio", Tensor::Scalar(0.25f), true);
  onnx::TensorProto* shape = g->add_initializer();
  shape->set_name("target");
  shape->set_data_type(kOnnxInt64);
  shape->add_dims(2);
  shape->add_int64_data(-1);
  shape->add_int64_data(3);
  AddNode(g, "Reshape", "r", {"x", "target"}, {"xr"});
  AddNode(g, "Dropout", "drop", {"xr", "ratio", ""}, {"y"});
  AddTensorInfo(g->mutable_output(), "y", kOnnxFloat, {-1, 3});

  auto graph = ImportOnnxModel(m, Batch(4), "dropout.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& gr = **graph;
  EXPECT_EQ(gr.FindValue("ratio")->kind, ValueKind::kConstant);
  EXPECT_EQ(gr.FindValue("target")->kind, ValueKind::kConstant);
  EXPECT_TRUE(gr.ValuesOfKind(ValueKind::kParameter).empty());
  const Node* drop = gr.FindNode("drop");
  ASSERT_NE(drop, nullptr);
  ASSERT_GE(drop->inputs.size(), 2u);
  EXPECT_EQ(drop->inputs[1], gr.FindValue("ratio"));
  for (size_t i = 2; i < drop->inputs.size(); ++i) EXPECT_EQ(drop->inputs[i], nullptr);
  EXPECT_EQ(gr.outputs()[0]->shape, (Shape{8, 3}));
}

TEST(OnnxImport, InitializerListedAsInputIsNotAnInput) {
  MlpWeights w;
  onnx::ModelProto m = MakeMlp(w);
  AddTensorInfo(m.mutable_graph()->mutable_input(), "w1", kOnnxFloat, {32, 16});
  auto g = ImportOnnxModel(m, Batch(2), "old_style.onnx");
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ((*g)->inputs().size(), 1u);
  EXPECT_EQ((*g)->FindValue("w1")->kind, ValueKind::kParameter);
}

TEST(OnnxImport, GraphAttributeRejectedWithNames) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  auto* a = m.mutable_graph()->mutable_node(1)->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  a->mutable_g()->set_name("sub");
  auto g = ImportOnnxModel(m, Batch(2), "attr.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(HasText(g.status().message(), "attr.onnx"));
  EXPECT_TRUE(HasText(g.status().message(), "'body'"));
  EXPECT_TRUE(HasText(g.status().message(), "GRAPH"));
  EXPECT_TRUE(HasText(g.status().message(), "Relu_1"));
  EXPECT_TRUE(HasText(g.status().message(), "(Relu)"));
}

TEST(OnnxImport, ExternalDataRejected) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  onnx::TensorProto* w1 = m.mutable_graph()->mutable_initializer(0);
  w1->clear_raw_data();
  w1->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* loc = w1->add_external_data();
  loc->set_key("location");
  loc->set_value("weights.bin");
  auto g = ImportOnnxModel(m, Batch(2), "ext.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(HasText(g.status().message(), "'w1'"));
  EXPECT_TRUE(HasText(g.status().message(), "outside the model"));
  EXPECT_TRUE(HasText(g.status().message(), "read from memory"));
  EXPECT_TRUE(HasText(g.status().message(), "weights.bin"));
}

TEST(OnnxImport, InitializerSizeMismatchRejected) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  m.mutable_graph()->mutable_initializer(0)->mutable_raw_data()->resize(10);
  auto g = ImportOnnxModel(m, Batch(2), "short.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(HasText(g.status().message(), "'w1'"));
  EXPECT_TRUE(HasText(g.status().message(), "raw_data"));
}

// A NaN in a weight is refused at load, naming the tensor, its first NaN and the file
// (training it would stop one step later with a NaN loss that blames the data). Infinities
// are graph/onnx_initializer_roles_test.cc's.
TEST(OnnxImport, NanInAnInitializerIsRefusedNamingTensorIndexAndFile) {
  MlpWeights w;
  w.w2.data<float>()[37] = std::numeric_limits<float>::quiet_NaN();  // element [1,5] of [4,32]
  w.w2.data<float>()[100] = std::numeric_limits<float>::quiet_NaN();
  auto g = ImportOnnxModel(MakeMlp(w), Batch(2), "nan.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(g.status().message());
  EXPECT_TRUE(HasText(message, "nan.onnx: initializer 'w2' holds NaN at index 37")) << message;
  EXPECT_TRUE(HasText(message, "[1,5] of [4,32]")) << message;
  EXPECT_TRUE(HasText(message, "2 NaN of 128")) << message;
}

// Dimensions whose product overflows 64 bits (2^40 x 2^40 wraps to 0) are named as such
// before ONNX's checker, which would call the tensor "0-element but contains data".
TEST(OnnxImport, OverflowingDimensionsAreNamed) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  onnx::TensorProto* w1 = m.mutable_graph()->mutable_initializer(0);
  w1->clear_dims();
  w1->add_dims(int64_t{1} << 40);
  w1->add_dims(int64_t{1} << 40);
  for (const bool from_bytes : {false, true}) {
    auto g = from_bytes ? ImportOnnxBytes(m.SerializeAsString(), Batch(2), "big.onnx")
                        : ImportOnnxModel(m, Batch(2), "big.onnx");
    ASSERT_FALSE(g.ok());
    const std::string message(g.status().message());
    EXPECT_TRUE(HasText(message, "initializer 'w1' has dimensions 1099511627776 x 1099511627776")) << message;
    EXPECT_TRUE(HasText(message, "exceeds 2^48 elements")) << message;
    EXPECT_FALSE(HasText(message, "0-element")) << message;
  }
}

TEST(OnnxImport, UnknownGraphOutputRejected) {
  onnx::ModelProto m = MakeMlp(MlpWeights());
  m.mutable_graph()->mutable_output(0)->set_name("logits");
  auto g = ImportOnnxModel(m, Batch(2), "out.onnx");
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(HasText(g.status().message(), "'logits'"));
}

TEST(OnnxExport, RoundTripPreservesOpsAttributesAndInitializers) {
  MlpWeights w;
  auto original = ImportOnnxModel(MakeMlp(w), Batch(8), "mlp.onnx");
  ASSERT_TRUE(original.ok()) << original.status();

  ExportOptions options;
  options.metadata["mpc.note"] = "round trip";
  auto exported = ExportOnnxModel(**original, options);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->ir_version(), 8);
  ASSERT_EQ(exported->opset_import_size(), 1);  // no mpc-domain ops in this graph
  EXPECT_EQ(exported->opset_import(0).domain(), "");
  EXPECT_EQ(exported->opset_import(0).version(), 17);
  ASSERT_EQ(exported->metadata_props_size(), 1);
  EXPECT_EQ(exported->metadata_props(0).key(), "mpc.note");
  EXPECT_EQ(exported->graph().initializer_size(), 4);

  // Through a file, so the ONNX checker sees our output too.
  const std::string dir = testing::MakeTempDir("onnx_roundtrip");
  const std::string path = dir + "/exported.onnx";
  ASSERT_TRUE(ExportOnnxFile(**original, options, path).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  auto again = ImportOnnxFile(path, Batch(8));
  ASSERT_TRUE(again.ok()) << again.status();

  const Graph& a = **original;
  const Graph& b = **again;
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    const Node& na = *a.nodes()[i];
    const Node* nb = b.FindNode(na.name);
    ASSERT_NE(nb, nullptr) << na.name;
    EXPECT_EQ(na.op, nb->op);
    EXPECT_EQ(na.attrs, nb->attrs) << na.name;
    ASSERT_EQ(na.inputs.size(), nb->inputs.size());
    for (size_t j = 0; j < na.inputs.size(); ++j) EXPECT_EQ(na.inputs[j]->name, nb->inputs[j]->name);
  }
  for (const Value* p : a.ValuesOfKind(ValueKind::kParameter)) {
    const Value* q = b.FindValue(p->name);
    ASSERT_NE(q, nullptr) << p->name;
    EXPECT_EQ(q->kind, ValueKind::kParameter);
    EXPECT_EQ(Bytes(q->data), Bytes(p->data)) << p->name;
  }
  ASSERT_EQ(b.inputs().size(), 1u);
  EXPECT_EQ(b.inputs()[0]->shape, (Shape{8, 16}));
  ASSERT_EQ(b.outputs().size(), 1u);
  EXPECT_EQ(b.outputs()[0]->name, "y");
  EXPECT_EQ(b.outputs()[0]->shape, (Shape{8, 4}));

  // Exports are deterministic.
  auto twice = ExportOnnxModel(**original, options);
  ASSERT_TRUE(twice.ok());
  EXPECT_EQ(twice->SerializeAsString(), exported->SerializeAsString());
}

TEST(OnnxExport, ConstantsAndAbsentInputsSurvive) {
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, {2, 6});
  Value* target = g.AddConstant("target", Tensor::FromVector<int64_t>({2}, {3, 4}));
  auto r = g.AddNode("Reshape", {x, target}, {}, "r");
  ASSERT_TRUE(r.ok()) << r.status();
  g.AddOutput((*r)->outputs[0]);
  auto model = ExportOnnxModel(g, ExportOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->graph().initializer_size(), 1);
  EXPECT_EQ(model->graph().initializer(0).data_type(), kOnnxInt64);
  auto back = ImportOnnxModel(*model, Batch(2), "reshape.onnx");
  ASSERT_TRUE(back.ok()) << back.status();
  const Value* t = (*back)->FindValue("target");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind, ValueKind::kConstant);
  EXPECT_EQ(Bytes(t->data), Bytes(target->data));
  EXPECT_EQ((*back)->outputs()[0]->shape, (Shape{3, 4}));
}

// mpc's BatchNormalization has five outputs (the last two are the saved statistics its
// gradient reads); ONNX allows at most three. The export writes the ones something reads,
// so a model with batch norms passes ONNX's checker and imports again.
TEST(OnnxExport, UnreadTrailingOutputsAreLeftOutSoBatchNormPassesTheChecker) {
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, {2, 3, 4, 4});
  std::vector<Value*> per_channel;
  for (const char* name : {"scale", "bias", "mean", "var"}) {
    per_channel.push_back(
        g.AddParameter(name, testing::RandomTensor(DType::kF32, {3}, per_channel.size() + 1, 0.5, 1.5)));
  }
  auto bn =
      g.AddNode("BatchNormalization", {x, per_channel[0], per_channel[1], per_channel[2], per_channel[3]}, {}, "bn");
  ASSERT_TRUE(bn.ok()) << bn.status();
  ASSERT_EQ((*bn)->outputs.size(), 5u);
  g.AddOutput((*bn)->outputs[0]);
  auto model = ExportOnnxModel(g, ExportOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->graph().node_size(), 1);
  EXPECT_EQ(model->graph().node(0).output_size(), 1);

  const std::string path = testing::MakeTempDir("onnx_batch_norm") + "/bn.onnx";
  ASSERT_TRUE(ExportOnnxFile(g, ExportOptions(), path).ok());
  auto back = ImportOnnxFile(path, Batch(2));  // runs ONNX's checker
  ASSERT_TRUE(back.ok()) << back.status();
  const Node* node = (*back)->FindNode("bn");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->outputs.size(), 5u);
  EXPECT_EQ((*back)->FindValue("mean")->kind, ValueKind::kState);
}

TEST(OnnxExport, MpcDomainOpsKeepTheirDomain) {
  // A backward op (ReluGrad is registered in domain "mpc") must be written with that
  // domain and an opset import for it, and the file must load again through the checker.
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, {4, 3});
  Value* dy = g.AddInput("dy", DType::kF32, {4, 3});
  auto relu = g.AddNode("Relu", {x}, {}, "relu");
  ASSERT_TRUE(relu.ok()) << relu.status();
  auto grad = g.AddNode("ReluGrad", {dy, (*relu)->outputs[0]}, {}, "relu_grad");
  ASSERT_TRUE(grad.ok()) << grad.status();
  g.AddOutput((*grad)->outputs[0]);

  auto model = ExportOnnxModel(g, ExportOptions());
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->graph().node_size(), 2);
  EXPECT_EQ(model->graph().node(0).domain(), "");
  EXPECT_EQ(model->graph().node(1).domain(), "mpc");
  bool has_mpc_opset = false;
  for (const auto& op : model->opset_import()) has_mpc_opset |= op.domain() == "mpc" && op.version() == 1;
  EXPECT_TRUE(has_mpc_opset);

  const std::string path = testing::MakeTempDir("onnx_mpc_domain") + "/program.onnx";
  ASSERT_TRUE(ExportOnnxFile(g, ExportOptions(), path).ok());
  auto back = ImportOnnxFile(path, Batch(4));
  ASSERT_TRUE(back.ok()) << back.status();
  const Node* n = (*back)->FindNode("relu_grad");
  ASSERT_NE(n, nullptr);
  EXPECT_EQ(n->op, "ReluGrad");
  EXPECT_EQ((*back)->outputs()[0]->shape, (Shape{4, 3}));

  // Without its domain the same op is rejected: ONNX consumers could not run it.
  onnx::ModelProto stripped = *model;
  stripped.mutable_graph()->mutable_node(1)->clear_domain();
  auto bad = ImportOnnxModel(stripped, Batch(4), "stripped.onnx");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(HasText(bad.status().message(), "'relu_grad'"));
  EXPECT_TRUE(HasText(bad.status().message(), "'mpc'"));
}

TEST(OnnxExport, LowPrecisionDataAndValueKindsSurvive) {
  // Float constants and state are initializers in ONNX like parameters; the exporter marks
  // them so that mpc reads its own files back with the same kinds.
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, {2, 3});
  const Tensor h = testing::RandomTensor(DType::kF16, {4}, 11);
  const Tensor bh = testing::RandomTensor(DType::kBF16, {2, 2}, 12);
  Tensor f8(DType::kF8E4M3, {3});
  for (int i = 0; i < 3; ++i) f8.data<uint8_t>()[i] = static_cast<uint8_t>(0x38 + i);
  g.AddParameter("h", h);
  g.AddState("moment", bh);
  g.AddConstant("c8", f8);
  g.AddConstant("eps", Tensor::Scalar(1e-5f));
  AttrMap to_bf16;
  to_bf16.Set("to", int64_t{onnx::TensorProto::BFLOAT16});
  auto cast = g.AddNode("Cast", {x}, to_bf16, "cast");
  ASSERT_TRUE(cast.ok()) << cast.status();
  g.AddOutput((*cast)->outputs[0]);

  const std::string path = testing::MakeTempDir("onnx_low_precision") + "/lp.onnx";
  ASSERT_TRUE(ExportOnnxFile(g, ExportOptions(), path).ok());
  auto back = ImportOnnxFile(path, Batch(2));
  ASSERT_TRUE(back.ok()) << back.status();
  const std::tuple<const char*, ValueKind, DType, const Tensor*> expected[] = {
      {"h", ValueKind::kParameter, DType::kF16, &h},
      {"moment", ValueKind::kState, DType::kBF16, &bh},
      {"c8", ValueKind::kConstant, DType::kF8E4M3, &f8},
  };
  for (const auto& [name, kind, dtype, data] : expected) {
    const Value* v = (*back)->FindValue(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->kind, kind) << name;
    EXPECT_EQ(v->dtype, dtype) << name;
    EXPECT_EQ(Bytes(v->data), Bytes(*data)) << name;
  }
  EXPECT_EQ((*back)->FindValue("eps")->kind, ValueKind::kConstant);
  EXPECT_EQ((*back)->outputs()[0]->dtype, DType::kBF16);
  EXPECT_EQ((*back)->FindNode("cast")->attrs.GetInt("to", 0), onnx::TensorProto::BFLOAT16);
}

TEST(OnnxExport, WriteFailureNamesPath) {
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, {2});
  g.AddOutput(x);
  const std::string path = testing::MakeTempDir("onnx_export_fail") + "/no/such/dir/m.onnx";
  absl::Status st = ExportOnnxFile(g, ExportOptions(), path);
  ASSERT_FALSE(st.ok());
  EXPECT_TRUE(HasText(st.message(), "m.onnx"));
}

// Imports a torch-exported model with batch 100 and checks every output against the
// shape the file declares (axis 0 is the batch).
void CheckTorchModel(const std::string& relative) {
  const std::string path = testing::SourcePath(relative);
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " is not generated yet";
  auto proto = ReadOnnxModelFile(path);
  ASSERT_TRUE(proto.ok()) << proto.status();
  auto graph = ImportOnnxFile(path, Batch(100));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& g = **graph;
  ASSERT_EQ(static_cast<int>(g.outputs().size()), proto->graph().output_size());
  for (int i = 0; i < proto->graph().output_size(); ++i) {
    const auto& declared = proto->graph().output(i).type().tensor_type().shape();
    const Value* out = g.outputs()[i];
    ASSERT_EQ(static_cast<int>(out->shape.size()), declared.dim_size()) << out->name;
    for (int axis = 0; axis < declared.dim_size(); ++axis) {
      const auto& dim = declared.dim(axis);
      if (axis == 0 && !dim.has_dim_value()) {
        EXPECT_EQ(out->shape[0], 100) << out->name;
      } else if (dim.has_dim_value()) {
        EXPECT_EQ(out->shape[axis], dim.dim_value()) << out->name << " axis " << axis;
      }
    }
  }
  int initializers_as_values = 0;
  for (const auto& init : proto->graph().initializer()) {
    const Value* v = g.FindValue(init.name());
    ASSERT_NE(v, nullptr) << init.name();
    if (v->kind == ValueKind::kParameter || v->kind == ValueKind::kConstant) ++initializers_as_values;
  }
  EXPECT_EQ(initializers_as_values, proto->graph().initializer_size());
}

TEST(OnnxImport, FashionMlpFromTorch) {
  CheckTorchModel("models/fashion_mlp/fashion_mlp.onnx");
  if (IsSkipped()) return;
  auto graph = ImportOnnxFile(testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx"), Batch(100));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& g = **graph;
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.inputs()[0]->shape, (Shape{100, 1, 28, 28}));
  EXPECT_EQ(g.ValuesOfKind(ValueKind::kParameter).size(), 6u);
  EXPECT_EQ(g.FindValue("1.weight")->shape, (Shape{256, 784}));
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0]->name, "logits");
  EXPECT_EQ(g.outputs()[0]->shape, (Shape{100, 10}));
}

TEST(OnnxImport, GoldenMlpFromTorch) {
  CheckTorchModel("tests/golden/mlp/model.onnx");
  if (IsSkipped()) return;
  auto graph = ImportOnnxFile(testing::SourcePath("tests/golden/mlp/model.onnx"), Batch(100));
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Graph& g = **graph;
  ASSERT_EQ(g.inputs().size(), 1u);
  EXPECT_EQ(g.inputs()[0]->shape, (Shape{100, 20}));
  EXPECT_EQ(g.ValuesOfKind(ValueKind::kParameter).size(), 8u);
  ASSERT_EQ(g.outputs().size(), 1u);
  EXPECT_EQ(g.outputs()[0]->shape, (Shape{100, 5}));
  std::vector<std::string> ops;
  for (const auto& n : g.nodes()) ops.push_back(n->op);
  EXPECT_EQ(ops, (std::vector<std::string>{"Gemm", "Relu", "Gemm", "Tanh", "Gemm", "Sigmoid", "Gemm"}));
}

// Every prefix of a model file is a clean error (never a crash or a partial graph): the
// opset import is serialized after the graph, so no strict prefix is a complete model.
TEST(OnnxImport, EveryTruncationIsACleanError) {
  const std::string dir = testing::MakeTempDir("onnx_truncations");
  const std::string full = MakeMlp(MlpWeights()).SerializeAsString();
  const size_t step = std::max<size_t>(1, full.size() / 300);
  for (size_t cut = 0; cut < full.size(); cut += step) {
    const std::string path = WriteFile(dir, "cut.onnx", full.substr(0, cut));
    auto g = ImportOnnxFile(path, Batch(2));
    ASSERT_FALSE(g.ok()) << "prefix of " << cut << " bytes imported";
    EXPECT_TRUE(HasText(g.status().message(), path)) << "cut " << cut;
  }
}

// Corrupted bytes may or may not leave a parseable model; either way import returns.
TEST(OnnxImport, CorruptedBytesNeverCrash) {
  const std::string full = MakeMlp(MlpWeights()).SerializeAsString();
  std::mt19937 rng(7);
  int imported = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    onnx::ModelProto m;
    if (!m.ParseFromString(bytes)) continue;
    auto g = ImportOnnxModel(m, Batch(2), "corrupt.onnx");
    if (g.ok()) {
      ++imported;
    } else {
      EXPECT_TRUE(HasText(g.status().message(), "corrupt.onnx")) << g.status();
    }
  }
  EXPECT_GT(imported, 0);  // flips inside weight data still give a valid model
}

}  // namespace
}  // namespace mpc
