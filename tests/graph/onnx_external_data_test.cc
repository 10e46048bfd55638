// Tests for ONNX external data (graph/onnx_external_data.h): models saved by Python onnx
// with their weights in a side file import with the same values as the same model saved
// inline; offsets and lengths are honoured; each way a side file or its entries can be
// wrong gives a message naming the tensor and the file; and mpc's export with external
// data (asked for, or automatic above the inline size limit) round-trips through mpc's
// importer and through onnx.load + onnx.checker.
#include "graph/onnx_external_data.h"

#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "base/file_util.h"
#include "graph/onnx_export.h"
#include "graph/onnx_import.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

::testing::AssertionResult HasText(absl::string_view text, absl::string_view needle) {
  if (text.find(needle) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << needle << "' not found in: " << text;
}

std::string Bytes(const Tensor& t) { return std::string(static_cast<const char*>(t.raw()), t.bytes()); }

int RunPython(const std::string& args) {
  const std::string command =
      absl::StrCat(testing::Python(), " ", testing::SourcePath("tests/graph/onnx_external_data_fixture.py"), " ", args);
  return std::system(command.c_str());
}

// name -> bytes of every initializer-like value (parameters, state, constants).
std::map<std::string, std::string> WeightBytes(const Graph& g) {
  std::map<std::string, std::string> out;
  for (ValueKind kind : {ValueKind::kParameter, ValueKind::kState, ValueKind::kConstant}) {
    for (const Value* v : g.ValuesOfKind(kind)) out[v->name] = Bytes(v->data);
  }
  return out;
}

// x[N,8] -> Gemm(w1[16,8], b1) -> Relu -> Gemm(w2[4,16], b2) -> y. w1 (512 bytes) and
// w2 (256 bytes) are written by the tests into side files; b1 and b2 stay inline.
onnx::ModelProto SmallMlp(const Tensor& w1, const Tensor& w2) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("small");
  auto add_init = [g](const std::string& name, const Tensor& t) {
    onnx::TensorProto* init = g->add_initializer();
    init->set_name(name);
    init->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : t.shape()) init->add_dims(d);
    init->set_raw_data(t.raw(), t.bytes());
  };
  add_init("w1", w1);
  add_init("b1", testing::RandomTensor(DType::kF32, {16}, 12));
  add_init("w2", w2);
  add_init("b2", testing::RandomTensor(DType::kF32, {4}, 14));
  auto io = [](google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name, int64_t d1) {
    auto* info = list->Add();
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_value(2);
    tt->mutable_shape()->add_dim()->set_dim_value(d1);
  };
  io(g->mutable_input(), "x", 8);
  io(g->mutable_output(), "y", 4);
  auto node = [g](const std::string& op, const std::string& name, std::vector<std::string> in, std::string out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  auto trans_b = [](onnx::NodeProto* n) {
    auto* a = n->add_attribute();
    a->set_name("transB");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
  };
  trans_b(node("Gemm", "fc1", {"x", "w1", "b1"}, "h"));
  node("Relu", "relu", {"h"}, "a");
  trans_b(node("Gemm", "fc2", {"a", "w2", "b2"}, "y"));
  return m;
}

