// The vector GELU math of backends/cpu/gelu_math.h against f64 libm on dense grids: the
// exponential over the whole non-positive range it serves, the normal CDF in both tails
// (where a naive 1 - erfc would cancel), GELU and both forms of its derivative, and the
// edge values (NaN, infinities, zero). The kernels built on it are checked end to end by
// the GeluGrad op cases (tests/graph/norm_op_cases.cc) in every float dtype.
#include "backends/cpu/gelu_math.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace mpc::cpu {
namespace {

double Phi(double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }
double Density(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI); }

TEST(GeluMathTest, ExponentialIsWithinOneUlpOverTheNonPositiveRange) {
  double worst = 0;
  for (int i = 0; i <= 400000; ++i) {
    const float a = static_cast<float>(-87.0 * i / 400000.0);
    const double want = std::exp(static_cast<double>(a));
    worst = std::max(worst, std::abs(ExpOfNonPositive(a) - want) / want);
  }
  EXPECT_LT(worst, 0x1p-23);  // one f32 ulp (8.3e-8 measured)
  EXPECT_EQ(ExpOfNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpOfNonPositive(-88.0f), 0.0f);
  EXPECT_EQ(ExpOfNonPositive(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(ExpOfNonPositive(std::numeric_limits<float>::quiet_NaN())));
}

TEST(GeluMathTest, NormalCdfStaysPositiveAndCloseInTheLeftTail) {
  // 1 - Phi(-x) would be 0 in f32 below x ~ -5.4; as erfc the value keeps the
  // approximation's own accuracy (absolute 7.5e-8, shrinking with Phi).
  for (float x : {-1.0f, -3.0f}) EXPECT_NEAR(NormalAt(x).cdf / Phi(x), 1.0, 1e-4) << x;
  for (float x : {-5.0f, -8.0f, -12.0f}) {
    EXPECT_GT(NormalAt(x).cdf, 0.0f) << x;
    EXPECT_NEAR(NormalAt(x).cdf / Phi(x), 1.0, 0.04) << x;
  }
}

TEST(GeluMathTest, GeluAndItsDerivativesMatchFloat64) {
  constexpr double kSqrt2OverPi = 0.7978845608028654;
  double worst_value = 0, worst_erf = 0, worst_tanh = 0;
  for (int i = -300000; i <= 300000; ++i) {
    const float x = static_cast<float>(i * 15.0 / 300000.0);
    const double xd = x;
    const double value = xd * Phi(xd);
    const double erf_derivative = Phi(xd) + xd * Density(xd);
    const double u = kSqrt2OverPi * (xd + 0.044715 * xd * xd * xd);
    const double t = std::tanh(u);
    const double tanh_derivative = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * xd * xd);
    // Errors against max(1, |ref|): absolute near the zero crossings, relative elsewhere.
    worst_value = std::max(worst_value, std::abs(GeluErf(x) - value) / std::max(1.0, std::abs(value)));
    worst_erf = std::max(worst_erf, std::abs(GeluErfDerivative(x) - erf_derivative));
    worst_tanh = std::max(worst_tanh, std::abs(GeluTanhDerivative(x) - tanh_derivative));
  }
  EXPECT_LT(worst_value, 3.5e-7);  // 2.1e-7, 2.5e-7 and 2.0e-7 measured
  EXPECT_LT(worst_erf, 3.5e-7);
  EXPECT_LT(worst_tanh, 3.5e-7);
}

TEST(GeluMathTest, EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(GeluErf(0.0f), 0.0f);
  EXPECT_EQ(GeluErfDerivative(0.0f), 0.5f);
  EXPECT_EQ(GeluTanhDerivative(0.0f), 0.5f);
  EXPECT_TRUE(std::isnan(GeluErf(nan)));
  EXPECT_TRUE(std::isnan(GeluErfDerivative(nan)));
  EXPECT_TRUE(std::isnan(GeluTanhDerivative(nan)));
  // inf * 0, as the f64 reference and PyTorch compute it.
  EXPECT_TRUE(std::isnan(GeluErfDerivative(inf)));
  EXPECT_TRUE(std::isnan(GeluErfDerivative(-inf)));
  EXPECT_EQ(GeluErf(inf), inf);
  // Far out, where the exponential is 0: the derivatives are exactly 1 and 0.
  EXPECT_EQ(GeluErfDerivative(20.0f), 1.0f);
  EXPECT_EQ(GeluErfDerivative(-20.0f), 0.0f);
  EXPECT_EQ(GeluTanhDerivative(20.0f), 1.0f);
}

}  // namespace
}  // namespace mpc::cpu
