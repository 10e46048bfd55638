// Tests for the f32 <-> f16 / bf16 / f8e4m3 / f8e5m2 conversions (graph/float_convert.h,
// graph/float8.h) and for Tensor's use of them. The conversions are bit tricks, so they
// are checked against an independent float64 reference written from the format
// definitions alone: decoding by formula (sign, exponent, mantissa -> ldexp), encoding by
// picking the nearest of all finite codes (ties to the even code) and then applying the
// inf / NaN / saturation rules. Every 8- and 16-bit pattern is decoded and round-tripped;
// encoding is compared on a stride over all f32 patterns and on every code value, every
// midpoint between neighbouring codes and their f32 neighbours; the named rounding
// boundaries are also spelled out with hand-written expected bits.
#include "graph/float_convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "graph/float8.h"
#include "graph/tensor.h"

namespace mpc {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---------------------------------------------------------------------------------------
// Reference, from the format definitions only.

struct Format {
  const char* name;
  int bits;
  int exp_bits;
  int man_bits;
  int bias;
  // The all-ones exponent holds ±inf (mantissa 0) and NaNs, as in IEEE 754. Otherwise
  // (E4M3FN) only the all-ones code S.1111.111 is NaN and there is no inf.
  bool ieee_specials;
  // Finite overflow saturates to ±max (OCP FP8 SATFINITE) instead of rounding to inf.
  bool saturate;
  uint32_t (*encode)(float);
  float (*decode)(uint32_t);
};

const Format kF16 = {"f16",
                     16,
                     5,
                     10,
                     15,
                     true,
                     false,
                     [](float f) -> uint32_t { return FloatToHalf(f); },
                     [](uint32_t c) { return HalfToFloat(static_cast<uint16_t>(c)); }};
const Format kBf16 = {"bf16",
                      16,
                      8,
                      7,
                      127,
                      true,
                      false,
                      [](float f) -> uint32_t { return FloatToBf16(f); },
                      [](uint32_t c) { return Bf16ToFloat(static_cast<uint16_t>(c)); }};
const Format kE4M3 = {"f8e4m3",
                      8,
                      4,
                      3,
                      7,
                      false,
                      true,
                      [](float f) -> uint32_t { return FloatToF8E4M3(f); },
                      [](uint32_t c) { return F8E4M3ToFloat(static_cast<uint8_t>(c)); }};
const Format kE5M2 = {"f8e5m2",
                      8,
                      5,
                      2,
                      15,
                      true,
                      true,
                      [](float f) -> uint32_t { return FloatToF8E5M2(f); },
                      [](uint32_t c) { return F8E5M2ToFloat(static_cast<uint8_t>(c)); }};
const Format* const kFormats[] = {&kF16, &kBf16, &kE4M3, &kE5M2};

uint32_t SignBit(const Format& f) { return 1u << (f.bits - 1); }

bool RefIsNan(const Format& f, uint32_t code) {
  const uint32_t e = (code >> f.man_bits) & ((1u << f.exp_bits) - 1u);
  const uint32_t m = code & ((1u << f.man_bits) - 1u);
  const uint32_t e_max = (1u << f.exp_bits) - 1u;
  if (f.ieee_specials) return e == e_max && m != 0;
  return e == e_max && m == (1u << f.man_bits) - 1u;
}

double RefDecode(const Format& f, uint32_t code) {
  const bool neg = (code & SignBit(f)) != 0;
  const int e = static_cast<int>((code >> f.man_bits) & ((1u << f.exp_bits) - 1u));
  const int m = static_cast<int>(code & ((1u << f.man_bits) - 1u));
  double v;
  if (RefIsNan(f, code)) {
    v = std::numeric_limits<double>::quiet_NaN();
  } else if (f.ieee_specials && e == (1 << f.exp_bits) - 1) {
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(m, 1 - f.bias - f.man_bits);  // subnormal: no implicit 1
  } else {
    v = std::ldexp((1 << f.man_bits) + m, e - f.bias - f.man_bits);
  }
  return neg ? -v : v;
}

// The non-negative finite codes of a format sorted by value, for the nearest search.
struct RefTable {
  const Format* format;
  std::vector<std::pair<double, uint32_t>> finite;  // (value, code), ascending
  uint32_t inf_code = 0;                            // unused without inf
};

RefTable MakeRefTable(const Format& f) {
  RefTable t{&f, {}, 0};
  for (uint32_t c = 0; c < SignBit(f); ++c) {
    const double v = RefDecode(f, c);
    if (std::isfinite(v)) t.finite.emplace_back(v, c);
    if (std::isinf(v)) t.inf_code = c;
  }
  std::sort(t.finite.begin(), t.finite.end());
  return t;
}

const RefTable& Table(const Format& f) {
  static const RefTable tables[] = {MakeRefTable(kF16), MakeRefTable(kBf16), MakeRefTable(kE4M3), MakeRefTable(kE5M2)};
  for (const RefTable& t : tables) {
    if (t.format == &f) return t;
  }
  std::abort();
}

struct Expected {
  bool nan = false;  // any NaN code of the format with the sign of the input
  uint32_t code = 0;
};

Expected RefEncode(const Format& f, double x) {
  const RefTable& t = Table(f);
  const uint32_t sign = std::signbit(x) ? SignBit(f) : 0;
  if (std::isnan(x)) return {true, sign};
  const double a = std::fabs(x);
  const double max = t.finite.back().first;
  const uint32_t max_code = t.finite.back().second;
  if (std::isinf(a)) return {false, sign | (f.ieee_specials ? t.inf_code : max_code)};
  if (a > max) {
    if (f.saturate) return {false, sign | max_code};
    // Round to nearest with an unbounded exponent: the next value up would be
    // max + ulp(max), with an even mantissa (max's is all ones), so the halfway point
    // itself already rounds up, to inf.
    const double top_ulp = max - t.finite[t.finite.size() - 2].first;
    return {false, sign | (a >= max + top_ulp / 2 ? t.inf_code : max_code)};
  }
  // Nearest finite code; on a tie, the one with the even last mantissa bit.
  auto hi = std::lower_bound(t.finite.begin(), t.finite.end(), std::make_pair(a, 0u),
                             [](const auto& p, const auto& q) { return p.first < q.first; });
  if (hi->first == a) return {false, sign | hi->second};
  const auto lo = hi - 1;
  const double dlo = a - lo->first, dhi = hi->first - a;
  uint32_t code;
  if (dlo != dhi) {
    code = dlo < dhi ? lo->second : hi->second;
  } else {
    code = (lo->second & 1u) == 0 ? lo->second : hi->second;
  }
  return {false, sign | code};
}

std::string Hex(uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

std::string Describe(float x) {
  std::ostringstream s;
  s.precision(9);
  s << x << " (" << Hex(FloatBits(x)) << ")";
  return s.str();
}

// Collects mismatches without one gtest assertion per value (the sweeps check millions).
class Mismatches {
 public:
  void Add(const std::string& what) {
    if (count_++ < 10) text_ += what + "\n";
  }
  ::testing::AssertionResult Result() const {
    if (count_ == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << count_ << " mismatches, first ones:\n" << text_;
  }

 private:
  int64_t count_ = 0;
  std::string text_;
};

void CheckEncode(const Format& f, float x, Mismatches& bad) {
  const uint32_t got = f.encode(x);
  const Expected want = RefEncode(f, x);
  const bool ok = want.nan ? RefIsNan(f, got) && (got & SignBit(f)) == want.code : got == want.code;
  if (!ok) {
    bad.Add(std::string(f.name) + " encode " + Describe(x) + ": got " + Hex(got) + ", want " +
            (want.nan ? std::string("NaN with sign ") + Hex(want.code) : Hex(want.code)));
  }
}

// ---------------------------------------------------------------------------------------
// The reference itself, on values fixed by the format specifications.

TEST(FloatConvertReference, MatchesPublishedValues) {
  EXPECT_EQ(RefDecode(kF16, 0x7bff), 65504.0);
  EXPECT_EQ(RefDecode(kF16, 0x0001), std::ldexp(1.0, -24));
  EXPECT_EQ(RefDecode(kBf16, 0x7f7f), std::ldexp(255.0, 120));
  EXPECT_EQ(RefDecode(kBf16, 0x0001), std::ldexp(1.0, -133));
  EXPECT_EQ(RefDecode(kE4M3, 0x7e), 448.0);
  EXPECT_EQ(RefDecode(kE4M3, 0x38), 1.0);
  EXPECT_EQ(RefDecode(kE4M3, 0x01), std::ldexp(1.0, -9));
  EXPECT_EQ(RefDecode(kE4M3, 0x08), std::ldexp(1.0, -6));
  EXPECT_TRUE(std::isnan(RefDecode(kE4M3, 0x7f)));
  EXPECT_EQ(RefDecode(kE4M3, 0x78), 256.0);  // exponent 1111 is finite in E4M3
  EXPECT_EQ(RefDecode(kE5M2, 0x7b), 57344.0);
  EXPECT_EQ(RefDecode(kE5M2, 0x3c), 1.0);
  EXPECT_EQ(RefDecode(kE5M2, 0x01), std::ldexp(1.0, -16));
  EXPECT_EQ(RefDecode(kE5M2, 0xfc), -std::numeric_limits<double>::infinity());
  for (uint32_t c : {0x7du, 0x7eu, 0x7fu}) EXPECT_TRUE(std::isnan(RefDecode(kE5M2, c)));
  // The IEEE overflow rule in RefEncode relies on max having an odd mantissa.
  for (const Format* f : {&kF16, &kBf16}) EXPECT_EQ(Table(*f).finite.back().second & 1u, 1u);
}

// ---------------------------------------------------------------------------------------
// Every pattern: decode matches the reference and encodes back to itself.

void CheckAllPatterns(const Format& f) {
  Mismatches bad;
  for (uint32_t c = 0; c < (1u << f.bits); ++c) {
    const float got = f.decode(c);
    const double want = RefDecode(f, c);
    if (std::isnan(want)) {
      if (!std::isnan(got) || std::signbit(got) != std::signbit(want)) {
        bad.Add(std::string(f.name) + " decode " + Hex(c) + ": got " + Describe(got) + ", want NaN");
      }
      const uint32_t back = f.encode(got);
      if (!RefIsNan(f, back) || (back & SignBit(f)) != (c & SignBit(f))) {
        bad.Add(std::string(f.name) + " NaN " + Hex(c) + " round trip gave " + Hex(back));
      }
      continue;
    }
    if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(want)) {
      bad.Add(std::string(f.name) + " decode " + Hex(c) + ": got " + Describe(got));
    }
    const uint32_t back = f.encode(got);
    if (back != c) bad.Add(std::string(f.name) + " round trip " + Hex(c) + " -> " + Hex(back));
  }
  EXPECT_TRUE(bad.Result());
}

TEST(FloatConvert, HalfEveryPatternDecodesAndRoundTrips) { CheckAllPatterns(kF16); }
TEST(FloatConvert, Bf16EveryPatternDecodesAndRoundTrips) { CheckAllPatterns(kBf16); }
TEST(Float8, F8E4M3EveryPatternDecodesAndRoundTrips) { CheckAllPatterns(kE4M3); }
TEST(Float8, F8E5M2EveryPatternDecodesAndRoundTrips) { CheckAllPatterns(kE5M2); }

TEST(Float8, F8NaNsDecodeQuiet) {
  // A signalling NaN must never reach the f32 arithmetic of a kernel.
  for (uint32_t c : {0x7fu, 0xffu}) EXPECT_NE(FloatBits(F8E4M3ToFloat(c)) & 0x400000u, 0u) << c;
  for (uint32_t c : {0x7du, 0x7eu, 0x7fu, 0xfdu, 0xfeu, 0xffu}) {
    EXPECT_NE(FloatBits(F8E5M2ToFloat(c)) & 0x400000u, 0u) << c;
  }
}

// ---------------------------------------------------------------------------------------
// Encoding sweeps against the reference.

// f32 values at and around every representable point of a format: each code value, each
// midpoint to the next code (and past max, the midpoint to where the next code would be),
// and the f32 neighbours of both; with both signs.
std::vector<float> NearRepresentable(const Format& f) {
  const auto& finite = Table(f).finite;
  std::vector<float> out;
  auto add = [&](double v) {
    const float x = static_cast<float>(v);
    EXPECT_EQ(static_cast<double>(x), v) << f.name << " point not exact in f32";
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, kInf)}) {
      out.push_back(y);
      out.push_back(-y);
    }
  };
  for (size_t i = 0; i < finite.size(); ++i) {
    add(finite[i].first);
    const double next =
        i + 1 < finite.size() ? finite[i + 1].first : finite[i].first + (finite[i].first - finite[i - 1].first);
    add((finite[i].first + next) / 2);
  }
  return out;
}

