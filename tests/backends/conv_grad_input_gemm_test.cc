// ConvGradInput through the CPU kernel registry on convolutions with tiny output planes,
// which take the matmul + col2im path (backends/cpu/conv_grad_input_gemm.h), against the
// f64 loops on the same (dtype-rounded) inputs: strides that leave input positions no tap
// reads, asymmetric padding, dilation, rectangular and 1-D kernels, in f32 and bf16. Also
// checks which shapes take the path, so the cases below keep exercising it.
#include "backends/cpu/conv_grad_input_gemm.h"

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

struct GradInputCase {
  std::string name;
  Shape dy, w, x;  // [N, M, spatial...], [M, C, kernel...], [N, C, spatial...]
  std::vector<int64_t> strides, pads, dilations;
};

// dX = ConvGradInput(dy, w) in `dtype`, returned as f64.
Tensor GradInput(const GradInputCase& c, const Tensor& dy, const Tensor& w, DType dtype) {
  Graph g;
  GraphBuilder b(&g);
  Value* dyv = g.AddInput("dy", dtype, c.dy);
  Value* wv = g.AddInput("w", dtype, c.w);
  AttrMap attrs;
  attrs.Set("kernel_shape", std::vector<int64_t>(c.w.begin() + 2, c.w.end()));
  attrs.Set("strides", c.strides);
  attrs.Set("pads", c.pads);
  attrs.Set("dilations", c.dilations);
  attrs.Set("input_shape", c.x);
  Value* dx = b.Op("ConvGradInput", {dyv, wv}, attrs);
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({dx});
  auto ex = testing::ExecutorFor(g, Cpu());
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return Tensor();
  EXPECT_TRUE((*ex)->SetInput("dy", dy.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->SetInput("w", w.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return (*ex)->Fetch(dx->name)->CastTo(DType::kF64);
}

std::vector<GradInputCase> Cases() {
  return {
      // ResNet-18's last stage at 64x64 images: 2x2 planes, 3x3 taps, most in the padding.
      {"resnet_2x2", {4, 24, 2, 2}, {24, 32, 3, 3}, {4, 32, 2, 2}, {1, 1}, {1, 1, 1, 1}, {1, 1}},
      // Strided from 4x4 into a 2x2 plane (ResNet's layer4.0).
      {"stride2", {3, 40, 2, 2}, {40, 16, 3, 3}, {3, 16, 4, 4}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
      // Stride 3 with a 2x2 kernel: a row and a column of X no tap reads (their dX is 0).
      {"unread_positions", {2, 6, 2, 2}, {6, 5, 2, 2}, {2, 5, 6, 6}, {3, 3}, {0, 0, 0, 0}, {1, 1}},
      // Asymmetric pads, a rectangular kernel.
      {"asymmetric", {2, 7, 2, 2}, {7, 5, 2, 4}, {2, 5, 2, 5}, {1, 1}, {1, 0, 0, 0}, {1, 1}},
      // Dilated taps, some in the padding on every side.
      {"dilated", {2, 9, 2, 1}, {9, 6, 3, 3}, {2, 6, 4, 3}, {1, 1}, {1, 1, 1, 1}, {2, 2}},
      // 1-D: runs as 2-D with H = 1.
      {"conv1d", {3, 11, 4}, {11, 8, 3}, {3, 8, 9}, {2}, {1, 0}, {1}},
  };
}

conv::Window2D WindowOf(const GradInputCase& c) {
  Node n;
  n.attrs.Set("strides", c.strides);
  n.attrs.Set("pads", c.pads);
  n.attrs.Set("dilations", c.dilations);
  auto w = conv::ResolveWindow(n, std::vector<int64_t>(c.x.begin() + 2, c.x.end()),
                               std::vector<int64_t>(c.w.begin() + 2, c.w.end()), /*pooling=*/false);
  EXPECT_TRUE(w.ok()) << w.status();
  return w.ok() ? conv::To2D(*w) : conv::Window2D{};
}

TEST(ConvGradInputGemmTest, TheseCasesTakeTheGemmPathAndOthersDoNot) {
  for (const GradInputCase& c : Cases()) {
    const cpu::GemmConvGeom q{c.x[0], c.x[1], c.dy[1], WindowOf(c)};
    EXPECT_TRUE(cpu::ConvGradInputGemm::Prefers(q, DType::kF32)) << c.name;
    EXPECT_TRUE(cpu::ConvGradInputGemm::Prefers(q, DType::kBF16)) << c.name;
    EXPECT_FALSE(cpu::ConvGradInputGemm::Prefers(q, DType::kF16)) << c.name << ": f16 is staged through f32";
  }
  cpu::GemmConvGeom q{32, 256, 256, {}};
  q.w.ih = q.w.iw = q.w.oh = q.w.ow = 4;
  q.w.kh = q.w.kw = 3;
  q.w.pt = q.w.pl = q.w.pb = q.w.pr = 1;
  EXPECT_FALSE(cpu::ConvGradInputGemm::Prefers(q, DType::kBF16)) << "4x4 planes stay on oneDNN's convolution";
  q.w.ih = q.w.iw = 4;
  q.w.oh = q.w.ow = 2;
  q.w.kh = q.w.kw = 1;
  q.w.sh = q.w.sw = 2;
  q.w.pt = q.w.pl = q.w.pb = q.w.pr = 0;
  EXPECT_FALSE(cpu::ConvGradInputGemm::Prefers(q, DType::kF32)) << "1x1 kernels stay on oneDNN's convolution";
}

// f32 and bf16 against the f64 loops on the same inputs rounded to the dtype: one f32
// accumulation (relative 1e-5 of the sum of |terms|) and, for bf16, one rounding of dX.
TEST(ConvGradInputGemmTest, MatchesTheFloat64LoopsInF32AndBf16) {
  uint64_t seed = 2027;
  for (const GradInputCase& c : Cases()) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(absl::StrCat(c.name, " ", DTypeName(dtype)));
      const Tensor dy = testing::RandomTensor(DType::kF32, c.dy, ++seed).CastTo(dtype).CastTo(DType::kF64);
      const Tensor w = testing::RandomTensor(DType::kF32, c.w, ++seed).CastTo(dtype).CastTo(DType::kF64);
      const Tensor want = GradInput(c, dy, w, DType::kF64);
      const Tensor got = GradInput(c, dy, w, dtype);
      // Every dX element is a sum of at most M * KH * KW products of values in [-1, 1].
      const double terms = static_cast<double>(NumElements(c.w) / c.w[1]);
      const double tol = 1e-5 * terms;
      ASSERT_EQ(got.num_elements(), want.num_elements());
      double largest = 0;
      int64_t zeros = 0;
      for (int64_t i = 0; i < want.num_elements(); ++i) {
        const double wv = want.data<double>()[i], g = got.data<double>()[i];
        const double bound = tol + (dtype == DType::kBF16 ? std::ldexp(std::fabs(wv), -8) : 0.0);
        ASSERT_LE(std::fabs(g - wv), bound) << "dX[" << i << "] = " << g << ", f64 loops give " << wv;
        largest = std::max(largest, std::fabs(wv));
        zeros += wv == 0.0;
      }
      EXPECT_GT(largest, 0.1) << "the gradient should not be (nearly) zero";
      if (c.name == "unread_positions") EXPECT_GT(zeros, 0) << "some X positions are read by no tap";
    }
  }
}

}  // namespace
}  // namespace mpc
