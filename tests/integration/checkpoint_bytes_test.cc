// Checkpoints to and from bytes (mpc.h Engine::SaveCheckpointToBytes / LoadCheckpointFromBytes,
// issue 19): bytes loaded into a fresh Engine of the same spec continue training bit for bit
// (losses and every parameter and state tensor), with the spec's own data source too (its
// epoch and batch position); a flipped bit anywhere, truncated, empty or foreign bytes are
// errors naming the cause that leave the Engine as it was and usable; bytes of another
// model are refused like a directory checkpoint of it, another precision loads with the
// same notice; the bytes hold exactly the directory checkpoint's manifest and tensor data;
// and loading them clears a failed step. The data is fresh random data each run (its seed
// is in the failure messages).
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "base/file_util.h"
#include "engine/checkpoint.h"
#include "engine/checkpoint_format.h"
#include "engine/mpc.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::testing::HasSubstr;
using State = std::map<std::string, std::vector<float>>;

constexpr int64_t kBatch = 16;

// The Fashion-MNIST MLP fed by the caller's batches, in FP16 with dynamic loss scaling and
// AdamW: the checkpoint holds master weights, FP16 copies, moments, step counters and the
// loss scale with its growth tracker.
std::string CallerSpec() {
  return "model: \"not-read.onnx\"\n"
         "features_input: \"image\"\n"
         "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
         "batch_size: 16\n"
         "steps: 12\n"
         "optimizer { adamw { lr: 0.002 weight_decay: 0.0001 } }\n"
         "schedule { warmup_cosine { warmup_steps: 3 min_lr: 0.00001 } }\n"
         "precision { compute: FP16 }\n"
         "loss_scaling { mode: DYNAMIC init_scale: 1024 growth_interval: 3 }\n"
         "seed: 5\n";
}

class CheckpointBytesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    seed_ = std::random_device()();
    rng_.seed(seed_);
    trace_ = std::make_unique<::testing::ScopedTrace>(__FILE__, __LINE__, absl::StrCat("random data seed ", seed_));
    auto bytes = ReadFileToString(testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx"));
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    model_bytes_ = *bytes;
    dir_ = testing::MakeTempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }

  std::unique_ptr<Engine> CallerEngine(bool check_numerics = false) const {
    EngineOptions options;
    options.spec_text = CallerSpec();
    options.model_bytes = model_bytes_;  // takes the place of the spec's model
    options.external_batches = true;
    options.use_checkpoint_dir = false;
    options.check_numerics = check_numerics;
    auto engine = Engine::Create(options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // An Engine of the golden MLP spec `run` (its own .npy data source), in its own directory.
  std::unique_ptr<Engine> GoldenEngine(const std::string& run, const std::string& extra = "") const {
    const std::string dir = absl::StrCat(dir_, "/", run, "_", ++spec_count_);
    std::filesystem::create_directories(dir);
    EngineOptions options;
    options.spec_path = testing::WriteGoldenSpec(run, extra, dir, "train.spec");
    options.use_checkpoint_dir = false;
    auto engine = Engine::Create(options);
    EXPECT_TRUE(engine.ok()) << engine.status();
    return engine.ok() ? std::move(*engine) : nullptr;
  }

  // `n` fresh random batches: images in [-1, 1), labels 0..9.
  std::vector<Batch> RandomBatches(int n) {
    std::uniform_real_distribution<float> pixel(-1.0f, 1.0f);
    std::uniform_int_distribution<int64_t> label(0, 9);
    std::vector<Batch> out(n);
    for (Batch& b : out) {
      std::vector<float> images(kBatch * 784);
      for (float& v : images) v = pixel(rng_);
      std::vector<int64_t> labels(kBatch);
      for (int64_t& l : labels) l = label(rng_);
      b["image"] = HostTensor::Float32({kBatch, 28, 28}, images);
      b["labels"] = HostTensor::Int64({kBatch}, labels);
    }
    return out;
  }

  uint32_t seed_ = 0;
  std::mt19937_64 rng_;
  std::unique_ptr<::testing::ScopedTrace> trace_;
  std::string model_bytes_;
  std::string dir_;
  mutable int spec_count_ = 0;
};

std::vector<double> Losses(Engine& e, const std::vector<Batch>& batches, size_t first, size_t end) {
  std::vector<double> out;
  for (size_t i = first; i < end; ++i) {
    auto s = e.Step(batches[i]);
    EXPECT_TRUE(s.ok()) << "step " << i + 1 << ": " << s.status();
    if (!s.ok()) break;
    out.push_back(s->loss);
  }
  return out;
}

// Where the tensor data starts in checkpoint bytes: after the header and the manifest
// (whose length the header gives, little-endian).
size_t DataStart(const std::string& bytes) {
  uint64_t manifest_size = 0;
  for (size_t i = 0; i < 8; ++i) {
    manifest_size |= uint64_t{static_cast<unsigned char>(bytes[kBytesMagicSize + i])} << (8 * i);
  }
  return kBytesHeaderSize + manifest_size;
}

// Every tensor, bit for bit (NaN-free: a finite state is all a checkpoint holds).
void ExpectSameState(const State& a, const State& b) {
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, values] : a) {
    auto it = b.find(name);
    ASSERT_NE(it, b.end()) << name;
    EXPECT_EQ(values, it->second) << name;
  }
}

