// Helpers the CPU kernel families share: the dtype list data movement registers for,
// element words, broadcast row walks, byte views, axis arithmetic, the plain copy kernel,
// and element access through double for operands whose dtype is not a kernel's T.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/half_types.h"

namespace mpc::cpu {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

// Every dtype: data movement is dtype-agnostic (it moves element-sized words).
inline constexpr DType kAllDTypes[] = {DType::kF32,    DType::kF64, DType::kF16, DType::kBF16, DType::kF8E4M3,
                                       DType::kF8E5M2, DType::kI64, DType::kI32, DType::kU8,   DType::kBool};

// Calls f(Word{}) with the unsigned integer type of the element size.
template <typename F>
inline void WithWord(size_t elem, F f) {
  switch (elem) {
    case 8:
      f(uint64_t{});
      break;
    case 4:
      f(uint32_t{});
      break;
    case 2:
      f(uint16_t{});
      break;
    default:
      f(uint8_t{});
      break;
  }
}

// Calls row(out_offset, offsets) for each innermost row of `out`, where offsets[k] is
// operand k's element offset for that row (strides aligned to out's rank).
template <size_t N, typename RowFn>
void ForEachRow(const Shape& out, const std::array<std::vector<int64_t>, N>& strides, RowFn row) {
  const int rank = static_cast<int>(out.size());
  const int64_t inner = rank == 0 ? 1 : out.back();
  const int64_t rows = inner == 0 ? 0 : NumElements(out) / inner;
#pragma omp parallel for if (rows > 256)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r;
    std::array<int64_t, N> off{};
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      for (size_t k = 0; k < N; ++k) off[k] += idx * strides[k][d];
    }
    row(r * inner, off);
  }
}

inline size_t ElemSize(const TensorView& t) { return DTypeSize(t.dtype); }
inline char* Bytes(const TensorView& t) { return static_cast<char*>(t.data); }

inline int64_t Prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

inline int NormAxis(int64_t axis, size_t rank) {
  return static_cast<int>(axis < 0 ? axis + static_cast<int64_t>(rank) : axis);
}

// Reshape, Flatten, Identity, Squeeze, Unsqueeze: the bytes, unchanged (the buffers are
// planned separately).
inline KernelOr CreateCopy(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    const size_t bytes = ctx.outputs[0].num_elements() * ElemSize(ctx.outputs[0]);
    if (bytes && ctx.outputs[0].data != ctx.inputs[0].data) std::memcpy(ctx.outputs[0].data, ctx.inputs[0].data, bytes);
    return absl::OkStatus();
  });
}

// Element access through double for operands whose dtype is not the kernel's T
// (statistics, per-channel parameters, exponents). Exact for every float format.
inline double LoadAt(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return t.as<float>()[i];
    case DType::kF64:
      return t.as<double>()[i];
    case DType::kBF16:
      return static_cast<float>(t.as<Bf16>()[i]);
    case DType::kF16:
      return static_cast<float>(t.as<Half>()[i]);
    case DType::kI64:
      return static_cast<double>(t.as<int64_t>()[i]);
    case DType::kI32:
      return t.as<int32_t>()[i];
    default:
      return 0;
  }
}

// Stores `v` (an Acc value: f32 precision unless the tensor is f64) rounding once.
template <typename A>
void StoreAt(const TensorView& t, int64_t i, A v) {
  switch (t.dtype) {
    case DType::kF32:
      t.as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      t.as<double>()[i] = static_cast<double>(v);
      break;
    case DType::kBF16:
      t.as<Bf16>()[i] = Bf16(static_cast<float>(v));
      break;
    case DType::kF16:
      t.as<Half>()[i] = Half(static_cast<float>(v));
      break;
    default:
      break;
  }
}

template <typename A>
std::vector<A> LoadAll(const TensorView& t) {
  std::vector<A> out(t.num_elements());
  for (int64_t i = 0; i < t.num_elements(); ++i) out[i] = static_cast<A>(LoadAt(t, i));
  return out;
}

}  // namespace mpc::cpu
