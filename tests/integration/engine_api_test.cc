// The in-memory public API (mpc.h, issue 19): an Engine created from spec text and model
// bytes, trained on batches the caller owns, gives the same losses as one reading the same
// data from .npy files and as the mpc-train binary on those files (bit for bit); every misuse is an error naming what
// is wrong (the Engine stays usable when nothing ran); parameters set by name; a failed step poisons the Engine until a
// checkpoint is loaded.
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "engine/dataset.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/integration/cli_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kBatch = 16;
constexpr int kSteps = 20;

// The spec without its data source (the caller's batches) or with one (`data`).
std::string SpecText(const std::string& model, const std::string& data = "", const std::string& length = "steps: 20") {
  return "model: \"" + model + "\"\n" +
         "features_input: \"image\"\n"
         "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n" +
         data + "batch_size: 16\n" + length +
         "\n"
         "optimizer { adamw { lr: 0.001 weight_decay: 0.0001 } }\n"
         "schedule { warmup_cosine { warmup_steps: 5 min_lr: 0.00001 } }\n"
         "seed: 1\n";
}

// Deterministic images in [-1, 1) (never all zeros) and labels 0..9 for `n` examples.
void MakeData(int64_t n, std::vector<float>* images, std::vector<int64_t>* labels) {
  uint64_t x = 0x243F6A8885A308D3ull;
  auto next = [&x] {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(x >> 33);
  };
  images->resize(static_cast<size_t>(n * 784));
  for (float& v : *images) v = static_cast<float>(next() % 2000) / 1000.0f - 1.0f;
  labels->resize(static_cast<size_t>(n));
  for (int64_t& l : *labels) l = next() % 10;
}

// Examples [first, first + rows) as a Batch: images [rows, 28, 28] (the model takes
// [rows, 1, 28, 28]: the same values per example) and labels [rows].
Batch MakeBatch(const std::vector<float>& images, const std::vector<int64_t>& labels, int64_t first, int64_t rows) {
  Batch batch;
  batch["image"] = HostTensor::Float32(
      {rows, 28, 28}, std::vector<float>(images.begin() + first * 784, images.begin() + (first + rows) * 784));
  batch["labels"] =
      HostTensor::Int64({rows}, std::vector<int64_t>(labels.begin() + first, labels.begin() + first + rows));
  return batch;
}

// `status` is an error of `code` whose message holds every one of `parts`.
void ExpectError(const absl::Status& status, absl::StatusCode code, const std::vector<std::string>& parts) {
  EXPECT_EQ(status.code(), code) << status;
  for (const std::string& part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos) << "'" << part << "' not in: " << status.message();
  }
}

std::string ModelPath() { return testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx"); }

class EngineApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MakeData(kBatch * kSteps, &images_, &labels_);
    auto bytes = ReadFileToString(ModelPath());
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    model_bytes_ = *bytes;
  }

  // From spec text (no data source) and model bytes: every batch from the caller.
  EngineOptions CallerOptions(const std::string& length = "steps: 20") const {
    EngineOptions options;
    options.spec_text = SpecText("not-read.onnx", "", length);  // model_bytes takes its place
    options.model_bytes = model_bytes_;
    options.external_batches = true;
    return options;
  }

  Batch BatchAt(int step, int64_t rows = kBatch) const { return MakeBatch(images_, labels_, step * kBatch, rows); }

  std::vector<float> images_;
  std::vector<int64_t> labels_;
  std::string model_bytes_;
};