TEST_F(CheckpointBytesTest, BytesContinueTrainingBitForBit) {
  const std::vector<Batch> batches = RandomBatches(12);
  auto whole = CallerEngine();
  auto saved = CallerEngine();
  ASSERT_TRUE(whole && saved);
  const std::vector<double> uninterrupted = Losses(*whole, batches, 0, 12);
  ASSERT_EQ(Losses(*saved, batches, 0, 5), std::vector<double>(uninterrupted.begin(), uninterrupted.begin() + 5));
  absl::StatusOr<std::string> bytes = saved->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  saved.reset();  // nothing of it is needed any more: the bytes are self-contained

  auto resumed = CallerEngine();
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(resumed->LoadCheckpointFromBytes(*bytes).ok());
  EXPECT_EQ(resumed->step(), 5);
  EXPECT_TRUE(resumed->notices().empty()) << resumed->notices().front();
  EXPECT_EQ(Losses(*resumed, batches, 5, 12), std::vector<double>(uninterrupted.begin() + 5, uninterrupted.end()));
  EXPECT_EQ(resumed->step(), 12);
  ExpectSameState(testing::SnapshotState(*resumed), testing::SnapshotState(*whole));
}

TEST_F(CheckpointBytesTest, BytesRestoreTheDataSourcePosition) {
  // The golden data set is 20 batches long: saved at step 18, the run crosses into the next
  // epoch after the save, so the resumed run must draw the same batches of the same epochs
  // (and, in bf16, keep the low-precision weight copies).
  auto whole = GoldenEngine("bf16_adamw");
  auto saved = GoldenEngine("bf16_adamw");
  ASSERT_TRUE(whole && saved);
  std::vector<double> uninterrupted, resumed_losses;
  for (int i = 0; i < 24; ++i) {
    auto s = whole->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    uninterrupted.push_back(s->loss);
  }
  for (int i = 0; i < 18; ++i) ASSERT_TRUE(saved->Step().ok());
  absl::StatusOr<std::string> bytes = saved->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto resumed = GoldenEngine("bf16_adamw");
  ASSERT_TRUE(resumed);
  ASSERT_TRUE(resumed->LoadCheckpointFromBytes(*bytes).ok());
  for (int i = 18; i < 24; ++i) {
    auto s = resumed->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    resumed_losses.push_back(s->loss);
  }
  EXPECT_EQ(resumed_losses, std::vector<double>(uninterrupted.begin() + 18, uninterrupted.end()));
  ExpectSameState(testing::SnapshotState(*resumed), testing::SnapshotState(*whole));
}

TEST_F(CheckpointBytesTest, LoadingIntoTheSameEngineRewindsItsBatches) {
  // The engine gathers each coming batch during the step before it (PrefetchNextBatch).
  // Loading an earlier checkpoint into the engine that ran past it must drop that batch and
  // draw the checkpoint's, across the epoch boundary at batch 20 as before.
  auto engine = GoldenEngine("bf16_adamw");
  ASSERT_TRUE(engine);
  std::vector<double> first, again;
  std::string bytes_at_12;
  for (int i = 0; i < 24; ++i) {
    if (i == 12) {
      absl::StatusOr<std::string> bytes = engine->SaveCheckpointToBytes();
      ASSERT_TRUE(bytes.ok()) << bytes.status();
      bytes_at_12 = *bytes;
    }
    auto s = engine->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    first.push_back(s->loss);
  }
  ASSERT_TRUE(engine->LoadCheckpointFromBytes(bytes_at_12).ok());
  for (int i = 12; i < 24; ++i) {
    auto s = engine->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    again.push_back(s->loss);
  }
  EXPECT_EQ(again, std::vector<double>(first.begin() + 12, first.end()));
}

