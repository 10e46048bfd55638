// The CPU kernels' vector loops (backends/cpu/cpu_isa.h): ParallelRanges hands every index
// to exactly one range, and the loops rewritten for vectorisation keep their edge cases at
// every position of a long operand, the vector tails included (the non-finite check on the
// bits, ReluGrad's masked select, Where's select, the 16-bit stores).
#include <cmath>
#include <limits>
#include <mutex>
#include <random>
#include <vector>

#include "backends/cpu/cpu_isa.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(ParallelRangesTest, EveryIndexOnceInOrderedRanges) {
  for (int64_t n : {0, 1, 63, 64, 65, 1000, 32768, 32769, 100003}) {
    SCOPED_TRACE(n);
    std::vector<int> seen(n, 0);
    std::mutex mu;
    std::vector<std::pair<int64_t, int64_t>> ranges;
    cpu::ParallelRanges(n, 32768, [&](int64_t begin, int64_t end) {
      ASSERT_LT(begin, end);
      for (int64_t i = begin; i < end; ++i) ++seen[i];
      std::lock_guard<std::mutex> lock(mu);
      ranges.emplace_back(begin, end);
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << i;
    if (n <= 32768) {
      EXPECT_EQ(ranges.size(), n > 0 ? 1u : 0u);  // small work stays on the calling thread
    }
    for (const auto& r : ranges) {
      if (r.second != n) EXPECT_EQ(r.second % 64, 0) << "a range boundary splits a cache line";
    }
  }
}

// Runs `op` on f32 inputs cast to `dtype`; the output as f32.
Tensor RunOp(const std::string& op, const std::vector<Tensor>& inputs, DType dtype, AttrMap attrs = {}) {
  Graph g;
  GraphBuilder b(&g);
  std::vector<Value*> values;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const DType d = inputs[i].dtype() == DType::kBool ? DType::kBool : dtype;
    values.push_back(g.AddInput("in" + std::to_string(i), d, inputs[i].shape()));
  }
  Value* y = b.Op(op, values, std::move(attrs));
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs({y});
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor in = inputs[i].dtype() == DType::kBool ? inputs[i] : inputs[i].CastTo(dtype);
    EXPECT_TRUE((*ex)->SetInput("in" + std::to_string(i), in).ok());
  }
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return (*ex)->Fetch(y->name)->CastTo(DType::kF32);
}

std::vector<float> RandomValues(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// A bad value anywhere in a gradient, including the last elements a vector loop handles
// in its tail, and in a tensor above the parallel threshold, is found.
TEST(CpuVectorLoopsTest, FindNonFiniteAtEveryPosition) {
  for (int64_t n : {int64_t{37}, int64_t{70001}}) {
    std::vector<int64_t> positions;
    for (int64_t i = 0; i < std::min<int64_t>(n, 40); ++i) positions.push_back(i);
    for (int64_t i = std::max<int64_t>(0, n - 40); i < n; ++i) positions.push_back(i);
    positions.push_back(n / 2);
    for (float bad : {kNaN, kInf, -kInf}) {
      for (int64_t pos : positions) {
        std::vector<float> g = RandomValues(n, 7);
        g[pos] = bad;
        const Tensor found = RunOp("FindNonFinite", {Tensor::FromVector<float>({n}, g)}, DType::kF32);
        ASSERT_EQ(found.data<float>()[0], 1.0f) << "n " << n << " position " << pos << " value " << bad;
      }
    }
    const Tensor clean = RunOp("FindNonFinite", {Tensor::FromVector<float>({n}, RandomValues(n, 8))}, DType::kF32);
    EXPECT_EQ(clean.data<float>()[0], 0.0f);
    // The largest finite float is finite.
    std::vector<float> big(n, std::numeric_limits<float>::max());
    EXPECT_EQ(RunOp("FindNonFinite", {Tensor::FromVector<float>({n}, big)}, DType::kF32).data<float>()[0], 0.0f);
  }
}

// The vectorised elementwise kernels against the value each element should have, over a
// length with a ragged tail, with NaN, infinities and signed zeros mixed in.
TEST(CpuVectorLoopsTest, ElementwiseEdgeValuesThroughVectorLoops) {
  const int64_t n = 40000 + 13;  // above the parallel threshold, not a multiple of any width
  std::vector<float> a = RandomValues(n, 1), b = RandomValues(n, 2);
  const float specials[] = {kNaN, kInf, -kInf, 0.0f, -0.0f};
  for (int64_t i = 0; i < n; i += 97) a[i] = specials[(i / 97) % 5];
  for (int64_t i = 5; i < n; i += 89) b[i] = specials[(i / 89) % 5];
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(DTypeName(d));
    const Tensor ta = Tensor::FromVector<float>({n}, a).CastTo(d).CastTo(DType::kF32);
    const Tensor tb = Tensor::FromVector<float>({n}, b).CastTo(d).CastTo(DType::kF32);
    const float* pa = ta.data<float>();
    const float* pb = tb.data<float>();
    const Tensor add = RunOp("Add", {ta, tb}, d);
    const Tensor relu_grad = RunOp("ReluGrad", {ta, tb}, d);
    for (int64_t i = 0; i < n; ++i) {
      const float want_add =
          Tensor::FromVector<float>({1}, {pa[i] + pb[i]}).CastTo(d).CastTo(DType::kF32).data<float>()[0];
      const float got_add = add.data<float>()[i];
      ASSERT_TRUE((std::isnan(want_add) && std::isnan(got_add)) || want_add == got_add) << i;
      const float want_rg = pb[i] > 0 ? pa[i] : 0.0f;  // dX = dY where Y > 0
      const float got_rg = relu_grad.data<float>()[i];
      ASSERT_TRUE((std::isnan(want_rg) && std::isnan(got_rg)) ||
                  (want_rg == got_rg && !std::signbit(got_rg) == !std::signbit(want_rg)))
          << i << ": dy " << pa[i] << " y " << pb[i];
    }
  }
}

TEST(CpuVectorLoopsTest, WhereSelectsPerElementAndAgainstBroadcastScalar) {
  const int64_t rows = 3, cols = 257;
  std::vector<int64_t> cond(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i) cond[i] = (i * 7 + i / 5) % 3 == 0;
  const Tensor c = Tensor::FromVector<int64_t>({rows, cols}, cond).CastTo(DType::kBool);
  const std::vector<float> x = RandomValues(rows * cols, 3), y = RandomValues(rows * cols, 4);
  for (DType d : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(DTypeName(d));
    const Tensor tx = Tensor::FromVector<float>({rows, cols}, x).CastTo(d).CastTo(DType::kF32);
    const Tensor ty = Tensor::FromVector<float>({rows, cols}, y).CastTo(d).CastTo(DType::kF32);
    const Tensor both = RunOp("Where", {c, tx, ty}, d);
    const Tensor scalar_else = RunOp("Where", {c, tx, Tensor::FromVector<float>({1}, {-kInf})}, d);
    for (int64_t i = 0; i < rows * cols; ++i) {
      ASSERT_EQ(both.data<float>()[i], cond[i] ? tx.data<float>()[i] : ty.data<float>()[i]) << i;
      ASSERT_EQ(scalar_else.data<float>()[i], cond[i] ? tx.data<float>()[i] : -kInf) << i;
    }
  }
}

}  // namespace
}  // namespace mpc