// Points initializer `name` at a side file; offset/length < 0 leave the entry out.
void MakeExternal(onnx::ModelProto& m, const std::string& name, const std::string& location, int64_t offset,
                  int64_t length) {
  for (auto& init : *m.mutable_graph()->mutable_initializer()) {
    if (init.name() != name) continue;
    init.clear_raw_data();
    init.set_data_location(onnx::TensorProto::EXTERNAL);
    auto add = [&init](const std::string& key, const std::string& value) {
      auto* e = init.add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    add("location", location);
    if (offset >= 0) add("offset", absl::StrCat(offset));
    if (length >= 0) add("length", absl::StrCat(length));
  }
}

std::string WriteModel(const std::string& dir, const std::string& name, const onnx::ModelProto& m) {
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << m.SerializeAsString();
  return path;
}

// A side file: 100 bytes of 0x5A, w1 at offset 100, 0xA5 filler up to 1000, w2 at 1000
// to the end of the file.
struct SideFile {
  Tensor w1 = testing::RandomTensor(DType::kF32, {16, 8}, 11);
  Tensor w2 = testing::RandomTensor(DType::kF32, {4, 16}, 13);
  std::string Contents() const {
    std::string data(100, '\x5a');
    data += Bytes(w1);
    data += std::string(1000 - data.size(), '\xa5');
    data += Bytes(w2);
    return data;
  }
};

TEST(OnnxExternalData, PythonSavedModelMatchesInlineCopy) {
  const std::string dir = testing::MakeTempDir("onnx_ext_python");
  ASSERT_EQ(RunPython(absl::StrCat("save ", dir)), 0);
  ASSERT_TRUE(std::filesystem::exists(dir + "/weights.data"));
  // The model file itself is small: the weights are outside it.
  EXPECT_LT(std::filesystem::file_size(dir + "/ext.onnx"), std::filesystem::file_size(dir + "/inline.onnx") / 4);

  auto proto = ReadOnnxModelFile(dir + "/ext.onnx");
  ASSERT_TRUE(proto.ok()) << proto.status();
  int external = 0;
  for (const auto& init : proto->graph().initializer()) external += UsesExternalData(init);
  EXPECT_EQ(external, 2);  // w1 and w2; the biases are under the 1024-byte threshold

  auto inline_graph = ImportOnnxFile(dir + "/inline.onnx", ImportOptions{});
  ASSERT_TRUE(inline_graph.ok()) << inline_graph.status();
  auto ext_graph = ImportOnnxFile(dir + "/ext.onnx", ImportOptions{});
  ASSERT_TRUE(ext_graph.ok()) << ext_graph.status();
  const auto want = WeightBytes(**inline_graph);
  const auto got = WeightBytes(**ext_graph);
  ASSERT_EQ(want.size(), 5u);  // w1, b1, w2, b2 and the Constant's value (external too)
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, bytes] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name), bytes) << name;
    EXPECT_NE(bytes, std::string(bytes.size(), '\0')) << name;
  }
}

TEST(OnnxExternalData, OffsetsAndDefaultLengthInOneFile) {
  const std::string dir = testing::MakeTempDir("onnx_ext_offsets");
  SideFile side;
  ASSERT_TRUE(WriteFileAtomically(dir + "/w.bin", side.Contents()).ok());
  onnx::ModelProto m = SmallMlp(side.w1, side.w2);
  MakeExternal(m, "w1", "w.bin", 100, side.w1.bytes());
  MakeExternal(m, "w2", "w.bin", 1000, -1);  // no length: the rest of the file
  auto g = ImportOnnxFile(WriteModel(dir, "m.onnx", m), ImportOptions{});
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(Bytes((*g)->FindValue("w1")->data), Bytes(side.w1));
  EXPECT_EQ(Bytes((*g)->FindValue("w2")->data), Bytes(side.w2));

  // A subdirectory of the model's directory is inside it, and "./" is fine.
  std::filesystem::create_directories(dir + "/data");
  std::filesystem::copy_file(dir + "/w.bin", dir + "/data/w.bin");
  onnx::ModelProto sub = SmallMlp(side.w1, side.w2);
  MakeExternal(sub, "w1", "./data/w.bin", 100, side.w1.bytes());
  MakeExternal(sub, "w2", "data/../data/w.bin", 1000, side.w2.bytes());
  auto g2 = ImportOnnxFile(WriteModel(dir, "sub.onnx", sub), ImportOptions{});
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ(Bytes((*g2)->FindValue("w2")->data), Bytes(side.w2));
}

// Imports SmallMlp with w1 made external by `edit`, from a model file in a fresh dir
// that also holds w.bin (SideFile's layout).
absl::Status ImportWithW1(const std::string& test, const std::string& location, int64_t offset, int64_t length) {
  const std::string dir = testing::MakeTempDir(test);
  SideFile side;
  EXPECT_TRUE(WriteFileAtomically(dir + "/w.bin", side.Contents()).ok());
  onnx::ModelProto m = SmallMlp(side.w1, side.w2);
  MakeExternal(m, "w1", location, offset, length);
  return ImportOnnxFile(WriteModel(dir, "m.onnx", m), ImportOptions{}).status();
}

TEST(OnnxExternalData, MissingFileNamesTensorAndPath) {
  absl::Status st = ImportWithW1("onnx_ext_missing", "nothere.bin", 0, 512);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(HasText(st.message(), "initializer 'w1'"));
  EXPECT_TRUE(HasText(st.message(), "onnx_ext_missing"));  // the directory tried
  EXPECT_TRUE(HasText(st.message(), "/nothere.bin"));
  EXPECT_TRUE(HasText(st.message(), "next to the model"));
}