TEST_F(EngineApiTest, CallerBatchesMatchNpyDataSourceBitForBit) {
  // The same examples through a spec file's .npy data source, unshuffled.
  const std::string dir = testing::MakeTempDir("engine_api_npy");
  const int64_t n = kBatch * kSteps;
  ASSERT_TRUE(WriteNpy(dir + "/images.npy", Tensor::FromVector<float>({n, 28, 28}, images_)).ok());
  ASSERT_TRUE(WriteNpy(dir + "/labels.npy", Tensor::FromVector<int64_t>({n}, labels_)).ok());
  const std::string data = "train_data { npy { features: \"images.npy\" labels: \"labels.npy\" } shuffle: false }\n";
  std::ofstream(dir + "/train.spec") << SpecText(ModelPath(), data);
  EngineOptions file_options;
  file_options.spec_path = dir + "/train.spec";
  auto from_files = Engine::Create(file_options);
  ASSERT_TRUE(from_files.ok()) << from_files.status();

  auto in_memory = Engine::Create(CallerOptions());
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ((*in_memory)->total_steps(), kSteps);
  EXPECT_EQ((*in_memory)->InputNames(), std::vector<std::string>{"image"});
  EXPECT_EQ((*in_memory)->labels_name(), "labels");
  EXPECT_EQ((*in_memory)->batch_size(), kBatch);

  // And through the mpc-train binary on the same files: its metrics print each loss with
  // 9 significant digits, which round-trip an f32 exactly.
  const testing::CommandResult cli = testing::RunCommand(
      absl::StrCat(MPC_TRAIN_BIN, " --spec ", dir, "/train.spec --metrics ", dir, "/cli.jsonl 2>&1"));
  ASSERT_EQ(cli.exit_code, 0) << cli.output;
  std::vector<float> cli_losses;
  std::ifstream metrics(dir + "/cli.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    if (line.find("\"kind\":\"train\"") == std::string::npos) continue;
    const size_t at = line.find("\"loss\":") + 7;
    cli_losses.push_back(std::strtof(line.c_str() + at, nullptr));
  }
  ASSERT_EQ(static_cast<int>(cli_losses.size()), kSteps);

  for (int i = 0; i < kSteps; ++i) {
    auto a = (*from_files)->Step();
    auto b = (*in_memory)->Step(BatchAt(i));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "step " << i + 1;
    EXPECT_EQ(a->lr, b->lr) << "step " << i + 1;
    EXPECT_EQ(static_cast<float>(b->loss), cli_losses[i]) << "step " << i + 1 << ": in-process vs mpc-train";
    EXPECT_TRUE(std::isfinite(b->loss));
  }
  EXPECT_EQ((*in_memory)->step(), kSteps);
  EXPECT_EQ((*in_memory)->skipped_steps(), 0);
  for (const std::string& name : (*from_files)->ParameterNames()) {
    EXPECT_EQ(*(*from_files)->GetParameter(name), *(*in_memory)->GetParameter(name)) << name;
  }

  // Evaluation: the spec's data (the training data, having no eval data) against the same
  // examples as caller batches; the last one short, padded by the engine.
  auto file_eval = (*from_files)->Evaluate();
  ASSERT_TRUE(file_eval.ok()) << file_eval.status();
  std::vector<Batch> batches;
  for (int i = 0; i < kSteps - 1; ++i) batches.push_back(BatchAt(i));
  batches.push_back(MakeBatch(images_, labels_, (kSteps - 1) * kBatch, 10));
  batches.push_back(MakeBatch(images_, labels_, (kSteps - 1) * kBatch + 10, kBatch - 10));
  auto caller_eval = (*in_memory)->Evaluate(batches);
  ASSERT_TRUE(caller_eval.ok()) << caller_eval.status();
  EXPECT_EQ(caller_eval->examples, n);
  EXPECT_NEAR(caller_eval->loss, file_eval->loss, 1e-9);
  EXPECT_EQ(caller_eval->accuracy, file_eval->accuracy);

  // The export of a model that came as bytes.
  const std::string onnx = dir + "/trained.onnx";
  ASSERT_TRUE((*in_memory)->ExportOnnx(onnx).ok());
  auto exported = ReadFileToString(onnx);
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_GT(exported->size(), 784u * 256u * 4u);  // at least the first layer's f32 weights
}

// Rows [first, first + rows) of a host array as a HostTensor of `dtype` (f32 or i64).
HostTensor Rows(const Tensor& all, DType dtype, int64_t first, int64_t rows) {
  const Tensor t = all.CastTo(dtype);
  const int64_t per_row = t.num_elements() / t.shape()[0];
  std::vector<int64_t> shape(t.shape().begin(), t.shape().end());
  shape[0] = rows;
  HostTensor out;
  out.dtype = dtype == DType::kF32 ? HostDType::kFloat32 : HostDType::kInt64;
  out.shape = shape;
  const size_t row_bytes = static_cast<size_t>(per_row) * DTypeSize(dtype);
  const uint8_t* begin = static_cast<const uint8_t*>(t.raw()) + first * row_bytes;
  out.data.assign(begin, begin + rows * row_bytes);
  return out;
}

