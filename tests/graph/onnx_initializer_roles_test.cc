// Which initializers the importer trains (graph/onnx_initializer_roles.h): PyTorch's
// graph-signature kinds read from IR-10 metadata_props (which Debian's ONNX 1.12 keeps as
// unknown fields, so the tests write them that way), non-finite tables, constants the
// exporter's optimizer folded, and the untying of initializers the optimizer merged.
#include "graph/onnx_initializer_roles.h"

#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "graph/onnx_import.h"
#include "graph/onnx_metadata.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// One metadata_props entry written as a newer ONNX would, into the unknown field `field`.
void AddMetadata(google::protobuf::Message* message, int field, const std::string& key, const std::string& value) {
  onnx::StringStringEntryProto entry;
  entry.set_key(key);
  entry.set_value(value);
  message->GetReflection()->MutableUnknownFields(message)->AddLengthDelimited(field, entry.SerializeAsString());
}

void AddInitializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  onnx::TensorProto* init = g->add_initializer();
  init->set_name(name);
  init->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : t.shape()) init->add_dims(d);
  init->set_raw_data(t.raw(), t.bytes());
}

// The dynamo exporter's record of an initializer: its kind and placeholder name.
void AddSignature(onnx::GraphProto* g, const std::string& name, const std::string& kind, const std::string& placeholder) {
  onnx::ValueInfoProto* info = g->add_value_info();
  info->set_name(name);
  AddMetadata(info, 4, kTorchInputKindKey, kind);
  AddMetadata(info, 4, kTorchOriginalNameKey, placeholder);
}

void AddInput(onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims) {
  auto* in = g->add_input();
  in->set_name(name);
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& op, const std::vector<std::string>& inputs,
                         const std::string& output, const std::string& fx_node = "") {
  onnx::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(output + "_node");
  for (const auto& i : inputs) n->add_input(i);
  n->add_output(output);
  if (!fx_node.empty()) AddMetadata(n, 9, kTorchFxNodeKey, fx_node);
  return n;
}

onnx::ModelProto Model(int64_t opset = 20) {
  onnx::ModelProto m;
  m.set_ir_version(10);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  return m;
}

const InitializerRole* RoleOf(const std::vector<InitializerRole>& roles, const std::string& name) {
  for (const InitializerRole& r : roles) {
    if (r.name == name) return &r;
  }
  return nullptr;
}

// Import options for a batch of 2 that collect the initializers' roles into `roles`.
ImportOptions WithRoles(std::vector<InitializerRole>* roles) {
  ImportOptions options;
  options.batch_size = 2;
  options.initializer_roles = roles;
  return options;
}

Tensor Filled(Shape shape, float value) {
  Tensor t(DType::kF32, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = value;
  return t;
}

// A dynamo export: the weight is a PARAMETER; the position table and the scale are BUFFERs
// (finite, so only the signature tells them apart from weights); the -inf causal mask has
// no kind and is a constant for its values; the output's shape check passes.
TEST(InitializerRoles, GraphSignatureDecidesAndNonFiniteIsNeverTrained) {
  onnx::ModelProto m = Model();
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 4, 4});
  AddInitializer(g, "w", testing::RandomTensor(DType::kF32, {4, 4}, 1));
  AddInitializer(g, "table", testing::RandomTensor(DType::kF32, {4, 4}, 2));
  Tensor mask = Filled({4, 4}, 0.0f);
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) mask.data<float>()[i * 4 + j] = -std::numeric_limits<float>::infinity();
  }
  AddInitializer(g, "mask", mask);
  AddSignature(g, "w", "PARAMETER", "p_w");
  AddSignature(g, "table", "BUFFER", "b_table");
  AddNode(g, "MatMul", {"x", "w"}, "h");
  AddNode(g, "Add", {"h", "table"}, "t");
  AddNode(g, "Add", {"t", "mask"}, "y");
  auto* out = g->add_output();
  out->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "dynamo.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  ASSERT_EQ((*graph)->ValuesOfKind(ValueKind::kParameter).size(), 1u);
  EXPECT_EQ((*graph)->ValuesOfKind(ValueKind::kParameter)[0]->name, "w");
  ASSERT_NE(RoleOf(roles, "table"), nullptr);
  EXPECT_EQ(RoleOf(roles, "table")->kind, "constant");
  EXPECT_EQ(RoleOf(roles, "table")->reason, "a PyTorch buffer (graph signature)");
  ASSERT_NE(RoleOf(roles, "mask"), nullptr);
  EXPECT_EQ(RoleOf(roles, "mask")->kind, "constant");
  EXPECT_EQ(RoleOf(roles, "w")->kind, "trained");
}

