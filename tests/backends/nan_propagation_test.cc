// NaN and infinities flow through the CPU kernels as IEEE arithmetic (and PyTorch) have
// them, so a bad value shows up downstream instead of vanishing: ReLU keeps a NaN (its
// oneDNN forms, eltwise and the fused Gemm + ReLU post-op, turn it into 0), a softmax
// row holding a NaN or +inf is NaN (oneDNN leaves the rest of the row finite), and max
// pooling's maximum of a window holding a NaN is NaN (a `>` comparison skips it).
#include <cmath>
#include <limits>

#include "backends/cpu/cpu_backend.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

// One op on input `x` (given as f32, run in `dtype`), its output back as f32.
Tensor RunOne(const std::string& op, const Tensor& x, DType dtype, AttrMap attrs = {},
              const std::vector<Value*>& extra = {}, Graph* graph = nullptr) {
  Graph local;
  Graph& g = graph ? *graph : local;
  GraphBuilder b(&g);
  Value* in = g.AddInput("x", dtype, x.shape());
  std::vector<Value*> inputs{in};
  inputs.insert(inputs.end(), extra.begin(), extra.end());
  Value* y = b.Op(op, inputs, std::move(attrs));
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({y});
  auto ex = testing::ExecutorFor(g, Cpu());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("x", x.CastTo(dtype)).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return (*ex)->Fetch(y->name)->CastTo(DType::kF32);
}

Tensor Values(Shape shape, std::vector<float> v) { return Tensor::FromVector<float>(std::move(shape), v); }

TEST(NanPropagationTest, ReluKeepsNaNInEveryDtype) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(d));
    const Tensor y = RunOne("Relu", Values({5}, {1, kNaN, -1, kInf, -kInf}), d);
    EXPECT_EQ(y.data<float>()[0], 1);
    EXPECT_TRUE(std::isnan(y.data<float>()[1]));
    EXPECT_EQ(y.data<float>()[2], 0);
    EXPECT_EQ(y.data<float>()[3], kInf);
    EXPECT_EQ(y.data<float>()[4], 0);
  }
}

// The fuse-epilogues form: Gemm with mpc_activation = Relu (a oneDNN post-op before).
TEST(NanPropagationTest, FusedGemmReluKeepsNaN) {
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    Graph g;
    Value* w = g.AddConstant("w", Values({2, 2}, {1, 0, 0, 1}).CastTo(d));
    AttrMap attrs;
    attrs.Set("mpc_activation", std::string("Relu"));
    const Tensor y = RunOne("Gemm", Values({2, 2}, {kNaN, 2, -3, 4}), d, attrs, {w}, &g);
    // Row 0 reads the NaN, so both of its outputs are NaN (NaN * 0 is NaN).
    EXPECT_TRUE(std::isnan(y.data<float>()[0]));
    EXPECT_TRUE(std::isnan(y.data<float>()[1]));
    EXPECT_EQ(y.data<float>()[2], 0);
    EXPECT_EQ(y.data<float>()[3], 4);
  }
}

TEST(NanPropagationTest, SoftmaxRowWithNaNOrInfinityIsNaN) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (DType d : {DType::kF32, DType::kF64, DType::kBF16}) {
      SCOPED_TRACE(std::string(op) + " " + DTypeName(d));
      const Tensor y = RunOne(op, Values({3, 3}, {1, kNaN, 2, 0, kInf, 1, -kInf, 0, 1}), d);
      for (int j = 0; j < 6; ++j) EXPECT_TRUE(std::isnan(y.data<float>()[j])) << j;
      // A -inf is an ordinary minimum: that row stays finite (its first entry is 0 / -inf).
      for (int j = 7; j < 9; ++j) EXPECT_TRUE(std::isfinite(y.data<float>()[j])) << j;
    }
  }
}

// Gelu and its gradient on oneDNN's eltwise (f32, bf16) and the loops (f64, f16).
TEST(NanPropagationTest, GeluAndGeluGradKeepNaN) {
  for (const char* approximate : {"none", "tanh"}) {
    for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(approximate) + " " + DTypeName(d));
      AttrMap attrs;
      attrs.Set("approximate", std::string(approximate));
      const Tensor y = RunOne("Gelu", Values({4}, {kNaN, 1, -2, 0.5f}), d, attrs);
      EXPECT_TRUE(std::isnan(y.data<float>()[0]));
      EXPECT_TRUE(std::isfinite(y.data<float>()[1]));
      Graph g;
      Value* x = g.AddConstant("gelu_input", Values({4}, {1, kNaN, -2, 0.5f}).CastTo(d));
      const Tensor dx = RunOne("GeluGrad", Values({4}, {kNaN, 1, 1, 1}), d, attrs, {x}, &g);
      EXPECT_TRUE(std::isnan(dx.data<float>()[0]));  // NaN upstream gradient
      EXPECT_TRUE(std::isnan(dx.data<float>()[1]));  // NaN input
      EXPECT_TRUE(std::isfinite(dx.data<float>()[2]));
    }
  }
}

TEST(NanPropagationTest, MaxPoolingOfAWindowWithNaNIsNaN) {
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    AttrMap attrs;
    attrs.Set("kernel_shape", std::vector<int64_t>{2, 2});
    attrs.Set("strides", std::vector<int64_t>{2, 2});
    // Two 2x2 windows side by side: the first holds a NaN after its maximum.
    const Tensor x = Values({1, 1, 2, 4}, {3, kNaN, 1, 2, 0, 1, 5, 4});
    const Tensor y = RunOne("MaxPool", x, d, attrs);
    EXPECT_TRUE(std::isnan(y.data<float>()[0]));
    EXPECT_EQ(y.data<float>()[1], 5);
    const Tensor gy = RunOne("GlobalMaxPool", x, d);
    EXPECT_TRUE(std::isnan(gy.data<float>()[0]));
  }
}

}  // namespace
}  // namespace mpc
