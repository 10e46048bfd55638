// What the matmul paths of tiny-plane convolutions share (conv_grad_weight_gemm.h,
// conv_grad_input_gemm.h): their geometry, and the im2col matrix stored transposed: row
// (c, kh, kw) holds the input value that tap sees at every output position
// j = (n, oh, ow), +0 where the tap lies in the padding. Each row is written contiguously
// from index tables built once, so staging is a gather with no branch.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "graph/dtype.h"
#include "graph/ops_conv_util.h"

namespace mpc::cpu {

// Batch n, input channels c, output channels m, group 1, in 2-D form.
struct GemmConvGeom {
  int64_t n = 0, c = 0, m = 0;
  conv::Window2D w;
  int64_t positions() const { return n * w.oh * w.ow; }  // output positions (n, oh, ow)
  int64_t taps() const { return c * w.kh * w.kw; }       // (c, kh, kw): a weight row's length
  int64_t x_size() const { return n * c * w.ih * w.iw; }
  int64_t y_size() const { return n * m * w.oh * w.ow; }
};

// The matmul paths run f32 and bf16 (f16 is staged through f32 by the caller): an error
// naming `path` otherwise.
absl::Status CheckGemmConvDtype(DType dtype, const char* path);
// uint32_t words holding `elements` values of dtype (bf16 packs two per word).
size_t WordsFor(int64_t elements, DType dtype);

class Im2ColTransposed {
 public:
  Im2ColTransposed() = default;
  explicit Im2ColTransposed(const GemmConvGeom& q);

  // col: taps() x positions() words; x: [N, C, IH, IW]. Word is uint16_t for 16-bit
  // formats and uint32_t for f32: a bit copy, so NaN payloads and signed zeros survive.
  template <typename Word>
  void Stage(const Word* x, Word* col) const;

 private:
  GemmConvGeom q_;
  // Per (kh, kw) and position j: the X element (from channel c's plane of sample 0 of
  // the tap's row) and an all-ones mask, all-zeros where the tap lies in the padding.
  std::vector<int32_t> tap_index_;
  std::vector<uint32_t> tap_keep_;
};

}  // namespace mpc::cpu
