// ConvGradWeight through the CPU kernel registry on convolutions with tiny output planes,
// which take the im2col + matmul path (backends/cpu/conv_grad_weight_gemm.h), against the
// f64 loops on the same (dtype-rounded) inputs: strides, asymmetric padding, dilation,
// rectangular and 1-D kernels, taps that see only padding, in f32 and bf16. Also checks
// which shapes take the path, so the cases below keep exercising it.
#include "backends/cpu/conv_grad_weight_gemm.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "graph/graph_builder.h"
#include "graph/ops_conv_util.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

struct GradWeightCase {
  std::string name;
  Shape x, dy;  // [N, C, spatial...], [N, M, spatial...]
  std::vector<int64_t> kernel, strides, pads, dilations;
};

// dW = ConvGradWeight(dy, x) in `dtype`, returned as f64.
Tensor GradWeight(const GradWeightCase& c, const Tensor& x, const Tensor& dy, DType dtype) {
  Graph g;
  GraphBuilder b(&g);
  Value* dyv = g.AddInput("dy", dtype, c.dy);
  Value* xv = g.AddInput("x", dtype, c.x);
  AttrMap attrs;
  attrs.Set("kernel_shape", c.kernel);
  attrs.Set("strides", c.strides);
  attrs.Set("pads", c.pads);
  attrs.Set("dilations", c.dilations);
  Value* dw = b.Op("ConvGradWeight", {dyv, xv}, attrs);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({dw});
  auto ex = testing::ExecutorFor(g, Cpu());
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return Tensor();
  EXPECT_TRUE((*ex)->SetInput("dy", dy.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->SetInput("x", x.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return (*ex)->Fetch(dw->name)->CastTo(DType::kF64);
}

std::vector<GradWeightCase> Cases() {
  return {
      // ResNet-18's last stage at 64x64 images: 2x2 planes, 3x3 taps, most in the padding.
      {"resnet_2x2", {4, 32, 2, 2}, {4, 24, 2, 2}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      // Strided into a 2x2 plane from 4x4.
      {"stride2", {3, 16, 4, 4}, {3, 40, 2, 2}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
      // Asymmetric pads, a rectangular kernel.
      {"asymmetric", {2, 5, 2, 5}, {2, 7, 2, 2}, {2, 4}, {1, 1}, {1, 0, 0, 0}, {1, 1}},
      // Dilated taps, some in the padding on every side.
      {"dilated", {2, 6, 4, 3}, {2, 9, 2, 1}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {2, 2}},
      // 1x1 strided (a ResNet downsample on a tiny plane).
      {"pointwise", {5, 12, 4, 4}, {5, 10, 2, 2}, {1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}},
      // 1-D: runs as 2-D with H = 1.
      {"conv1d", {3, 8, 9}, {3, 11, 4}, {3}, {2}, {1, 0}, {1}},
  };
}

conv::Window2D WindowOf(const GradWeightCase& c) {
  Node n;
  n.attrs.Set("kernel_shape", c.kernel);
  n.attrs.Set("strides", c.strides);
  n.attrs.Set("pads", c.pads);
  n.attrs.Set("dilations", c.dilations);
  auto w = conv::ResolveWindow(n, std::vector<int64_t>(c.x.begin() + 2, c.x.end()), c.kernel, /*pooling=*/false);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? conv::To2D(*w) : conv::Window2D{};
}

TEST(ConvGradWeightGemmTest, TheseCasesTakeTheGemmPathAndLargerPlanesDoNot) {
  for (const GradWeightCase& c : Cases()) {
    const cpu::GemmConvGeom q{c.x[0], c.x[1], c.dy[1], WindowOf(c)};
    EXPECT_TRUE(cpu::ConvGradWeightGemm::Prefers(q, DType::kF32)) << c.name;
    EXPECT_TRUE(cpu::ConvGradWeightGemm::Prefers(q, DType::kBF16)) << c.name;
    EXPECT_FALSE(cpu::ConvGradWeightGemm::Prefers(q, DType::kF16)) << c.name << ": f16 is staged through f32";
  }
  cpu::GemmConvGeom big{32, 256, 256, {}};
  big.w.ih = big.w.iw = big.w.oh = big.w.ow = 4;
  big.w.kh = big.w.kw = 3;
  big.w.pt = big.w.pl = big.w.pb = big.w.pr = 1;
  EXPECT_FALSE(cpu::ConvGradWeightGemm::Prefers(big, DType::kF32)) << "f32 4x4 planes stay on oneDNN's convolution";
  EXPECT_TRUE(cpu::ConvGradWeightGemm::Prefers(big, DType::kBF16)) << "bf16 4x4 planes take the matmul";
  big.w.ih = big.w.iw = big.w.oh = big.w.ow = 8;
  EXPECT_FALSE(cpu::ConvGradWeightGemm::Prefers(big, DType::kBF16)) << "bf16 8x8 planes stay on oneDNN's convolution";
}

// f32 and bf16 against the f64 loops on the same inputs rounded to the dtype: one f32
// accumulation (relative 1e-5 of the sum of |terms|) and, for bf16, one rounding of dW.
TEST(ConvGradWeightGemmTest, MatchesTheFloat64LoopsInF32AndBf16) {
  uint64_t seed = 2026;
  for (const GradWeightCase& c : Cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(c.name, " ", DTypeName(dtype)));
      const Tensor x = testing::RandomTensor(DType::kF32, c.x, ++seed).CastTo(dtype).CastTo(DType::kF64);
      const Tensor dy = testing::RandomTensor(DType::kF32, c.dy, ++seed).CastTo(dtype).CastTo(DType::kF64);
      const Tensor want = GradWeight(c, x, dy, DType::kF64);
      const Tensor got = GradWeight(c, x, dy, dtype);
      // Every dW element is a sum of at most N * OH * OW products of values in [-1, 1].
      const double terms = static_cast<double>(NumElements(c.dy) / c.dy[1]);
      const double tol = 1e-5 * terms;
      ASSERT_EQ(got.num_elements(), want.num_elements());
      double largest = 0;
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        const double w = want.data<double>()[i], g = got.data<double>()[i];
        // bf16 rounds dW once: half a unit in the last place (2^-8 relative) of the result.
        const double bound = tol + (dtype == DType::kBF16 ? std::ldexp(std::fabs(w), -8) : 0.0);
        ASSERT_LE(std::fabs(g - w), bound) << "dW[" << i << "] = " << g << ", f64 loops give " << w;
        largest = std::max(largest, std::fabs(w));
      }
      EXPECT_GT(largest, 0.1) << "the gradient should not be (nearly) zero";
    }
  }
}

}  // namespace
}  // namespace mpc