// An infinity in what the signature calls a PARAMETER is refused at load, naming the
// tensor and where (a trained weight must be finite); the same values in a BUFFER are the
// model's own (an additive mask) and load.
TEST(InitializerRoles, InfinityInAParameterIsRefusedInABufferKept) {
  for (const char* kind : {"PARAMETER", "BUFFER"}) {
    SCOPED_TRACE(kind);
    onnx::ModelProto m = Model();
    onnx::GraphProto* g = m.mutable_graph();
    AddInput(g, "x", {2, 4, 4});
    Tensor w = testing::RandomTensor(DType::kF32, {4, 4}, 1);
    w.data<float>()[6] = std::numeric_limits<float>::infinity();
    AddInitializer(g, "w", w);
    AddSignature(g, "w", kind, "p_w");
    AddNode(g, "Add", {"x", "w"}, "y");
    g->add_output()->set_name("y");
    std::vector<InitializerRole> roles;
    auto graph = ImportOnnxModel(m, WithRoles(&roles), "dynamo.onnx");
    if (std::string(kind) == "BUFFER") {
      ASSERT_TRUE(graph.ok()) << graph.status();
      continue;
    }
    ASSERT_FALSE(graph.ok());
    const std::string message(graph.status().message());
    EXPECT_NE(message.find("dynamo.onnx: initializer 'w' is a parameter"), std::string::npos) << message;
    EXPECT_NE(message.find("holds inf at index 6 (element [1,2] of [4,4])"), std::string::npos) << message;
  }
}

// Without any signature (a TorchScript export) a finite float initializer is trained, and a
// -inf mask still is not.
TEST(InitializerRoles, WithoutSignatureFiniteFloatsAreTrainedMasksAreNot) {
  onnx::ModelProto m = Model(18);
  m.set_ir_version(8);
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 4});
  AddInitializer(g, "b", testing::RandomTensor(DType::kF32, {4}, 3));
  Tensor mask = Filled({4}, 0.0f);
  mask.data<float>()[3] = -std::numeric_limits<float>::infinity();
  AddInitializer(g, "mask", mask);
  AddNode(g, "Add", {"x", "b"}, "h");
  AddNode(g, "Add", {"h", "mask"}, "y");
  g->add_output()->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "ts.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(RoleOf(roles, "b")->kind, "trained");
  EXPECT_EQ(RoleOf(roles, "mask")->kind, "constant");
  EXPECT_EQ(RoleOf(roles, "mask")->reason, "holds non-finite values (a mask or a table, not a weight)");
}

// onnxscript's optimizer merges equal initializers: two LayerNorm-style scales of ones
// arrive as one. The second reader's FX node names its own placeholder (%p_norm2_weight),
// so it gets a private copy named after it, trained apart from the first.
TEST(InitializerRoles, ParametersTheExporterMergedAreUntied) {
  onnx::ModelProto m = Model();
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 4});
  AddInitializer(g, "norm1.weight", Filled({4}, 1.0f));
  AddSignature(g, "norm1.weight", "PARAMETER", "p_norm1_weight");
  AddNode(g, "Mul", {"x", "norm1.weight"}, "h", "%mul : = call_function[target=aten.mul](args = (%x, %p_norm1_weight))");
  AddNode(g, "Mul", {"h", "norm1.weight"}, "y", "%mul_1 : = call_function[target=aten.mul](args = (%mul, %p_norm2_weight))");
  g->add_output()->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "merged.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const auto params = (*graph)->ValuesOfKind(ValueKind::kParameter);
  ASSERT_EQ(params.size(), 2u);
  const Value* copy = (*graph)->FindValue("norm2_weight");
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->kind, ValueKind::kParameter);
  ASSERT_EQ(copy->consumers.size(), 1u);
  EXPECT_EQ(copy->consumers[0]->outputs[0]->name, "y");
  EXPECT_EQ((*graph)->FindValue("norm1.weight")->consumers.size(), 1u);
  ASSERT_NE(RoleOf(roles, "norm2_weight"), nullptr);
  EXPECT_EQ(RoleOf(roles, "norm2_weight")->kind, "trained");
}

