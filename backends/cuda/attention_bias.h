// The interface between kernels_attention.cc (host code: cuDNN's fused attention) and
// attention_bias.cu (device code): the copy that lays an attention bias out the way cuDNN
// reads it. No device code here: kernels_attention.cc is compiled by the host compiler.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"

namespace mpc::cuda {

class StridedCopy;  // tensor_families.h (device-side header)

// A planned copy of a bias of shape `bias` (rank 4, each dim 1 or the matching dim of
// `out`) into the rows of a [out0, out1, out2, out3] tensor whose rows are `row_stride`
// elements apart (row_stride >= out3; the columns past out3 are left as they are):
// broadcasting over the dims where `bias` is 1 and out is not. Planned once at kernel
// creation; Launch enqueues it on `stream`. Source and destination must not overlap.
class BiasBroadcast {
 public:
  static absl::StatusOr<BiasBroadcast> Make(const Shape& bias, const Shape& out, int64_t row_stride, size_t elem_bytes,
                                            const std::string& what);
  absl::Status Launch(const void* src, void* dst, cudaStream_t stream) const;

 private:
  std::shared_ptr<const StridedCopy> copy_;
};

}  // namespace mpc::cuda
