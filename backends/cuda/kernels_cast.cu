// CUDA Cast (CPU reference: CreateCast in backends/cpu/kernels_shape.cc), bit-identical
// to the CPU for every (from, to) pair it supports: from f32, f16, bf16, int64, int32,
// uint8, bool (f64 inputs are not registered on the GPU) to any of those or f64.
//   f32 -> bf16/f16       round to nearest even on the bit patterns (graph/float_convert.h)
//   bf16/f16 -> f32       exact widening on the bit patterns (NaN payloads kept as they are)
//   every other pair      through double, as the CPU's Load/Store do:
//       load: exact (int64 rounds to nearest double);
//       f32 <- double: round to nearest; -> f16/bf16: round to odd into f32, then to nearest
//       even (one rounding of the double, like Tensor::CastTo);
//       int64/int32 <- double: truncation toward zero, and for NaN or out-of-range values
//       what x86's cvttsd2si gives the CPU: the integer indefinite INT64_MIN / INT32_MIN;
//       uint8 <- double: the low byte of that int32 conversion (gcc's code for
//       static_cast<uint8_t>(double)), so -1.0 -> 255 and 256.0 -> 0;
//       bool <- double: v != 0 (NaN -> true).
//   NaN bits: the f32 <-> f64 steps quiet a NaN and keep its payload as x86 does, written
//   out on the bit patterns because CUDA's cvt may canonicalise NaNs.
// The element conversions are __host__ __device__, so host tests can hold them against
// the CPU backend's Load/Store.
// FP8: the CPU Cast rejects FP8 inputs and outputs ("runs through the fp8 pass's quantize
// ops"), so this kernel does too, with the same message; registered for the FP8 dtypes
// only because the CPU is.
#include <climits>
#include <cstdint>
#include <cstring>

#include "backends/cuda/elementwise_families.h"

namespace mpc::cuda {
namespace {

// ---- element conversions (device mirrors of graph/float_convert.h) --------------------------
// __host__ __device__ and written with plain C++ conversions (round to nearest on both
// sides; no multiply feeds an add, so nvcc has nothing to contract), so the host can
// check them against the CPU backend's code.

template <typename To, typename From>
__host__ __device__ inline To BitCast(From v) {
  static_assert(sizeof(To) == sizeof(From), "BitCast between types of different sizes");
  To out;
  memcpy(&out, &v, sizeof(To));
  return out;
}

__host__ __device__ inline bool IsNaNBits(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }
__host__ __device__ inline bool IsNaN(double v) {
  return (BitCast<uint64_t>(v) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}

__host__ __device__ inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u = BitCast<uint32_t>(f);
  if (IsNaNBits(u)) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);                                   // round to nearest even; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}

__host__ __device__ inline float Bf16BitsToFloat(uint16_t h) { return BitCast<float>(static_cast<uint32_t>(h) << 16); }

__host__ __device__ inline uint16_t FloatToHalfBits(float f) {
  const uint32_t u = BitCast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN -> quiet NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {
    // Subnormal (or zero) in f16: adding 0.5 (exponent 126) rounds the value scaled by
    // 2^24 to an integer, to nearest even, in the add itself.
    const float scaled = BitCast<float>(abs) + 0.5f;
    return sign | static_cast<uint16_t>(BitCast<uint32_t>(scaled) - 0x3f000000u);
  }
  // Normal: rebias the exponent (127 -> 15), round the 13 dropped mantissa bits to even.
  uint32_t h = abs - ((127u - 15u) << 23);
  h += 0xfffu + ((h >> 13) & 1u);
  return sign | static_cast<uint16_t>(h >> 13);
}

__host__ __device__ inline float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitCast<float>(sign | 0x7f800000u | (mant << 13));  // inf/NaN
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;  // mant * 2^-24, exact
    return BitCast<float>(sign | BitCast<uint32_t>(v));
  }
  return BitCast<float>(sign | ((exp + 127u - 15u) << 23) | (mant << 13));
}

// f32 -> f64 as x86 cvtss2sd: exact; a NaN is quieted and keeps its payload.
__host__ __device__ inline double WidenF32(float f) {
  const uint32_t u = BitCast<uint32_t>(f);
  if (IsNaNBits(u)) {
    return BitCast<double>((static_cast<uint64_t>(u & 0x80000000u) << 32) | 0x7ff8000000000000ull |
                           (static_cast<uint64_t>(u & 0x003fffffu) << 29));
  }
  return static_cast<double>(f);
}

// f64 -> f32 as x86 cvtsd2ss: round to nearest even; a NaN is quieted and keeps the top
// 22 bits of its payload.
__host__ __device__ inline float NarrowF64(double v) {
  const uint64_t d = BitCast<uint64_t>(v);
  if (IsNaN(v)) {
    return BitCast<float>((static_cast<uint32_t>(d >> 32) & 0x80000000u) | 0x7fc00000u |
                          static_cast<uint32_t>((d >> 29) & 0x003fffffu));
  }
  return static_cast<float>(v);
}

