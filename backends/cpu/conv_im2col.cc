// See conv_im2col.h.
#include "backends/cpu/conv_im2col.h"

#include "absl/strings/str_cat.h"

namespace mpc::cpu {

absl::Status CheckGemmConvDtype(DType dtype, const char* path) {
  if (dtype == DType::kF32 || dtype == DType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": dtype ", DTypeName(dtype), " is not f32 or bf16 (stage it through f32)"));
}

size_t WordsFor(int64_t elements, DType dtype) {
  return static_cast<size_t>(DTypeSize(dtype) == 2 ? (elements + 1) / 2 : elements);
}

Im2ColTransposed::Im2ColTransposed(const GemmConvGeom& q) : q_(q) {
  const conv::Window2D& d = q.w;
  const int64_t k = q.positions(), kernel = d.kh * d.kw, out_plane = d.oh * d.ow;
  tap_index_.assign(static_cast<size_t>(kernel * k), 0);
  tap_keep_.assign(static_cast<size_t>(kernel * k), 0);
  for (int64_t j = 0; j < k; ++j) {
    const int64_t n = j / out_plane, oh = (j % out_plane) / d.ow, ow = j % d.ow;
    for (int64_t kh = 0; kh < d.kh; ++kh) {
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const int64_t ih = oh * d.sh - d.pt + kh * d.dh, iw = ow * d.sw - d.pl + kw * d.dw;
        if (ih < 0 || ih >= d.ih || iw < 0 || iw >= d.iw) continue;  // padding: index 0, masked
        const size_t at = static_cast<size_t>((kh * d.kw + kw) * k + j);
        tap_index_[at] = static_cast<int32_t>((n * q.c * d.ih + ih) * d.iw + iw);
        tap_keep_[at] = ~uint32_t{0};
      }
    }
  }
}

// Every (c, kh, kw) row gathers the same positions of channel c's planes; a tap in the
// padding reads element 0 and is masked to +0 (a zero word is +0 in f32 and bf16 alike).
template <typename Word>
void Im2ColTransposed::Stage(const Word* x, Word* col) const {
  const int64_t k = q_.positions(), kernel = q_.w.kh * q_.w.kw, plane = q_.w.ih * q_.w.iw;
#pragma omp parallel for schedule(static)
  for (int64_t tap = 0; tap < q_.c * kernel; ++tap) {
    const Word* src = x + (tap / kernel) * plane;
    const int32_t* index = tap_index_.data() + (tap % kernel) * k;
    const uint32_t* keep = tap_keep_.data() + (tap % kernel) * k;
    Word* dst = col + tap * k;
    for (int64_t j = 0; j < k; ++j) dst[j] = src[index[j]] & static_cast<Word>(keep[j]);
  }
}

template void Im2ColTransposed::Stage<uint16_t>(const uint16_t*, uint16_t*) const;
template void Im2ColTransposed::Stage<uint32_t>(const uint32_t*, uint32_t*) const;

}  // namespace mpc::cpu
