// The engine's batches copied to the GPU ahead (Engine::Impl::PrefetchNextBatch ->
// Executor::UploadInputAhead -> CudaBackend::UploadAhead): a batch of 1 MiB or more is
// pinned, gathered during the step before it and copied on the upload stream beside that
// step's kernels, then moved into the input by a device-to-device copy. Training on such
// batches on the GPU must see the same batches as on the CPU, step by step, across epoch
// boundaries (the shuffle changes) and after a checkpoint load (which drops the batch
// already uploaded). Another batch changes a step's loss by 2e-4 to 1e-2 here (CPU, f32),
// above the f32 difference between cuBLASLt and oneDNN that the tolerance allows.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// 512 x 784 f32 features: 1.5 MiB a batch, pinned and uploaded ahead on CUDA; 4 batches
// an epoch.
std::unique_ptr<Engine> FashionMlpOn(const std::string& device) {
  EngineOptions options;
  options.spec_text = absl::StrCat("model: \"", testing::SourcePath("models/fashion_mlp/fashion_mlp.onnx"),
                                   "\"\n"
                                   "features_input: \"image\"\n"
                                   "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
                                   "train_data { synthetic { num_examples: 2048 feature_shape: 784 num_classes: 10 "
                                   "seed: 3 } }\n"
                                   "batch_size: 512\nsteps: 40\nseed: 5\n"
                                   "optimizer { sgd { lr: 0.1 } }\n");
  options.device = device;
  options.precision = "f32";
  options.use_checkpoint_dir = false;
  auto engine = Engine::Create(options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// Steps `n` times, or until a step fails (reported), returning the losses.
std::vector<double> Losses(Engine& engine, int n) {
  std::vector<double> out;
  for (int i = 0; i < n; ++i) {
    auto s = engine.Step();
    EXPECT_TRUE(s.ok()) << "step " << i + 1 << ": " << s.status();
    if (!s.ok()) break;
    out.push_back(s->loss);
  }
  return out;
}

void ExpectSameLosses(const std::vector<double>& gpu, const std::vector<double>& cpu, const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  // f32 on both (no TF32): cuBLASLt and oneDNN sum in different orders, ~1e-6 relative
  // per GEMM, compounded over 10 SGD steps.
  for (size_t i = 0; i < gpu.size(); ++i) {
    EXPECT_NEAR(gpu[i], cpu[i], 3e-5 * std::max(1.0, std::fabs(cpu[i]))) << what << ", step " << i + 1;
  }
}

TEST(CudaEngineUpload, BatchesUploadedAheadAreTheCpusBatches) {
  MPC_GPU_OR_SKIP(gpu);
  (void)gpu;
  auto on_gpu = FashionMlpOn("cuda");
  auto on_cpu = FashionMlpOn("cpu");
  ASSERT_TRUE(on_gpu && on_cpu);
  for (const std::string& notice : on_gpu->notices()) {
    EXPECT_EQ(notice.find("pageable"), std::string::npos) << "the batch was not pinned: " << notice;
  }
  // 10 steps: two and a half epochs, each reshuffled.
  std::vector<double> gpu_losses = Losses(*on_gpu, 6);
  auto bytes = on_gpu->SaveCheckpointToBytes();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  const std::vector<double> gpu_rest = Losses(*on_gpu, 4);
  gpu_losses.insert(gpu_losses.end(), gpu_rest.begin(), gpu_rest.end());
  const std::vector<double> cpu_losses = Losses(*on_cpu, 10);
  ExpectSameLosses(gpu_losses, cpu_losses, "first pass");
  // The batches differ enough for a wrong one to show: the spread of the losses is far
  // above the tolerance.
  const auto [lo, hi] = std::minmax_element(cpu_losses.begin(), cpu_losses.end());
  EXPECT_GT(*hi - *lo, 1e-2);

  // Back to step 6: the batch uploaded during step 10 is for step 11 and must be dropped.
  ASSERT_TRUE(on_gpu->LoadCheckpointFromBytes(*bytes).ok());
  ExpectSameLosses(Losses(*on_gpu, 4), std::vector<double>(cpu_losses.begin() + 6, cpu_losses.end()),
                   "after loading the step-6 checkpoint");
}

}  // namespace
}  // namespace mpc
