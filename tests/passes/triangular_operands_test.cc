// triangular-operands on causal attention's four products with a triangular A (P·V, P^T·dO,
// dS·K, dS^T·Q): each is marked with the side of the diagonal its A is zero on, and the CPU's
// banded products (T = 150: bands of 64, 64 and 22 rows) give the unmarked graph's values
// and a float64 reference's; masks that are not causal, and operands that are not the
// softmax's, are left alone.
#include "passes/triangular_operands.h"

#include <string>
#include <vector>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kB = 2, kH = 3, kT = 150, kD = 8;
const Shape kScores = {kB, kH, kT, kT};
const Shape kHeads = {kB, kH, kT, kD};
const Shape kHeadsLast = {kB, kT, kH, kD};  // q as attention stores it, read through a perm

// keep[i][j] = j <= i, then `edit` applied (a near miss).
Tensor CausalMask(void (*edit)(uint8_t* keep) = nullptr) {
  Tensor t(DType::kBool, {1, 1, kT, kT});
  uint8_t* keep = t.data<uint8_t>();
  for (int64_t i = 0; i < kT; ++i) {
    for (int64_t j = 0; j < kT; ++j) keep[i * kT + j] = j <= i;
  }
  if (edit) edit(keep);
  return t;
}

Value* MatMul(GraphBuilder& b, Value* x, Value* y, AttrMap attrs = {}) {
  return b.Op("MatMul", {x, y}, std::move(attrs));
}

AttrMap Scale() {
  AttrMap a;
  a.Set("scale", 0.25f);
  return a;
}

// Outputs: P, dS, P·V, P^T·dO, dS·K, dS^T·Q (Q stored heads-last), scores·V.
std::unique_ptr<Graph> Attention(const Tensor& mask) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* scores = g->AddInput("scores", DType::kF32, kScores);
  Value* dp = g->AddInput("dp", DType::kF32, kScores);
  Value* v = g->AddInput("v", DType::kF32, kHeads);
  Value* dout = g->AddInput("dout", DType::kF32, kHeads);
  Value* k = g->AddInput("k", DType::kF32, kHeads);
  Value* q = g->AddInput("q", DType::kF32, kHeadsLast);
  Value* keep = g->AddConstant("keep", mask);
  Value* p = b.Op("MaskedSoftmax", {scores, keep}, Scale());
  Value* ds = b.Op("MaskedSoftmaxGrad", {dp, p}, Scale());
  AttrMap transposed;
  transposed.Set("mpc_trans_a", int64_t{1});
  AttrMap permuted;
  permuted.Set("mpc_perm_a", std::vector<int64_t>{0, 1, 3, 2});
  permuted.Set("mpc_perm_b", std::vector<int64_t>{0, 2, 1, 3});
  std::vector<Value*> outputs = {p,
                                 ds,
                                 MatMul(b, p, v),
                                 MatMul(b, p, dout, transposed),
                                 MatMul(b, ds, k),
                                 MatMul(b, ds, q, permuted),
                                 MatMul(b, scores, v)};
  EXPECT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs(outputs);
  return g;
}

std::vector<Tensor> RunOnCpu(const Graph& g) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  uint64_t seed = 11;
  for (const Value* in : g.inputs()) {
    EXPECT_TRUE((*ex)->SetInput(in->name, testing::RandomTensor(DType::kF32, in->shape, seed++, -2.0, 2.0)).ok());
  }
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  std::vector<Tensor> out;
  for (const Value* o : g.outputs()) out.push_back(*(*ex)->Fetch(o->name));
  return out;
}

// y[b, h] = op(a[b, h]) · x[b, h] in float64, op the transpose when `ta`; x given as
// [B, H, T, D] or, when `heads_last`, stored [B, T, H, D].
Tensor Reference(const Tensor& a, bool ta, const Tensor& x, bool heads_last) {
  Tensor y(DType::kF64, kHeads);
  const float* pa = a.data<float>();
  const float* px = x.data<float>();
  double* py = y.data<double>();
  for (int64_t bh = 0; bh < kB * kH; ++bh) {
    const int64_t bi = bh / kH, hi = bh % kH;
    for (int64_t i = 0; i < kT; ++i) {
      for (int64_t d = 0; d < kD; ++d) {
        double sum = 0;
        for (int64_t j = 0; j < kT; ++j) {
          const double aij = pa[(bh * kT + (ta ? j : i)) * kT + (ta ? i : j)];
          const int64_t xo = heads_last ? ((bi * kT + j) * kH + hi) * kD + d : (bh * kT + j) * kD + d;
          sum += aij * px[xo];
        }
        py[(bh * kT + i) * kD + d] = sum;
      }
    }
  }
  return y;
}

