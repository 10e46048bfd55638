// The interface between kernels_conv.cc (host code: the cuDNN convolutions) and
// kernels_pool.cu (device code: the pooling kernels, and the small device helpers the
// convolutions need around cuDNN). No device code here: kernels_conv.cc is compiled by
// the host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace mpc {
namespace cuda {

// For planes p < `planes` of row-major [h, w] images (dtype f32, bf16 or f16):
//   dst[p][r][c] = src[p][r + row_shift][c + col_shift], or +0 where that is outside src.
// With negative shifts this zero-pads src into a larger dst (pad top = -row_shift, left =
// -col_shift); with positive shifts it crops a window of src. Every dst element is
// written. Enqueued on `stream`; src and dst must not overlap.
absl::Status LaunchCopyPlanesShifted(DType dtype, const void* src, int64_t src_h, int64_t src_w, void* dst,
                                     int64_t dst_h, int64_t dst_w, int64_t planes, int64_t row_shift, int64_t col_shift,
                                     cudaStream_t stream);

// y[n][m][s] += bias[m] for y of shape [batch, channels, spatial] (dtype f32, bf16 or f16),
// added in f32 and rounded once to the dtype. Enqueued on `stream`.
absl::Status LaunchAddChannelBias(DType dtype, void* y, const void* bias, int64_t batch, int64_t channels,
                                  int64_t spatial, cudaStream_t stream);

class StridedCopy;  // tensor_families.h (device-side header)

// A planned batched matrix transpose [outer, rows, cols] -> [outer, cols, rows] of
// elem_bytes-sized elements: NCHW <-> NHWC for activations ([N, C, H*W] <-> [N, H*W, C])
// and KCRS <-> KRSC for filters. Planned once at kernel creation (a tiled StridedCopy);
// Launch enqueues it on `stream`. Source and destination must not overlap.
class MatrixTranspose {
 public:
  static absl::StatusOr<MatrixTranspose> Make(int64_t outer, int64_t rows, int64_t cols, size_t elem_bytes);
  absl::Status Launch(const void* src, void* dst, cudaStream_t stream) const;

 private:
  std::shared_ptr<const StridedCopy> copy_;
};

}  // namespace cuda
}  // namespace mpc
