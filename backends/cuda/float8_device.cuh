// FP8 (OCP OFP8) conversions usable in device and host code, bit-identical to the CPU's
// graph/float8.h (which is the specification; read its header comment):
//   E4M3 (E4M3FN): bias 7, no infinities, NaN = S.1111.111, largest finite ±448.
//   E5M2: bias 15, IEEE-like ±inf and NaNs, largest finite ±57344.
// f32 -> f8 rounds to nearest, ties to even, keeps subnormals and -0, and saturates a
// finite overflow to ±max (SATFINITE, what the tensor cores write). E4M3 also saturates
// ±inf to ±448; E5M2 keeps ±inf. NaN becomes 0x7F/0xFF (E4M3) or the quiet 0x7E/0xFE
// (E5M2), payload dropped, sign kept.
//
//   FloatToF8E4M3Byte / FloatToF8E5M2Byte  f32 -> the 8-bit code (for a real FP8 GEMM path)
//   FloatPairToF8Bytes                     two at once, by the hardware where it can
//   F8E4M3ByteToFloat / F8E5M2ByteToFloat  the 8-bit code -> f32 (NaNs decode quiet, with
//                                          the same bits as graph/float8.h's tables)
//   RoundToF8E4M3 / RoundToF8E5M2          f32 -> nearest f8 value, kept in f32 (the
//                                          emulated quantization of Fp8Quantize)
//
// The encoder is the same branch-free bit algorithm as the CPU's. Its subnormal path adds
// a power of two in f32 and relies on that add rounding to nearest even: on the device it
// is __fadd_rn, which nvcc never contracts or reorders. Decoding is arithmetic (no table:
// a per-thread table lookup in constant memory would serialise divergent indices).
#pragma once

#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace mpc::cuda {

inline constexpr float kDeviceF8E4M3Max = 448.0f;
inline constexpr float kDeviceF8E5M2Max = 57344.0f;

namespace float8_device_internal {

__host__ __device__ __forceinline__ uint32_t Bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

__host__ __device__ __forceinline__ float FromBits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// a + b rounded to nearest even, never fused with anything around it.
__host__ __device__ __forceinline__ float AddRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// graph/float8.h's EncodeMagnitude: |x| (f32 bits `abs`) -> exponent/mantissa bits of a
// format with kMan mantissa bits and bias kBias, rounded to nearest even. Meaningful only
// for a finite |x| below the saturation threshold; callers select the special results.
template <int kMan, int kBias>
__host__ __device__ __forceinline__ uint32_t EncodeMagnitude(uint32_t abs) {
  constexpr uint32_t kDrop = 23u - kMan;  // f32 mantissa bits dropped
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 - kBias + 1) << 23;
  // Normal result: rebias the exponent, round the dropped bits to even (a carry out of
  // the mantissa bumps the exponent, which is right). Unsigned wrap-around for small
  // |x| is harmless: that result is not selected.
  uint32_t h = abs - (static_cast<uint32_t>(127 - kBias) << 23);
  h += ((1u << (kDrop - 1u)) - 1u) + ((h >> kDrop) & 1u);
  const uint32_t normal = h >> kDrop;
  // Subnormal (or zero) result, |x| < 2^(1 - bias): adding C = 2^(24 - bias - kMan),
  // whose f32 ulp is the smallest subnormal, makes the adder round |x| to the subnormal
  // grid (ties to even); the low bits of the sum count subnormal units.
  static_assert(24 - kBias - kMan >= 0, "C = 2^(24 - bias - kMan) must be an integer");
  constexpr float kC = static_cast<float>(1u << (24 - kBias - kMan));
  const uint32_t sub = Bits(AddRn(FromBits(abs), kC)) - Bits(kC);
  return abs < kMinNormal ? sub : normal;
}

}  // namespace float8_device_internal

__host__ __device__ __forceinline__ uint8_t FloatToF8E4M3Byte(float f) {
  using namespace float8_device_internal;
  const uint32_t u = Bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t r = EncodeMagnitude<3, 7>(abs);
  // |x| >= 448 (inf included) saturates: [448, 464] rounds to 448 anyway, larger values
  // would round to 480, whose code is the NaN.
  r = abs >= 0x43e00000u ? 0x7eu : r;
  r = abs > 0x7f800000u ? 0x7fu : r;  // NaN
  return static_cast<uint8_t>(sign | r);
}