TEST(FloatConvert, EncodeMatchesReferenceOnF32Stride) {
  // Every 1021st f32 pattern (a prime stride, so all exponents and mantissa residues
  // are hit), which includes subnormal, inf and NaN inputs.
  Mismatches bad;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 1021) {
    const float x = BitsToFloat(static_cast<uint32_t>(b));
    for (const Format* f : kFormats) CheckEncode(*f, x, bad);
  }
  for (float x :
       {0.0f, -0.0f, kInf, -kInf, kNaN, -kNaN, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
        std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min()}) {
    for (const Format* f : kFormats) CheckEncode(*f, x, bad);
  }
  EXPECT_TRUE(bad.Result());
}

TEST(FloatConvert, EncodeMatchesReferenceNearEveryCodeAndMidpoint) {
  // The points near every format's codes are checked against all four formats, so the
  // 8-bit points also probe the 16-bit encoders and vice versa.
  Mismatches bad;
  for (const Format* source : kFormats) {
    for (float x : NearRepresentable(*source)) {
      for (const Format* f : kFormats) CheckEncode(*f, x, bad);
    }
  }
  EXPECT_TRUE(bad.Result());
}

// ---------------------------------------------------------------------------------------
// Named boundaries with hand-written expected bits.

float Pow2(int e) { return std::ldexp(1.0f, e); }
float Above(float x) { return std::nextafter(x, kInf); }
float Below(float x) { return std::nextafter(x, -kInf); }

