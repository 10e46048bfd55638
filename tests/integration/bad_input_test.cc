// Bad input through the real command line: a garbage or truncated model, an
// unsupported op, a model/data shape mismatch, a missing data file, unknown and
// mistyped spec fields. Each must print a one-line error naming the problem, exit with
// code 1 (no crash, no abort), and leave the checkpoint directory untouched.
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "engine/dataset.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class BadInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    golden_ = testing::SourcePath("tests/golden/mlp");
    ckpt_ = dir_ + "/ckpt";
    std::filesystem::create_directories(ckpt_);
    // A checkpoint from an earlier run that a failing run must not damage.
    WriteFile(ckpt_ + "/checkpoint.pb", "previous checkpoint bytes");
    WriteFile(ckpt_ + "/notes.txt", "keep me");
    before_ = testing::DirectoryFingerprint(ckpt_);
  }

  // A spec like the golden SGD one with `replace` substitutions applied.
  std::string Spec(const std::string& extra_or_replacement = "", const std::string& model = "") {
    std::string text = ReadFile(golden_ + "/sgd.spec");
    text =
        absl::StrReplaceAll(text, {{"\"model.onnx\"", "\"" + (model.empty() ? golden_ + "/model.onnx" : model) + "\""},
                                   {"\"features.npy\"", "\"" + golden_ + "/features.npy\""},
                                   {"\"labels.npy\"", "\"" + golden_ + "/labels.npy\""}});
    text += "\n" + extra_or_replacement + "\n";
    const std::string path = dir_ + "/train.spec";
    WriteFile(path, text);
    return path;
  }

  // Runs mpc-train and checks the contract; returns the error line.
  std::string ExpectCleanFailure(const std::string& spec_path, const std::string& extra_flags = "") {
    const auto r = testing::RunCommand(
        absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec_path, " --checkpoint_dir ", ckpt_, " ", extra_flags));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
    EXPECT_EQ(lines.size(), 1u) << "expected a one-line error, got:\n" << r.output;
    EXPECT_EQ(testing::DirectoryFingerprint(ckpt_), before_) << "the checkpoint directory changed";
    return lines.empty() ? "" : lines[0];
  }

  std::string dir_, golden_, ckpt_, before_;
};

TEST_F(BadInputTest, GarbageModelFile) {
  WriteFile(dir_ + "/garbage.onnx", "this is not a protobuf \x01\x02\xff\xfe at all {{{");
  const std::string line = ExpectCleanFailure(Spec("", dir_ + "/garbage.onnx"));
  EXPECT_NE(line.find("garbage.onnx"), std::string::npos) << line;
  EXPECT_NE(line.find("not an ONNX model"), std::string::npos) << line;
}

TEST_F(BadInputTest, TruncatedModelFile) {
  const std::string bytes = ReadFile(golden_ + "/model.onnx");
  WriteFile(dir_ + "/truncated.onnx", bytes.substr(0, bytes.size() / 2));
  const std::string line = ExpectCleanFailure(Spec("", dir_ + "/truncated.onnx"));
  EXPECT_NE(line.find("truncated.onnx"), std::string::npos) << line;
}

TEST_F(BadInputTest, UnsupportedOp) {
  // The golden model with its Tanh renamed to an op mpc does not have.
  const std::string text = R"(ir_version: 8
opset_import { domain: "" version: 17 }
graph {
  name: "g"
  node { input: "x" output: "y" name: "my_node" op_type: "Hardmax" }
  input { name: "x" type { tensor_type { elem_type: 1 shape { dim { dim_param: "batch" } dim { dim_value: 20 } } } } }
  output { name: "y" type { tensor_type { elem_type: 1 shape { dim { dim_param: "batch" } dim { dim_value: 20 } } } } }
})";
  WriteFile(dir_ + "/unsupported.onnxtxt", text);
  const std::string line = ExpectCleanFailure(Spec("", dir_ + "/unsupported.onnxtxt"));
  EXPECT_NE(line.find("Hardmax"), std::string::npos) << line;
  EXPECT_NE(line.find("my_node"), std::string::npos) << line;
  EXPECT_NE(line.find("17"), std::string::npos) << line;
}

