// `mpc run` and the inference entry point behind it (engine/inference.h): a tiny ONNX
// model built here (Gemm -> Softmax, a dynamic batch axis, two outputs, no loss) runs on
// .npy inputs; the outputs are compared with a float64 reference computed in the test.
// Bad input (missing or unknown inputs, a bad .npy, wrong shape or dtype, a missing
// model) must give a one-line error, exit code 1 and no output files.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/dataset.h"
#include "engine/inference.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kIn = 3, kOut = 4;

void AddTensorInfo(onnx::ValueInfoProto* info, const std::string& name, const std::vector<std::string>& dims) {
  info->set_name(name);
  auto* tt = info->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (const std::string& d : dims) {
    if (std::isdigit(static_cast<unsigned char>(d[0]))) {
      tt->mutable_shape()->add_dim()->set_dim_value(std::stoll(d));
    } else {
      tt->mutable_shape()->add_dim()->set_dim_param(d);
    }
  }
}

std::vector<float> Weights() {
  std::vector<float> w(kIn * kOut);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.25f * static_cast<float>(i % 5) - 0.4f;
  return w;
}
std::vector<float> Bias() { return {0.1f, -0.2f, 0.3f, 0.0f}; }

// logits = x @ W + b (Gemm); probs = Softmax(logits); x is f32[batch, 3].
onnx::ModelProto TinyModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("mpc_run_test");
  auto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("tiny");
  AddTensorInfo(g->add_input(), "x", {"batch", "3"});
  auto* w = g->add_initializer();
  w->set_name("W");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(kIn);
  w->add_dims(kOut);
  for (float v : Weights()) w->add_float_data(v);
  auto* b = g->add_initializer();
  b->set_name("b");
  b->set_data_type(onnx::TensorProto::FLOAT);
  b->add_dims(kOut);
  for (float v : Bias()) b->add_float_data(v);
  auto* gemm = g->add_node();
  gemm->set_op_type("Gemm");
  gemm->set_name("fc");
  gemm->add_input("x");
  gemm->add_input("W");
  gemm->add_input("b");
  gemm->add_output("logits");
  auto* softmax = g->add_node();
  softmax->set_op_type("Softmax");
  softmax->set_name("softmax");
  softmax->add_input("logits");
  softmax->add_output("probs");
  auto* axis = softmax->add_attribute();
  axis->set_name("axis");
  axis->set_type(onnx::AttributeProto::INT);
  axis->set_i(-1);
  AddTensorInfo(g->add_output(), "logits", {"batch", "4"});
  AddTensorInfo(g->add_output(), "probs", {"batch", "4"});
  return m;
}

// TinyModel with a node put in front of the Gemm, which now reads "x_in": `front` builds
// it (reading "x", writing "x_in").
onnx::ModelProto TinyModelWithFront(const std::function<void(onnx::GraphProto*, onnx::NodeProto*)>& front) {
  onnx::ModelProto m = TinyModel();
  onnx::GraphProto* g = m.mutable_graph();
  g->mutable_node(0)->set_input(0, "x_in");
  onnx::NodeProto* n = g->add_node();
  front(g, n);
  for (int i = g->node_size() - 1; i > 0; --i) g->mutable_node()->SwapElements(i, i - 1);  // first in order
  return m;
}

// x is a bf16 model input, cast to f32 for the Gemm.
onnx::ModelProto Bf16InputModel() {
  return TinyModelWithFront([](onnx::GraphProto* g, onnx::NodeProto* n) {
    g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::BFLOAT16);
    n->set_op_type("Cast");
    n->set_name("to_f32");
    n->add_input("x");
    n->add_output("x_in");
    auto* to = n->add_attribute();
    to->set_name("to");
    to->set_type(onnx::AttributeProto::INT);
    to->set_i(onnx::TensorProto::FLOAT);
  });
}

// A Dropout exported in training mode (its training_mode input an initializer holding true).
onnx::ModelProto TrainingModeDropoutModel() {
  return TinyModelWithFront([](onnx::GraphProto* g, onnx::NodeProto* n) {
    auto* ratio = g->add_initializer();
    ratio->set_name("ratio");
    ratio->set_data_type(onnx::TensorProto::FLOAT);
    ratio->add_float_data(0.5f);
    auto* training = g->add_initializer();
    training->set_name("training_mode");
    training->set_data_type(onnx::TensorProto::BOOL);
    training->add_int32_data(1);
    n->set_op_type("Dropout");
    n->set_name("drop");
    n->add_input("x");
    n->add_input("ratio");
    n->add_input("training_mode");
    n->add_output("x_in");
  });
}

