// BiasBroadcast (attention_bias.h): the attention bias laid out for cuDNN, as one planned
// StridedCopy with stride 0 on the broadcast dims.
#include "absl/strings/str_cat.h"
#include "backends/cuda/attention_bias.h"
#include "backends/cuda/tensor_families.h"
#include "base/status_macros.h"

namespace mpc::cuda {

absl::StatusOr<BiasBroadcast> BiasBroadcast::Make(const Shape& bias, const Shape& out, int64_t row_stride,
                                                  size_t elem_bytes, const std::string& what) {
  if (bias.size() != 4 || out.size() != 4 || row_stride < out[3]) {
    return absl::InternalError(absl::StrCat(what, ": bias copy of ", ShapeToString(bias), " into ", ShapeToString(out),
                                            " rows ", row_stride, " apart is malformed"));
  }
  std::vector<int64_t> src = DenseStrides(bias);
  for (int d = 0; d < 4; ++d) {
    if (bias[d] == out[d]) continue;
    if (bias[d] != 1) {
      return absl::InternalError(
          absl::StrCat(what, ": bias ", ShapeToString(bias), " does not broadcast to ", ShapeToString(out)));
    }
    src[d] = 0;
  }
  const std::vector<int64_t> dst = {out[1] * out[2] * row_stride, out[2] * row_stride, row_stride, 1};
  MPC_ASSIGN_OR_RETURN(StridedCopy copy, StridedCopy::Make(out, src, 0, dst, 0, elem_bytes, what));
  BiasBroadcast b;
  b.copy_ = std::make_shared<const StridedCopy>(std::move(copy));
  return b;
}

absl::Status BiasBroadcast::Launch(const void* src, void* dst, cudaStream_t stream) const {
  if (!copy_) return absl::FailedPreconditionError("BiasBroadcast::Launch before Make");
  return copy_->Launch(src, dst, stream);
}

}  // namespace mpc::cuda
