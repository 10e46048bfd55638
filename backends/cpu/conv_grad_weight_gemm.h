// The weight gradient of a group-1 convolution as one oneDNN matmul over an im2col
// matrix, for convolutions whose output planes are tiny (ResNet's last stages at 64x64
// images: 4x4 and 2x2). There oneDNN 2.6's direct backward-weights kernel spends most of
// its time on taps that land in the padding and on reorders to and from blocked layouts:
// on ResNet-18's 512-channel 3x3 convolutions on 2x2 planes (batch 32, 2 threads) it
// takes 2.6 ms in bf16 and f32 with its reorders, against 0.8 ms (bf16) and 1.4 ms (f32)
// for this path with its staging (tools/bench/conv_gemm_paths; results in
// tools/bench/results/2026-11-25-cpu-dev-resnet18-grad-weight-gemm.md). Prefers() says
// where it wins.
//
//   dW[M, C*KH*KW] = dY'[M, N*OH*OW] x col[N*OH*OW, C*KH*KW]
//
// dY' is dY with its N and M axes swapped, col is the im2col matrix (conv_im2col.h),
// stored transposed so that each (c, kh, kw) row is written contiguously; the matmul
// reads it through strides. Products accumulate in f32 and dW is rounded to its dtype
// once, as oneDNN's convolution does. The input gradient of such convolutions has its own
// matmul path (conv_grad_input_gemm.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cpu/conv_im2col.h"
#include "graph/dtype.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc::cpu {

class ConvGradWeightGemm {
 public:
  // True when this path beats oneDNN's direct kernel (tools/bench/conv_gemm_paths
  // on ResNet-18's layers, matmul / direct): output planes of at most 4 positions in f32
  // (2x2: 0.47-0.76x; at 4x4 the two broke even, 0.89-1.09x) and 16 in bf16 (4x4:
  // 0.66-0.87x; 8x8: 0.76-1.51x), scratch under kMaxScratchBytes, operands whose element
  // offsets fit int32.
  static bool Prefers(const GemmConvGeom& q, DType dtype);
  // dtype: f32 or bf16 (operands and dW alike). Allocates the scratch once.
  static absl::StatusOr<std::unique_ptr<ConvGradWeightGemm>> Create(const GemmConvGeom& q, DType dtype);

  // dy: [N, M, OH, OW], x: [N, C, IH, IW], dw: [M, C, KH, KW], all in dtype, plain.
  void Run(const void* dy, const void* x, void* dw);

  static constexpr int64_t kMaxOutputPlaneF32 = 4, kMaxOutputPlaneBf16 = 16;
  static constexpr int64_t kMaxScratchBytes = int64_t{64} << 20;

 private:
  template <typename Word>
  void Stage(const Word* dy, const Word* x);

  GemmConvGeom q_;
  DType dtype_ = DType::kF32;
  std::vector<uint32_t> dy_rows_, col_;  // dY' and col^T, in dtype's words (bf16 packs two per uint32_t)
  std::vector<int32_t> dy_index_;        // per position of K: the dY element dY' reads
  Im2ColTransposed im2col_;
  dnnl::matmul primitive_;
  dnnl::memory a_, b_, y_;
};

}  // namespace mpc::cpu