TEST_F(CheckpointBytesTest, BytesHoldExactlyTheDirectoryCheckpoint) {
  const std::vector<Batch> batches = RandomBatches(6);
  auto e = CallerEngine();
  ASSERT_TRUE(e);
  Losses(*e, batches, 0, 4);
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_TRUE(e->SaveCheckpoint(ckpt).ok());
  absl::StatusOr<std::string> bytes = e->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  // Header, then manifest.pb and tensors.bin byte for byte.
  const std::string step_dir = ckpt + "/" + StepDirName(4);
  const std::string manifest = *ReadFileToString(step_dir + "/" + kManifestFile);
  const std::string data = *ReadFileToString(step_dir + "/" + kDataFile);
  ASSERT_EQ(bytes->size(), kBytesHeaderSize + manifest.size() + data.size());
  EXPECT_EQ(bytes->substr(0, kBytesMagicSize), std::string(kBytesMagic, kBytesMagicSize));
  EXPECT_EQ(DataStart(*bytes), kBytesHeaderSize + manifest.size());
  EXPECT_TRUE(bytes->compare(kBytesHeaderSize, manifest.size(), manifest) == 0) << "the manifest differs";
  EXPECT_TRUE(bytes->compare(kBytesHeaderSize + manifest.size(), std::string::npos, data) == 0) << "the data differs";

  // Loading either gives the same state, and the same next losses.
  auto from_dir = CallerEngine();
  auto from_bytes = CallerEngine();
  ASSERT_TRUE(from_dir && from_bytes);
  ASSERT_TRUE(from_dir->LoadCheckpoint(ckpt).ok());
  ASSERT_TRUE(from_bytes->LoadCheckpointFromBytes(*bytes).ok());
  EXPECT_EQ(from_dir->step(), from_bytes->step());
  ExpectSameState(testing::SnapshotState(*from_bytes), testing::SnapshotState(*from_dir));
  ExpectSameState(testing::SnapshotState(*from_bytes), testing::SnapshotState(*e));
  EXPECT_EQ(Losses(*from_bytes, batches, 4, 6), Losses(*from_dir, batches, 4, 6));
}

TEST_F(CheckpointBytesTest, AFlippedBitIsRefusedAndChangesNothing) {
  const std::vector<Batch> batches = RandomBatches(4);
  auto source = CallerEngine();
  auto target = CallerEngine();
  auto control = CallerEngine();
  ASSERT_TRUE(source && target && control);
  Losses(*source, batches, 0, 3);
  Losses(*target, batches, 0, 1);
  Losses(*control, batches, 0, 1);
  absl::StatusOr<std::string> bytes = source->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const State before = testing::SnapshotState(*target);
  const size_t data_start = DataStart(*bytes);
  ASSERT_LT(data_start, bytes->size());

  // A bit in the tensor data (at random): the checksum of the tensor holding it.
  for (int trial = 0; trial < 5; ++trial) {
    std::string bad = *bytes;
    const size_t at = std::uniform_int_distribution<size_t>(data_start, bad.size() - 1)(rng_);
    bad[at] = static_cast<char>(bad[at] ^ (1 << std::uniform_int_distribution<int>(0, 7)(rng_)));
    const absl::Status st = target->LoadCheckpointFromBytes(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr("checksum mismatch at tensor '")) << "byte " << at;
    EXPECT_THAT(std::string(st.message()), HasSubstr("checkpoint bytes")) << st;
  }
  // A bit in the manifest: its checksum.
  std::string bad = *bytes;
  const size_t at = std::uniform_int_distribution<size_t>(kBytesHeaderSize + 12, data_start - 1)(rng_);
  bad[at] = static_cast<char>(bad[at] ^ 0x10);
  const absl::Status st = target->LoadCheckpointFromBytes(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("checksum mismatch in the checkpoint manifest"));

  // Untouched, and it trains on exactly as an Engine that never saw the bytes.
  EXPECT_EQ(target->step(), 1);
  ExpectSameState(testing::SnapshotState(*target), before);
  EXPECT_EQ(Losses(*target, batches, 1, 4), Losses(*control, batches, 1, 4));
}

