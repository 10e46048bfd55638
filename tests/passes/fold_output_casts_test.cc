// fold-output-casts: a bf16 Gemm read only by a Cast to f32 (directly or through a Reshape)
// writes f32 itself, which is the f32 accumulation without the bf16 rounding in between; a
// product with other readers keeps its Cast. FP8 alike: a lowered Fp8Gemm writes f32 (its
// `to`), and an emulated FP8 GEMM's f32 product loses the bf16 round trip; both then give
// the f32 accumulation of the same FP8 values.
#include "passes/fold_output_casts.h"

#include "graph/float8.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// y = Cast(Gemm(a, b) in bf16, f32); with `second_reader`, the bf16 product is also an output;
// with `reshaped`, the Cast reads the product reshaped to [2, 4, 16] (fold-transposes' rows).
std::unique_ptr<Graph> CastGemm(bool second_reader, bool reshaped = false) {
  auto g = std::make_unique<Graph>();
  GraphBuilder b(g.get());
  Value* a = g->AddInput("a", DType::kBF16, {8, 64});
  Value* w = g->AddConstant("w", testing::RandomTensor(DType::kF32, {64, 16}, 2).CastTo(DType::kBF16));
  Value* p = b.Op("Gemm", {a, w});
  Value* y = b.Cast(reshaped ? b.Reshape(p, {2, 4, 16}) : p, DType::kF32);
  EXPECT_TRUE(b.status().ok()) << b.status();
  if (second_reader) {
    g->SetOutputs({y, p});
  } else {
    g->SetOutputs({y});
  }
  return g;
}

Tensor RunOnCpu(const Graph& g, const Tensor& a) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("a", a).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(g.outputs()[0]->name);
}

TEST(FoldOutputCastsTest, Bf16GemmReadOnlyByACastWritesF32) {
  std::unique_ptr<Graph> before = CastGemm(false);
  std::unique_ptr<Graph> after = CastGemm(false);
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(after->nodes().size(), 1u);
  const Node& gemm = *after->nodes().front();
  EXPECT_EQ(gemm.op, "Gemm");
  EXPECT_EQ(gemm.attrs.GetInt("mpc_output_dtype", 0), 1);
  EXPECT_EQ(gemm.outputs[0]->dtype, DType::kF32);
  EXPECT_EQ(after->outputs()[0], gemm.outputs[0]);

  // Reference: the same bf16 operands multiplied in double.
  const Tensor a = testing::RandomTensor(DType::kF32, {8, 64}, 1).CastTo(DType::kBF16);
  const Tensor w = after->ValuesOfKind(ValueKind::kConstant)[0]->data;
  std::vector<double> ref(8 * 16, 0.0);
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 16; ++j) {
      for (int k = 0; k < 64; ++k) ref[i * 16 + j] += a.GetAsDouble(i * 64 + k) * w.GetAsDouble(k * 16 + j);
    }
  }
  const Tensor expected = Tensor::FromVector<double>({8, 16}, ref);
  const double folded = testing::RelativeError(RunOnCpu(*after, a).CastTo(DType::kF64), expected);
  const double rounded = testing::RelativeError(RunOnCpu(*before, a).CastTo(DType::kF64), expected);
  EXPECT_LT(folded, 1e-5);   // the f32 accumulation itself
  EXPECT_GT(rounded, 1e-4);  // rounded to bf16 on the way
}

