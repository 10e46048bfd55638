// What the CUDA data-movement and reduction families share:
//   strided_copy.cu    the strided copy every data-movement kernel here is built on
//   kernels_shape.cu   Reshape Flatten Identity Squeeze Unsqueeze Transpose BroadcastTo
//                      Expand Shape ConstantOfShape Range
//   kernels_slice.cu   Slice SliceGrad SliceTo PadTo Concat Split
//   kernels_gather.cu  Gather GatherGrad
//   kernels_reduce.cu  ReduceSumTo ReduceSum ReduceMean
// The two pieces those files share are StridedCopy (an element copy between two strided layouts, planned at
// kernel creation) and DeviceScratch (device memory owned by a kernel). Include it from
// .cu files only: it pulls in the CUDA runtime headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/cuda/cuda_kernel_util.cuh"

namespace mpc::cuda {

// Every dtype the CPU registers its dtype-agnostic data-movement kernels for, minus f64
// (the GPU runs f32 and below).
inline constexpr DType kCudaMoveDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2,
                                            DType::kI64, DType::kI32, DType::kU8,   DType::kBool};

// One copy layout: element (i_0, ..., i_{rank-1}) of an index space `dims` moves from
// src[src_base + sum_d i_d * src_strides[d]] to dst[dst_base + sum_d i_d * dst_strides[d]],
// counted in words of word_bytes. Strides may be 0 (broadcast) or negative (reversed
// slices).
struct CopyLayout {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t src_strides[kMaxRank] = {};
  int64_t dst_strides[kMaxRank] = {};
  int64_t src_base = 0, dst_base = 0;
  int64_t count = 0;     // product of dims (1 for rank 0)
  int word_bytes = 1;    // bytes moved per index
  bool index32 = false;  // every offset and the count fit in int32: cheaper index math
};

// A planned copy between two strided layouts of the same element count. Make simplifies
// the index space (drops extent-1 axes, merges axes that are contiguous on both sides),
// so tensors of any rank whose copy reduces to kMaxRank axes or fewer are accepted, and
// prepares wider-word variants (up to 16 bytes) for copies whose innermost axis is
// contiguous on both sides; Launch picks the widest one the run's pointers are aligned
// for. A copy where the source's contiguous axis is not the destination's (a transpose
// moving the last axis) runs through a 32x32 shared-memory tile so both sides are read
// and written coalesced. The destination must not overlap the source.
class StridedCopy {
 public:
  // `what` names the op (and node) for launch errors and for the rank error.
  static absl::StatusOr<StridedCopy> Make(const Shape& dims, const std::vector<int64_t>& src_strides, int64_t src_base,
                                          const std::vector<int64_t>& dst_strides, int64_t dst_base, size_t elem_bytes,
                                          const std::string& what);
  // Enqueues the copy on `stream`; nothing when the index space is empty.
  absl::Status Launch(const void* src, void* dst, cudaStream_t stream) const;
  int64_t count() const { return element_.count; }

 private:
  CopyLayout element_;               // one word per element
  std::vector<CopyLayout> widened_;  // wider words, widest first (need aligned pointers)
  bool tiled_ = false;               // transpose-like: use the shared-memory tile kernel
  int tile_axis_ = -1;               // for tiled_: the axis that is contiguous in the source
  std::string what_;
};

// Row-major strides of `shape` (in elements) as a vector, for StridedCopy::Make.
std::vector<int64_t> DenseStrides(const Shape& shape);

// Device memory a kernel allocates when it is created and frees when it is destroyed
// (kernels never allocate in Run). Kernels are destroyed before their backend.
class DeviceScratch {
 public:
  static absl::StatusOr<std::shared_ptr<DeviceScratch>> Allocate(Backend& backend, size_t bytes) {
    if (bytes == 0) return std::shared_ptr<DeviceScratch>(new DeviceScratch(&backend, nullptr));
    absl::StatusOr<void*> p = backend.Allocate(bytes);
    if (!p.ok()) return p.status();
    return std::shared_ptr<DeviceScratch>(new DeviceScratch(&backend, *p));
  }
  ~DeviceScratch() {
    if (ptr_) backend_->Free(ptr_);
  }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  void* data() const { return ptr_; }

 private:
  DeviceScratch(Backend* backend, void* ptr) : backend_(backend), ptr_(ptr) {}
  Backend* backend_;
  void* ptr_;
};

}  // namespace mpc::cuda
