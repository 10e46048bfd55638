// e^a for a <= 0 in f32 arithmetic that vectorises (no libm call), for the GELU loops
// (gelu_math.h) and the 16-bit softmax rows (kernels_softmax_loss.cc), which call it on a
// negated square or on a difference from the row's maximum. Cody-Waite reduction by ln 2
// and a degree-6 polynomial, 0.7 ulp measured (gelu_math_test.cc); fused multiply-adds
// written out (__builtin_fmaf), so every ISA clone computes the same bits.
#pragma once

#include <cstdint>

namespace mpc::cpu {

// e^a for a <= 0 (a NaN stays NaN); below -87 (where e^a leaves the normal floats) 0.
__attribute__((always_inline)) inline float ExpOfNonPositive(float a) {
  const float clamped = a < -87.0f ? -87.0f : a;
  // n = round(a / ln 2) by the 1.5 * 2^23 shift: the sum's low mantissa bits hold n.
  constexpr float kShift = 12582912.0f;
  const float shifted = __builtin_fmaf(clamped, 1.44269504088896341f, kShift);
  const float n = shifted - kShift;
  // r = a - n ln 2 in two parts (ln 2's high part has trailing zero bits, so n * hi is exact).
  const float r = __builtin_fmaf(n, 2.12194440e-4f, __builtin_fmaf(n, -0.693359375f, clamped));
  float p = 1.9875691500e-4f;
  p = __builtin_fmaf(p, r, 1.3981999507e-3f);
  p = __builtin_fmaf(p, r, 8.3334519073e-3f);
  p = __builtin_fmaf(p, r, 4.1665795894e-2f);
  p = __builtin_fmaf(p, r, 1.6666665459e-1f);
  p = __builtin_fmaf(p, r, 5.0000001201e-1f);
  p = __builtin_fmaf(p * r, r, r) + 1.0f;
  // Unsigned, so a NaN's arbitrary bits wrap instead of overflowing (its result is NaN anyway).
  const uint32_t n_bits = __builtin_bit_cast(uint32_t, shifted) - __builtin_bit_cast(uint32_t, kShift);
  const float two_to_n = __builtin_bit_cast(float, (n_bits + 127u) << 23);
  const float e = p * two_to_n;
  return a < -87.0f ? 0.0f : e;
}

}  // namespace mpc::cpu