TEST_F(EngineApiTest, CallerBatchesFeedEveryModelInput) {
  // The two-input golden model (dense features and embedding ids): the spec file reads
  // three .npy arrays, the caller passes the same rows under the inputs' names.
  const std::string dir = testing::SourcePath("tests/golden/two_inputs/");
  EngineOptions file_options;
  file_options.spec_path = dir + "train.spec";
  auto from_files = Engine::Create(file_options);
  ASSERT_TRUE(from_files.ok()) << from_files.status();

  auto text = ReadFileToString(dir + "train.spec");
  ASSERT_TRUE(text.ok());
  const size_t begin = text->find("train_data {"), end = text->find("batch_size:");
  ASSERT_NE(begin, std::string::npos);
  EngineOptions options;
  options.spec_text = text->substr(0, begin) + text->substr(end);
  options.base_dir = dir;  // model: "model.onnx"
  options.external_batches = true;
  auto in_memory = Engine::Create(options);
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  EXPECT_EQ((*in_memory)->InputNames(), (std::vector<std::string>{"dense", "ids"}));

  auto dense = ReadNpy(dir + "dense.npy");
  auto ids = ReadNpy(dir + "ids.npy");
  auto labels = ReadNpy(dir + "labels.npy");
  ASSERT_TRUE(dense.ok() && ids.ok() && labels.ok());
  const int64_t n = dense->shape()[0];
  for (int i = 0; i < 20; ++i) {
    const int64_t first = (i * kBatch) % n;
    Batch batch{{"dense", Rows(*dense, DType::kF32, first, kBatch)},
                {"ids", Rows(*ids, DType::kI64, first, kBatch)},
                {"labels", Rows(*labels, DType::kI64, first, kBatch)}};
    auto a = (*from_files)->Step();
    auto b = (*in_memory)->Step(batch);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "step " << i + 1;
    if (i == 0) {
      // An id past the embedding table is an error, not an out-of-bounds read.
      Batch bad = batch;
      reinterpret_cast<int64_t*>(bad["ids"].data.data())[0] = 1 << 20;
      ExpectError((*in_memory)->Step(bad).status(), absl::StatusCode::kInvalidArgument, {"'ids'"});
      batch.erase("ids");
      ExpectError((*in_memory)->Step(batch).status(), absl::StatusCode::kInvalidArgument,
                  {"no entry 'ids'", "dense, ids, labels"});
    }
  }
}

TEST_F(EngineApiTest, MicroBatchesAccumulateLikeTheDataSource) {
  const std::string dir = testing::MakeTempDir("engine_api_accumulate");
  const int64_t n = kBatch * kSteps;
  ASSERT_TRUE(WriteNpy(dir + "/images.npy", Tensor::FromVector<float>({n, 28, 28}, images_)).ok());
  ASSERT_TRUE(WriteNpy(dir + "/labels.npy", Tensor::FromVector<int64_t>({n}, labels_)).ok());
  const std::string data = "train_data { npy { features: \"images.npy\" labels: \"labels.npy\" } shuffle: false }\n";
  std::ofstream(dir + "/train.spec") << SpecText(ModelPath(), data, "steps: 10\naccumulate_steps: 2");
  EngineOptions file_options;
  file_options.spec_path = dir + "/train.spec";
  auto from_files = Engine::Create(file_options);
  ASSERT_TRUE(from_files.ok()) << from_files.status();
  EngineOptions options = CallerOptions("steps: 10\naccumulate_steps: 2");
  auto in_memory = Engine::Create(options);
  ASSERT_TRUE(in_memory.ok()) << in_memory.status();
  ExpectError((*in_memory)->Step(BatchAt(0)).status(), absl::StatusCode::kFailedPrecondition,
              {"accumulate_steps 2", "StepMicroBatches"});
  ExpectError((*in_memory)->StepMicroBatches({BatchAt(0)}).status(), absl::StatusCode::kInvalidArgument,
              {"1 micro-batches given", "accumulate_steps is 2"});
  for (int i = 0; i < 10; ++i) {
    auto a = (*from_files)->Step();
    auto b = (*in_memory)->StepMicroBatches({BatchAt(2 * i), BatchAt(2 * i + 1)});
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(a->loss, b->loss) << "step " << i + 1;
  }
}

