// Conversions between f32 and the OCP 8-bit float formats (OFP8, 2023), bit-exact.
//
//   E4M3 ("E4M3FN", ONNX FLOAT8E4M3FN): bias 7, no infinities, NaN = S.1111.111, largest
//        finite ±448 (S.1111.110), smallest subnormal 2^-9.
//   E5M2 (ONNX FLOAT8E5M2): bias 15, IEEE-like: ±inf = S.11111.00, NaN = S.11111.{01,10,11},
//        largest finite ±57344 (S.11110.11), smallest subnormal 2^-16.
//
// f32 -> f8 rounds to nearest, ties to even, with subnormals and -0 kept, and saturates:
// a finite value whose magnitude rounds past the largest finite becomes ±max instead of
// inf/NaN. That is the SATFINITE behaviour of the cuBLASLt / Transformer Engine FP8
// outputs, so the CPU backend reproduces what the tensor cores write.
//   - E4M3: ±inf also saturates to ±448 (the format has no inf); NaN -> 0x7F / 0xFF.
//   - E5M2: ±inf stays ±inf (it is representable, and an inf usually means the loss scale
//     overflowed, which the dynamic loss scaler has to see); finite overflow saturates to
//     ±57344; NaN -> the quiet NaN 0x7E / 0xFE.
// NaN payloads are not kept (the sign is): FP8 has one or three NaN codes.
//
// Everything on the per-element path is inline so kernels can inline and vectorise it:
// encoding is table-free, branch-free bit code (selects, so loops vectorise), decoding is
// a lookup in a 256-entry table of f32 bit patterns computed at compile time (so there
// is no static-initialisation order issue when other initialisers decode FP8).
#pragma once

#include <array>
#include <cstdint>

#include "graph/float_convert.h"

namespace mpc {

namespace float8_internal {

// Encodes |x| (f32 bits `abs`) into the exponent/mantissa bits of an 8-bit format with
// kMan mantissa bits and bias kBias, rounding to nearest even. Only meaningful for a
// finite |x| below the format's saturation threshold; the caller selects the special
// results. Branch-free (both paths computed, one selected) so that loops over it
// vectorise: a data-dependent branch here mispredicts on real tensors, whose values
// straddle the subnormal range.
template <int kMan, int kBias>
inline uint32_t EncodeMagnitude(uint32_t abs) {
  constexpr uint32_t kDrop = 23u - kMan;  // f32 mantissa bits dropped
  constexpr uint32_t kMinNormal = static_cast<uint32_t>(127 - kBias + 1) << 23;
  // Normal result: rebias the exponent and round the dropped mantissa bits to even; a
  // carry out of the mantissa correctly bumps the exponent (up to the next binade).
  uint32_t h = abs - (static_cast<uint32_t>(127 - kBias) << 23);
  h += ((1u << (kDrop - 1u)) - 1u) + ((h >> kDrop) & 1u);
  const uint32_t normal = h >> kDrop;
  // Subnormal (or zero) result, |x| < 2^(1 - bias): add the power of two C whose f32 ulp
  // is the smallest subnormal 2^(1 - bias - kMan); the f32 adder rounds the sum to that
  // grid, ties to even, and the low bits of the sum count subnormal units (a carry to
  // 2^(1 - bias) gives the code of the smallest normal, which is right). This is exact
  // under the default rounding mode; FTZ/DAZ do not matter (f32 subnormals round to 0
  // here anyway, and the sum is normal).
  static_assert(24 - kBias - kMan >= 0, "C = 2^(24 - bias - kMan) must be an integer");
  constexpr float kC = static_cast<float>(1u << (24 - kBias - kMan));
  const uint32_t sub = FloatBits(BitsToFloat(abs) + kC) - FloatBits(kC);
  return abs < kMinNormal ? sub : normal;
}

// f32 bit pattern of an 8-bit code. kIeeeSpecials: the all-ones exponent holds inf and
// NaNs (E5M2); otherwise only S.1111.111 is NaN and the rest are finite (E4M3). NaNs
// decode quiet, so that no signalling NaN ever reaches the f32 arithmetic.
template <int kExp, int kMan, int kBias, bool kIeeeSpecials>
constexpr uint32_t DecodeBits(uint32_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t e = (code >> kMan) & ((1u << kExp) - 1u);
  const uint32_t m = code & ((1u << kMan) - 1u);
  const uint32_t e_max = (1u << kExp) - 1u;
  if (kIeeeSpecials && e == e_max) return sign | (m == 0 ? 0x7f800000u : 0x7fc00000u | (m << (23 - kMan)));
  if (!kIeeeSpecials && e == e_max && m == (1u << kMan) - 1u) return sign | 0x7fc00000u;
  if (e == 0) {
    if (m == 0) return sign;
    // Subnormal m * 2^(1 - bias - kMan): normalise so the leading 1 becomes implicit.
    int p = 0;
    while ((m >> (p + 1)) != 0) ++p;
    const uint32_t f32_exp = static_cast<uint32_t>(127 + 1 - kBias - kMan + p);
    return sign | (f32_exp << 23) | ((m - (1u << p)) << (23 - p));
  }
  return sign | ((e + 127u - kBias) << 23) | (m << (23 - kMan));
}

template <int kExp, int kMan, int kBias, bool kIeeeSpecials>
constexpr std::array<uint32_t, 256> MakeDecodeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t c = 0; c < 256; ++c) t[c] = DecodeBits<kExp, kMan, kBias, kIeeeSpecials>(c);
  return t;
}