TEST_F(BadInputTest, ShapeMismatchBetweenModelAndData) {
  Tensor wide = testing::RandomTensor(DType::kF32, {64, 21}, 7);
  ASSERT_TRUE(WriteNpy(dir_ + "/wide.npy", wide).ok());
  std::string spec = Spec();
  std::string text = absl::StrReplaceAll(ReadFile(spec), {{golden_ + "/features.npy", dir_ + "/wide.npy"}});
  text = absl::StrReplaceAll(text, {{golden_ + "/labels.npy", dir_ + "/labels64.npy"}});
  Tensor labels = Tensor::FromVector<int64_t>({64}, std::vector<int64_t>(64, 1));
  ASSERT_TRUE(WriteNpy(dir_ + "/labels64.npy", labels).ok());
  WriteFile(spec, text);
  const std::string line = ExpectCleanFailure(spec);
  EXPECT_NE(line.find("shape mismatch"), std::string::npos) << line;
  EXPECT_NE(line.find("[21]"), std::string::npos) << line;
}

TEST_F(BadInputTest, MissingDataFile) {
  std::string spec = Spec();
  WriteFile(spec, absl::StrReplaceAll(ReadFile(spec), {{golden_ + "/features.npy", dir_ + "/nope.npy"}}));
  const std::string line = ExpectCleanFailure(spec);
  EXPECT_NE(line.find("nope.npy"), std::string::npos) << line;
  EXPECT_NE(line.find("not found"), std::string::npos) << line;
}

TEST_F(BadInputTest, UnknownSpecField) {
  const std::string line = ExpectCleanFailure(Spec("learning_rate_typo: 3"));
  EXPECT_NE(line.find("learning_rate_typo"), std::string::npos) << line;
  EXPECT_NE(line.find("train.spec"), std::string::npos) << line;
}

TEST_F(BadInputTest, MistypedSpecField) {
  std::string spec = Spec();
  WriteFile(spec, absl::StrReplaceAll(ReadFile(spec), {{"batch_size: 16", "batch_size: \"sixteen\""}}));
  const std::string line = ExpectCleanFailure(spec);
  EXPECT_NE(line.find("batch_size"), std::string::npos) << line;
}

TEST_F(BadInputTest, InvalidSpecValueNamesTheFieldPath) {
  std::string spec = Spec();
  WriteFile(spec, absl::StrReplaceAll(ReadFile(spec), {{"momentum: 0.9", "momentum: 1.5"}}));
  const std::string line = ExpectCleanFailure(spec);
  EXPECT_NE(line.find("optimizer.sgd.momentum"), std::string::npos) << line;
}

TEST_F(BadInputTest, MissingSpecFile) {
  const std::string line = ExpectCleanFailure(dir_ + "/does_not_exist.spec");
  EXPECT_NE(line.find("does_not_exist.spec"), std::string::npos) << line;
}

