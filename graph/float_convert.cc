// IEEE binary16 <-> binary32 with round-to-nearest-even, done on the bit patterns.
#include "graph/float_convert.h"

namespace mpc {

uint16_t FloatToHalf(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;   // NaN -> quiet NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {
    // Result is subnormal (or zero) in f16: scale by 2^24 and round the integer.
    // Adding 0.5 (as a float with exponent 126) performs the RNE rounding in hardware.
    const float scaled = BitsToFloat(abs) + 0.5f;
    return sign | static_cast<uint16_t>(FloatBits(scaled) - 0x3f000000u);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  uint32_t h = abs - ((127u - 15u) << 23);
  h += 0xfffu + ((h >> 13) & 1u);
  return sign | static_cast<uint16_t>(h >> 13);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mant << 13));  // inf/NaN
  if (exp == 0) {
    // Zero or subnormal: value = mant * 2^-24, exact in f32.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return BitsToFloat(sign | FloatBits(v));
  }
  return BitsToFloat(sign | ((exp + 127u - 15u) << 23) | (mant << 13));
}

}  // namespace mpc