TEST_F(EngineApiTest, SpecTextResolvesRelativePathsAgainstBaseDirAndTrainsInBf16) {
  EngineOptions options;
  options.spec_text = SpecText("fashion_mlp.onnx");
  options.base_dir = testing::SourcePath("models/fashion_mlp");
  options.external_batches = true;
  options.precision = "bf16";
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  double first = 0, last = 0;
  for (int i = 0; i < kSteps; ++i) {
    auto s = (*engine)->Step(BatchAt(i % 4));  // four batches again and again: learnable
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_TRUE(std::isfinite(s->loss)) << "step " << i + 1;
    if (i == 0) first = s->loss;
    last = s->loss;
  }
  EXPECT_LT(last, first);
  // The master weights stay f32: a value set by name reads back exactly.
  const std::string name = (*engine)->ParameterNames().front();
  std::vector<float> values = *(*engine)->GetParameter(name);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.001f * static_cast<float>(i % 7) - 0.003f;
  ASSERT_TRUE((*engine)->SetParameter(name, values).ok());
  EXPECT_EQ(*(*engine)->GetParameter(name), values);
  auto s = (*engine)->Step(BatchAt(0));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(std::isfinite(s->loss));
}

TEST_F(EngineApiTest, SetParameterRoundTripsAndChangesTheNextLoss) {
  auto a = Engine::Create(CallerOptions());
  auto b = Engine::Create(CallerOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  const std::vector<std::string> names = (*a)->ParameterNames();
  ASSERT_FALSE(names.empty());
  for (const std::string& name : names) {
    std::vector<float> halved = *(*a)->GetParameter(name);
    for (float& v : halved) v *= 0.5f;
    ASSERT_TRUE((*a)->SetParameter(name, halved).ok()) << name;
    EXPECT_EQ(*(*a)->GetParameter(name), halved) << name;
  }
  auto la = (*a)->Step(BatchAt(0));
  auto lb = (*b)->Step(BatchAt(0));
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_NE(la->loss, lb->loss);

  const absl::Status wrong_size = (*a)->SetParameter(names.front(), {1.0f, 2.0f, 3.0f});
  EXPECT_EQ(wrong_size.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_size.message().find(names.front()), std::string::npos) << wrong_size;
  EXPECT_NE(wrong_size.message().find("3 were given"), std::string::npos) << wrong_size;
  const absl::Status unknown = (*a)->SetParameter("no_such_weight", {1.0f});
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.message().find("no_such_weight"), std::string::npos) << unknown;
}