Tensor Input(int64_t batch, uint64_t seed = 7) { return testing::RandomTensor(DType::kF32, {batch, kIn}, seed); }

// float64 reference: logits and softmax probabilities.
std::pair<Tensor, Tensor> Reference(const Tensor& x) {
  const int64_t batch = x.shape()[0];
  const std::vector<float> w = Weights(), b = Bias();
  Tensor logits(DType::kF32, {batch, kOut}), probs(DType::kF32, {batch, kOut});
  for (int64_t r = 0; r < batch; ++r) {
    double l[kOut], mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j < kOut; ++j) {
      l[j] = b[j];
      for (int64_t k = 0; k < kIn; ++k) l[j] += static_cast<double>(x.data<float>()[r * kIn + k]) * w[k * kOut + j];
      mx = std::max(mx, l[j]);
    }
    for (int64_t j = 0; j < kOut; ++j) sum += std::exp(l[j] - mx);
    for (int64_t j = 0; j < kOut; ++j) {
      logits.data<float>()[r * kOut + j] = static_cast<float>(l[j]);
      probs.data<float>()[r * kOut + j] = static_cast<float>(std::exp(l[j] - mx) / sum);
    }
  }
  return {logits, probs};
}

// ---- The library entry point -------------------------------------------------------------

TEST(InferenceSessionTest, RunsAModelWithoutALossAndMatchesTheReference) {
  auto session = InferenceSession::FromBytes(TinyModel().SerializeAsString());
  ASSERT_TRUE(session.ok()) << session.status();
  ASSERT_EQ((*session)->inputs().size(), 1u);
  EXPECT_EQ((*session)->inputs()[0].ToString(), "f32[batch,3]");
  ASSERT_EQ((*session)->outputs().size(), 2u);
  // Two batch sizes: each compiles its own program from the same session.
  for (int64_t batch : {5, 2}) {
    const Tensor x = Input(batch, 11 + batch);
    auto out = (*session)->Run({{"x", x}});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), 2u);
    const auto [logits, probs] = Reference(x);
    EXPECT_EQ((*out)[0].name, "logits");
    EXPECT_EQ((*out)[1].name, "probs");
    EXPECT_EQ((*out)[0].value.dtype(), DType::kF32);
    EXPECT_EQ((*out)[0].value.shape(), (Shape{batch, kOut}));
    EXPECT_EQ((*out)[1].value.shape(), (Shape{batch, kOut}));
    EXPECT_LT(testing::RelativeError((*out)[0].value, logits), 1e-5);
    EXPECT_LT(testing::RelativeError((*out)[1].value, probs), 1e-5);
  }
  EXPECT_EQ((*session)->device(), "cpu");
}

TEST(InferenceSessionTest, Bf16GoesThroughAutocastAndReturnsTheModelsDtype) {
  InferenceOptions options;
  options.precision = "bf16";
  auto session = InferenceSession::FromBytes(TinyModel().SerializeAsString(), options);
  ASSERT_TRUE(session.ok()) << session.status();
  const Tensor x = Input(8);
  auto out = (*session)->Run({{"x", x}});
  ASSERT_TRUE(out.ok()) << out.status();
  const auto [logits, probs] = Reference(x);
  EXPECT_EQ((*out)[0].value.dtype(), DType::kF32);
  const double err = testing::RelativeError((*out)[0].value, logits);
  EXPECT_LT(err, 1e-2);
  EXPECT_GT(err, 1e-6) << "bf16 gave f32-exact logits: did autocast run?";
  EXPECT_LT(testing::RelativeError((*out)[1].value, probs), 1e-2);
}