TEST(OnnxExternalData, AbsoluteAndEscapingLocationsRefused) {
  absl::Status abs = ImportWithW1("onnx_ext_abs", "/etc/passwd", 0, 512);
  ASSERT_FALSE(abs.ok());
  EXPECT_TRUE(HasText(abs.message(), "initializer 'w1'"));
  EXPECT_TRUE(HasText(abs.message(), "'/etc/passwd' is an absolute path"));
  EXPECT_TRUE(HasText(abs.message(), "relative to the model's directory"));

  absl::Status up = ImportWithW1("onnx_ext_up", "../w.bin", 0, 512);
  ASSERT_FALSE(up.ok());
  EXPECT_TRUE(HasText(up.message(), "'../w.bin' points outside the model's directory"));
  absl::Status hidden = ImportWithW1("onnx_ext_up2", "data/../../w.bin", 0, 512);
  ASSERT_FALSE(hidden.ok());
  EXPECT_TRUE(HasText(hidden.message(), "points outside the model's directory"));
}

TEST(OnnxExternalData, OffsetAndLengthChecked) {
  // SideFile is 100 + 512 + 388 + 256 = 1256 bytes.
  absl::Status past = ImportWithW1("onnx_ext_past", "w.bin", 5000, 512);
  ASSERT_FALSE(past.ok());
  EXPECT_TRUE(HasText(past.message(), "initializer 'w1'"));
  EXPECT_TRUE(HasText(past.message(), "offset 5000 is beyond the end of"));
  EXPECT_TRUE(HasText(past.message(), "(1256 bytes)"));

  absl::Status runs = ImportWithW1("onnx_ext_runs", "w.bin", 1000, 512);
  ASSERT_FALSE(runs.ok());
  EXPECT_TRUE(HasText(runs.message(), "offset 1000 + length 512 runs past the end"));

  absl::Status wrong = ImportWithW1("onnx_ext_len", "w.bin", 100, 256);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(HasText(wrong.message(), "is 256 bytes (offset 100), but its type and shape need 512 bytes"));

  // No length: the rest of the file, 1156 bytes from offset 100, is not w1's 512.
  absl::Status rest = ImportWithW1("onnx_ext_rest", "w.bin", 100, -1);
  ASSERT_FALSE(rest.ok());
  EXPECT_TRUE(HasText(rest.message(), "is 1156 bytes (offset 100), but its type and shape need 512 bytes"));

  absl::Status garbage = ImportWithW1("onnx_ext_garbage", "w.bin", -1, -1);  // offset 0, rest of file
  ASSERT_FALSE(garbage.ok());
  EXPECT_TRUE(HasText(garbage.message(), "is 1256 bytes"));
}

TEST(OnnxExternalData, ModelFromBytesCannotUseExternalData) {
  SideFile side;
  onnx::ModelProto m = SmallMlp(side.w1, side.w2);
  MakeExternal(m, "w2", "w.bin", 1000, 256);
  auto from_bytes = ImportOnnxBytes(m.SerializeAsString(), ImportOptions{}, "<bytes>");
  ASSERT_FALSE(from_bytes.ok());
  EXPECT_TRUE(HasText(from_bytes.status().message(), "<bytes>: initializer 'w2'"));
  EXPECT_TRUE(HasText(from_bytes.status().message(), "('w.bin')"));
  EXPECT_TRUE(HasText(from_bytes.status().message(), "read from memory"));
  // ImportOnnxModel without a directory says the same.
  auto from_proto = ImportOnnxModel(m, ImportOptions{}, "proto.onnx");
  ASSERT_FALSE(from_proto.ok());
  EXPECT_TRUE(HasText(from_proto.status().message(), "initializer 'w2'"));
}

// A graph whose w1/w2 are 512/256 bytes (above and below a 300-byte threshold).
std::unique_ptr<Graph> ImportedSmallMlp() {
  SideFile side;
  auto g = ImportOnnxModel(SmallMlp(side.w1, side.w2), ImportOptions{}, "small.onnx");
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : nullptr;
}