inline constexpr std::array<uint32_t, 256> kE4M3Bits = MakeDecodeTable<4, 3, 7, false>();
inline constexpr std::array<uint32_t, 256> kE5M2Bits = MakeDecodeTable<5, 2, 15, true>();

}  // namespace float8_internal

inline constexpr float kF8E4M3Max = 448.0f;
inline constexpr float kF8E5M2Max = 57344.0f;

// The special cases are selects rather than early returns, for the same reason as in
// EncodeMagnitude: the loops over these should vectorise.
inline uint8_t FloatToF8E4M3(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t r = float8_internal::EncodeMagnitude<3, 7>(abs);
  // |x| >= 448 (inf included) saturates: values in [448, 464] round to 448 anyway and
  // larger ones would round to 480, whose code is the NaN.
  r = abs >= 0x43e00000u ? 0x7eu : r;
  r = abs > 0x7f800000u ? 0x7fu : r;  // NaN
  return static_cast<uint8_t>(sign | r);
}

inline uint8_t FloatToF8E5M2(float f) {
  const uint32_t u = FloatBits(f);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t abs = u & 0x7fffffffu;
  uint32_t r = float8_internal::EncodeMagnitude<2, 15>(abs);
  // Finite |x| > 57344 saturates: up to 61440 it rounds to 57344 anyway, beyond to inf.
  r = abs >= 0x47600000u ? 0x7bu : r;
  r = abs == 0x7f800000u ? 0x7cu : r;  // inf stays inf
  r = abs > 0x7f800000u ? 0x7eu : r;   // NaN -> quiet NaN
  return static_cast<uint8_t>(sign | r);
}

inline float F8E4M3ToFloat(uint8_t v) { return BitsToFloat(float8_internal::kE4M3Bits[v]); }
inline float F8E5M2ToFloat(uint8_t v) { return BitsToFloat(float8_internal::kE5M2Bits[v]); }

// Rounds an f32 value to the nearest representable value of the format (with the
// saturation above), kept in f32: the operand rounding of an FP8 GEMM.
inline float RoundToF8E4M3(float f) { return F8E4M3ToFloat(FloatToF8E4M3(f)); }
inline float RoundToF8E5M2(float f) { return F8E5M2ToFloat(FloatToF8E5M2(f)); }

// Bulk forms over n contiguous elements, for kernels and tensor casts.
void FloatToF8E4M3(const float* in, uint8_t* out, int64_t n);
void FloatToF8E5M2(const float* in, uint8_t* out, int64_t n);
void F8E4M3ToFloat(const uint8_t* in, float* out, int64_t n);
void F8E5M2ToFloat(const uint8_t* in, float* out, int64_t n);

}  // namespace mpc