// The same through the Reshape between them: the Gemm writes f32 and the Reshape carries it.
TEST(FoldOutputCastsTest, CastThroughAReshapeFoldsIntoTheGemm) {
  std::unique_ptr<Graph> g = CastGemm(false, /*reshaped=*/true);
  std::unique_ptr<Graph> plain = CastGemm(false);
  ASSERT_TRUE(FoldOutputCastsPass().Run(*plain).ok());
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  int casts = 0;
  for (const auto& n : g->nodes()) {
    casts += n->op == "Cast";
    if (n->op == "Gemm") EXPECT_EQ(n->attrs.GetInt("mpc_output_dtype", 0), 1);
  }
  EXPECT_EQ(casts, 0);
  const Value* y = g->outputs()[0];
  EXPECT_EQ(y->dtype, DType::kF32);
  EXPECT_EQ(y->shape, (Shape{2, 4, 16}));
  ASSERT_NE(y->producer, nullptr);
  EXPECT_EQ(y->producer->op, "Reshape");
  // The values are the unreshaped fold's f32 accumulation, element for element.
  const Tensor a = testing::RandomTensor(DType::kF32, {8, 64}, 1).CastTo(DType::kBF16);
  const Tensor got = RunOnCpu(*g, a), want = RunOnCpu(*plain, a);
  ASSERT_EQ(got.num_elements(), want.num_elements());
  for (int64_t i = 0; i < got.num_elements(); ++i) EXPECT_EQ(got.GetAsDouble(i), want.GetAsDouble(i)) << i;
}

TEST(FoldOutputCastsTest, ProductWithAnotherReaderKeepsItsCast) {
  std::unique_ptr<Graph> g = CastGemm(true);
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(g->nodes().size(), 2u);
}

constexpr int64_t kM = 8, kN = 16, kK = 64;
constexpr float kScaleInvA = 0.5f, kScaleInvB = 0.25f;

// FP8 codes of random values in [-8, 8): [rows, cols] E4M3, and the values they decode to.
Tensor E4M3Codes(int64_t rows, int64_t cols, uint64_t seed, std::vector<double>* decoded) {
  const Tensor x = testing::RandomTensor(DType::kF32, {rows, cols}, seed, -8.0, 8.0);
  Tensor codes(DType::kF8E4M3, {rows, cols});
  decoded->resize(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows * cols; ++i) {
    const uint8_t c = FloatToF8E4M3(x.data<float>()[i]);
    static_cast<uint8_t*>(codes.raw())[i] = c;
    (*decoded)[i] = F8E4M3ToFloat(c);
  }
  return codes;
}

// y = Cast(Fp8Gemm(a, b, 0.5, 0.25; TN, to = bf16), f32), a [8, 64] and b [16, 64] codes
// given as inputs; `ref` gets the product of the decoded values in double.
std::unique_ptr<Graph> CastFp8Gemm(Tensor* a, Tensor* b, std::vector<double>* ref) {
  std::vector<double> da, db;
  *a = E4M3Codes(kM, kK, 1, &da);
  *b = E4M3Codes(kN, kK, 2, &db);
  ref->assign(kM * kN, 0.0);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      for (int64_t k = 0; k < kK; ++k) (*ref)[i * kN + j] += da[i * kK + k] * db[j * kK + k];
      (*ref)[i * kN + j] *= double{kScaleInvA} * kScaleInvB;
    }
  }
  auto g = std::make_unique<Graph>();
  GraphBuilder bld(g.get());
  AttrMap attrs;
  attrs.Set("transB", int64_t{1});
  attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(DType::kBF16)));
  Value* p = bld.Op("Fp8Gemm",
                    {g->AddInput("a", DType::kF8E4M3, {kM, kK}), g->AddInput("b", DType::kF8E4M3, {kN, kK}),
                     g->AddConstant("a_scale_inv", Tensor::Scalar(kScaleInvA)),
                     g->AddConstant("b_scale_inv", Tensor::Scalar(kScaleInvB))},
                    attrs);
  g->SetOutputs({bld.Cast(p, DType::kF32)});
  EXPECT_TRUE(bld.status().ok()) << bld.status();
  return g;
}

Tensor RunFp8OnCpu(const Graph& g, const Tensor& a, const Tensor& b) {
  auto ex = testing::ExecutorFor(g, testing::CpuBackend());
  EXPECT_TRUE(ex.ok()) << ex.status();
  EXPECT_TRUE((*ex)->SetInput("a", a).ok());
  EXPECT_TRUE((*ex)->SetInput("b", b).ok());
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(g.outputs()[0]->name);
}

