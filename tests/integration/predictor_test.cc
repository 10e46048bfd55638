// The public inference API (mpc.h's Predictor, issue 19): every misuse is an error value
// with a message naming the input and what was expected, and leaves the Predictor usable
// (the next good Run returns bit for bit what it returned before); 8 threads running at once
// get exactly the outputs of a single-threaded run; a Predictor made from a trained Engine
// answers like one made from its exported file. Only mpc.h is used, as a service would.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "engine/mpc.h"
#include "gtest/gtest.h"

namespace mpc {
namespace {

std::string ModelPath() { return std::string(MPC_SOURCE_DIR) + "/models/fashion_mlp/fashion_mlp.onnx"; }

// `rows` deterministic 1x28x28 images in [-1, 1), different for each `seed`.
HostTensor Images(int64_t rows, uint64_t seed) {
  std::vector<float> values(static_cast<size_t>(rows) * 784);
  uint64_t x = 0x9E3779B97F4A7C15ull ^ (seed * 0x2545F4914F6CDD1Dull);
  for (float& v : values) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>((x >> 40) % 2000) / 1000.0f - 1.0f;
  }
  return HostTensor::Float32({rows, 1, 28, 28}, values);
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::vector<std::string>& parts) {
  ASSERT_FALSE(status.ok()) << "expected an error containing '" << (parts.empty() ? "" : parts[0]) << "'";
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : parts) EXPECT_NE(status.message().find(part), std::string::npos) << status;
}

class PredictorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    PredictorOptions options;
    options.max_concurrent_runs = 8;
    auto predictor = Predictor::FromFile(ModelPath(), options);
    ASSERT_TRUE(predictor.ok()) << predictor.status();
    predictor_ = *std::move(predictor);
    good_["image"] = Images(4, 1);
    auto reference = predictor_->Run(good_);
    ASSERT_TRUE(reference.ok()) << reference.status();
    reference_ = *std::move(reference);
  }

  // A misuse left the predictor as it was: the good inputs give the same bytes again.
  void ExpectStillUsable() {
    auto again = predictor_->Run(good_);
    ASSERT_TRUE(again.ok()) << again.status();
    ASSERT_EQ(again->size(), 1u);
    const HostTensor& logits = again->at("logits");
    EXPECT_EQ(logits.dtype, HostDType::kFloat32);
    EXPECT_EQ(logits.shape, (std::vector<int64_t>{4, 10}));
    EXPECT_EQ(logits.data, reference_.at("logits").data);
  }

  absl::Status RunWith(const HostTensors& inputs) { return predictor_->Run(inputs).status(); }

  std::unique_ptr<Predictor> predictor_;
  HostTensors good_;
  HostTensors reference_;
};

TEST_F(PredictorTest, DescribesTheModelsSignatures) {
  ASSERT_EQ(predictor_->inputs().size(), 1u);
  EXPECT_EQ(predictor_->inputs()[0].name, "image");
  EXPECT_EQ(predictor_->inputs()[0].dtype, HostDType::kFloat32);
  EXPECT_EQ(predictor_->inputs()[0].shape, (std::vector<int64_t>{-1, 1, 28, 28}));
  EXPECT_EQ(predictor_->inputs()[0].type, "f32[batch,1,28,28]");
  ASSERT_EQ(predictor_->outputs().size(), 1u);
  EXPECT_EQ(predictor_->outputs()[0].name, "logits");
  EXPECT_EQ(predictor_->max_concurrent_runs(), 8);
  EXPECT_EQ(predictor_->workers(), 1);  // SetUp's run
  // Any batch size: the batch dimension is dynamic.
  HostTensors one{{"image", Images(1, 7)}};
  auto out = predictor_->Run(one);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->at("logits").shape, (std::vector<int64_t>{1, 10}));
  ExpectStillUsable();
}