TEST(InferenceSessionTest, FeedErrorsNameTheInputAndTheExpectedType) {
  auto session = InferenceSession::FromBytes(TinyModel().SerializeAsString(), {}, "tiny.onnx");
  ASSERT_TRUE(session.ok()) << session.status();
  auto missing = (*session)->Run({});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("'x' f32[batch,3]"), std::string::npos) << missing.status();

  auto unknown = (*session)->Run({{"x", Input(2)}, {"y", Input(2)}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("no input named 'y'"), std::string::npos) << unknown.status();

  auto shape = (*session)->Run({{"x", testing::RandomTensor(DType::kF32, {2, 5}, 1)}});
  ASSERT_FALSE(shape.ok());
  EXPECT_NE(shape.status().message().find("input 'x' expects f32[batch,3] but was given f32[2,5]"), std::string::npos)
      << shape.status();

  auto dtype = (*session)->Run({{"x", Tensor(DType::kI64, {2, 3})}});
  ASSERT_FALSE(dtype.ok());
  EXPECT_NE(dtype.status().message().find("dtype i64 instead of f32"), std::string::npos) << dtype.status();

  InferenceOptions bad_precision;
  bad_precision.precision = "f12";
  auto precision = InferenceSession::FromBytes(TinyModel().SerializeAsString(), bad_precision);
  EXPECT_FALSE(precision.ok());
  auto garbage = InferenceSession::FromBytes("not a model", {}, "garbage.bin");
  ASSERT_FALSE(garbage.ok());
  EXPECT_NE(garbage.status().message().find("garbage.bin"), std::string::npos) << garbage.status();
}

// ScatterND at constant indices into data the model is fed (T5's shift_right in a
// TorchScript export): f32 rows [4,3] with index 3 written twice (the last update wins, as
// ONNX applies them in order) and i64 elements [2,5] at (0,0) and (1,4); the f32 scatter
// sits in a local function, so the call is inlined first.
TEST(InferenceSessionTest, ScatterNdAtConstantIndicesRunsOnComputedData) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  for (const auto& [domain, version] : std::vector<std::pair<std::string, int64_t>>{{"", 18}, {"local", 1}}) {
    auto* opset = m.add_opset_import();
    opset->set_domain(domain);
    opset->set_version(version);
  }
  auto* g = m.mutable_graph();
  g->set_name("scatter");
  auto add_info = [](google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list, const std::string& name,
                     int type, std::vector<int64_t> dims) {
    auto* tt = list->Add()->mutable_type()->mutable_tensor_type();
    list->rbegin()->set_name(name);
    tt->set_elem_type(type);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  auto add_indices = [&](const std::string& name, std::vector<int64_t> dims, std::vector<int64_t> values) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
  };
  add_info(g->mutable_input(), "x", onnx::TensorProto::FLOAT, {4, 3});
  add_info(g->mutable_input(), "u", onnx::TensorProto::FLOAT, {3, 3});
  add_info(g->mutable_input(), "ids", onnx::TensorProto::INT64, {2, 5});
  add_info(g->mutable_input(), "v", onnx::TensorProto::INT64, {2});
  add_indices("rows", {3, 1}, {3, 1, 3});
  add_indices("cells", {2, 2}, {0, 0, 1, 4});
  onnx::FunctionProto* f = m.add_functions();
  f->set_domain("local");
  f->set_name("ScatterRows");
  f->add_input("D");
  f->add_input("I");
  f->add_input("U");
  f->add_output("Y");
  auto* f_opset = f->add_opset_import();
  f_opset->set_domain("");
  f_opset->set_version(18);
  auto* body = f->add_node();
  body->set_op_type("ScatterND");
  for (const char* in : {"D", "I", "U"}) body->add_input(in);
  body->add_output("Y");
  auto* call = g->add_node();
  call->set_op_type("ScatterRows");
  call->set_domain("local");
  call->set_name("scatter_rows");
  for (const char* in : {"x", "rows", "u"}) call->add_input(in);
  call->add_output("y");
  auto* cells = g->add_node();
  cells->set_op_type("ScatterND");
  cells->set_name("scatter_cells");
  for (const char* in : {"ids", "cells", "v"}) cells->add_input(in);
  cells->add_output("shifted");
  add_info(g->mutable_output(), "y", onnx::TensorProto::FLOAT, {4, 3});
  add_info(g->mutable_output(), "shifted", onnx::TensorProto::INT64, {2, 5});

  auto session = InferenceSession::FromBytes(m.SerializeAsString(), {}, "scatter.onnx");
  ASSERT_TRUE(session.ok()) << session.status();
  const Tensor x = testing::RandomTensor(DType::kF32, {4, 3}, 21);
  const Tensor u = testing::RandomTensor(DType::kF32, {3, 3}, 22);
  Tensor ids(DType::kI64, {2, 5}), v(DType::kI64, {2});
  for (int64_t i = 0; i < 10; ++i) ids.data<int64_t>()[i] = 100 + i;
  v.data<int64_t>()[0] = -7;
  v.data<int64_t>()[1] = 9;
  auto out = (*session)->Run({{"x", x}, {"u", u}, {"ids", ids}, {"v", v}});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  const Tensor& y = (*out)[0].value;
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t c = 0; c < 3; ++c) {
      const float want = r == 1 ? u.data<float>()[1 * 3 + c] : r == 3 ? u.data<float>()[2 * 3 + c] : x.data<float>()[r * 3 + c];
      EXPECT_EQ(y.data<float>()[r * 3 + c], want) << "row " << r << " column " << c;
    }
  }
  const Tensor& shifted = (*out)[1].value;
  ASSERT_EQ(shifted.dtype(), DType::kI64);
  for (int64_t i = 0; i < 10; ++i) {
    const int64_t want = i == 0 ? -7 : i == 9 ? 9 : 100 + i;
    EXPECT_EQ(shifted.data<int64_t>()[i], want) << "element " << i;
  }
}