__host__ __device__ __forceinline__ uint8_t FloatToF8E5M2Byte(float f) {
  using namespace float8_device_internal;
  const uint32_t u = Bits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t r = EncodeMagnitude<2, 15>(abs);
  // Finite |x| >= 57344 saturates: up to 61440 it rounds to 57344 anyway, beyond to inf.
  r = abs >= 0x47600000u ? 0x7bu : r;
  r = abs == 0x7f800000u ? 0x7cu : r;  // inf stays inf
  r = abs > 0x7f800000u ? 0x7eu : r;   // NaN -> quiet NaN
  return static_cast<uint8_t>(sign | r);
}

// Two f32 -> two codes, `lo`'s in the low byte of the result, bit-identical to
// FloatToF8E4M3Byte / FloatToF8E5M2Byte. On sm_89 and newer one cvt.rn.satfinite
// instruction converts a pair of finite values (round to nearest even, a finite overflow
// saturated to +-max: the rule above); the bit algorithm is ~20 integer operations an
// element, which made the FP8 cast kernels compute-bound on an H200. Infinities and NaNs
// keep the bit algorithm: the instruction saturates an E5M2 infinity (mpc keeps it) and
// its NaN carries no sign.
template <bool kE4M3>
__device__ __forceinline__ uint32_t FloatPairToF8Bytes(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (isfinite(lo) && isfinite(hi)) {
    return __nv_cvt_float2_to_fp8x2(make_float2(lo, hi), __NV_SATFINITE, kE4M3 ? __NV_E4M3 : __NV_E5M2);
  }
#endif
  return kE4M3 ? (FloatToF8E4M3Byte(lo) | (static_cast<uint32_t>(FloatToF8E4M3Byte(hi)) << 8))
               : (FloatToF8E5M2Byte(lo) | (static_cast<uint32_t>(FloatToF8E5M2Byte(hi)) << 8));
}

// Code -> f32, exactly graph/float8.h's DecodeBits: sign | value, where a subnormal code
// m * 2^(1 - bias - kMan) is formed as float(m) * 2^(1 - bias - kMan), exact (m < 8, a
// power-of-two factor, a normal f32 result).
__host__ __device__ __forceinline__ float F8E4M3ByteToFloat(uint8_t code) {
  using namespace float8_device_internal;
  const uint32_t c = code;
  const uint32_t sign = (c & 0x80u) << 24;
  const uint32_t e = (c >> 3) & 0xfu;
  const uint32_t m = c & 0x7u;
  const uint32_t normal = sign | ((e + 127u - 7u) << 23) | (m << 20);
  const uint32_t sub = sign | Bits(static_cast<float>(m) * 0.001953125f);  // 2^-9
  uint32_t r = e == 0 ? sub : normal;
  r = (e == 0xfu && m == 0x7u) ? (sign | 0x7fc00000u) : r;  // the only NaN code
  return FromBits(r);
}

__host__ __device__ __forceinline__ float F8E5M2ByteToFloat(uint8_t code) {
  using namespace float8_device_internal;
  const uint32_t c = code;
  const uint32_t sign = (c & 0x80u) << 24;
  const uint32_t e = (c >> 2) & 0x1fu;
  const uint32_t m = c & 0x3u;
  const uint32_t normal = sign | ((e + 127u - 15u) << 23) | (m << 21);
  const uint32_t sub = sign | Bits(static_cast<float>(m) * 1.52587890625e-05f);        // 2^-16
  const uint32_t special = sign | (m == 0 ? 0x7f800000u : (0x7fc00000u | (m << 21)));  // inf, quiet NaNs
  uint32_t r = e == 0 ? sub : normal;
  r = e == 0x1fu ? special : r;
  return FromBits(r);
}

// The operand rounding of an FP8 GEMM, kept in f32.
__host__ __device__ __forceinline__ float RoundToF8E4M3(float f) { return F8E4M3ByteToFloat(FloatToF8E4M3Byte(f)); }
__host__ __device__ __forceinline__ float RoundToF8E5M2(float f) { return F8E5M2ByteToFloat(FloatToF8E5M2Byte(f)); }

}  // namespace mpc::cuda