TEST(FloatConvert, HalfBoundaries) {
  // Halfway cases round to the even mantissa, down and up.
  EXPECT_EQ(FloatToHalf(1.0f + Pow2(-11)), 0x3c00);      // 1 | 1+2^-10: to 1
  EXPECT_EQ(FloatToHalf(1.0f + 3 * Pow2(-11)), 0x3c02);  // 1+2^-10 | 1+2^-9: up
  EXPECT_EQ(FloatToHalf(Above(1.0f + Pow2(-11))), 0x3c01);
  EXPECT_EQ(FloatToHalf(-(1.0f + Pow2(-11))), 0xbc00);
  // Largest finite, and overflow past the halfway point to 65536.
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(Below(65520.0f)), 0x7bff);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);
  EXPECT_EQ(FloatToHalf(-65520.0f), 0xfc00);
  EXPECT_EQ(FloatToHalf(1e30f), 0x7c00);
  // Subnormals: smallest, half of it (tie to 0), just above half, the subnormal/normal tie.
  EXPECT_EQ(FloatToHalf(Pow2(-24)), 0x0001);
  EXPECT_EQ(FloatToHalf(Pow2(-25)), 0x0000);
  EXPECT_EQ(FloatToHalf(-Pow2(-25)), 0x8000);
  EXPECT_EQ(FloatToHalf(Above(Pow2(-25))), 0x0001);
  EXPECT_EQ(FloatToHalf(3 * Pow2(-25)), 0x0002);
  EXPECT_EQ(FloatToHalf(1023.5f * Pow2(-24)), 0x0400);
  EXPECT_EQ(HalfToFloat(0x0001), Pow2(-24));
  EXPECT_EQ(HalfToFloat(0x03ff), 1023 * Pow2(-24));
  // Zeros, infinities, NaN.
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(kInf), 0x7c00);
  EXPECT_EQ(FloatToHalf(-kInf), 0xfc00);
  EXPECT_EQ(FloatToHalf(kNaN), 0x7e00);
  EXPECT_EQ(FloatToHalf(-kNaN), 0xfe00);
  EXPECT_TRUE(std::signbit(HalfToFloat(0x8000)));
  EXPECT_EQ(HalfToFloat(0xfc00), -kInf);
}