// ---- mpc run -----------------------------------------------------------------------------

class MpcRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    model_ = dir_ + "/tiny.onnx";
    std::ofstream out(model_, std::ios::binary);
    ASSERT_TRUE(TinyModel().SerializeToOstream(&out));
    out.close();
    x_ = Input(6);
    ASSERT_TRUE(WriteNpy(dir_ + "/x.npy", x_).ok());
    out_dir_ = dir_ + "/out";
  }

  testing::CommandResult Run(const std::string& args) {
    return testing::RunCommand(absl::StrCat(MPC_TOOL_BIN, " run ", args));
  }

  // Writes `model` next to the tiny one and runs it on x.npy into out_dir_.
  testing::CommandResult RunModel(const onnx::ModelProto& model, const std::string& file) {
    const std::string path = dir_ + "/" + file;
    std::ofstream out(path, std::ios::binary);
    EXPECT_TRUE(model.SerializeToOstream(&out));
    out.close();
    return Run(absl::StrCat("--model ", path, " --input x=", dir_, "/x.npy --output-dir ", out_dir_));
  }

  // The failure contract: exit code 1, one line, nothing written.
  std::string ExpectCleanFailure(const std::string& args) {
    const auto r = Run(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
    EXPECT_EQ(lines.size(), 1u) << "expected a one-line error, got:\n" << r.output;
    EXPECT_FALSE(std::filesystem::exists(out_dir_)) << "a failed run created " << out_dir_;
    return lines.empty() ? "" : lines[0];
  }

  std::string dir_, model_, out_dir_;
  Tensor x_;
};

TEST_F(MpcRunTest, WritesEveryOutputAsNpyAndPrintsOneLineEach) {
  const auto r = Run(absl::StrCat("--model ", model_, " --input x=", dir_, "/x.npy --output-dir ", out_dir_));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> lines = absl::StrSplit(r.output, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << r.output;
  EXPECT_EQ(lines[0], absl::StrCat("logits: shape [6,4] dtype f32 -> ", out_dir_, "/logits.npy"));
  EXPECT_EQ(lines[1], absl::StrCat("probs: shape [6,4] dtype f32 -> ", out_dir_, "/probs.npy"));
  const auto [logits, probs] = Reference(x_);
  auto got_logits = ReadNpy(out_dir_ + "/logits.npy");
  auto got_probs = ReadNpy(out_dir_ + "/probs.npy");
  ASSERT_TRUE(got_logits.ok()) << got_logits.status();
  ASSERT_TRUE(got_probs.ok()) << got_probs.status();
  EXPECT_EQ(got_logits->shape(), (Shape{6, kOut}));
  EXPECT_LT(testing::RelativeError(*got_logits, logits), 1e-5);
  EXPECT_LT(testing::RelativeError(*got_probs, probs), 1e-5);
}

TEST_F(MpcRunTest, Bf16PrecisionAndKebabCaseFlags) {
  const auto r = Run(absl::StrCat("--model=", model_, " --precision bf16 --device cpu --input=x=", dir_,
                                  "/x.npy --output-dir=", out_dir_));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto [logits, probs] = Reference(x_);
  auto got = ReadNpy(out_dir_ + "/probs.npy");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->dtype(), DType::kF32);
  EXPECT_LT(testing::RelativeError(*got, probs), 1e-2);
}

