// CpuBackend: aligned host allocations, memcpy transfers, and the CPU kernel registry.
#include "backends/cpu/cpu_backend.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/shared_reorders.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc {
namespace {

class CpuBackend : public Backend {
 public:
  CpuBackend() {
    caps_.device = "cpu";
    // bf16 GEMMs are native through oneDNN on AVX512-BF16 / AMX CPUs; f16 and FP8 are
    // emulated exactly (operands rounded, f32 compute), so they run but are not native.
    caps_.native_compute = {DType::kF32, DType::kF64, DType::kBF16};
    caps_.tf32 = false;
    caps_.fp8 = false;
    caps_.updates_read_16bit_gradients = true;  // kernels_multi_tensor_update.cc, kernels_loss_scaling.cc
    // oneDNN's convolutions read and write channels-last activations as they are (NCHW ones
    // are reordered in and out every call) and run as fast or faster on them, except on
    // tiny planes: f32 loses at 2x2 (1.3-1.6x), where it takes the matmul paths
    // (kernels_conv.cc), and bf16's channels-last forward is 1.6x slower at 4x4
    // (tools/bench/conv_layouts on ResNet-18's layers, batch 32, 2 threads:
    // tools/bench/results/2026-11-26-cpu-dev-resnet18-channels-last.md).
    caps_.channels_last_min_plane = {{DType::kF32, 16}, {DType::kBF16, 64}};
    caps_.matmul_permuted_operands = true;  // oneDNN matmul takes arbitrary strides
    caps_.layer_norm_fused_edges = true;    // kernels_layer_norm.cc
    // The registry lives for the process; capturing it rather than `this` keeps a copy of
    // these capabilities valid after the backend is gone (passes and tests keep copies).
    caps_.has_kernel = [registry = &kernels()](const std::string& op, DType dtype) {
      return registry->Has(op, "cpu", dtype);
    };
  }

  std::string name() const override { return "cpu"; }
  void BeginKernelGroup() override { cpu::OpenReorderGroup(); }
  void EndKernelGroup() override { cpu::CloseReorderGroup(); }
  const Capabilities& capabilities() const override { return caps_; }

  absl::StatusOr<void*> Allocate(size_t bytes) override {
    // Exact-size allocation (rounded to the alignment only): AddressSanitizer then
    // catches any kernel that strays outside its planned buffer.
    void* p = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    if (!p) return absl::ResourceExhaustedError(absl::StrCat("cpu: out of memory allocating ", bytes, " bytes"));
    return p;
  }
  void Free(void* ptr) override { std::free(ptr); }
  absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override { return absl::OkStatus(); }

  const KernelRegistry& kernels() const override {
    static const KernelRegistry* registry = [] {
      auto* r = new KernelRegistry();
      for (auto family : {RegisterCpuGemmKernels,
                          RegisterCpuElementwiseKernels,
                          RegisterCpuMathKernels,
                          RegisterCpuCompareKernels,
                          RegisterCpuCastKernels,
                          RegisterCpuDropoutKernels,
                          RegisterCpuSoftmaxLossKernels,
                          RegisterCpuLayerNormKernels,
                          RegisterCpuAttentionKernels,
                          RegisterCpuSiluKernels,
                          RegisterCpuBatchNormKernels,
                          RegisterCpuShapeKernels,
                          RegisterCpuSliceKernels,
                          RegisterCpuGatherKernels,
                          RegisterCpuReduceKernels,
                          RegisterCpuConvKernels,
                          RegisterCpuPoolKernels,
                          RegisterCpuOptimizerKernels,
                          RegisterCpuMultiTensorUpdateKernels,
                          RegisterCpuLossScalingKernels,
                          RegisterCpuFp8Kernels,
                          RegisterCpuFp8GemmKernels,
                          RegisterCpuFp8CastDynamicKernels,
                          RegisterCpuCollectiveKernels}) {
        family(*r);
      }
      RegisterCpuDnnlEltwiseKernels(*r);
      return r;
    }();
    return *registry;
  }

 private:
  Capabilities caps_;
};

}  // namespace

std::unique_ptr<Backend> CreateCpuBackend() { return std::make_unique<CpuBackend>(); }

dnnl::engine& CpuDnnlEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& CpuDnnlStream() {
  static dnnl::stream* stream = new dnnl::stream(CpuDnnlEngine());
  return *stream;
}

}  // namespace mpc
