// CPU data-movement kernels: Reshape/Flatten/Identity (copies: buffers are planned
// separately), Transpose, Cast, and the broadcast pair ReduceSumTo/BroadcastTo (f32,
// f64, bf16, f16; ReduceSumTo sums in Acc<T>, f32 for the 16-bit formats, and rounds
// once). Cast has direct loops for the f32 <-> bf16/f16 casts autocast inserts.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/float_convert.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

constexpr DType kAllDTypes[] = {DType::kF32,    DType::kF64, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                DType::kF8E5M2, DType::kI64, DType::kI32, DType::kU8,   DType::kBool};

absl::StatusOr<std::unique_ptr<Kernel>> CreateCopy(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const size_t bytes = ctx.outputs[0].num_elements() * DTypeSize(ctx.outputs[0].dtype);
    if (ctx.outputs[0].data != ctx.inputs[0].data) std::memcpy(ctx.outputs[0].data, ctx.inputs[0].data, bytes);
    return absl::OkStatus();
  });
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

// double -> float rounding to odd, as Tensor::CastTo does: rounding that float to
// nearest even again for a 16-bit format equals rounding the double directly, so an
// f64 -> bf16/f16 Cast rounds once, bit-identical to Tensor::CastTo.
float ToFloatRoundToOdd(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v || (FloatBits(f) & 1u) != 0) return f;
  const float inf = std::numeric_limits<float>::infinity();
  return std::nextafter(f, static_cast<double>(f) < v ? inf : -inf);
}

// Element read/write through double, with round-to-nearest-even for 16-bit floats.
double Load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return t.as<float>()[i];
    case DType::kF64:
      return t.as<double>()[i];
    case DType::kF16:
      return HalfToFloat(t.as<uint16_t>()[i]);
    case DType::kBF16:
      return Bf16ToFloat(t.as<uint16_t>()[i]);
    case DType::kI64:
      return static_cast<double>(t.as<int64_t>()[i]);
    case DType::kI32:
      return t.as<int32_t>()[i];
    case DType::kU8:
    case DType::kBool:
      return t.as<uint8_t>()[i];
    default:
      return 0;
  }
}

void Store(const TensorView& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::kF32:
      t.as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      t.as<double>()[i] = v;
      break;
    case DType::kF16:
      t.as<uint16_t>()[i] = FloatToHalf(ToFloatRoundToOdd(v));
      break;
    case DType::kBF16:
      t.as<uint16_t>()[i] = FloatToBf16(ToFloatRoundToOdd(v));
      break;
    case DType::kI64:
      t.as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kI32:
      t.as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kU8:
      t.as<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DType::kBool:
      t.as<uint8_t>()[i] = v != 0;
      break;
    default:
      break;
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCast(const Node& node, Backend&) {
  const DType from = node.inputs[0]->dtype, to = node.outputs[0]->dtype;
  if (from == DType::kF8E4M3 || from == DType::kF8E5M2 || to == DType::kF8E4M3 || to == DType::kF8E5M2) {
    return absl::UnimplementedError("Cast to or from FP8 runs through the fp8 pass's quantize ops");
  }
  return MakeKernel([](KernelContext& ctx) {
    const int64_t n = ctx.outputs[0].num_elements();
    const TensorView& in = ctx.inputs[0];
    const TensorView& out = ctx.outputs[0];
    if (in.dtype == DType::kF32 && out.dtype == DType::kF64) {
      for (int64_t i = 0; i < n; ++i) out.as<double>()[i] = in.as<float>()[i];
    } else if (in.dtype == DType::kF32 && (out.dtype == DType::kBF16 || out.dtype == DType::kF16)) {
      // The hot casts of a mixed-precision program: no per-element dtype dispatch.
      const float* x = in.as<float>();
      uint16_t* y = out.as<uint16_t>();
      if (out.dtype == DType::kBF16) {
#pragma omp parallel for simd if (n > 32768)
        for (int64_t i = 0; i < n; ++i) y[i] = FloatToBf16(x[i]);
      } else {
#pragma omp parallel for if (n > 32768)
        for (int64_t i = 0; i < n; ++i) y[i] = FloatToHalf(x[i]);
      }
    } else if (out.dtype == DType::kF32 && (in.dtype == DType::kBF16 || in.dtype == DType::kF16)) {
      const uint16_t* x = in.as<uint16_t>();
      float* y = out.as<float>();
      if (in.dtype == DType::kBF16) {
#pragma omp parallel for simd if (n > 32768)
        for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToFloat(x[i]);
      } else {
#pragma omp parallel for if (n > 32768)
        for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
      }
    } else {
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) Store(out, i, Load(in, i));
    }
    return absl::OkStatus();
  });
}