// kernels_shape.cc's ToFloatRoundToOdd: the nearest float, moved one ulp toward v when
// inexact and even, so that rounding it again to a 16-bit format rounds v only once.
__host__ __device__ inline float ToFloatRoundToOdd(double v) {
  const float f = NarrowF64(v);
  uint32_t u = BitCast<uint32_t>(f);
  if (IsNaN(v) || static_cast<double>(f) == v || (u & 1u) != 0) return f;
  // std::nextafter(f, toward v) on the bit pattern (f is not NaN here).
  if ((u & 0x7fffffffu) == 0) {
    u = (v < 0 ? 0x80000000u : 0u) | 1u;  // smallest subnormal on v's side
  } else if ((static_cast<double>(f) < v) == (f > 0.0f)) {
    ++u;  // away from zero
  } else {
    --u;  // toward zero (from +-inf: to +-FLT_MAX, as nextafter does)
  }
  return BitCast<float>(u);
}

// x86 cvttsd2si (what gcc emits for static_cast<int64_t/int32_t>(double)): truncation,
// and the "integer indefinite" value for NaN and out-of-range inputs.
__host__ __device__ inline int64_t TruncateToI64(double v) {
  return v >= -9223372036854775808.0 && v < 9223372036854775808.0 ? static_cast<int64_t>(v) : INT64_MIN;
}
__host__ __device__ inline int32_t TruncateToI32(double v) {
  return v > -2147483649.0 && v < 2147483648.0 ? static_cast<int32_t>(v) : INT32_MIN;
}

// ---- dtype-generic Load/Store through double --------------------------------------------

template <DType D>
struct StorageOf;
template <>
struct StorageOf<DType::kF32> {
  using type = float;
};
template <>
struct StorageOf<DType::kF64> {
  using type = double;
};
template <>
struct StorageOf<DType::kF16> {
  using type = uint16_t;
};
template <>
struct StorageOf<DType::kBF16> {
  using type = uint16_t;
};
template <>
struct StorageOf<DType::kI64> {
  using type = int64_t;
};
template <>
struct StorageOf<DType::kI32> {
  using type = int32_t;
};
template <>
struct StorageOf<DType::kU8> {
  using type = uint8_t;
};
template <>
struct StorageOf<DType::kBool> {
  using type = uint8_t;
};
template <DType D>
using Storage = typename StorageOf<D>::type;

template <DType D>
__host__ __device__ inline double LoadAsDouble(Storage<D> v) {
  if constexpr (D == DType::kF32)
    return WidenF32(v);
  else if constexpr (D == DType::kF64)
    return v;
  else if constexpr (D == DType::kF16)
    return WidenF32(HalfBitsToFloat(v));
  else if constexpr (D == DType::kBF16)
    return WidenF32(Bf16BitsToFloat(v));
  else if constexpr (D == DType::kI64)
    return static_cast<double>(v);  // round to nearest
  else
    return static_cast<double>(v);  // int32, uint8, bool: exact
}

template <DType D>
__host__ __device__ inline Storage<D> StoreFromDouble(double v) {
  if constexpr (D == DType::kF32)
    return NarrowF64(v);
  else if constexpr (D == DType::kF64)
    return v;
  else if constexpr (D == DType::kF16)
    return FloatToHalfBits(ToFloatRoundToOdd(v));
  else if constexpr (D == DType::kBF16)
    return FloatToBf16Bits(ToFloatRoundToOdd(v));
  else if constexpr (D == DType::kI64)
    return TruncateToI64(v);
  else if constexpr (D == DType::kI32)
    return TruncateToI32(v);
  else if constexpr (D == DType::kU8)
    return static_cast<uint8_t>(static_cast<uint32_t>(TruncateToI32(v)) & 0xffu);
  else
    return v != 0.0 ? 1 : 0;  // bool (NaN != 0)
}

// The CPU's direct loops for the autocast pairs, else Load/Store through double.
template <DType From, DType To>
__host__ __device__ inline Storage<To> CastOne(Storage<From> v) {
  if constexpr (From == DType::kF32 && To == DType::kBF16)
    return FloatToBf16Bits(v);
  else if constexpr (From == DType::kF32 && To == DType::kF16)
    return FloatToHalfBits(v);
  else if constexpr (From == DType::kBF16 && To == DType::kF32)
    return Bf16BitsToFloat(v);
  else if constexpr (From == DType::kF16 && To == DType::kF32)
    return HalfBitsToFloat(v);
  else
    return StoreFromDouble<To>(LoadAsDouble<From>(v));
}

template <DType From, DType To>
__global__ void CastKernel(int64_t n, const Storage<From>* x, Storage<To>* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = CastOne<From, To>(x[i]);
  }
}