TEST(FoldOutputCastsTest, Fp8GemmReadOnlyByACastWritesF32) {
  Tensor a, b;
  std::vector<double> ref;
  std::unique_ptr<Graph> before = CastFp8Gemm(&a, &b, &ref);
  std::unique_ptr<Graph> after = CastFp8Gemm(&a, &b, &ref);
  const Value* y = after->outputs()[0]->producer->inputs[0];  // the Fp8Gemm's bf16 result
  const std::string y_name = y->name;
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*after);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(after->nodes().size(), 1u);
  const Node& gemm = *after->nodes().front();
  EXPECT_EQ(gemm.op, "Fp8Gemm");
  EXPECT_EQ(gemm.attrs.GetInt("to", 0), DTypeToOnnx(DType::kF32));
  EXPECT_EQ(gemm.outputs[0]->dtype, DType::kF32);
  // The product's value (its name: maybe the model's logits) holds the f32 result now,
  // in the Cast's place.
  EXPECT_EQ(gemm.outputs[0], y);
  EXPECT_EQ(after->outputs()[0], y);
  EXPECT_EQ(after->FindValue(y_name), y);
  const Tensor expected = Tensor::FromVector<double>({kM, kN}, ref);
  EXPECT_LT(testing::RelativeError(RunFp8OnCpu(*after, a, b).CastTo(DType::kF64), expected), 1e-6);
  EXPECT_GT(testing::RelativeError(RunFp8OnCpu(*before, a, b).CastTo(DType::kF64), expected), 1e-4);
}

// The emulated form: y = Cast(Cast(Gemm[mpc_fp8](qa, qb) in f32, bf16), f32) becomes the
// f32 product itself; with the bf16 value read elsewhere too, nothing changes.
std::unique_ptr<Graph> EmulatedFp8Gemm(bool bf16_also_output) {
  auto g = std::make_unique<Graph>();
  GraphBuilder bld(g.get());
  Value* qa = g->AddInput("qa", DType::kF32, {kM, kK});
  Value* qb = g->AddConstant("qb", testing::RandomTensor(DType::kF32, {kK, kN}, 3));
  AttrMap attrs;
  attrs.Set("mpc_fp8", int64_t{1});
  Value* narrow = bld.Cast(bld.Op("Gemm", {qa, qb}, attrs), DType::kBF16);
  Value* y = bld.Cast(narrow, DType::kF32);
  EXPECT_TRUE(bld.status().ok()) << bld.status();
  if (bf16_also_output) {
    g->SetOutputs({y, narrow});
  } else {
    g->SetOutputs({y});
  }
  return g;
}

TEST(FoldOutputCastsTest, EmulatedFp8GemmLosesItsBf16RoundTrip) {
  std::unique_ptr<Graph> g = EmulatedFp8Gemm(false);
  const Value* y = g->outputs()[0]->producer->inputs[0];  // the narrowing Cast's bf16 result
  const std::string y_name = y->name;
  absl::StatusOr<bool> changed = FoldOutputCastsPass().Run(*g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  ASSERT_EQ(g->nodes().size(), 1u);
  const Node& gemm = *g->nodes().front();
  EXPECT_EQ(gemm.op, "Gemm");
  EXPECT_FALSE(gemm.attrs.Has("mpc_output_dtype")) << "the product was f32 already";
  EXPECT_EQ(y->dtype, DType::kF32);
  EXPECT_EQ(gemm.outputs[0], y);
  EXPECT_EQ(g->outputs()[0], y);
  EXPECT_EQ(g->FindValue(y_name), y);

  std::unique_ptr<Graph> kept = EmulatedFp8Gemm(true);
  changed = FoldOutputCastsPass().Run(*kept);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_FALSE(*changed);
  EXPECT_EQ(kept->nodes().size(), 3u);
}

}  // namespace
}  // namespace mpc