TEST_F(PredictorTest, UnknownInputName) {
  ExpectError(RunWith({{"images", Images(4, 1)}}), absl::StatusCode::kInvalidArgument,
              {"no input named 'images'", "'image' f32[-1, 1, 28, 28]"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, ExtraInputBesideTheRightOne) {
  HostTensors inputs = good_;
  inputs["labels"] = HostTensor::Int64({4}, {1, 2, 3, 4});
  ExpectError(RunWith(inputs), absl::StatusCode::kInvalidArgument, {"no input named 'labels'"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, MissingInput) {
  ExpectError(RunWith({}), absl::StatusCode::kInvalidArgument,
              {"no value given for input 'image' f32[-1, 1, 28, 28]", "every model input must be fed"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, WrongDtypeInt64) {
  ExpectError(RunWith({{"image", HostTensor::Int64({1, 1, 28, 28}, std::vector<int64_t>(784, 1))}}),
              absl::StatusCode::kInvalidArgument,
              {"input 'image': wrong dtype", "expected f32", "given i64[1, 1, 28, 28]"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, WrongDtypeBFloat16) {
  ExpectError(RunWith({{"image", HostTensor::BFloat16({1, 1, 28, 28}, std::vector<uint16_t>(784, 0x3f80))}}),
              absl::StatusCode::kInvalidArgument, {"wrong dtype", "given bf16[1, 1, 28, 28]"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, WrongRank) {
  ExpectError(RunWith({{"image", HostTensor::Float32({4, 784}, std::vector<float>(4 * 784))}}),
              absl::StatusCode::kInvalidArgument, {"wrong rank 2 instead of 4", "given f32[4, 784]"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, WrongStaticDimension) {
  ExpectError(RunWith({{"image", HostTensor::Float32({2, 1, 28, 27}, std::vector<float>(2 * 28 * 27))}}),
              absl::StatusCode::kInvalidArgument, {"dimension 3 is 27 instead of 28"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, NegativeDimension) {
  HostTensor t = Images(1, 3);
  t.shape[0] = -1;
  ExpectError(RunWith({{"image", t}}), absl::StatusCode::kInvalidArgument, {"dimension 0 is negative"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, EmptyBatch) {
  ExpectError(RunWith({{"image", HostTensor::Float32({0, 1, 28, 28}, {})}}), absl::StatusCode::kInvalidArgument,
              {"dimension 0 is 0"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, DataShorterThanTheShape) {
  HostTensor t = Images(4, 1);
  t.data.resize(t.data.size() - 4);
  ExpectError(RunWith({{"image", t}}), absl::StatusCode::kInvalidArgument,
              {"its data holds 12540 bytes but the shape needs 12544"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, ShapeWhoseElementCountOverflows) {
  HostTensor t = Images(1, 1);
  t.shape[0] = int64_t{1} << 60;
  ExpectError(RunWith({{"image", t}}), absl::StatusCode::kInvalidArgument, {"too many elements"});
  ExpectStillUsable();
}

TEST_F(PredictorTest, ErrorsFromManyThreadsLeaveEveryWorkerUsable) {
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        if (RunWith({{"image", HostTensor::Float32({1, 784}, std::vector<float>(784))}}).ok()) ++wrong;
        auto out = predictor_->Run(good_);
        if (!out.ok() || out->at("logits").data != reference_.at("logits").data) ++wrong;
      }
      (void)t;
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LE(predictor_->workers(), 8);
  ExpectStillUsable();
}

TEST(PredictorCreateTest, CreationErrorsNameTheCause) {
  ExpectError(Predictor::FromFile("/nonexistent/model.onnx").status(), absl::StatusCode::kNotFound,
              {"/nonexistent/model.onnx"});
  ExpectError(Predictor::FromBytes("not a model").status(), absl::StatusCode::kInvalidArgument,
              {"not a serialized ONNX model"});
  ExpectError(Predictor::FromBytes("").status(), absl::StatusCode::kInvalidArgument, {"not a serialized ONNX model"});
  PredictorOptions precision;
  precision.precision = "f33";
  EXPECT_FALSE(Predictor::FromFile(ModelPath(), precision).ok());
  PredictorOptions device;
  device.device = "tpu";
  EXPECT_FALSE(Predictor::FromFile(ModelPath(), device).ok());
  PredictorOptions pad;
  pad.pad_multiple = -8;
  ExpectError(Predictor::FromFile(ModelPath(), pad).status(), absl::StatusCode::kInvalidArgument, {"negative"});
  PredictorOptions pool;
  pool.max_concurrent_runs = -1;
  ExpectError(Predictor::FromFile(ModelPath(), pool).status(), absl::StatusCode::kInvalidArgument,
              {"max_concurrent_runs"});
}

// 8 threads x 24 runs on one Predictor, each run a different input (batch 1 or 3): every
// output equals, byte for byte, a single-threaded run of the same input on a Predictor with
// one worker.
TEST(PredictorConcurrencyTest, EightThreadsGiveTheSingleThreadedOutputs) {
  std::ifstream file(ModelPath(), std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  PredictorOptions serial_options;
  serial_options.max_concurrent_runs = 1;
  auto serial = Predictor::FromBytes(bytes.str(), serial_options);
  ASSERT_TRUE(serial.ok()) << serial.status();
  constexpr int kThreads = 8, kRuns = 24;
  std::vector<HostTensors> inputs;
  std::vector<std::vector<uint8_t>> expected;
  for (int i = 0; i < kThreads * kRuns; ++i) {
    inputs.push_back({{"image", Images(i % 2 == 0 ? 1 : 3, 100 + i)}});
    auto out = (*serial)->Run(inputs.back());
    ASSERT_TRUE(out.ok()) << out.status();
    expected.push_back(out->at("logits").data);
  }
  EXPECT_EQ((*serial)->workers(), 1);

  PredictorOptions options;
  options.max_concurrent_runs = kThreads;
  auto shared = Predictor::FromBytes(bytes.str(), options);
  ASSERT_TRUE(shared.ok()) << shared.status();
  ASSERT_TRUE((*shared)->Warm(inputs[0], kThreads).ok());
  EXPECT_EQ((*shared)->workers(), kThreads);
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRuns; ++r) {
        const int i = (r * kThreads + t * 7) % (kThreads * kRuns);
        auto out = (*shared)->Run(inputs[i]);
        if (!out.ok()) {
          ++failures;
        } else if (out->at("logits").data != expected[i]) {
          ++mismatches;
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_LE((*shared)->workers(), kThreads);
}

// A Predictor from a trained Engine answers as one from the file the Engine exports: the
// MLP, and the CNN whose BatchNormalizations once made every export fail ONNX's checker.
class PredictorFromEngineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PredictorFromEngineTest, MatchesTheExportedModel) {
  const std::string model = std::string(MPC_SOURCE_DIR) + "/models/" + GetParam() + "/" + GetParam() + ".onnx";
  std::ifstream file(model, std::ios::binary);
  std::stringstream bytes;
  bytes << file.rdbuf();
  EngineOptions options;
  options.spec_text =
      "model: \"not-read.onnx\"\nfeatures_input: \"image\"\n"
      "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\nbatch_size: 8\nsteps: 3\n"
      "optimizer { adamw { lr: 0.01 } }\nseed: 1\n";
  options.model_bytes = bytes.str();
  options.external_batches = true;
  options.use_checkpoint_dir = false;
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Batch batch{{"image", Images(8, 5)}, {"labels", HostTensor::Int64({8}, {0, 1, 2, 3, 4, 5, 6, 7})}};
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*engine)->Step(batch).ok());
  auto from_engine = Predictor::FromEngine(**engine);
  ASSERT_TRUE(from_engine.ok()) << from_engine.status();
  const std::string exported = ::testing::TempDir() + "/predictor_from_engine_" + GetParam() + ".onnx";
  ASSERT_TRUE((*engine)->ExportOnnx(exported).ok());
  auto from_file = Predictor::FromFile(exported);
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  auto untrained = Predictor::FromFile(model);
  ASSERT_TRUE(untrained.ok()) << untrained.status();
  // Training goes on: the Predictor keeps the weights it was made with.
  ASSERT_TRUE((*engine)->Step(batch).ok());
  HostTensors in{{"image", Images(2, 9)}};
  auto a = (*from_engine)->Run(in);
  auto b = (*from_file)->Run(in);
  auto c = (*untrained)->Run(in);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->at("logits").data, b->at("logits").data);
  EXPECT_NE(a->at("logits").data, c->at("logits").data);  // the trained weights, not the file's
}

INSTANTIATE_TEST_SUITE_P(Models, PredictorFromEngineTest, ::testing::Values("fashion_mlp", "fashion_cnn"));

}  // namespace
}  // namespace mpc
