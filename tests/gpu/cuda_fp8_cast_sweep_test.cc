// Fp8Cast on the GPU against graph/float8.h's encoders over 2^26 f32 bit patterns: every
// 24-bit prefix (sign, exponent, 15 mantissa bits) with low bytes 0x00, 0x01, 0x80 and
// 0xFF, so every binade, the rounding ties of both formats (normal and subnormal), the
// values just off them, the saturation thresholds, infinities and NaNs of both signs.
// The CUDA kernels encode finite pairs with the hardware's cvt.rn.satfinite on sm_89+
// (float8_device.cuh, FloatPairToF8Bytes) and everything else with the bit algorithm;
// either way every code must be the CPU's. Both formats, both layouts (plain, and the
// 64x64-tile transposed kernel). Its first run (H200, 2026-11-28) matched all 2^26
// patterns but the 131,071 negative NaNs in each case: the GPU's multiply by the scale
// returned the positive canonical NaN (ScaleLikeTheCpu now passes a NaN through).
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/executor.h"
#include "graph/float8.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kRows = 16384, kCols = 4096;  // 2^26 elements: 256 MiB of f32

Tensor SweptPatterns() {
  Tensor x(DType::kF32, {kRows, kCols});
  uint32_t* bits = static_cast<uint32_t*>(x.raw());
  constexpr uint32_t kLow[4] = {0x00, 0x01, 0x80, 0xFF};
  for (uint32_t e = 0; e < uint32_t{1} << 26; ++e) bits[e] = ((e >> 2) << 8) | kLow[e & 3];
  return x;
}

void ExpectCodesMatchTheCpu(Backend& gpu, const Tensor& x, bool e4m3, bool transpose) {
  SCOPED_TRACE(absl::StrCat(e4m3 ? "e4m3" : "e5m2", transpose ? ", transposed" : ", plain"));
  Graph g;
  Value* in = g.AddInput("x", DType::kF32, {kRows, kCols});
  Value* scale = g.AddInput("scale", DType::kF32, {});
  AttrMap attrs;
  attrs.Set("format", std::string(e4m3 ? "e4m3" : "e5m2"));
  if (transpose) attrs.Set("transpose", int64_t{1});
  auto cast = g.AddNode("Fp8Cast", {in, scale}, attrs, "sweep");
  ASSERT_TRUE(cast.ok()) << cast.status();
  g.SetOutputs({(*cast)->outputs[0]});
  auto ex = testing::ExecutorFor(g, gpu);
  ASSERT_TRUE(ex.ok()) << ex.status();
  ASSERT_TRUE((*ex)->SetInput("x", x).ok());
  ASSERT_TRUE((*ex)->SetInput("scale", Tensor::Scalar(1.0f)).ok());
  ASSERT_TRUE((*ex)->Run(0, 0).ok());
  auto codes = (*ex)->Fetch((*cast)->outputs[0]->name);
  ASSERT_TRUE(codes.ok()) << codes.status();
  const uint8_t* got = static_cast<const uint8_t*>(codes->raw());
  const float* v = x.data<float>();
  int64_t mismatches = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const float f = v[r * kCols + c];
      const uint8_t want = e4m3 ? FloatToF8E4M3(f) : FloatToF8E5M2(f);
      const uint8_t code = got[transpose ? c * kRows + r : r * kCols + c];
      if (code != want && ++mismatches <= 8) {
        uint32_t b;
        std::memcpy(&b, &f, 4);
        ADD_FAILURE() << "f32 bits 0x" << std::hex << b << " (" << f << "): got code 0x" << int{code}
                      << ", the CPU's 0x" << int{want};
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << kRows * kCols << " patterns";
}

TEST(CudaFp8CastSweep, EveryRoundingCaseEncodesAsOnTheCpu) {
  MPC_GPU_OR_SKIP(gpu);
  const Tensor x = SweptPatterns();
  for (bool e4m3 : {true, false}) {
    for (bool transpose : {false, true}) ExpectCodesMatchTheCpu(gpu, x, e4m3, transpose);
  }
}

}  // namespace
}  // namespace mpc