TEST_F(EngineApiTest, BadBatchesAreErrorsThatLeaveTheEngineUsable) {
  auto engine = Engine::Create(CallerOptions());
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;

  Batch renamed = BatchAt(0);
  renamed["img"] = renamed["image"];
  renamed.erase("image");
  ExpectError(e.Step(renamed).status(), absl::StatusCode::kInvalidArgument, {"'img'", "image", "labels"});

  Batch missing = BatchAt(0);
  missing.erase("labels");
  ExpectError(e.Step(missing).status(), absl::StatusCode::kInvalidArgument, {"no entry 'labels'", "i64"});

  Batch wrong_dtype = BatchAt(0);
  wrong_dtype["image"] = HostTensor::Int64({kBatch, 784}, std::vector<int64_t>(kBatch * 784, 1));
  ExpectError(e.Step(wrong_dtype).status(), absl::StatusCode::kInvalidArgument,
              {"'image'", "wrong dtype", "expected f32[16, 1, 28, 28]", "given i64[16, 784]"});

  Batch bf16 = BatchAt(0);
  bf16["image"] = HostTensor::BFloat16({kBatch, 784}, std::vector<uint16_t>(kBatch * 784, 0x3f80));
  ExpectError(e.Step(bf16).status(), absl::StatusCode::kInvalidArgument, {"'image'", "wrong dtype", "given bf16"});

  Batch wrong_shape = BatchAt(0);
  wrong_shape["image"] = HostTensor::Float32({kBatch, 700}, std::vector<float>(kBatch * 700, 0.5f));
  ExpectError(e.Step(wrong_shape).status(), absl::StatusCode::kInvalidArgument,
              {"'image'", "wrong shape", "784 values", "given f32[16, 700]"});

  ExpectError(e.Step(BatchAt(0, 8)).status(), absl::StatusCode::kInvalidArgument,
              {"'image'", "wrong batch dimension", "given f32[8, 28, 28]"});

  Batch short_data = BatchAt(0);
  short_data["image"].data.resize(100);
  ExpectError(e.Step(short_data).status(), absl::StatusCode::kInvalidArgument, {"'image'", "100 bytes"});

  Batch bad_label = BatchAt(0);
  reinterpret_cast<int64_t*>(bad_label["labels"].data.data())[3] = 10;
  ExpectError(e.Step(bad_label).status(), absl::StatusCode::kInvalidArgument,
              {"'labels'", "element 3 is 10", "10 classes"});

  ExpectError(e.Step().status(), absl::StatusCode::kFailedPrecondition, {"no train_data", "Step(batch)"});
  ExpectError(e.Evaluate().status(), absl::StatusCode::kFailedPrecondition, {"Evaluate(batches)"});
  ExpectError(e.Evaluate(std::vector<Batch>{BatchAt(0), wrong_shape}).status(), absl::StatusCode::kInvalidArgument,
              {"batch 1", "'image'"});

  // None of that ran anything: the engine is at step 0 and takes a good batch.
  EXPECT_EQ(e.step(), 0);
  auto ok = e.Step(BatchAt(0));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->step, 1);
}

TEST_F(EngineApiTest, BadOptionsAreErrorsNamingTheField) {
  EngineOptions both = CallerOptions();
  both.spec_path = "train.spec";
  ExpectError(Engine::Create(both).status(), absl::StatusCode::kInvalidArgument,
              {"spec_path", "spec_text", "exactly one"});

  EngineOptions neither = CallerOptions();
  neither.spec_text.clear();
  ExpectError(Engine::Create(neither).status(), absl::StatusCode::kInvalidArgument, {"spec_path", "spec_text"});

  ExpectError(Engine::Create(CallerOptions("")).status(), absl::StatusCode::kInvalidArgument,
              {"spec field steps", "steps: N"});
  ExpectError(Engine::Create(CallerOptions("epochs: 2")).status(), absl::StatusCode::kInvalidArgument,
              {"spec field epochs", "steps: N"});

  EngineOptions no_data = CallerOptions();
  no_data.external_batches = false;
  ExpectError(Engine::Create(no_data).status(), absl::StatusCode::kInvalidArgument, {"train_data", "external_batches"});

  EngineOptions bad_bytes = CallerOptions();
  bad_bytes.model_bytes = "not a model";
  EXPECT_FALSE(Engine::Create(bad_bytes).ok());
}

TEST_F(EngineApiTest, FailedStepRefusesFurtherStepsUntilACheckpointIsLoaded) {
  // check_numerics stops a step at the first non-finite output: the step has then run in
  // part, which is what a kernel failing midway leaves.
  EngineOptions options = CallerOptions();
  options.check_numerics = true;
  options.use_checkpoint_dir = false;
  auto engine = Engine::Create(options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  Engine& e = **engine;
  ASSERT_TRUE(e.Step(BatchAt(0)).ok());
  const std::string ckpt = testing::MakeTempDir("engine_api_failed_step");
  ASSERT_TRUE(e.SaveCheckpoint(ckpt).ok());

  Batch poisoned = BatchAt(1);
  reinterpret_cast<float*>(poisoned["image"].data.data())[5] = NAN;
  EXPECT_FALSE(e.Step(poisoned).ok());
  ExpectError(e.Step(BatchAt(1)).status(), absl::StatusCode::kFailedPrecondition,
              {"undefined state", "LoadCheckpoint", "new Engine"});
  ExpectError(e.SaveCheckpoint(ckpt), absl::StatusCode::kFailedPrecondition, {"undefined state"});

  ASSERT_TRUE(e.LoadCheckpoint(ckpt).ok());
  EXPECT_EQ(e.step(), 1);
  auto s = e.Step(BatchAt(1));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 2);
}

}  // namespace
}  // namespace mpc
