// CPU shape kernels (graph/ops_shape.cc, graph/ops_tensor.cc): Reshape, Flatten,
// Identity, Squeeze, Unsqueeze (copies: buffers are planned separately), Transpose,
// Expand and BroadcastTo (numpy broadcast copies), and the shape producers Shape,
// ConstantOfShape and Range. Data movement is dtype-agnostic: it moves element words.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

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
  if (rank >= 2 && strides[rank - 2] == 1) {
    // The last two output axes are a transposed matrix of the input (attention's K^T):
    // copy it in square tiles, so both the reads and the writes stay within a few lines.
    const int64_t rows = out.shape[rank - 2];
    int64_t outer = 1;
    for (int i = 0; i < rank - 2; ++i) outer *= out.shape[i];
    constexpr int64_t kTile = 16;
#pragma omp parallel for if (outer * rows * inner > 32768)
    for (int64_t k = 0; k < outer; ++k) {
      int64_t rem = k, xo = 0;
      for (int d = rank - 3; d >= 0; --d) {
        xo += (rem % out.shape[d]) * strides[d];
        rem /= out.shape[d];
      }
      Word* y = dst + k * rows * inner;
      for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
        for (int64_t c0 = 0; c0 < inner; c0 += kTile) {
          const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(inner, c0 + kTile);
          for (int64_t r = r0; r < r1; ++r) {
            for (int64_t c = c0; c < c1; ++c) y[r * inner + c] = src[xo + r + c * inner_stride];
          }
        }
      }
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