TEST_F(CheckpointBytesTest, TruncatedEmptyAndForeignBytesAreClearErrors) {
  const std::vector<Batch> batches = RandomBatches(2);
  auto source = CallerEngine();
  auto target = CallerEngine();
  ASSERT_TRUE(source && target);
  Losses(*source, batches, 0, 2);
  absl::StatusOr<std::string> bytes = source->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const State before = testing::SnapshotState(*target);
  auto expect_error = [&](const std::string& bad, absl::StatusCode code, const std::string& part) {
    const absl::Status st = target->LoadCheckpointFromBytes(bad);
    EXPECT_EQ(st.code(), code) << st;
    EXPECT_THAT(std::string(st.message()), HasSubstr(part)) << bad.size() << " bytes";
  };
  expect_error("", absl::StatusCode::kInvalidArgument, "empty (0 bytes)");
  expect_error(bytes->substr(0, 5), absl::StatusCode::kDataLoss, "truncated within the 16-byte header");
  expect_error(bytes->substr(0, kBytesHeaderSize + 10), absl::StatusCode::kDataLoss, "truncated: the header gives");
  // Cut at random inside the tensor data: the data is shorter than the manifest says.
  for (int trial = 0; trial < 3; ++trial) {
    const size_t keep = std::uniform_int_distribution<size_t>(DataStart(*bytes), bytes->size() - 1)(rng_);
    expect_error(bytes->substr(0, keep), absl::StatusCode::kDataLoss, "the file is truncated");
  }
  expect_error("certainly not a checkpoint", absl::StatusCode::kInvalidArgument,
               "not a checkpoint from SaveCheckpointToBytes");
  // A directory checkpoint's manifest passed by mistake: the error says what it is.
  const std::string ckpt = dir_ + "/ckpt";
  ASSERT_TRUE(source->SaveCheckpoint(ckpt).ok());
  expect_error(*ReadFileToString(ckpt + "/" + StepDirName(2) + "/" + kManifestFile), absl::StatusCode::kInvalidArgument,
               "LoadCheckpoint(dir)");
  EXPECT_EQ(target->step(), 0);
  ExpectSameState(testing::SnapshotState(*target), before);
  EXPECT_TRUE(target->Step(batches[0]).ok());
}

TEST_F(CheckpointBytesTest, AnotherModelIsRefusedAnotherPrecisionLoadsWithTheDirectoryNotice) {
  auto fashion = CallerEngine();
  auto golden = GoldenEngine("adamw");
  ASSERT_TRUE(fashion && golden);
  ASSERT_TRUE(golden->Step().ok());
  absl::StatusOr<std::string> golden_bytes = golden->SaveCheckpointToBytes();
  ASSERT_TRUE(golden_bytes.ok()) << golden_bytes.status();
  const State before = testing::SnapshotState(*fashion);
  const absl::Status st = fashion->LoadCheckpointFromBytes(*golden_bytes);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_THAT(std::string(st.message()), HasSubstr("written for a different model: "));
  EXPECT_EQ(fashion->step(), 0);
  ExpectSameState(testing::SnapshotState(*fashion), before);

  // The bf16 run's checkpoint into an f32 run: as from a directory, the same notice.
  auto bf16 = GoldenEngine("bf16_adamw");
  ASSERT_TRUE(bf16);
  ASSERT_TRUE(bf16->Step().ok());
  const std::string ckpt = dir_ + "/bf16_ckpt";
  ASSERT_TRUE(bf16->SaveCheckpoint(ckpt).ok());
  absl::StatusOr<std::string> bf16_bytes = bf16->SaveCheckpointToBytes();
  ASSERT_TRUE(bf16_bytes.ok()) << bf16_bytes.status();
  auto from_dir = GoldenEngine("adamw");
  auto from_bytes = GoldenEngine("adamw");
  ASSERT_TRUE(from_dir && from_bytes);
  ASSERT_TRUE(from_dir->LoadCheckpoint(ckpt).ok());
  ASSERT_TRUE(from_bytes->LoadCheckpointFromBytes(*bf16_bytes).ok());
  ASSERT_EQ(from_dir->notices().size(), 1u);
  ASSERT_EQ(from_bytes->notices().size(), 1u);
  EXPECT_THAT(from_bytes->notices()[0], HasSubstr("resumed the checkpoint bytes of step 1 (written with"));
  EXPECT_EQ(absl::StrReplaceAll(from_bytes->notices()[0], {{"the checkpoint bytes of step 1", "X"}}),
            absl::StrReplaceAll(from_dir->notices()[0], {{ckpt + "/" + StepDirName(1), "X"}}));
  ExpectSameState(testing::SnapshotState(*from_bytes), testing::SnapshotState(*from_dir));
}

TEST_F(CheckpointBytesTest, LoadingBytesClearsAFailedStep) {
  // check_numerics stops a step at its first non-finite output, after part of it ran.
  const std::vector<Batch> batches = RandomBatches(3);
  auto e = CallerEngine(/*check_numerics=*/true);
  ASSERT_TRUE(e);
  Losses(*e, batches, 0, 1);
  absl::StatusOr<std::string> bytes = e->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  Batch poisoned = batches[1];
  reinterpret_cast<float*>(poisoned["image"].data.data())[7] = NAN;
  EXPECT_FALSE(e->Step(poisoned).ok());
  const absl::StatusOr<std::string> refused = e->SaveCheckpointToBytes();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("LoadCheckpointFromBytes"));
  ASSERT_TRUE(e->LoadCheckpointFromBytes(*bytes).ok());
  EXPECT_EQ(e->step(), 1);
  auto s = e->Step(batches[1]);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->step, 2);
}

}  // namespace
}  // namespace mpc