// .npy has no bf16: a bf16 model input is fed a float32 array, rounded on the way in, with
// a note saying so; the result is the reference on the rounded input.
TEST_F(MpcRunTest, Bf16ModelInputTakesAFloat32Array) {
  const auto r = RunModel(Bf16InputModel(), "bf16_input.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("input 'x' is bf16 in the model; the f32 array was rounded to bf16"), std::string::npos)
      << r.output;
  const auto [logits, probs] = Reference(x_.CastTo(DType::kBF16).CastTo(DType::kF32));
  auto got = ReadNpy(out_dir_ + "/logits.npy");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LT(testing::RelativeError(*got, logits), 1e-5);
}

// A training-mode export runs in evaluation mode, and says so.
TEST_F(MpcRunTest, TrainingModeExportIsNoticedAndRunsInEvaluationMode) {
  const auto r = RunModel(TrainingModeDropoutModel(), "train_mode.onnx");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported in training mode (Dropout 'drop')"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("evaluation mode"), std::string::npos) << r.output;
  const auto [logits, probs] = Reference(x_);  // Dropout passed values through
  auto got = ReadNpy(out_dir_ + "/logits.npy");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_LT(testing::RelativeError(*got, logits), 1e-5);
  // The model without the Dropout has nothing to say.
  auto plain = InferenceSession::FromFile(model_);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_TRUE((*plain)->notices().empty());
}

TEST_F(MpcRunTest, MissingInput) {
  const std::string line = ExpectCleanFailure(absl::StrCat("--model ", model_, " --output-dir ", out_dir_));
  EXPECT_NE(line.find("no value given for input 'x' f32[batch,3]"), std::string::npos) << line;
}

TEST_F(MpcRunTest, UnknownInputName) {
  const std::string line = ExpectCleanFailure(absl::StrCat(
      "--model ", model_, " --input x=", dir_, "/x.npy --input y=", dir_, "/x.npy --output-dir ", out_dir_));
  EXPECT_NE(line.find("no input named 'y'"), std::string::npos) << line;
  EXPECT_NE(line.find("'x' f32[batch,3]"), std::string::npos) << line;
}

TEST_F(MpcRunTest, BadNpyFile) {
  std::ofstream(dir_ + "/bad.npy") << "definitely not numpy";
  const std::string line =
      ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x=", dir_, "/bad.npy --output-dir ", out_dir_));
  EXPECT_NE(line.find("bad.npy"), std::string::npos) << line;
  EXPECT_NE(line.find("not a .npy file"), std::string::npos) << line;
}

TEST_F(MpcRunTest, MissingNpyFile) {
  const std::string line =
      ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x=", dir_, "/nope.npy --output-dir ", out_dir_));
  EXPECT_NE(line.find("nope.npy: file not found"), std::string::npos) << line;
}

TEST_F(MpcRunTest, ShapeMismatch) {
  ASSERT_TRUE(WriteNpy(dir_ + "/wide.npy", testing::RandomTensor(DType::kF32, {6, 5}, 3)).ok());
  const std::string line =
      ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x=", dir_, "/wide.npy --output-dir ", out_dir_));
  EXPECT_NE(line.find("input 'x' expects f32[batch,3] but was given f32[6,5]"), std::string::npos) << line;
}

TEST_F(MpcRunTest, DtypeMismatch) {
  ASSERT_TRUE(WriteNpy(dir_ + "/ints.npy", Tensor(DType::kI64, {6, 3})).ok());
  const std::string line =
      ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x=", dir_, "/ints.npy --output-dir ", out_dir_));
  EXPECT_NE(line.find("dtype i64 instead of f32"), std::string::npos) << line;
}

TEST_F(MpcRunTest, MissingModelFile) {
  const std::string line = ExpectCleanFailure(
      absl::StrCat("--model ", dir_, "/absent.onnx --input x=", dir_, "/x.npy --output-dir ", out_dir_));
  EXPECT_NE(line.find("absent.onnx"), std::string::npos) << line;
}

TEST_F(MpcRunTest, BadFlags) {
  EXPECT_NE(ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x", " --output-dir ", out_dir_))
                .find("expected NAME=FILE.npy"),
            std::string::npos);
  EXPECT_NE(ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x=", dir_, "/x.npy"))
                .find("--output-dir is required"),
            std::string::npos);
  EXPECT_NE(ExpectCleanFailure(absl::StrCat("--output-dir ", out_dir_)).find("--model is required"), std::string::npos);
  EXPECT_NE(ExpectCleanFailure(absl::StrCat("--model ", model_, " --input x=", dir_, "/x.npy --input x=", dir_,
                                            "/x.npy --output-dir ", out_dir_))
                .find("given twice"),
            std::string::npos);
  EXPECT_NE(ExpectCleanFailure(
                absl::StrCat("--model ", model_, " --precision f12 --input x=", dir_, "/x.npy --output-dir ", out_dir_))
                .find("f12"),
            std::string::npos);
}

}  // namespace
}  // namespace mpc