void ExpectNoTempFiles(const std::string& dir) {
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    EXPECT_EQ(entry.path().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST(OnnxExternalData, ExportWritesSideFileThatRoundTrips) {
  std::unique_ptr<Graph> g = ImportedSmallMlp();
  ASSERT_NE(g, nullptr);
  const std::string dir = testing::MakeTempDir("onnx_ext_export");
  ExportOptions options;
  options.external_data = true;
  options.external_data_threshold = 300;
  ASSERT_TRUE(ExportOnnxFile(*g, options, dir + "/model.onnx").ok());
  ASSERT_TRUE(ExportOnnxFile(*g, ExportOptions{}, dir + "/inline.onnx").ok());
  ExpectNoTempFiles(dir);
  ASSERT_TRUE(std::filesystem::exists(dir + "/model.onnx.data"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/inline.onnx.data"));

  auto proto = ReadOnnxModelFile(dir + "/model.onnx");
  ASSERT_TRUE(proto.ok()) << proto.status();
  std::map<std::string, std::map<std::string, std::string>> entries;
  for (const auto& init : proto->graph().initializer()) {
    if (!UsesExternalData(init)) continue;
    for (const auto& e : init.external_data()) entries[init.name()][e.key()] = e.value();
  }
  ASSERT_EQ(entries.size(), 1u);  // w1 only: w2 is 256 bytes, under the threshold
  EXPECT_EQ(entries["w1"]["location"], "model.onnx.data");
  EXPECT_EQ(std::stoll(entries["w1"]["offset"]) % ExternalDataWriter::kAlignment, 0);
  EXPECT_EQ(entries["w1"]["length"], "512");

  auto back = ImportOnnxFile(dir + "/model.onnx", ImportOptions{});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(WeightBytes(**back), WeightBytes(*g));
  // Python onnx reads it too: onnx.load, the checker on the path, equal arrays.
  EXPECT_EQ(RunPython(absl::StrCat("check ", dir, "/model.onnx ", dir, "/inline.onnx")), 0);

  // Exporting again over the same files replaces both.
  options.external_data_file = "weights.bin";
  options.external_data_threshold = 100;  // w1 and w2: the second at an aligned offset
  ASSERT_TRUE(ExportOnnxFile(*g, options, dir + "/model.onnx").ok());
  ExpectNoTempFiles(dir);
  EXPECT_EQ(std::filesystem::file_size(dir + "/weights.bin"),
            static_cast<uintmax_t>(ExternalDataWriter::kAlignment + 256));
  auto again = ImportOnnxFile(dir + "/model.onnx", ImportOptions{});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(WeightBytes(**again), WeightBytes(*g));
  EXPECT_EQ(RunPython(absl::StrCat("check ", dir, "/model.onnx ", dir, "/inline.onnx")), 0);

  // Nothing at or above the threshold: no side file is written.
  options.external_data_file = "";
  options.external_data_threshold = 1 << 20;
  ASSERT_TRUE(ExportOnnxFile(*g, options, dir + "/none.onnx").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/none.onnx.data"));
  ExpectNoTempFiles(dir);
  auto none = ImportOnnxFile(dir + "/none.onnx", ImportOptions{});
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(WeightBytes(**none), WeightBytes(*g));

  options.external_data_file = "../escape.data";
  absl::Status bad = ExportOnnxFile(*g, options, dir + "/model.onnx");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(HasText(bad.message(), "must be a plain file name"));
}

TEST(OnnxExternalData, ExportSwitchesToExternalDataAboveInlineLimit) {
  std::unique_ptr<Graph> g = ImportedSmallMlp();
  ASSERT_NE(g, nullptr);
  const std::string dir = testing::MakeTempDir("onnx_ext_auto");
  // The default limit (1.8 GiB) keeps this model inline.
  ASSERT_TRUE(ExportOnnxFile(*g, ExportOptions{}, dir + "/small.onnx").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/small.onnx.data"));
  EXPECT_EQ(ExportOptions{}.max_inline_bytes, ExportOptions::kMaxInlineOnnxBytes);

  // 512 + 64 + 256 + 16 = 848 bytes of initializers: over a limit of 800, external data
  // is used although not asked for, with the default 1024-byte threshold lowered here
  // so that the 512-byte w1 goes out.
  ExportOptions options;
  options.max_inline_bytes = 800;
  options.external_data_threshold = 500;
  ASSERT_TRUE(ExportOnnxFile(*g, options, dir + "/big.onnx").ok());
  ExpectNoTempFiles(dir);
  ASSERT_TRUE(std::filesystem::exists(dir + "/big.onnx.data"));
  EXPECT_EQ(std::filesystem::file_size(dir + "/big.onnx.data"), 512u);
  auto back = ImportOnnxFile(dir + "/big.onnx", ImportOptions{});
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(WeightBytes(**back), WeightBytes(*g));

  options.max_inline_bytes = 848;  // at the limit: still inline
  ASSERT_TRUE(ExportOnnxFile(*g, options, dir + "/edge.onnx").ok());
  EXPECT_FALSE(std::filesystem::exists(dir + "/edge.onnx.data"));
}

}  // namespace
}  // namespace mpc
