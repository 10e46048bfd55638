// See conv_grad_weight_gemm.h.
#include "backends/cpu/conv_grad_weight_gemm.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_gemm.h"

namespace mpc::cpu {

namespace {

using dnnl::memory;

int64_t ScratchElements(const GemmConvGeom& q) { return (q.m + q.taps()) * q.positions(); }

}  // namespace

bool ConvGradWeightGemm::Prefers(const GemmConvGeom& q, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16) return false;
  const int64_t largest_operand = std::max(q.x_size(), q.y_size());
  const int64_t max_plane = dtype == DType::kBF16 ? kMaxOutputPlaneBf16 : kMaxOutputPlaneF32;
  return q.w.oh * q.w.ow <= max_plane &&
         ScratchElements(q) * static_cast<int64_t>(DTypeSize(dtype)) <= kMaxScratchBytes &&
         largest_operand <= std::numeric_limits<int32_t>::max();  // the index tables are int32
}

absl::StatusOr<std::unique_ptr<ConvGradWeightGemm>> ConvGradWeightGemm::Create(const GemmConvGeom& q, DType dtype) {
  if (absl::Status s = CheckGemmConvDtype(dtype, "ConvGradWeightGemm"); !s.ok()) return s;
  auto g = std::make_unique<ConvGradWeightGemm>();
  g->q_ = q;
  g->dtype_ = dtype;
  const int64_t k = q.positions(), taps = q.taps();
  g->dy_rows_.resize(WordsFor(q.m * k, dtype));
  g->col_.resize(WordsFor(taps * k, dtype));
  // Position j = (n, oh, ow) of K: where dY' row m reads (from channel m's plane of sample 0).
  const int64_t out_plane = q.w.oh * q.w.ow;
  g->dy_index_.resize(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) {
    g->dy_index_[j] = static_cast<int32_t>((j / out_plane) * q.m * out_plane + j % out_plane);
  }
  g->im2col_ = Im2ColTransposed(q);
  try {
    auto& eng = CpuDnnlEngine();
    const memory::data_type dt = DnnlType(dtype);
    const memory::desc a_md({q.m, k}, dt, memory::format_tag::ab);
    const memory::desc b_md({k, taps}, dt, memory::dims{1, k});  // col^T read as col
    const memory::desc y_md({q.m, taps}, dt, memory::format_tag::ab);
    g->primitive_ = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a_md, b_md, y_md), eng));
    g->a_ = memory(a_md, eng, g->dy_rows_.data());
    g->b_ = memory(b_md, eng, g->col_.data());
    g->y_ = memory(y_md, eng, DNNL_MEMORY_NONE);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul setup failed for a convolution weight gradient (M=", q.m,
                                            " K=", k, " N=", taps, ", ", DTypeName(dtype), "): ", e.what()));
  }
  return g;
}

// Fills dY' through its index table (every row gathers the same positions of its
// channel) and col^T through the im2col tables.
template <typename Word>
void ConvGradWeightGemm::Stage(const Word* dy, const Word* x) {
  const int64_t k = q_.positions(), out_plane = q_.w.oh * q_.w.ow;
  Word* rows = reinterpret_cast<Word*>(dy_rows_.data());
  const int32_t* dy_index = dy_index_.data();
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < q_.m; ++m) {
    const Word* src = dy + m * out_plane;
    Word* dst = rows + m * k;
    for (int64_t j = 0; j < k; ++j) dst[j] = src[dy_index[j]];
  }
  im2col_.Stage(x, reinterpret_cast<Word*>(col_.data()));
}

void ConvGradWeightGemm::Run(const void* dy, const void* x, void* dw) {
  if (DTypeSize(dtype_) == 2) {
    Stage(static_cast<const uint16_t*>(dy), static_cast<const uint16_t*>(x));
  } else {
    Stage(static_cast<const uint32_t*>(dy), static_cast<const uint32_t*>(x));
  }
  y_.set_data_handle(dw);
  primitive_.execute(CpuDnnlStream(), {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, y_}});
  CpuDnnlStream().wait();
}

}  // namespace mpc::cpu