// A BatchNormalization whose running variance the exporter merged with its weight (both
// ones) reads a private state copy; the weight stays a parameter.
TEST(InitializerRoles, RunningStatisticSharedWithWeightGetsItsOwnState) {
  onnx::ModelProto m = Model(18);
  m.set_ir_version(8);
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 3, 4, 4});
  AddInitializer(g, "ones", Filled({3}, 1.0f));
  AddInitializer(g, "zeros", Filled({3}, 0.0f));
  AddNode(g, "BatchNormalization", {"x", "ones", "zeros", "zeros", "ones"}, "y");
  g->add_output()->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "bn.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Node* bn = (*graph)->outputs()[0]->producer;
  ASSERT_NE(bn, nullptr);
  EXPECT_EQ(bn->inputs[1]->kind, ValueKind::kParameter);
  EXPECT_EQ(bn->inputs[2]->kind, ValueKind::kParameter);
  EXPECT_EQ(bn->inputs[3]->kind, ValueKind::kState);
  EXPECT_EQ(bn->inputs[4]->kind, ValueKind::kState);
  EXPECT_NE(bn->inputs[4], bn->inputs[1]);
  EXPECT_NE(bn->inputs[3], bn->inputs[2]);
  EXPECT_EQ(bn->inputs[4]->data.data<float>()[0], 1.0f);
}

// onnxscript's constant folding wrote the tied output projection as a transposed copy of
// the embedding (folded_from names it): it is read as Transpose of the embedding, so the
// two stay one weight; a parameter broadcast over the batch becomes Expand of one row.
TEST(InitializerRoles, FoldedCopiesOfParametersAreDerivedFromThem) {
  onnx::ModelProto m = Model();
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 4});
  const Tensor table = testing::RandomTensor(DType::kF32, {6, 4}, 7);
  AddInitializer(g, "emb.weight", table);
  AddSignature(g, "emb.weight", "PARAMETER", "p_emb_weight");
  Tensor transposed(DType::kF32, {4, 6});
  for (int i = 0; i < 6; ++i) {
    for (int j = 0; j < 4; ++j) transposed.data<float>()[j * 6 + i] = table.data<float>()[i * 4 + j];
  }
  AddInitializer(g, "val_9", transposed);
  AddMetadata(g->add_value_info(), 4, kOnnxscriptFoldedFromKey, "['emb.weight']");
  g->mutable_value_info(g->value_info_size() - 1)->set_name("val_9");
  Tensor token(DType::kF32, {2, 4});  // a [1, 4] parameter expanded over the batch of 2
  for (int j = 0; j < 4; ++j) token.data<float>()[j] = token.data<float>()[4 + j] = 0.25f * (j + 1);
  AddInitializer(g, "expand", token);
  AddMetadata(g->add_value_info(), 4, kOnnxscriptFoldedFromKey, "['type_emb.weight', 'val_3']");
  g->mutable_value_info(g->value_info_size() - 1)->set_name("expand");
  AddNode(g, "Add", {"x", "expand"}, "h", "%add : = call_function[target=aten.add](args = (%x, %expand))");
  AddNode(g, "MatMul", {"h", "val_9"}, "y", "%linear : = call_function[target=aten.linear](args = (%h, %p_emb_weight))");
  g->add_output()->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "folded.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Value* projection = (*graph)->FindValue("val_9");
  ASSERT_NE(projection, nullptr);
  ASSERT_NE(projection->producer, nullptr);
  EXPECT_EQ(projection->producer->op, "Transpose");
  EXPECT_EQ(projection->producer->inputs[0]->name, "emb.weight");
  const Value* expanded = (*graph)->FindValue("expand");
  ASSERT_NE(expanded->producer, nullptr);
  EXPECT_EQ(expanded->producer->op, "Expand");
  const Value* base = expanded->producer->inputs[0];
  EXPECT_EQ(base->name, "type_emb.weight");
  EXPECT_EQ(base->kind, ValueKind::kParameter);
  EXPECT_EQ(base->shape, (Shape{1, 4}));
  EXPECT_EQ((*graph)->ValuesOfKind(ValueKind::kParameter).size(), 2u);  // emb.weight and type_emb.weight
  ASSERT_NE(RoleOf(roles, "val_9"), nullptr);
  EXPECT_EQ(RoleOf(roles, "val_9")->kind, "derived");
}