TEST(FloatConvert, Bf16Boundaries) {
  EXPECT_EQ(FloatToBf16(1.0f + Pow2(-8)), 0x3f80);
  EXPECT_EQ(FloatToBf16(1.0f + 3 * Pow2(-8)), 0x3f82);
  EXPECT_EQ(FloatToBf16(Above(1.0f + Pow2(-8))), 0x3f81);
  // Largest finite (0x7f7f = 255 * 2^120) and the overflow halfway point 0x7f7f8000.
  EXPECT_EQ(Bf16ToFloat(0x7f7f), std::ldexp(255.0f, 120));
  EXPECT_EQ(FloatToBf16(std::ldexp(255.0f, 120)), 0x7f7f);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(FloatToBf16(BitsToFloat(0x7f7f8000u)), 0x7f80);
  EXPECT_EQ(FloatToBf16(-std::numeric_limits<float>::max()), 0xff80);
  // Subnormals (bf16 shares f32's exponent range, so these are f32 subnormals too).
  EXPECT_EQ(FloatToBf16(Pow2(-133)), 0x0001);
  EXPECT_EQ(FloatToBf16(Pow2(-134)), 0x0000);
  EXPECT_EQ(FloatToBf16(Above(Pow2(-134))), 0x0001);
  EXPECT_EQ(FloatToBf16(3 * Pow2(-134)), 0x0002);
  EXPECT_EQ(Bf16ToFloat(0x0001), Pow2(-133));
  EXPECT_EQ(FloatToBf16(0.0f), 0x0000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(FloatToBf16(kInf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-kInf), 0xff80);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(kNaN))));
  EXPECT_EQ(FloatToBf16(-kNaN) & 0x8000, 0x8000);
  // A NaN whose payload is only in the low 16 bits must not truncate to inf.
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(BitsToFloat(0x7f800001u)))));
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(BitsToFloat(0xff800001u)))));
}

