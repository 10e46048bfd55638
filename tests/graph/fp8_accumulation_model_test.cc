// A CPU model of FP8 "fast accumulation" (issue 46): Hopper's FP8 tensor cores add the
// products of a K-long dot product into an accumulator that keeps fewer bits than f32
// (DeepSeek-V3's report: about 14), so the error grows with K unless partial sums are
// promoted into an f32 accumulator every so many products (cuBLASLt's split accumulation,
// CUBLASLT_MATMUL_DESC_FAST_ACCUM off; DeepSeek-V3 promotes every 128). The model: E4M3
// operands (per-tensor scaled N(0,1), as the fp8 pass quantizes them), exact products, an
// accumulator truncated to `bits` mantissa bits after every add, and an optional promotion
// interval. It prints the error against float64 as K grows (the table in
// docs/fp8-recipes.md) and holds the model to what it must show: without promotion the
// error grows with K (about as sqrt(K)); promoting every 128 keeps it at or below K=128's.
// The model is not the hardware (whose adder alignment is not published); the GPU run
// measures the real GEMM.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "graph/float8.h"
#include "gtest/gtest.h"

namespace mpc {
namespace {

// x with its mantissa cut to `bits` explicit bits (toward zero), as an adder that keeps
// `bits` bits drops the rest.
float Truncate(float x, int bits) {
  if (bits >= 23 || x == 0 || !std::isfinite(x)) return x;
  uint32_t u = FloatBits(x);
  u &= ~((1u << (23 - bits)) - 1u);
  return BitsToFloat(u);
}

// sum_i a[i] * b[i]: products exact (FP8 x FP8 fits in f32), added into a `bits`-bit
// accumulator that is added into an f32 one every `promote` products (0: never).
float ModelDot(const std::vector<float>& a, const std::vector<float>& b, int bits, int promote) {
  float fast = 0, total = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    fast = Truncate(fast + a[i] * b[i], bits);
    if (promote > 0 && (i + 1) % promote == 0) {
      total += fast;
      fast = 0;
    }
  }
  return total + fast;
}

struct Errors {
  double f32 = 0, fast = 0, promoted = 0;
};

// Mean relative error over `trials` dot products of length k, E4M3 operands.
Errors MeasureAtK(int k, int bits, int promote, int trials) {
  std::mt19937 rng(42 + k);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Errors e;
  for (int t = 0; t < trials; ++t) {
    std::vector<float> a(k), b(k);
    for (int i = 0; i < k; ++i) {
      // Scale 448/4: the amax of N(0,1) draws is about 4.
      a[i] = RoundToF8E4M3(normal(rng) * 112.0f) / 112.0f;
      b[i] = RoundToF8E4M3(normal(rng) * 112.0f) / 112.0f;
    }
    double exact = 0, magnitude = 0;
    for (int i = 0; i < k; ++i) {
      exact += double(a[i]) * b[i];
      magnitude += std::fabs(double(a[i]) * b[i]);
    }
    // Relative to the sum of |products| (a dot product of random signs cancels to ~sqrt(K)
    // of it; relative to the result itself the error would be dominated by near-zero sums).
    e.f32 += std::fabs(ModelDot(a, b, 23, 0) - exact) / magnitude;
    e.fast += std::fabs(ModelDot(a, b, bits, 0) - exact) / magnitude;
    e.promoted += std::fabs(ModelDot(a, b, bits, promote) - exact) / magnitude;
  }
  e.f32 /= trials;
  e.fast /= trials;
  e.promoted /= trials;
  return e;
}

TEST(Fp8AccumulationModelTest, ErrorGrowsWithKWithoutPromotionAndStaysSmallWithIt) {
  constexpr int kBits = 13, kPromote = 128;  // ~14 significant bits; DeepSeek-V3's interval
  std::printf("K      f32 accumulation   %d-bit accumulator   same, promoted every %d (mean |error| / sum|products|)\n",
              kBits, kPromote);
  std::vector<Errors> rows;
  const std::vector<int> ks{128, 512, 2048, 8192, 16384};
  for (int k : ks) {
    rows.push_back(MeasureAtK(k, kBits, kPromote, 40));
    std::printf("%-6d %.3g            %.3g               %.3g\n", k, rows.back().f32, rows.back().fast,
                rows.back().promoted);
  }
  // Without promotion the truncation error grows with K (each add loses up to an ulp of a
  // sum that grows as sqrt(K)); promoted, every partial sum is at most 128 products long and
  // the f32 total adds their (sign-alternating) truncation errors.
  EXPECT_GT(rows.back().fast, 5 * rows.front().fast);
  for (size_t i = 1; i < rows.size(); ++i) {
    if (ks[i] >= 2048) EXPECT_LT(rows[i].promoted, rows[i].fast / 2) << "K=" << ks[i];
    EXPECT_LT(rows[i].promoted, 2 * rows[0].fast) << "K=" << ks[i];
  }
  for (const Errors& r : rows) EXPECT_LT(r.f32, r.promoted);  // f32 all the way is the floor
}

}  // namespace
}  // namespace mpc