TEST(TriangularOperandsTest, CausalAttentionProductsAreMarkedAndKeepTheirValues) {
  std::unique_ptr<Graph> before = Attention(CausalMask());
  std::unique_ptr<Graph> after = Attention(CausalMask());
  TriangularOperandsResult result;
  absl::StatusOr<bool> changed = TriangularOperandsPass(&result).Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  EXPECT_EQ(result.zero_above, 2);
  EXPECT_EQ(result.zero_below, 2);
  const std::vector<std::string> want_marks = {"above_diagonal", "below_diagonal", "above_diagonal", "below_diagonal",
                                               ""};
  for (size_t i = 0; i < want_marks.size(); ++i) {
    EXPECT_EQ(after->outputs()[2 + i]->producer->attrs.GetString("mpc_a_zeros", ""), want_marks[i]) << "product " << i;
  }

  const std::vector<Tensor> unmarked = RunOnCpu(*before), banded = RunOnCpu(*after);
  for (size_t i = 0; i < unmarked.size(); ++i) {
    EXPECT_LT(testing::RelativeError(banded[i], unmarked[i]), 1e-5) << "output " << i;
  }
  // Against float64 products of the P and dS the program computed.
  const Tensor& p = banded[0];
  const Tensor& ds = banded[1];
  auto input = [&](const char* name) {
    uint64_t seed = 11;
    for (const Value* in : after->inputs()) {
      if (in->name == name) return testing::RandomTensor(DType::kF32, in->shape, seed, -2.0, 2.0);
      ++seed;
    }
    ADD_FAILURE() << "no input " << name;
    return Tensor();
  };
  EXPECT_LT(testing::RelativeError(banded[2], Reference(p, false, input("v"), false)), 1e-5);
  EXPECT_LT(testing::RelativeError(banded[3], Reference(p, true, input("dout"), false)), 1e-5);
  EXPECT_LT(testing::RelativeError(banded[4], Reference(ds, false, input("k"), false)), 1e-5);
  EXPECT_LT(testing::RelativeError(banded[5], Reference(ds, true, input("q"), true)), 1e-5);
  // The structure the marks rely on: nothing above the diagonal of P or dS.
  for (const Tensor* t : {&p, &ds}) {
    const float* x = t->data<float>();
    int64_t nonzero_above = 0;
    for (int64_t m = 0; m < kB * kH; ++m) {
      for (int64_t i = 0; i < kT; ++i) {
        for (int64_t j = i + 1; j < kT; ++j) nonzero_above += x[(m * kT + i) * kT + j] != 0.0f;
      }
    }
    EXPECT_EQ(nonzero_above, 0);
  }
}

TEST(TriangularOperandsTest, ACastOfTheProbabilitiesKeepsTheMark) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* scores = g->AddInput("scores", DType::kF32, kScores);
  Value* v = g->AddInput("v", DType::kBF16, kHeads);
  Value* p = b.Op("MaskedSoftmax", {scores, g->AddConstant("keep", CausalMask())}, Scale());
  AttrMap to_bf16;
  to_bf16.Set("to", int64_t{16});  // ONNX TensorProto BFLOAT16
  Value* y = MatMul(b, b.Op("Cast", {p}, std::move(to_bf16)), v);
  ASSERT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({y});
  TriangularOperandsResult result;
  ASSERT_TRUE(TriangularOperandsPass(&result).Run(*g).ok());
  EXPECT_EQ(y->producer->attrs.GetString("mpc_a_zeros", ""), "above_diagonal");
}

TEST(TriangularOperandsTest, MasksThatAreNotCausalAreLeftAlone) {
  struct NearMiss {
    const char* name;
    void (*edit)(uint8_t* keep);
  };
  const std::vector<NearMiss> misses = {
      {"keeps one above the diagonal", [](uint8_t* keep) { keep[3 * kT + 4] = 1; }},
      {"drops a diagonal element (an all-masked first row is NaN)", [](uint8_t* keep) { keep[0] = 0; }},
  };
  for (const NearMiss& miss : misses) {
    std::unique_ptr<Graph> g = Attention(CausalMask(miss.edit));
    TriangularOperandsResult result;
    absl::StatusOr<bool> changed = TriangularOperandsPass(&result).Run(*g);
    ASSERT_TRUE(changed.ok()) << changed.status();
    EXPECT_FALSE(*changed) << miss.name;
    EXPECT_EQ(result.zero_above + result.zero_below, 0) << miss.name;
  }
  // A mask fed at run time is not known to be causal.
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* scores = g->AddInput("scores", DType::kF32, kScores);
  Value* keep = g->AddInput("keep", DType::kBool, {1, 1, kT, kT});
  Value* v = g->AddInput("v", DType::kF32, kHeads);
  Value* y = MatMul(b, b.Op("MaskedSoftmax", {scores, keep}, Scale()), v);
  ASSERT_TRUE(b.status().ok()) << b.status();
  g->SetOutputs({y});
  TriangularOperandsResult result;
  absl::StatusOr<bool> changed = TriangularOperandsPass(&result).Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
}

}  // namespace
}  // namespace mpc
