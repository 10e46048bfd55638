// Conversions between f32 and the 16-bit float formats, and f32's rounding to TF32,
// bit-exact: round to nearest even, subnormals kept, ±inf and NaN preserved (NaN stays a
// quiet NaN). These are the semantics of a tensor core's operand rounding, so the CPU
// backend can reproduce it.
#pragma once

#include <cstdint>
#include <cstring>

namespace mpc {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even; overflow carries into inf
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16ToFloat(uint16_t h) { return BitsToFloat(static_cast<uint32_t>(h) << 16); }

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// Rounds an f32 value to the nearest representable value of the format, kept in f32.
inline float RoundToBf16(float f) { return Bf16ToFloat(FloatToBf16(f)); }
inline float RoundToHalf(float f) { return HalfToFloat(FloatToHalf(f)); }

// Rounds an f32 value to TF32 (f32's 8-bit exponent, 10 explicit mantissa bits), kept in
// f32 with the low 13 mantissa bits zero: the operand rounding of a TF32 tensor-core GEMM
// or convolution. Round to nearest even on the bits, as FloatToBf16 does 16 bits lower:
// subnormals round on the same grid, a value past the largest TF32 number's halfway point
// (FLT_MAX included) carries into inf, ±inf stay, and a NaN stays a (quiet) NaN whatever
// its payload, never truncated to inf.
inline float RoundToTf32(float f) {
  uint32_t u = FloatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return BitsToFloat((u | 0x00400000u) & 0xffffe000u);  // quiet NaN
  u += 0x0fffu + ((u >> 13) & 1u);
  return BitsToFloat(u & 0xffffe000u);
}

}  // namespace mpc