// TF32 (RoundToTf32): f32's exponent, 10 explicit mantissa bits, kept in f32.
TEST(FloatConvert, Tf32Boundaries) {
  auto bits = [](float x) { return FloatBits(RoundToTf32(x)); };
  // Halfway cases round to the even mantissa, down and up; just above halfway rounds up.
  EXPECT_EQ(RoundToTf32(1.0f + Pow2(-11)), 1.0f);                         // 1 | 1+2^-10: to 1
  EXPECT_EQ(RoundToTf32(1.0f + 3 * Pow2(-11)), 1.0f + Pow2(-9));          // 1+2^-10 | 1+2^-9: up
  EXPECT_EQ(RoundToTf32(Above(1.0f + Pow2(-11))), 1.0f + Pow2(-10));      // past the tie
  EXPECT_EQ(RoundToTf32(Below(1.0f + 3 * Pow2(-11))), 1.0f + Pow2(-10));  // below the tie
  EXPECT_EQ(RoundToTf32(-(1.0f + 3 * Pow2(-11))), -(1.0f + Pow2(-9)));
  EXPECT_EQ(bits(BitsToFloat(0x3f801000u)), 0x3f800000u);  // the tie, as bits
  EXPECT_EQ(bits(BitsToFloat(0x3f803000u)), 0x3f804000u);
  // TF32 values are fixed points; the mantissa carry moves into the exponent.
  EXPECT_EQ(RoundToTf32(1.0f + Pow2(-10)), 1.0f + Pow2(-10));
  EXPECT_EQ(RoundToTf32(Below(2.0f)), 2.0f);
  EXPECT_EQ(RoundToTf32(2047.0f), 2047.0f);  // 11 significant bits fit
  EXPECT_EQ(RoundToTf32(4095.0f), 4096.0f);  // 12 do not: tie to even
  // The largest TF32 number (0x7f7fe000), the overflow halfway point (0x7f7ff000) and
  // FLT_MAX itself, which rounds to inf as the hardware conversion does.
  EXPECT_EQ(bits(BitsToFloat(0x7f7fe000u)), 0x7f7fe000u);
  EXPECT_EQ(bits(BitsToFloat(0x7f7fefffu)), 0x7f7fe000u);
  EXPECT_EQ(RoundToTf32(BitsToFloat(0x7f7ff000u)), kInf);
  EXPECT_EQ(RoundToTf32(std::numeric_limits<float>::max()), kInf);
  EXPECT_EQ(RoundToTf32(-std::numeric_limits<float>::max()), -kInf);
  // Subnormals round on the same grid: smallest TF32 subnormal 2^-136, half of it ties to
  // 0, just above half rounds up, 3 * 2^-137 ties up to the even 2^-135.
  EXPECT_EQ(RoundToTf32(Pow2(-136)), Pow2(-136));
  EXPECT_EQ(bits(Pow2(-137)), 0x00000000u);
  EXPECT_EQ(bits(-Pow2(-137)), 0x80000000u);
  EXPECT_EQ(RoundToTf32(Above(Pow2(-137))), Pow2(-136));
  EXPECT_EQ(RoundToTf32(3 * Pow2(-137)), Pow2(-135));
  EXPECT_EQ(RoundToTf32(std::numeric_limits<float>::denorm_min()), 0.0f);
  EXPECT_EQ(RoundToTf32(Below(std::numeric_limits<float>::min())), std::numeric_limits<float>::min());
  // Zeros, infinities, NaN (quiet, sign kept; a payload only in the low 13 bits must not
  // truncate to inf).
  EXPECT_EQ(bits(0.0f), 0x00000000u);
  EXPECT_EQ(bits(-0.0f), 0x80000000u);
  EXPECT_EQ(RoundToTf32(kInf), kInf);
  EXPECT_EQ(RoundToTf32(-kInf), -kInf);
  EXPECT_TRUE(std::isnan(RoundToTf32(kNaN)));
  EXPECT_TRUE(std::signbit(RoundToTf32(-kNaN)));
  EXPECT_TRUE(std::isnan(RoundToTf32(BitsToFloat(0x7f800001u))));
  EXPECT_TRUE(std::isnan(RoundToTf32(BitsToFloat(0xff800fffu))));
  EXPECT_EQ(bits(BitsToFloat(0x7f800001u)) & 0x1fffu, 0u);
}

// RoundToTf32 against a float64 reference from the format's definition (the nearest
// multiple of the value's TF32 spacing, ties to even; inf past the largest number's
// halfway point) on a stride over every f32 pattern and around every TF32 tie.
TEST(FloatConvert, Tf32MatchesReference) {
  auto reference = [](float x) -> double {
    if (!std::isfinite(x) || x == 0) return x;
    int e;
    std::frexp(static_cast<double>(x), &e);  // |x| in [2^(e-1), 2^e)
    const int spacing_exp = std::max(e - 1, -126) - 10;
    const double r = std::ldexp(std::nearbyint(std::ldexp(static_cast<double>(x), -spacing_exp)), spacing_exp);
    return std::fabs(r) >= std::ldexp(1.0, 128) ? std::copysign(INFINITY, r) : r;
  };
  int64_t bad = 0, checked = 0;
  auto check = [&](float x) {
    const float got = RoundToTf32(x);
    ++checked;
    if (std::isnan(x)) {
      bad += !std::isnan(got);
      return;
    }
    const double want = reference(x);
    if (static_cast<double>(got) != want || std::signbit(got) != std::signbit(x) || (FloatBits(got) & 0x1fffu) != 0) {
      if (++bad <= 10) ADD_FAILURE() << Describe(x) << " -> " << Describe(got) << ", reference " << want;
    }
  };
  for (uint64_t b = 0; b <= 0xffffffffu; b += 1021) check(BitsToFloat(static_cast<uint32_t>(b)));
  // Every exponent: the TF32 ties (low 13 bits 0x1000) of odd and even mantissas and their
  // f32 neighbours.
  for (uint32_t exp = 0; exp < 255; ++exp) {
    for (uint32_t man : {0x000000u, 0x001000u, 0x003000u, 0x7fd000u, 0x7ff000u, 0x2aa000u | 0x1000u}) {
      for (uint32_t sign : {0u, 0x80000000u}) {
        const float tie = BitsToFloat(sign | (exp << 23) | man);
        for (float x : {tie, Above(tie), Below(tie)}) check(x);
      }
    }
  }
  EXPECT_EQ(bad, 0) << "of " << checked;
}