// The optimizer's inference rewrites, told by the rule name it writes on the node: a zero
// bias it removed comes back as a trained zero parameter; a BatchNorm folded into a
// convolution is refused with the fix.
TEST(InitializerRoles, RemovedZeroBiasIsRestoredAndFoldedBatchNormRefused) {
  onnx::ModelProto m = Model();
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 4});
  AddInitializer(g, "fc.weight", testing::RandomTensor(DType::kF32, {3, 4}, 8));
  AddSignature(g, "fc.weight", "PARAMETER", "p_fc_weight");
  onnx::NodeProto* gemm =
      AddNode(g, "Gemm", {"x", "fc.weight"}, "y", "%linear : = call_function(args = (%x, %p_fc_weight, %p_fc_bias))");
  auto* trans = gemm->add_attribute();
  trans->set_name("transB");
  trans->set_type(onnx::AttributeProto::INT);
  trans->set_i(1);
  AddMetadata(gemm, 9, kOnnxscriptRuleNameKey, "RemoveOptionalBiasFromGemm");
  g->add_output()->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "bias.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Node* fc = (*graph)->outputs()[0]->producer;
  ASSERT_EQ(fc->inputs.size(), 3u);
  EXPECT_EQ(fc->inputs[2]->name, "fc_bias");
  EXPECT_EQ(fc->inputs[2]->kind, ValueKind::kParameter);
  EXPECT_EQ(fc->inputs[2]->shape, (Shape{3}));
  EXPECT_EQ(fc->inputs[2]->data.GetAsDouble(0), 0.0);

  onnx::ModelProto folded = Model();
  onnx::GraphProto* f = folded.mutable_graph();
  AddInput(f, "x", {2, 3, 4, 4});
  AddInitializer(f, "conv.weight", testing::RandomTensor(DType::kF32, {5, 3, 1, 1}, 9));
  AddMetadata(AddNode(f, "Conv", {"x", "conv.weight"}, "y"), 9, kOnnxscriptRuleNameKey, "FuseBatchNormIntoConv");
  f->add_output()->set_name("y");
  auto refused = ImportOnnxModel(folded, options, "bn.onnx");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("optimize=False"), std::string::npos) << refused.status();
}

// A rotary table computed from a buffer: Cos of constants is computed at import (and the
// inv_freq initializer feeding it is a buffer, even without a signature); Cos of an
// activation is refused with the node named.
TEST(InitializerRoles, CosOfBuffersIsComputedAtImportAndOfActivationsRefused) {
  onnx::ModelProto m = Model(18);
  m.set_ir_version(8);
  onnx::GraphProto* g = m.mutable_graph();
  AddInput(g, "x", {2, 4});
  AddInitializer(g, "inv_freq", Tensor::FromVector<float>({4}, {1.0f, 0.5f, 0.25f, 0.125f}));
  AddNode(g, "Cos", {"inv_freq"}, "table");
  AddNode(g, "Mul", {"x", "table"}, "y");
  g->add_output()->set_name("y");
  std::vector<InitializerRole> roles;
  const ImportOptions options = WithRoles(&roles);
  auto graph = ImportOnnxModel(m, options, "rotary.onnx");
  ASSERT_TRUE(graph.ok()) << graph.status();
  const Value* table = (*graph)->FindValue("table");
  ASSERT_NE(table, nullptr);
  EXPECT_EQ(table->kind, ValueKind::kConstant);
  EXPECT_FLOAT_EQ(static_cast<float>(table->data.GetAsDouble(1)), std::cos(0.5f));
  EXPECT_EQ(RoleOf(roles, "inv_freq")->kind, "constant");

  onnx::ModelProto bad = Model(18);
  bad.set_ir_version(8);
  onnx::GraphProto* b = bad.mutable_graph();
  AddInput(b, "x", {2, 4});
  AddNode(b, "Cos", {"x"}, "y");
  b->add_output()->set_name("y");
  auto refused = ImportOnnxModel(bad, options, "cos.onnx");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().message().find("'y_node' (Cos)"), std::string::npos) << refused.status();
}

}  // namespace
}  // namespace mpc
