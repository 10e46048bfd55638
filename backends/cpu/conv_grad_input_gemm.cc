// See conv_grad_input_gemm.h.
#include "backends/cpu/conv_grad_input_gemm.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_gemm.h"
#include "graph/float_convert.h"

namespace mpc::cpu {

namespace {

using dnnl::memory;

// Rounds an f32 sum to the dtype's word once.
inline void StoreWord(float v, uint32_t* p) { std::memcpy(p, &v, sizeof v); }
inline void StoreWord(float v, uint16_t* p) { *p = FloatToBf16(v); }

}  // namespace

bool ConvGradInputGemm::Prefers(const GemmConvGeom& q, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) return false;
  const int64_t k = q.positions(), taps = q.taps();
  const int64_t scratch = k * q.m * static_cast<int64_t>(DTypeSize(dtype)) + k * taps * 4;
  const int64_t largest = std::max({q.x_size(), q.y_size(), k * taps});
  return q.w.oh * q.w.ow <= kMaxOutputPlane && q.w.kh * q.w.kw > 1 && scratch <= kMaxScratchBytes &&
         largest <= std::numeric_limits<int32_t>::max();  // the index tables are int32
}

absl::StatusOr<std::unique_ptr<ConvGradInputGemm>> ConvGradInputGemm::Create(const GemmConvGeom& q, DType dtype) {
  if (absl::Status s = CheckGemmConvDtype(dtype, "ConvGradInputGemm"); !s.ok()) return s;
  auto g = std::make_unique<ConvGradInputGemm>();
  g->q_ = q;
  g->dtype_ = dtype;
  const int64_t k = q.positions(), taps = q.taps();
  g->dy_t_.resize(WordsFor(k * q.m, dtype));
  g->dcol_.resize(static_cast<size_t>(k * taps));
  // Which (output position, tap) pairs of one sample read each input position.
  const conv::Window2D& d = q.w;
  std::vector<std::vector<int32_t>> reads(static_cast<size_t>(d.ih * d.iw));
  for (int64_t p = 0; p < d.oh * d.ow; ++p) {
    const int64_t oh = p / d.ow, ow = p % d.ow;
    for (int64_t kh = 0; kh < d.kh; ++kh) {
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        const int64_t ih = oh * d.sh - d.pt + kh * d.dh, iw = ow * d.sw - d.pl + kw * d.dw;
        if (ih < 0 || ih >= d.ih || iw < 0 || iw >= d.iw) continue;  // a tap in the padding reads nothing
        reads[static_cast<size_t>(ih * d.iw + iw)].push_back(static_cast<int32_t>(p * taps + kh * d.kw + kw));
      }
    }
  }
  g->tap_begin_.push_back(0);
  for (const std::vector<int32_t>& r : reads) {
    g->tap_offset_.insert(g->tap_offset_.end(), r.begin(), r.end());
    g->tap_begin_.push_back(static_cast<int32_t>(g->tap_offset_.size()));
  }
  try {
    auto& eng = CpuDnnlEngine();
    const memory::data_type dt = DnnlType(dtype);
    const memory::desc dy_md({k, q.m}, dt, memory::format_tag::ab);
    const memory::desc w_md({q.m, taps}, dt, memory::format_tag::ab);
    const memory::desc dcol_md({k, taps}, memory::data_type::f32, memory::format_tag::ab);
    g->primitive_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(dy_md, w_md, dcol_md), eng));
    g->dy_mem_ = memory(dy_md, eng, g->dy_t_.data());
    g->w_mem_ = memory(w_md, eng, DNNL_MEMORY_NONE);
    g->dcol_mem_ = memory(dcol_md, eng, g->dcol_.data());
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul setup failed for a convolution input gradient (M=", k,
                                            " K=", q.m, " N=", taps, ", ", DTypeName(dtype), "): ", e.what()));
  }
  return g;
}

// dY'^T[n * P + p, m] = dY[n, m, p]: a bit copy.
template <typename Word>
void ConvGradInputGemm::StageRows(const Word* dy) {
  const int64_t plane = q_.w.oh * q_.w.ow, channels = q_.m;
  Word* rows = reinterpret_cast<Word*>(dy_t_.data());
#pragma omp parallel for schedule(static)
  for (int64_t j = 0; j < q_.positions(); ++j) {
    const Word* src = dy + (j / plane) * channels * plane + j % plane;
    Word* dst = rows + j * channels;
    for (int64_t m = 0; m < channels; ++m) dst[m] = src[m * plane];
  }
}

// dX[n, c, i] = the sum of dcol[n * P + p, c * KH*KW + kk] over the (p, kk) that read i.
template <typename Word>
void ConvGradInputGemm::GatherInputGradient(Word* dx) const {
  const int64_t in_plane = q_.w.ih * q_.w.iw, out_plane = q_.w.oh * q_.w.ow, taps = q_.taps(),
                kernel = q_.w.kh * q_.w.kw, channels = q_.c;
  const float* dcol = dcol_.data();
  const int32_t* begin = tap_begin_.data();
  const int32_t* offset = tap_offset_.data();
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < q_.n * channels; ++nc) {
    const float* base = dcol + (nc / channels) * out_plane * taps + (nc % channels) * kernel;
    Word* dst = dx + nc * in_plane;
    for (int64_t i = 0; i < in_plane; ++i) {
      float sum = 0.0f;
      for (int32_t e = begin[i]; e < begin[i + 1]; ++e) sum += base[offset[e]];
      StoreWord(sum, dst + i);
    }
  }
}

void ConvGradInputGemm::Run(const void* dy, const void* w, void* dx) {
  const bool half = DTypeSize(dtype_) == 2;
  if (half) {
    StageRows(static_cast<const uint16_t*>(dy));
  } else {
    StageRows(static_cast<const uint32_t*>(dy));
  }
  w_mem_.set_data_handle(const_cast<void*>(w));
  primitive_.execute(CpuDnnlStream(), {{DNNL_ARG_SRC, dy_mem_}, {DNNL_ARG_WEIGHTS, w_mem_}, {DNNL_ARG_DST, dcol_mem_}});
  CpuDnnlStream().wait();
  if (half) {
    GatherInputGradient(static_cast<uint16_t*>(dx));
  } else {
    GatherInputGradient(static_cast<uint32_t*>(dx));
  }
}

}  // namespace mpc::cpu
