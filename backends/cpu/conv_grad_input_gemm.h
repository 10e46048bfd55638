// The input gradient (backward data) of a group-1 convolution with tiny output planes
// (ResNet's last stage at 64x64 images: 2x2) as one oneDNN matmul. oneDNN 2.6's direct
// backward-data kernel first reorders the weights into its blocked layout, every step
// (the weights change every step), and spends its time on taps in the padding; here the
// plain OIHW weight is a row-major [M, C*KH*KW] matrix the matmul takes as it is:
//
//   dcol[N*OH*OW, C*KH*KW] = dY'^T[N*OH*OW, M] x W[M, C*KH*KW]
//
// dY'^T is dY with the output position (n, oh, ow) as row; dcol is gathered back into dX
// (col2im): each input position sums the (position, tap) entries that read it, so every
// dX element is written once by one thread. The matmul accumulates in f32 and dX is
// rounded to its dtype once, as oneDNN's convolution does. conv_grad_weight_gemm.h is the
// weight gradient's counterpart; the forward pass stays on oneDNN's convolution (the
// matmul lost or broke even there: tools/bench/conv_gemm_paths).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cpu/conv_im2col.h"
#include "graph/dtype.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc::cpu {

class ConvGradInputGemm {
 public:
  // True when this path beats oneDNN's direct kernel with its reorders
  // (tools/bench/conv_gemm_paths on ResNet-18's layers, matmul / direct): f32 or bf16,
  // output planes of at most kMaxOutputPlane positions (2x2 with 3x3 taps: 0.53-0.76x in
  // both dtypes; 4x4: 0.78-1.46x), kernels larger than 1x1 (a 1x1 kernel has no taps in
  // the padding to waste: 1.03-1.17x), scratch under kMaxScratchBytes, operands whose
  // element offsets fit int32.
  static bool Prefers(const GemmConvGeom& q, DType dtype);
  // dtype: f32 or bf16 (operands and dX alike). Allocates the scratch once.
  static absl::StatusOr<std::unique_ptr<ConvGradInputGemm>> Create(const GemmConvGeom& q, DType dtype);

  // dy: [N, M, OH, OW], w: [M, C, KH, KW], dx: [N, C, IH, IW], all in dtype, plain.
  void Run(const void* dy, const void* w, void* dx);

  static constexpr int64_t kMaxOutputPlane = 4;
  static constexpr int64_t kMaxScratchBytes = int64_t{64} << 20;

 private:
  template <typename Word>
  void StageRows(const Word* dy);
  template <typename Word>
  void GatherInputGradient(Word* dx) const;

  GemmConvGeom q_;
  DType dtype_ = DType::kF32;
  std::vector<uint32_t> dy_t_;  // dY'^T in dtype's words (bf16 packs two per uint32_t)
  std::vector<float> dcol_;     // [N*OH*OW, C*KH*KW] in f32
  // For input position i of a plane, the dcol entries that add into it:
  // tap_offset_[tap_begin_[i] .. tap_begin_[i + 1]) = p * C*KH*KW + (kh * KW + kw) for the
  // output positions p of the same sample, relative to the sample's first row and channel
  // c's first column.
  std::vector<int32_t> tap_begin_, tap_offset_;
  dnnl::matmul primitive_;
  dnnl::memory dy_mem_, w_mem_, dcol_mem_;
};

}  // namespace mpc::cpu
