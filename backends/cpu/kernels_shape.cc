// CPU shape kernels (graph/ops_shape.cc, graph/ops_tensor.cc): Reshape, Flatten,
// Identity, Squeeze, Unsqueeze (copies: buffers are planned separately), Transpose,
// Expand and BroadcastTo (numpy broadcast copies), and the shape producers Shape,
// ConstantOfShape and Range. Data movement is dtype-agnostic: it moves element words.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

#if defined(__SSE2__)
// One 8x8 block of 16-bit words: y row j = a column j. Three rounds of unpacks interleave
// 16-, 32- and 64-bit pieces of row pairs.
inline void TransposeBlock(const uint16_t* a, int64_t a_stride, uint16_t* y, int64_t y_stride) {
  __m128i r[8], t[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i * a_stride));
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  // t[0] = a00 a10 a01 a11 a02 a12 a03 a13, t[1] = a04 a14 ... a07 a17, t[2] = a20 a30 ...
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 2; ++i) {
      r[4 * h + 2 * i] = _mm_unpacklo_epi32(t[4 * h + i], t[4 * h + i + 2]);
      r[4 * h + 2 * i + 1] = _mm_unpackhi_epi32(t[4 * h + i], t[4 * h + i + 2]);
    }
  }
  // r[0] = a00 a10 a20 a30 a01 a11 a21 a31, r[1] = columns 2-3, r[2] = 4-5, r[3] = 6-7 of
  // rows 0-3; r[4..7] the same of rows 4-7.
  for (int i = 0; i < 4; ++i) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + (2 * i) * y_stride), _mm_unpacklo_epi64(r[i], r[i + 4]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + (2 * i + 1) * y_stride), _mm_unpackhi_epi64(r[i], r[i + 4]));
  }
}

// One 4x4 block of 32-bit words.
inline void TransposeBlock(const uint32_t* a, int64_t a_stride, uint32_t* y, int64_t y_stride) {
  __m128i r[4];
  for (int i = 0; i < 4; ++i) r[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + i * a_stride));
  const __m128i t0 = _mm_unpacklo_epi32(r[0], r[1]), t1 = _mm_unpacklo_epi32(r[2], r[3]);
  const __m128i t2 = _mm_unpackhi_epi32(r[0], r[1]), t3 = _mm_unpackhi_epi32(r[2], r[3]);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), _mm_unpacklo_epi64(t0, t1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y + y_stride), _mm_unpackhi_epi64(t0, t1));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y + 2 * y_stride), _mm_unpacklo_epi64(t2, t3));
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y + 3 * y_stride), _mm_unpackhi_epi64(t2, t3));
}

#endif  // __SSE2__

// Where SSE2 shuffles exist (every x86-64), 2- and 4-byte words move in blocks.
#if defined(__SSE2__)
constexpr bool kHasBlockShuffles = true;
#else
constexpr bool kHasBlockShuffles = false;
#endif

// y[r * y_row_stride + c] = a[c * a_row_stride + r] for r < rows, c < cols: blocks of
// kBlock x kBlock, each read as kBlock rows of a and written as kBlock rows of y. Word by
// word, a 16-bit block moved at ~7.5 GB/s (char_gpt's K^T and head merges, 0.8 ms each);
// 2- and 4-byte words take SSE2's unpack shuffles (baseline x86-64, no dispatch; other
// machines go word by word).
template <typename Word>
void TransposeMatrix(const Word* a, int64_t a_row_stride, Word* y, int64_t y_row_stride, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = sizeof(Word) == 2 ? 8 : sizeof(Word) == 4 ? 4 : 16;
  constexpr bool kShuffled = kHasBlockShuffles && (sizeof(Word) == 2 || sizeof(Word) == 4);
  for (int64_t r0 = 0; r0 < rows; r0 += kBlock) {
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t r1 = std::min(rows, r0 + kBlock), c1 = std::min(cols, c0 + kBlock);
      if constexpr (kShuffled) {
        if (r1 - r0 == kBlock && c1 - c0 == kBlock) {
          TransposeBlock(a + c0 * a_row_stride + r0, a_row_stride, y + r0 * y_row_stride + c0, y_row_stride);
          continue;
        }
      }
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) y[r * y_row_stride + c] = a[c * a_row_stride + r];
      }
    }
  }
}