// out[target index] += in[i] over all i: the sum over broadcast axes. Rows of the input
// are visited in order, so the result is deterministic.
// ReduceSumTo's output as [O, M, I] blocks of its input: the reduced axes form a leading
// block (O) and a trailing block (I) around the kept ones (M), so y[m] = sum over o, i of
// x[(o*M + m)*I + i]. That covers bias gradients ([rows, C] -> [C]) and convolution bias
// gradients ([N, C, H, W] -> [C, 1, 1]). Returns false for other patterns.
bool AsOuterMiddleInner(const Shape& in, const Shape& out, int64_t* o, int64_t* m, int64_t* i) {
  const size_t rank = in.size(), lead = rank - out.size();
  int first_kept = -1, last_kept = -1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t od = d < lead ? 1 : out[d - lead];
    if (in[d] != 1 && od == in[d]) {
      if (first_kept < 0) first_kept = static_cast<int>(d);
      last_kept = static_cast<int>(d);
    }
  }
  *o = *m = *i = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t od = d < lead ? 1 : out[d - lead];
    const bool reduced = in[d] != 1 && od == 1;
    const int di = static_cast<int>(d);
    if (first_kept >= 0 && di > first_kept && di < last_kept && reduced) return false;
    if (first_kept < 0 || di < first_kept) {
      *o *= in[d];
    } else if (di <= last_kept) {
      *m *= in[d];
    } else {
      *i *= in[d];
    }
  }
  return true;
}

template <typename T>
struct ReduceSumToKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      const TensorView& in = ctx.inputs[0];
      const TensorView& out = ctx.outputs[0];
      using Acc = cpu::Acc<T>;
      T* y = out.as<T>();
      const T* x = in.as<T>();
      int64_t blocks_o, blocks_m, blocks_i;
      if (AsOuterMiddleInner(in.shape, out.shape, &blocks_o, &blocks_m, &blocks_i)) {
        const int64_t O = blocks_o, M = blocks_m, I = blocks_i;
        // Each output's sum runs in a fixed order whatever the thread count, so results
        // are reproducible run to run.
        if (I == 1) {
          // [O, M] -> [M]: rows read contiguously; threads take blocks of columns.
          constexpr int64_t kBlock = 256;
#pragma omp parallel for if (O * M > 32768)
          for (int64_t mb = 0; mb < M; mb += kBlock) {
            const int64_t me = std::min(M, mb + kBlock);
            Acc acc[kBlock] = {};
            for (int64_t r = 0; r < O; ++r) {
              const T* row = x + r * M;
              for (int64_t c = mb; c < me; ++c) acc[c - mb] += Acc(row[c]);
            }
            for (int64_t c = mb; c < me; ++c) y[c] = static_cast<T>(acc[c - mb]);
          }
        } else {
#pragma omp parallel for if (O * M * I > 32768)
          for (int64_t c = 0; c < M; ++c) {
            Acc acc = 0;
            for (int64_t r = 0; r < O; ++r) {
              const T* run = x + (r * M + c) * I;
              for (int64_t k = 0; k < I; ++k) acc += Acc(run[k]);
            }
            y[c] = static_cast<T>(acc);
          }
        }
        return absl::OkStatus();
      }
      // Any other pattern: walk the input rows, accumulating into the broadcast offsets.
      const auto os = cpu::BroadcastStrides(out.shape, in.shape);
      const int64_t n_out = out.num_elements();
      const int rank = static_cast<int>(in.shape.size());
      const int64_t inner = rank ? in.shape.back() : 1;
      const int64_t rows = inner ? in.num_elements() / inner : 0;
      const int64_t inner_stride = rank ? os.back() : 0;
      std::vector<Acc> acc(n_out, Acc(0));
      for (int64_t r = 0; r < rows; ++r) {
        int64_t rem = r, off = 0;
        for (int d = rank - 2; d >= 0; --d) {
          off += (rem % in.shape[d]) * os[d];
          rem /= in.shape[d];
        }
        for (int64_t i = 0; i < inner; ++i) acc[off + i * inner_stride] += Acc(x[r * inner + i]);
      }
      for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<T>(acc[i]);
      return absl::OkStatus();
    });
  }
};

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

}  // namespace

void RegisterCpuShapeKernels(KernelRegistry& r) {
  for (DType d : kAllDTypes) {
    for (const char* op : {"Reshape", "Flatten", "Identity"}) r.Register(op, "cpu", d, CreateCopy);
    r.Register("Transpose", "cpu", d, CreateTranspose);
    r.Register("Cast", "cpu", d, CreateCast);
  }
  cpu::RegisterFloatKernels<ReduceSumToKernel>(r, "ReduceSumTo");
  cpu::RegisterFloatKernels<BroadcastToKernel>(r, "BroadcastTo");
}

}  // namespace mpc