TEST(Float8, F8E4M3Boundaries) {
  EXPECT_EQ(FloatToF8E4M3(1.0f), 0x38);
  EXPECT_EQ(FloatToF8E4M3(1.0f + Pow2(-4)), 0x38);      // 1 | 1.125: to 1
  EXPECT_EQ(FloatToF8E4M3(1.0f + 3 * Pow2(-4)), 0x3a);  // 1.125 | 1.25: up
  EXPECT_EQ(FloatToF8E4M3(Above(1.0f + Pow2(-4))), 0x39);
  EXPECT_EQ(FloatToF8E4M3(Below(1.0f + 3 * Pow2(-4))), 0x39);
  // Largest finite; everything above saturates, inf included (the format has none).
  EXPECT_EQ(FloatToF8E4M3(448.0f), 0x7e);
  EXPECT_EQ(FloatToF8E4M3(Below(448.0f)), 0x7e);
  EXPECT_EQ(FloatToF8E4M3(432.0f), 0x7e);  // 416 | 448 tie: 448 has the even mantissa
  EXPECT_EQ(FloatToF8E4M3(Below(432.0f)), 0x7d);
  for (float x : {Above(448.0f), 464.0f, 480.0f, 1e6f, std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(FloatToF8E4M3(x), 0x7e) << x;
    EXPECT_EQ(FloatToF8E4M3(-x), 0xfe) << x;
  }
  EXPECT_EQ(RoundToF8E4M3(1000.0f), 448.0f);
  EXPECT_EQ(RoundToF8E4M3(-kInf), -448.0f);
  // Subnormals: smallest 2^-9, half of it ties to 0, just above half rounds up; the
  // largest subnormal 7*2^-9 and its tie with the smallest normal 2^-6.
  EXPECT_EQ(FloatToF8E4M3(Pow2(-9)), 0x01);
  EXPECT_EQ(FloatToF8E4M3(Pow2(-10)), 0x00);
  EXPECT_EQ(FloatToF8E4M3(-Pow2(-10)), 0x80);
  EXPECT_EQ(FloatToF8E4M3(Above(Pow2(-10))), 0x01);
  EXPECT_EQ(FloatToF8E4M3(3 * Pow2(-10)), 0x02);
  EXPECT_EQ(FloatToF8E4M3(7 * Pow2(-9)), 0x07);
  EXPECT_EQ(FloatToF8E4M3(7.5f * Pow2(-9)), 0x08);
  EXPECT_EQ(FloatToF8E4M3(Below(7.5f * Pow2(-9))), 0x07);
  EXPECT_EQ(FloatToF8E4M3(std::numeric_limits<float>::denorm_min()), 0x00);
  EXPECT_EQ(F8E4M3ToFloat(0x01), Pow2(-9));
  EXPECT_EQ(F8E4M3ToFloat(0x08), Pow2(-6));
  EXPECT_EQ(F8E4M3ToFloat(0x7e), 448.0f);
  EXPECT_EQ(F8E4M3ToFloat(0xfe), -448.0f);
  // Zeros and NaN (sign kept).
  EXPECT_EQ(FloatToF8E4M3(0.0f), 0x00);
  EXPECT_EQ(FloatToF8E4M3(-0.0f), 0x80);
  EXPECT_TRUE(std::signbit(F8E4M3ToFloat(0x80)));
  EXPECT_EQ(FloatToF8E4M3(kNaN), 0x7f);
  EXPECT_EQ(FloatToF8E4M3(-kNaN), 0xff);
  EXPECT_TRUE(std::isnan(F8E4M3ToFloat(0x7f)));
  EXPECT_TRUE(std::isnan(RoundToF8E4M3(kNaN)));
}

TEST(Float8, F8E5M2Boundaries) {
  EXPECT_EQ(FloatToF8E5M2(1.0f), 0x3c);
  EXPECT_EQ(FloatToF8E5M2(1.0f + Pow2(-3)), 0x3c);      // 1 | 1.25: to 1
  EXPECT_EQ(FloatToF8E5M2(1.0f + 3 * Pow2(-3)), 0x3e);  // 1.25 | 1.5: up
  EXPECT_EQ(FloatToF8E5M2(Above(1.0f + Pow2(-3))), 0x3d);
  // Largest finite; finite values above saturate (61440 would round to inf without it),
  // while ±inf stays ±inf.
  EXPECT_EQ(FloatToF8E5M2(57344.0f), 0x7b);
  EXPECT_EQ(FloatToF8E5M2(Below(57344.0f)), 0x7b);
  for (float x : {Above(57344.0f), Below(61440.0f), 61440.0f, 65536.0f, 1e30f, std::numeric_limits<float>::max()}) {
    EXPECT_EQ(FloatToF8E5M2(x), 0x7b) << x;
    EXPECT_EQ(FloatToF8E5M2(-x), 0xfb) << x;
  }
  EXPECT_EQ(FloatToF8E5M2(kInf), 0x7c);
  EXPECT_EQ(FloatToF8E5M2(-kInf), 0xfc);
  EXPECT_EQ(F8E5M2ToFloat(0x7c), kInf);
  EXPECT_EQ(F8E5M2ToFloat(0xfc), -kInf);
  EXPECT_EQ(RoundToF8E5M2(1e9f), 57344.0f);
  // Subnormals: smallest 2^-16, half ties to 0, just above half rounds up, and the
  // largest subnormal 3*2^-16 tied with the smallest normal 2^-14.
  EXPECT_EQ(FloatToF8E5M2(Pow2(-16)), 0x01);
  EXPECT_EQ(FloatToF8E5M2(Pow2(-17)), 0x00);
  EXPECT_EQ(FloatToF8E5M2(-Pow2(-17)), 0x80);
  EXPECT_EQ(FloatToF8E5M2(Above(Pow2(-17))), 0x01);
  EXPECT_EQ(FloatToF8E5M2(3 * Pow2(-17)), 0x02);
  EXPECT_EQ(FloatToF8E5M2(3.5f * Pow2(-16)), 0x04);
  EXPECT_EQ(FloatToF8E5M2(Below(3.5f * Pow2(-16))), 0x03);
  EXPECT_EQ(F8E5M2ToFloat(0x01), Pow2(-16));
  EXPECT_EQ(F8E5M2ToFloat(0x04), Pow2(-14));
  EXPECT_EQ(F8E5M2ToFloat(0x7b), 57344.0f);
  // Zeros and NaN: a quiet NaN code with the sign kept.
  EXPECT_EQ(FloatToF8E5M2(0.0f), 0x00);
  EXPECT_EQ(FloatToF8E5M2(-0.0f), 0x80);
  EXPECT_EQ(FloatToF8E5M2(kNaN), 0x7e);
  EXPECT_EQ(FloatToF8E5M2(-kNaN), 0xfe);
  EXPECT_EQ(FloatToF8E5M2(BitsToFloat(0x7f800001u)), 0x7e);  // signalling f32 NaN too
  for (uint8_t c : {0x7d, 0x7e, 0x7f, 0xfd, 0xfe, 0xff}) EXPECT_TRUE(std::isnan(F8E5M2ToFloat(c)));
}

TEST(Float8, BulkFormsMatchElementwise) {
  std::vector<float> in;
  for (int c = 0; c < 256; ++c) {
    in.push_back(F8E4M3ToFloat(static_cast<uint8_t>(c)) * 1.03f);
    in.push_back(F8E5M2ToFloat(static_cast<uint8_t>(c)) * 0.97f);
  }
  const int64_t n = static_cast<int64_t>(in.size());
  std::vector<uint8_t> e4(n), e5(n);
  FloatToF8E4M3(in.data(), e4.data(), n);
  FloatToF8E5M2(in.data(), e5.data(), n);
  std::vector<float> d4(n), d5(n);
  F8E4M3ToFloat(e4.data(), d4.data(), n);
  F8E5M2ToFloat(e5.data(), d5.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(e4[i], FloatToF8E4M3(in[i])) << i;
    ASSERT_EQ(e5[i], FloatToF8E5M2(in[i])) << i;
    ASSERT_EQ(FloatBits(d4[i]), FloatBits(F8E4M3ToFloat(e4[i]))) << i;
    ASSERT_EQ(FloatBits(d5[i]), FloatBits(F8E5M2ToFloat(e5[i]))) << i;
  }
}

// ---------------------------------------------------------------------------------------
// Tensor casts and element access.

TEST(Float8, TensorCastF32ToF8AndBack) {
  const std::vector<float> values = {0.0f, -0.0f, 1.0f, 1.0625f,   -3.3f, 500.0f,   -1e9f,
                                     kInf, -kInf, kNaN, Pow2(-10), 3e-3f, 60000.0f, 1e-6f};
  const Tensor x = Tensor::FromVector<float>({2, 7}, values);
  for (DType dt : {DType::kF8E4M3, DType::kF8E5M2}) {
    const Format& f = dt == DType::kF8E4M3 ? kE4M3 : kE5M2;
    const Tensor q = x.CastTo(dt);
    ASSERT_EQ(q.dtype(), dt);
    EXPECT_EQ(q.shape(), x.shape());
    ASSERT_EQ(q.bytes(), values.size());
    const Tensor back = q.CastTo(DType::kF32);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint32_t code = q.data<uint8_t>()[i];
      EXPECT_EQ(code, f.encode(values[i])) << DTypeName(dt) << " " << values[i];
      const double want = RefDecode(f, code);
      const double got = q.GetAsDouble(static_cast<int64_t>(i));
      const float round = back.data<float>()[i];
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(got) && std::isnan(round)) << values[i];
      } else {
        EXPECT_EQ(got, want) << DTypeName(dt) << " " << values[i];
        EXPECT_EQ(std::signbit(got), std::signbit(want)) << values[i];
        EXPECT_EQ(static_cast<double>(round), want) << DTypeName(dt) << " " << values[i];
      }
    }
  }
  // Spot values: the saturation and inf rules survive the tensor path.
  const Tensor e4 = x.CastTo(DType::kF8E4M3).CastTo(DType::kF32);
  EXPECT_EQ(e4.data<float>()[5], 448.0f);
  EXPECT_EQ(e4.data<float>()[7], 448.0f);
  const Tensor e5 = x.CastTo(DType::kF8E5M2).CastTo(DType::kF32);
  EXPECT_EQ(e5.data<float>()[6], -57344.0f);
  EXPECT_EQ(e5.data<float>()[7], kInf);
}