// The first 4 * n4 elements four at a time: one element per thread left a gradient's
// bf16 -> f32 Cast at a third of an H200's memory bandwidth (246 us for 64M elements).
// The same CastOne per element, so the same bits. Four elements move as one aligned
// access (elementwise_families.h's Pack).
template <DType From, DType To>
__global__ void CastFourKernel(int64_t n4, const Pack<Storage<From>, 4>* x, Pack<Storage<To>, 4>* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n4; i += int64_t{gridDim.x} * blockDim.x) {
    const Pack<Storage<From>, 4> in = x[i];
    Pack<Storage<To>, 4> out;
#pragma unroll
    for (int k = 0; k < 4; ++k) out.v[k] = CastOne<From, To>(in.v[k]);
    y[i] = out;
  }
}

// ---- factory --------------------------------------------------------------------------------

template <DType From, DType To>
absl::StatusOr<std::unique_ptr<Kernel>> CastBetween(int64_t n, Backend& backend) {
  return MakeCudaKernel(backend, [n](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    if (n <= 0) return absl::OkStatus();
    const Storage<From>* x = ctx.inputs[0].as<Storage<From>>();
    Storage<To>* y = ctx.outputs[0].as<Storage<To>>();
    const bool aligned = reinterpret_cast<uintptr_t>(x) % sizeof(Pack<Storage<From>, 4>) == 0 &&
                         reinterpret_cast<uintptr_t>(y) % sizeof(Pack<Storage<To>, 4>) == 0;
    const int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
      CastFourKernel<From, To><<<BlocksFor(n4), kThreadsPerBlock, 0, stream>>>(
          n4, reinterpret_cast<const Pack<Storage<From>, 4>*>(x), reinterpret_cast<Pack<Storage<To>, 4>*>(y));
    }
    if (n > 4 * n4) {
      CastKernel<From, To><<<BlocksFor(n - 4 * n4), kThreadsPerBlock, 0, stream>>>(n - 4 * n4, x + 4 * n4, y + 4 * n4);
    }
    return LaunchStatus("Cast");
  });
}

absl::Status UnsupportedCast(const Node& node, DType from, DType to) {
  return absl::UnimplementedError(absl::StrCat("Cast node '", node.name, "' from ", DTypeName(from), " to ",
                                               DTypeName(to), " is not supported on cuda (nor on cpu)"));
}

template <DType From>
absl::StatusOr<std::unique_ptr<Kernel>> CastFrom(const Node& node, DType to, int64_t n, Backend& backend) {
  switch (to) {
    case DType::kF32:
      return CastBetween<From, DType::kF32>(n, backend);
    case DType::kF64:
      return CastBetween<From, DType::kF64>(n, backend);
    case DType::kF16:
      return CastBetween<From, DType::kF16>(n, backend);
    case DType::kBF16:
      return CastBetween<From, DType::kBF16>(n, backend);
    case DType::kI64:
      return CastBetween<From, DType::kI64>(n, backend);
    case DType::kI32:
      return CastBetween<From, DType::kI32>(n, backend);
    case DType::kU8:
      return CastBetween<From, DType::kU8>(n, backend);
    case DType::kBool:
      return CastBetween<From, DType::kBool>(n, backend);
    default:
      return UnsupportedCast(node, From, to);
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCast(const Node& node, Backend& backend) {
  const DType from = node.inputs[0]->dtype, to = node.outputs[0]->dtype;
  if (from == DType::kF8E4M3 || from == DType::kF8E5M2 || to == DType::kF8E4M3 || to == DType::kF8E5M2) {
    return absl::UnimplementedError(absl::StrCat("Cast node '", node.name, "' from ", DTypeName(from), " to ",
                                                 DTypeName(to),
                                                 ": Cast to or from FP8 runs through the fp8 pass's quantize ops"));
  }
  if (NumElements(node.inputs[0]->shape) != NumElements(node.outputs[0]->shape)) {
    return absl::InvalidArgumentError(absl::StrCat("Cast node '", node.name, "': input ",
                                                   ShapeToString(node.inputs[0]->shape), " and output ",
                                                   ShapeToString(node.outputs[0]->shape), " differ in element count"));
  }
  const int64_t n = NumElements(node.outputs[0]->shape);
  switch (from) {
    case DType::kF32:
      return CastFrom<DType::kF32>(node, to, n, backend);
    case DType::kF16:
      return CastFrom<DType::kF16>(node, to, n, backend);
    case DType::kBF16:
      return CastFrom<DType::kBF16>(node, to, n, backend);
    case DType::kI64:
      return CastFrom<DType::kI64>(node, to, n, backend);
    case DType::kI32:
      return CastFrom<DType::kI32>(node, to, n, backend);
    case DType::kU8:
      return CastFrom<DType::kU8>(node, to, n, backend);
    case DType::kBool:
      return CastFrom<DType::kBool>(node, to, n, backend);
    default:
      return UnsupportedCast(node, from, to);  // f64: the GPU registers no f64 kernels
  }
}

}  // namespace

void RegisterCudaCastKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                  DType::kU8, DType::kBool}) {
    r.Register("Cast", "cuda", d, CreateCast);
  }
}

}  // namespace mpc::cuda