// Token ids outside an embedding table: the CPU's Gather would stop the first step, the
// GPU's would read a zero row; the engine rejects the data before training, naming the
// example and the table, on every backend.
TEST_F(BadInputTest, TokenIdOutsideTheEmbeddingTable) {
  // tokens [batch, 4] -> Gather(emb [10, 8]) -> ReduceMean over the tokens -> Gemm -> 3 logits.
  std::string emb, w, b;
  for (int i = 0; i < 80; ++i) absl::StrAppend(&emb, " float_data: ", 0.01 * (i % 17) - 0.08);
  for (int i = 0; i < 24; ++i) absl::StrAppend(&w, " float_data: ", 0.02 * (i % 7) - 0.06);
  for (int i = 0; i < 3; ++i) absl::StrAppend(&b, " float_data: 0");
  const std::string model = absl::StrCat(R"(ir_version: 8
opset_import { domain: "" version: 17 }
graph {
  name: "embed"
  node { input: "emb" input: "tokens" output: "e" name: "lookup" op_type: "Gather" }
  node { input: "e" output: "m" name: "pool" op_type: "ReduceMean"
         attribute { name: "axes" ints: 1 type: INTS } attribute { name: "keepdims" i: 0 type: INT } }
  node { input: "m" input: "w" input: "b" output: "logits" name: "head" op_type: "Gemm" }
  initializer { name: "emb" dims: 10 dims: 8 data_type: 1)",
                                         emb, R"( }
  initializer { name: "w" dims: 8 dims: 3 data_type: 1)",
                                         w, R"( }
  initializer { name: "b" dims: 3 data_type: 1)",
                                         b, R"( }
  input { name: "tokens" type { tensor_type { elem_type: 7 shape { dim { dim_param: "batch" } dim { dim_value: 4 } } } } }
  output { name: "logits" type { tensor_type { elem_type: 1 shape { dim { dim_param: "batch" } dim { dim_value: 3 } } } } }
})");
  WriteFile(dir_ + "/embed.onnxtxt", model);
  std::vector<int64_t> tokens(16 * 4), labels(16);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7) % 10);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3);
  tokens[9 * 4 + 2] = 10;  // example 9, third token: one past the table
  ASSERT_TRUE(WriteNpy(dir_ + "/tokens.npy", Tensor::FromVector<int64_t>({16, 4}, tokens)).ok());
  ASSERT_TRUE(WriteNpy(dir_ + "/labels.npy", Tensor::FromVector<int64_t>({16}, labels)).ok());
  const std::string spec = dir_ + "/embed.spec";
  WriteFile(spec, absl::StrCat("model: \"", dir_, "/embed.onnxtxt\"\nfeatures_input: \"tokens\"\n",
                               "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n",
                               "train_data { npy { features: \"", dir_, "/tokens.npy\" labels: \"", dir_,
                               "/labels.npy\" } }\nbatch_size: 4\nsteps: 2\noptimizer { sgd { lr: 0.1 } }\n"));
  const std::string line = ExpectCleanFailure(spec);
  for (const char* part :
       {"training data features", "example 9", "is 10", "'tokens'", "'emb'", "10 entries", "'lookup'"}) {
    EXPECT_NE(line.find(part), std::string::npos) << part << " missing from: " << line;
  }
  // `mpc run` checks what it is fed the same way.
  const auto run =
      testing::RunCommand(absl::StrCat(MPC_TOOL_BIN, " run --model ", dir_, "/embed.onnxtxt --input tokens=", dir_,
                                       "/tokens.npy --output-dir ", dir_, "/out"));
  EXPECT_EQ(run.exit_code, 1) << run.output;
  for (const char* part : {"input 'tokens'", "example 9", "is 10", "'emb'"}) {
    EXPECT_NE(run.output.find(part), std::string::npos) << part << " missing from: " << run.output;
  }
  // The same data with the id in range trains.
  tokens[9 * 4 + 2] = 9;
  ASSERT_TRUE(WriteNpy(dir_ + "/tokens.npy", Tensor::FromVector<int64_t>({16, 4}, tokens)).ok());
  const auto ok = testing::RunCommand(absl::StrCat(MPC_TRAIN_BIN, " --spec ", spec));
  EXPECT_EQ(ok.exit_code, 0) << ok.output;
}

TEST_F(BadInputTest, CompileToolReportsTheSameErrors) {
  WriteFile(dir_ + "/garbage.onnx", "garbage");
  const auto r = testing::RunCommand(absl::StrCat(MPC_TOOL_BIN, " compile --spec ", Spec("", dir_ + "/garbage.onnx")));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("garbage.onnx"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace mpc