// Transpose on element-size-typed words: out[j] = in[perm-mapped index].
template <typename Word>
void TransposeWords(const TensorView& in, const TensorView& out, const std::vector<int64_t>& perm) {
  const int rank = static_cast<int>(out.shape.size());
  const auto in_strides = RowMajorStrides(in.shape);
  std::vector<int64_t> strides(rank);  // input stride for each output axis
  for (int i = 0; i < rank; ++i) strides[i] = in_strides[perm[i]];
  const Word* src = static_cast<const Word*>(in.data);
  Word* dst = static_cast<Word*>(out.data);
  const std::vector<int64_t> zero(rank, 0);
  const int64_t inner = rank ? out.shape.back() : 1;
  const int64_t inner_stride = rank ? strides.back() : 0;
  if (inner_stride == 1) {  // the last axis stays last (attention's head split): row copies
    cpu::ForEachBroadcastRow(out.shape, strides, zero, [&](int64_t yo, int64_t xo, int64_t) {
      std::memcpy(dst + yo, src + xo, inner * sizeof(Word));
    });
    return;
  }
  // An output axis read with input stride 1 before the last one: every pair of them is a
  // transposed matrix of the input (attention's K^T, [0,2,3,1]; the head merge of the
  // backward, [0,3,1,2]). Copy each in square blocks, so both the reads and the writes stay
  // within a few lines, with SSE2 shuffles for 2- and 4-byte words (TransposeBlock).
  int unit_axis = -1;
  for (int i = 0; i + 1 < rank; ++i) {
    if (strides[i] == 1) unit_axis = i;
  }
  if (unit_axis >= 0) {
    const auto out_strides = RowMajorStrides(out.shape);
    const int64_t rows = out.shape[unit_axis], y_row_stride = out_strides[unit_axis];
    int64_t outer = 1;
    for (int i = 0; i < rank - 1; ++i) outer *= i == unit_axis ? 1 : out.shape[i];
#pragma omp parallel for if (outer * rows * inner > 32768)
    for (int64_t k = 0; k < outer; ++k) {
      int64_t rem = k, xo = 0, yo = 0;
      for (int d = rank - 2; d >= 0; --d) {
        if (d == unit_axis) continue;
        const int64_t index = rem % out.shape[d];
        rem /= out.shape[d];
        xo += index * strides[d];
        yo += index * out_strides[d];
      }
      TransposeMatrix(src + xo, inner_stride, dst + yo, y_row_stride, rows, inner);
    }
    return;
  }
  cpu::ForEachBroadcastRow(out.shape, strides, zero, [&](int64_t yo, int64_t xo, int64_t) {
    for (int64_t i = 0; i < inner; ++i) dst[yo + i] = src[xo + i * inner_stride];
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateTranspose(const Node& node, Backend&) {
  std::vector<int64_t> perm = node.attrs.GetInts("perm", {});
  const int rank = static_cast<int>(node.inputs[0]->shape.size());
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  return MakeKernel([perm](KernelContext& ctx) {
    switch (DTypeSize(ctx.inputs[0].dtype)) {
      case 8:
        TransposeWords<uint64_t>(ctx.inputs[0], ctx.outputs[0], perm);
        break;
      case 4:
        TransposeWords<uint32_t>(ctx.inputs[0], ctx.outputs[0], perm);
        break;
      case 2:
        TransposeWords<uint16_t>(ctx.inputs[0], ctx.outputs[0], perm);
        break;
      default:
        TransposeWords<uint8_t>(ctx.inputs[0], ctx.outputs[0], perm);
        break;
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// BroadcastTo (the gradient of a broadcast's reduction).

template <typename T>
struct BroadcastToKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      const TensorView& in = ctx.inputs[0];
      const TensorView& out = ctx.outputs[0];
      const auto is = cpu::BroadcastStrides(in.shape, out.shape);
      const std::vector<int64_t> zero(out.shape.size(), 0);
      const int64_t inner = out.shape.empty() ? 1 : out.shape.back();
      const int64_t stride = is.empty() ? 0 : is.back();
      const T* x = in.as<T>();
      T* y = out.as<T>();
      cpu::ForEachBroadcastRow(out.shape, is, zero, [&](int64_t yo, int64_t xo, int64_t) {
        for (int64_t i = 0; i < inner; ++i) y[yo + i] = x[xo + i * stride];
      });
      return absl::OkStatus();
    });
  }
};

// ---------------------------------------------------------------------------------
// Expand: numpy broadcast copy.

KernelOr CreateExpand(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const TensorView& in = ctx.inputs[0];
    const TensorView& out = ctx.outputs[0];
    const std::array<std::vector<int64_t>, 1> strides = {cpu::BroadcastStrides(in.shape, out.shape)};
    const int64_t inner = out.shape.empty() ? 1 : out.shape.back();
    const int64_t s = out.shape.empty() ? 0 : strides[0].back();
    WithWord(ElemSize(out), [&](auto word) {
      using W = decltype(word);
      const W* src = in.as<W>();
      W* dst = out.as<W>();
      ForEachRow<1>(out.shape, strides, [&](int64_t o, const std::array<int64_t, 1>& off) {
        for (int64_t i = 0; i < inner; ++i) dst[o + i] = src[off[0] + i * s];
      });
    });
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// ConstantOfShape, Shape, Range.

KernelOr CreateConstantOfShape(const Node& node, Backend&) {
  const DType dtype = node.outputs[0]->dtype;
  Tensor one;
  if (IsFloating(dtype)) {
    one = Tensor::FromVector<double>({}, {static_cast<double>(node.attrs.GetFloat("value", 0.0f))}).CastTo(dtype);
  } else {
    one = Tensor::FromVector<int64_t>({}, {node.attrs.GetInt("value", 0)});
    if (dtype != DType::kI64) one = one.CastTo(dtype);  // CastTo goes through double
  }
  return MakeKernel([one](KernelContext& ctx) {
    const size_t elem = DTypeSize(one.dtype());
    char* dst = Bytes(ctx.outputs[0]);
    const int64_t n = ctx.outputs[0].num_elements();
    for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * elem, one.raw(), elem);
    return absl::OkStatus();
  });
}

KernelOr CreateShape(const Node& node, Backend&) {
  const Shape& in = node.inputs[0]->shape;
  const int64_t n = node.outputs[0]->shape[0];
  const auto rank = static_cast<int64_t>(in.size());
  int64_t start = node.attrs.GetInt("start", 0);
  if (start < 0) start += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  const std::vector<int64_t> dims(in.begin() + start, in.begin() + start + n);
  return MakeKernel([dims](KernelContext& ctx) {
    if (!dims.empty()) std::memcpy(ctx.outputs[0].data, dims.data(), dims.size() * sizeof(int64_t));
    return absl::OkStatus();
  });
}

template <typename T>
struct RangeKernel {
  static KernelOr Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      using V = std::conditional_t<std::is_integral_v<T>, int64_t, cpu::Acc<T>>;
      const V start = static_cast<V>(ctx.inputs[0].as<T>()[0]);
      const V delta = static_cast<V>(ctx.inputs[2].as<T>()[0]);
      T* y = ctx.outputs[0].as<T>();
      const int64_t n = ctx.outputs[0].num_elements();
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(start + static_cast<V>(i) * delta);
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuShapeKernels(KernelRegistry& r) {
  for (DType d : cpu::kAllDTypes) {
    for (const char* op : {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}) {
      r.Register(op, "cpu", d, cpu::CreateCopy);
    }
    r.Register("Transpose", "cpu", d, CreateTranspose);
    r.Register("Expand", "cpu", d, CreateExpand);
    r.Register("Shape", "cpu", d, CreateShape);
  }
  cpu::RegisterFloatKernels<BroadcastToKernel>(r, "BroadcastTo");
  r.Register("ConstantOfShape", "cpu", DType::kI64, CreateConstantOfShape);
  r.Register("ConstantOfShape", "cpu", DType::kI32, CreateConstantOfShape);
  cpu::RegisterFloatKernels<RangeKernel>(r, "Range");
  r.Register("Range", "cpu", DType::kI64, RangeKernel<int64_t>::Create);
  r.Register("Range", "cpu", DType::kI32, RangeKernel<int32_t>::Create);
}

}  // namespace mpc
