// The softmax / loss / normalisation families of the CUDA backend, one file each:
//   kernels_softmax_loss.cu  Softmax, LogSoftmax and their gradients, SoftmaxCrossEntropy-
//                            Loss (+ Grad), MeanSquaredError (+ Grad)
//   kernels_layer_norm.cu    LayerNormalization, LayerNormGrad
//   kernels_batch_norm.cu    BatchNormalization, BatchNormGrad, BatchNormStatsUpdate
// and two helpers those files share: a scratch buffer a kernel allocates at creation and
// frees with itself, and loads/stores of float operands whose dtype is only known when the
// kernel is created (per-channel parameters and statistics, which need not have X's dtype).
// Included only by .cu files (it pulls in the CUDA headers through cuda_kernel_util.cuh).
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"

namespace mpc::cuda {

// Device memory a kernel owns for its whole life (per-row or per-block partial results),
// allocated once at creation so Run stays free of allocations. Shared by copies of the
// kernel's Run closure; freed through the backend when the last one goes.
class Scratch {
 public:
  // At least one byte, so a zero-sized request still yields a valid pointer.
  static absl::StatusOr<std::shared_ptr<Scratch>> Create(Backend& backend, size_t bytes, const std::string& what) {
    auto p = backend.Allocate(bytes == 0 ? 1 : bytes);
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat("allocating ", bytes, " bytes of scratch for ", what, ": ",
                                                          p.status().message()));
    }
    return std::shared_ptr<Scratch>(new Scratch(backend, *p));
  }
  ~Scratch() { backend_.Free(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  template <typename T>
  T* as(size_t byte_offset = 0) const {
    return reinterpret_cast<T*>(static_cast<char*>(ptr_) + byte_offset);
  }

 private:
  Scratch(Backend& backend, void* ptr) : backend_(backend), ptr_(ptr) {}
  Backend& backend_;
  void* ptr_;
};

// Byte offsets of consecutive scratch arrays, each aligned to 256 bytes.
inline size_t AlignScratch(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The float formats an operand of runtime dtype may have on the GPU (no f64 kernels).
enum class FloatKind : int { kF32, kBF16, kF16 };

// `what` names the operand for the error ("BatchNormalization 'bn1' input 'scale'").
inline absl::StatusOr<FloatKind> FloatKindOf(DType dtype, const std::string& what) {
  switch (dtype) {
    case DType::kF32:
      return FloatKind::kF32;
    case DType::kBF16:
      return FloatKind::kBF16;
    case DType::kF16:
      return FloatKind::kF16;
    default:
      return absl::UnimplementedError(
          absl::StrCat(what, " is ", DTypeName(dtype), ", which is not yet on CUDA; use float32, bfloat16 or float16"));
  }
}

// Element i of a float operand of kind k, widened exactly to f32.
__device__ inline float LoadFloat(const void* p, FloatKind k, int64_t i) {
  switch (k) {
    case FloatKind::kBF16:
      return ToAcc(static_cast<const __nv_bfloat16*>(p)[i]);
    case FloatKind::kF16:
      return ToAcc(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Stores f32 v as element i of a float operand of kind k, rounding once (nearest even).
__device__ inline void StoreFloat(void* p, FloatKind k, int64_t i, float v) {
  switch (k) {
    case FloatKind::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = FromAcc<__nv_bfloat16>(v);
      break;
    case FloatKind::kF16:
      static_cast<__half*>(p)[i] = FromAcc<__half>(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

// The data of an optional output: null when the node has fewer outputs or it is absent.
inline void* OptionalOutput(const KernelContext& ctx, size_t i) {
  return i < ctx.outputs.size() ? ctx.outputs[i].data : nullptr;
}

}  // namespace mpc::cuda