TEST(Float8, TensorEveryF8PatternThroughF32AndF64) {
  for (DType dt : {DType::kF8E4M3, DType::kF8E5M2}) {
    const Format& f = dt == DType::kF8E4M3 ? kE4M3 : kE5M2;
    Tensor t(dt, {256});
    for (int c = 0; c < 256; ++c) t.data<uint8_t>()[c] = static_cast<uint8_t>(c);
    for (DType wide : {DType::kF32, DType::kF64, DType::kF16}) {
      const Tensor back = t.CastTo(wide).CastTo(dt);
      for (uint32_t c = 0; c < 256; ++c) {
        const uint32_t got = back.data<uint8_t>()[c];
        if (RefIsNan(f, c)) {
          EXPECT_TRUE(RefIsNan(f, got) && (got & 0x80u) == (c & 0x80u)) << Hex(c);
        } else {
          EXPECT_EQ(got, c) << DTypeName(dt) << " via " << DTypeName(wide);
          EXPECT_EQ(t.GetAsDouble(c), RefDecode(f, c)) << DTypeName(dt) << " " << Hex(c);
        }
      }
    }
  }
}

TEST(FloatConvert, TensorCastFromF64RoundsOnce) {
  // Each value sits just above a halfway point of the target by less than an f32 ulp:
  // rounding to f32 first would land exactly on the tie and round to even (down).
  const Tensor x = Tensor::FromVector<double>(
      {5},
      {1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40), 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40),
       1.0 + std::ldexp(1.0, -4) + std::ldexp(1.0, -40), -(1.0 + std::ldexp(1.0, -3) + std::ldexp(1.0, -40)), 1e300});
  EXPECT_EQ(x.CastTo(DType::kF16).data<uint16_t>()[0], 0x3c01);
  EXPECT_EQ(x.CastTo(DType::kBF16).data<uint16_t>()[1], 0x3f81);
  EXPECT_EQ(x.CastTo(DType::kF8E4M3).data<uint8_t>()[2], 0x39);
  EXPECT_EQ(x.CastTo(DType::kF8E5M2).data<uint8_t>()[3], 0xbd);
  // A finite f64 beyond f32's range is still finite: E5M2 saturates it, f16 gives inf.
  EXPECT_EQ(x.CastTo(DType::kF8E5M2).data<uint8_t>()[4], 0x7b);
  EXPECT_EQ(x.CastTo(DType::kF16).data<uint16_t>()[4], 0x7c00);
  // Exact values pass through unchanged.
  const Tensor exact = Tensor::FromVector<double>({3}, {0.5, -448.0, 65504.0});
  EXPECT_EQ(exact.CastTo(DType::kF8E4M3).data<uint8_t>()[1], 0xfe);
  EXPECT_EQ(exact.CastTo(DType::kF16).data<uint16_t>()[2], 0x7bff);
}

TEST(FloatConvert, TensorF16AndBf16EveryPatternRoundTrips) {
  for (DType dt : {DType::kF16, DType::kBF16}) {
    const Format& f = dt == DType::kF16 ? kF16 : kBf16;
    Tensor t(dt, {65536});
    for (uint32_t c = 0; c < 65536; ++c) t.data<uint16_t>()[c] = static_cast<uint16_t>(c);
    const Tensor back = t.CastTo(DType::kF64).CastTo(dt);
    Mismatches bad;
    for (uint32_t c = 0; c < 65536; ++c) {
      const uint32_t got = back.data<uint16_t>()[c];
      const bool ok = RefIsNan(f, c) ? RefIsNan(f, got) && (got & 0x8000u) == (c & 0x8000u) : got == c;
      if (!ok) bad.Add(std::string(f.name) + " " + Hex(c) + " -> " + Hex(got));
    }
    EXPECT_TRUE(bad.Result());
  }
}

}  // namespace
}  // namespace mpc
