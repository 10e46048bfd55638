// PinnedHostBuffers (engine/pinned_host_buffers.h) against a backend that records what it
// is asked: large buffers pinned and unpinned once, small ones and backends without pinned
// memory left alone, a refusal kept as a notice that names the buffer. The CUDA side
// (cudaHostRegister, copies from pinned memory) is tests/gpu/cuda_gemm_test.cc's.
#include "engine/pinned_host_buffers.h"

#include <set>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mpc {
namespace {

using ::testing::HasSubstr;

// Only the pinning calls matter here; the rest of Backend is never reached.
class RecordingBackend : public Backend {
 public:
  enum class Mode { kPins, kNoPinnedMemory, kRefuses };
  explicit RecordingBackend(Mode mode) : mode_(mode) {}
  std::string name() const override { return "recording"; }
  const Capabilities& capabilities() const override { return caps_; }
  absl::StatusOr<void*> Allocate(size_t) override { return absl::UnimplementedError("not used"); }
  void Free(void*) override {}
  absl::Status CopyToDevice(void*, const void*, size_t) override { return absl::UnimplementedError("not used"); }
  absl::Status CopyToHost(void*, const void*, size_t) override { return absl::UnimplementedError("not used"); }
  absl::Status Synchronize() override { return absl::OkStatus(); }
  const KernelRegistry& kernels() const override { return registry_; }

  absl::StatusOr<bool> PinHostBuffer(void* ptr, size_t bytes) override {
    if (mode_ == Mode::kRefuses) return absl::ResourceExhaustedError("page-locked memory limit reached");
    if (mode_ == Mode::kNoPinnedMemory) return false;
    EXPECT_TRUE(pinned.insert(ptr).second) << "pinned twice";
    pinned_bytes += bytes;
    return true;
  }
  void UnpinHostBuffer(void* ptr) override { EXPECT_EQ(pinned.erase(ptr), 1u) << "unpinned what was not pinned"; }

  std::set<void*> pinned;
  size_t pinned_bytes = 0;

 private:
  Mode mode_;
  Capabilities caps_;
  KernelRegistry registry_;
};

TEST(PinnedHostBuffersTest, PinsLargeBuffersAndUnpinsThemOnce) {
  RecordingBackend backend(RecordingBackend::Mode::kPins);
  Tensor features(DType::kF32, {512, 1024});  // 2 MiB
  Tensor labels(DType::kI64, {512});          // 4 KiB: not worth pinning
  {
    PinnedHostBuffers buffers;
    buffers.Pin(backend, features, "the feature batch");
    buffers.Pin(backend, labels, "the label batch");
    EXPECT_EQ(buffers.pinned_count(), 1u);
    EXPECT_EQ(buffers.pinned_bytes(), features.bytes());
    EXPECT_EQ(backend.pinned, std::set<void*>{features.raw()});
    EXPECT_EQ(backend.pinned_bytes, features.bytes());
    EXPECT_TRUE(buffers.refusals().empty());
  }
  EXPECT_TRUE(backend.pinned.empty()) << "the destructor unpins";
}

TEST(PinnedHostBuffersTest, ClearUnpinsSoBuffersCanBeReplaced) {
  RecordingBackend backend(RecordingBackend::Mode::kPins);
  Tensor a(DType::kF32, {1 << 19}), b(DType::kF32, {1 << 19});
  PinnedHostBuffers buffers;
  buffers.Pin(backend, a, "a");
  buffers.Pin(backend, b, "b");
  EXPECT_EQ(backend.pinned.size(), 2u);
  buffers.Clear();
  EXPECT_TRUE(backend.pinned.empty());
  EXPECT_EQ(buffers.pinned_count(), 0u);
  EXPECT_EQ(buffers.pinned_bytes(), 0u);
}

TEST(PinnedHostBuffersTest, BackendWithoutPinnedMemoryChangesNothing) {
  RecordingBackend backend(RecordingBackend::Mode::kNoPinnedMemory);
  Tensor features(DType::kF32, {1 << 20});
  PinnedHostBuffers buffers;
  buffers.Pin(backend, features, "the feature batch");
  EXPECT_EQ(buffers.pinned_count(), 0u);
  EXPECT_TRUE(buffers.refusals().empty()) << "not pinning is the CPU's normal, not a refusal";
}

TEST(PinnedHostBuffersTest, RefusalLeavesTheBufferPageableAndSaysWhy) {
  RecordingBackend backend(RecordingBackend::Mode::kRefuses);
  Tensor features(DType::kF32, {1 << 20});
  PinnedHostBuffers buffers;
  buffers.Pin(backend, features, "the feature batch");
  EXPECT_EQ(buffers.pinned_count(), 0u);
  ASSERT_EQ(buffers.refusals().size(), 1u);
  EXPECT_THAT(buffers.refusals()[0], HasSubstr("the feature batch (4194304 bytes) stays in pageable memory"));
  EXPECT_THAT(buffers.refusals()[0], HasSubstr("page-locked memory limit reached"));
}

}  // namespace
}  // namespace mpc
