// GELU and its derivatives in f32 arithmetic that vectorises: no libm calls, absolute
// values and selects instead of branches (GCC if-converted `x < 0 ? -x : x` by computing
// everything after it twice, in masked lanes), so a `#pragma omp simd` loop compiled per
// vector ISA (cpu_isa.h) runs them in full-width lanes.
//
// Why not oneDNN's eltwise backward: for the erf form it evaluates erf and the normal
// density with an exponential each, where both need only exp(-x^2/2), and its time is
// bimodal from run to run. char_gpt bf16's GeluGrad (16x256x1536, six a step): oneDNN
// 205 or 410 ms per 13 steps, these loops 175 (f32: oneDNN 214 to 620, these 169). The
// forward stays on oneDNN for f32 and bf16, whose kernel is faster than GeluErfRange
// (166 vs 180 ms; 2026-11-26, on the AMX machine, bf16: 161 vs 190 even blocked).
//
// Accuracy: Phi(x) = erfc(-x/sqrt 2)/2 from Abramowitz & Stegun 7.1.26 (absolute error of
// erf below 1.5e-7; oneDNN's GELU uses the same approximation), taken as erfc for x < 0
// so the left tail is a product rather than 1 minus a number near 1 (its relative error
// then grows only as the approximation's: 5e-5 at x = -3, 3% at -12 where Phi is 2e-33);
// exp from exp_math.h (0.7 ulp). Maximum errors against f64 over [-15, 15], 2-2.5e-7
// (gelu_math_test.cc): inside the f32 tolerance (1e-5 relative) and below one bf16
// rounding. NaN propagates; at +/-inf the erf form's derivative is NaN (inf * 0), as the
// f64 reference and PyTorch give. Fused multiply-adds are written out (__builtin_fmaf), so
// every ISA clone computes the same bits.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/exp_math.h"

namespace mpc::cpu {

// The pieces GELU and its derivative share: Phi(x), the standard normal CDF, and
// phi(x) = e^(-x^2/2) / sqrt(2 pi), its density.
struct NormalCdfAndDensity {
  float cdf, density;
};

__attribute__((always_inline)) inline NormalCdfAndDensity NormalAt(float x) {
  const float e = ExpOfNonPositive(-0.5f * x * x);            // e^(-z^2), z = |x| / sqrt 2
  const float z = __builtin_fabsf(x) * 0.70710678118654752f;  // |x| / sqrt 2
  const float t = 1.0f / __builtin_fmaf(0.3275911f, z, 1.0f);
  float poly = 1.061405429f;
  poly = __builtin_fmaf(poly, t, -1.453152027f);
  poly = __builtin_fmaf(poly, t, 1.421413741f);
  poly = __builtin_fmaf(poly, t, -0.284496736f);
  poly = __builtin_fmaf(poly, t, 0.254829592f);
  const float half_erfc = (poly * t) * (0.5f * e);  // erfc(z) / 2 = Phi(-|x|)
  return {x < 0.0f ? half_erfc : 1.0f - half_erfc, e * 0.39894228040143268f};
}

// gelu(x) = x Phi(x).
__attribute__((always_inline)) inline float GeluErf(float x) { return x * NormalAt(x).cdf; }

// gelu'(x) = Phi(x) + x phi(x).
__attribute__((always_inline)) inline float GeluErfDerivative(float x) {
  const NormalCdfAndDensity n = NormalAt(x);
  return __builtin_fmaf(x, n.density, n.cdf);
}

// The tanh form's derivative: with u = sqrt(2/pi) (x + 0.044715 x^3) and t = tanh(u),
// gelu'(x) = (1 + t) / 2 + x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2) / 2. Both terms
// from e = e^(-2|u|) without differences of near-equal numbers: (1 + t) / 2 is 1 / (1 + e)
// for u >= 0 and e / (1 + e) below, 1 - t^2 = 4 e / (1 + e)^2.
__attribute__((always_inline)) inline float GeluTanhDerivative(float x) {
  constexpr float kSqrt2OverPi = 0.79788456080286536f;
  const float x2 = x * x;
  const float u = kSqrt2OverPi * __builtin_fmaf(0.044715f * x2, x, x);
  const float e = ExpOfNonPositive(-2.0f * __builtin_fabsf(u));
  const float r = 1.0f / (1.0f + e);
  const float half_one_plus_t = u < 0.0f ? e * r : r;
  const float slope = kSqrt2OverPi * __builtin_fmaf(3.0f * 0.044715f, x2, 1.0f);
  return __builtin_fmaf(2.0f * x * slope, e * r * r, half_one_plus_t);
}

// The kernels' loops over [begin, end) for T = float, Bf16 or Half, rounded once on store.
// The math is always_inline so that it is compiled inside each ISA clone: only there does
// __builtin_fmaf become a vector FMA (the baseline clone calls fmaf; the same results).
//
// 16-bit operands go through blocks of kWidenBlock f32 values on the stack: widen the
// inputs in one tight loop, run the math on the block, narrow it on store. With the
// widening loads inside the long math loop, char_gpt bf16's GeluGrad ran at 5.6 ms a call
// in the model (2.5x the same loop on freshly written data); blocked, 2.4 ms. f32 operands
// are read in place: the copy made f32's GeluGrad slower (3.5 -> 4.5 ms a call).
constexpr int64_t kWidenBlock = 256;

// out[i] = f(a[i]) (or f(a[i], b[i])) over [begin, end), f on f32 values.
template <typename T, typename F>
__attribute__((always_inline)) inline void MapWidened(int64_t begin, int64_t end, const T* a, const T* b, T* out, F f) {
  if constexpr (std::is_same_v<T, float>) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) out[i] = f(a[i], b ? b[i] : 0.0f);
  } else {
    alignas(64) float ab[kWidenBlock], bb[kWidenBlock];
    for (int64_t s = begin; s < end; s += kWidenBlock) {
      const int64_t m = end - s < kWidenBlock ? end - s : kWidenBlock;
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) ab[i] = float(a[s + i]);
      if (b) {
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) bb[i] = float(b[s + i]);
      }
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) ab[i] = f(ab[i], b ? bb[i] : 0.0f);
#pragma omp simd
      for (int64_t i = 0; i < m; ++i) StoreRounded(out + s + i, ab[i]);
    }
  }
}

template <typename T>
MPC_ISA_CLONES void GeluErfRange(int64_t begin, int64_t end, const T* x, T* y) {
  MapWidened(
      begin, end, x, static_cast<const T*>(nullptr), y,
      [](float xi, float) __attribute__((always_inline)) { return GeluErf(xi); });
}

template <typename T, bool kTanh>
MPC_ISA_CLONES void GeluGradRange(int64_t begin, int64_t end, const T* dy, const T* x, T* dx) {
  MapWidened(
      begin, end, x, dy, dx, [](float xi, float dyi) __attribute__((always_inline)) {
        return dyi * (kTanh ? GeluTanhDerivative(xi) : GeluErfDerivative(xi));
      });
}

}  // namespace mpc::cpu
