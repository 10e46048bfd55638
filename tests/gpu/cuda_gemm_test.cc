// The CUDA backend's GEMMs against the CPU backend and f64 references. Each node test
// computes what it can on the CPU first (so the graph construction is exercised on every
// machine), then creates the CUDA backend and skips, with the reason, when that fails:
// there is no GPU in CI or on the development machines, so these only really run on the
// H100 (ctest -L gpu).
//   CudaGemm*     one Gemm node through Graph -> PlanMemory -> Executor on both backends,
//                 same random inputs, every C route (none, bias epilogue, full C with beta,
//                 broadcast C: row with beta != 1, column, scalar, [1,1], another dtype);
//                 ||cuda - cpu|| / ||cpu|| within docs/numerics.md's tolerances (f32 1e-5,
//                 tf32 1e-3, bf16 1e-2, f16 2e-3).
//   CudaMatMul*   one MatMul node likewise: 2-D, folded batch, equal batch, broadcast
//                 batch (strided with stride 0), and broadcasts that need several calls.
//   CublasLtEpilogues  the wrapper's aux and backward epilogues (GELU/ReLU with aux,
//                 dGELU/dReLU with bias gradient, bias gradients of A and B) on f32
//                 operands against f64 host references.
//   Capabilities, AllocateAndCopyRoundTrip: the device basics.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "engine/device.h"
#include "engine/executor.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::DeviceBuffers;
using ::mpc::testing::RandomTensor;

constexpr int64_t kOnnxFloat = 1;

absl::StatusOr<Backend*> Gpu() { return ::mpc::testing::SharedGpu(); }
Backend& Cpu() { return ::mpc::testing::SharedCpu(); }

double Tolerance(DType dtype, bool tf32) {
  if (tf32) return 1e-3;
  switch (dtype) {
    case DType::kBF16:
      return 1e-2;
    case DType::kF16:
      return 2e-3;
    default:
      return 1e-5;
  }
}

// One node's graph, its inputs and the output to compare.
struct Problem {
  Graph graph;
  std::vector<std::string> names;
  std::vector<Tensor> feeds;
  std::string out;
};

// Adds the node over graph inputs named after `names`/`feeds`; nullptr on failure.
std::unique_ptr<Problem> BuildNode(const std::string& op, std::vector<std::string> names, std::vector<Tensor> feeds,
                                   const AttrMap& attrs) {
  auto p = std::make_unique<Problem>();
  p->names = std::move(names);
  p->feeds = std::move(feeds);
  std::vector<Value*> operands;
  for (size_t i = 0; i < p->feeds.size(); ++i) {
    operands.push_back(p->graph.AddInput(p->names[i], p->feeds[i].dtype(), p->feeds[i].shape()));
  }
  auto node = p->graph.AddNode(op, operands, attrs, "node");
  if (!node.ok()) {
    ADD_FAILURE() << node.status();
    return nullptr;
  }
  p->graph.SetOutputs({(*node)->outputs[0]});
  p->out = (*node)->outputs[0]->name;
  return p;
}

absl::StatusOr<Tensor> RunOn(const Problem& p, Backend& backend) {
  auto ex = testing::ExecutorFor(p.graph, backend);
  if (!ex.ok()) return ex.status();
  for (size_t i = 0; i < p.feeds.size(); ++i) {
    if (absl::Status st = (*ex)->SetInput(p.names[i], p.feeds[i]); !st.ok()) return st;
  }
  if (absl::Status st = (*ex)->Run(1, 0); !st.ok()) return st;
  if (absl::Status st = backend.Synchronize(); !st.ok()) return st;
  return (*ex)->Fetch(p.out);
}

// ||got - ref|| / ||ref||, NaN/Inf failing.
double RelErr(const Tensor& got, const Tensor& ref) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < ref.num_elements(); ++i) {
    const double g = got.GetAsDouble(i), r = ref.GetAsDouble(i);
    if (!std::isfinite(g)) return INFINITY;
    diff += (g - r) * (g - r);
    norm += r * r;
  }
  return std::sqrt(diff / norm);
}

// Runs `problem` on the CPU, then (if there is a GPU) on CUDA, and compares.
void ExpectCudaMatchesCpu(const Problem& problem, double tolerance, bool non_negative) {
  auto ref = RunOn(problem, Cpu());
  ASSERT_TRUE(ref.ok()) << ref.status();
  MPC_GPU_OR_SKIP(gpu);
  auto got = RunOn(problem, gpu);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->dtype(), ref->dtype());
  ASSERT_EQ(got->shape(), ref->shape());
  const double err = RelErr(*got, *ref);
  EXPECT_LT(err, tolerance) << "cuda vs cpu relative error";
  if (non_negative) {
    for (int64_t i = 0; i < got->num_elements(); ++i) ASSERT_GE(got->GetAsDouble(i), 0.0) << "element " << i;
  }
}

// ---- Gemm nodes ------------------------------------------------------------------------

// The C a case gives its Gemm (scaled by the case's beta).
enum class CKind { kNone, kRow, kRow1N, kFull, kColumn, kScalar, kOne };

const char* CKindName(CKind c) {
  switch (c) {
    case CKind::kNone:
      return "None";
    case CKind::kRow:
      return "Row";
    case CKind::kRow1N:
      return "Row1N";
    case CKind::kFull:
      return "Full";
    case CKind::kColumn:
      return "Column";
    case CKind::kScalar:
      return "Scalar";
    case CKind::kOne:
      return "One";
  }
  return "?";
}

Shape CShape(CKind c, int64_t m, int64_t n) {
  switch (c) {
    case CKind::kRow:
      return {n};
    case CKind::kRow1N:
      return {1, n};
    case CKind::kFull:
      return {m, n};
    case CKind::kColumn:
      return {m, 1};
    case CKind::kOne:
      return {1, 1};
    default:
      return {};
  }
}

struct GemmCase {
  DType dtype = DType::kF32;
  bool ta = false, tb = false;
  CKind c = CKind::kNone;
  float beta = 1.0f;
  bool relu = false;
  bool f32_output = false;  // mpc_output_dtype = f32 (bf16/f16 only)
  bool tf32 = false;        // mpc_tf32 (f32 only)
  float alpha = 1.0f;
};

GemmCase Case(DType d, bool ta, bool tb, CKind c) {
  GemmCase g;
  g.dtype = d;
  g.ta = ta;
  g.tb = tb;
  g.c = c;
  return g;
}

std::string GemmCaseName(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  return absl::StrCat(DTypeName(c.dtype), "_tA", c.ta, "_tB", c.tb, c.c != CKind::kNone ? "_C" : "",
                      c.c != CKind::kNone ? CKindName(c.c) : "",
                      c.beta != 1.0f ? absl::StrCat("_Beta", std::lround(c.beta * 100)) : "", c.relu ? "_Relu" : "",
                      c.f32_output ? "_OutF32" : "", c.tf32 ? "_Tf32" : "", c.alpha != 1.0f ? "_Alpha" : "");
}

std::vector<GemmCase> GemmCases() {
  std::vector<GemmCase> cases;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (CKind c : {CKind::kNone, CKind::kRow}) cases.push_back(Case(d, ta != 0, tb != 0, c));
      }
    }
    GemmCase linear_relu = Case(d, false, true, CKind::kRow);  // the fused Linear+ReLU form
    linear_relu.relu = true;
    cases.push_back(linear_relu);
    GemmCase alpha_bias = Case(d, true, false, CKind::kRow);  // alpha with the bias epilogue
    alpha_bias.alpha = 0.7f;
    cases.push_back(alpha_bias);
    // C through cuBLASLt's C matrix with beta.
    cases.push_back(Case(d, false, true, CKind::kFull));
    GemmCase full_beta = Case(d, true, false, CKind::kFull);
    full_beta.beta = 0.5f;
    full_beta.relu = true;
    cases.push_back(full_beta);
    // C broadcast into Y first, then added with beta.
    cases.push_back(Case(d, false, false, CKind::kColumn));
    GemmCase scalar = Case(d, false, true, CKind::kScalar);
    scalar.beta = 2.0f;
    cases.push_back(scalar);
    cases.push_back(Case(d, true, true, CKind::kOne));
    GemmCase row_beta = Case(d, false, true, CKind::kRow1N);
    row_beta.beta = 0.3f;
    row_beta.alpha = 0.7f;
    cases.push_back(row_beta);
    GemmCase ignored_c = Case(d, false, false, CKind::kFull);  // beta = 0: C is not read
    ignored_c.beta = 0.0f;
    cases.push_back(ignored_c);
    if (d != DType::kF32) {
      GemmCase out_f32 = Case(d, false, false, CKind::kNone);
      out_f32.f32_output = true;
      cases.push_back(out_f32);
      GemmCase out_f32_bias = Case(d, false, true, CKind::kRow);  // a bias in another dtype: broadcast
      out_f32_bias.f32_output = true;
      out_f32_bias.relu = true;
      cases.push_back(out_f32_bias);
      GemmCase out_f32_full = Case(d, true, false, CKind::kFull);
      out_f32_full.f32_output = true;
      out_f32_full.beta = 0.5f;
      cases.push_back(out_f32_full);
    }
  }
  GemmCase tf32 = Case(DType::kF32, false, true, CKind::kRow);
  tf32.tf32 = true;
  cases.push_back(tf32);
  GemmCase tf32_full = Case(DType::kF32, false, false, CKind::kFull);
  tf32_full.tf32 = true;
  cases.push_back(tf32_full);
  return cases;
}

std::unique_ptr<Problem> BuildGemm(const GemmCase& c, int64_t m, int64_t k, int64_t n) {
  const Shape a_shape = c.ta ? Shape{k, m} : Shape{m, k}, b_shape = c.tb ? Shape{n, k} : Shape{k, n};
  std::vector<Tensor> feeds = {RandomTensor(DType::kF32, a_shape, 11).CastTo(c.dtype),
                               RandomTensor(DType::kF32, b_shape, 12).CastTo(c.dtype)};
  std::vector<std::string> names = {"A", "B"};
  if (c.c != CKind::kNone) {
    feeds.push_back(RandomTensor(DType::kF32, CShape(c.c, m, n), 13).CastTo(c.dtype));
    names.push_back("C");
  }
  AttrMap attrs;
  if (c.ta) attrs.Set("transA", int64_t{1});
  if (c.tb) attrs.Set("transB", int64_t{1});
  if (c.alpha != 1.0f) attrs.Set("alpha", c.alpha);
  if (c.beta != 1.0f) attrs.Set("beta", c.beta);
  if (c.relu) attrs.Set("mpc_activation", std::string("Relu"));
  if (c.f32_output) attrs.Set("mpc_output_dtype", kOnnxFloat);
  if (c.tf32) attrs.Set("mpc_tf32", int64_t{1});
  return BuildNode("Gemm", std::move(names), std::move(feeds), attrs);
}

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CudaGemm, MatchesCpuBackend) {
  const GemmCase& c = GetParam();
  // Odd sizes (not multiples of 8) as well as aligned ones.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 61, 53}, {128, 256, 64}}) {
    SCOPED_TRACE(absl::StrCat("M=", m, " K=", k, " N=", n));
    auto problem = BuildGemm(c, m, k, n);
    ASSERT_NE(problem, nullptr);
    ExpectCudaMatchesCpu(*problem, Tolerance(c.dtype, c.tf32), c.relu);
    if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaGemm, ::testing::ValuesIn(GemmCases()), GemmCaseName);

TEST(CudaGemm, UnsupportedActivationIsUnimplementedNamingTheNode) {
  Graph graph;
  Value* a = graph.AddInput("A", DType::kF32, {4, 8});
  Value* b = graph.AddInput("B", DType::kF32, {8, 6});
  AttrMap attrs;
  attrs.Set("mpc_activation", std::string("Softplus"));
  auto node = graph.AddNode("Gemm", {a, b}, attrs, "softplus_gemm");
  ASSERT_TRUE(node.ok()) << node.status();
  MPC_GPU_OR_SKIP(gpu);
  auto kernel = gpu.CreateKernel(**node);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(kernel.status().message().find("softplus_gemm"), std::string::npos) << kernel.status();
  EXPECT_NE(kernel.status().message().find("not yet on CUDA"), std::string::npos) << kernel.status();
}

// ---- MatMul nodes ----------------------------------------------------------------------

struct MatMulCase {
  std::string name;
  DType dtype = DType::kF32;
  Shape a, b;
  bool f32_output = false;
};

std::string MatMulCaseName(const ::testing::TestParamInfo<MatMulCase>& info) { return info.param.name; }

std::vector<MatMulCase> MatMulCases() {
  struct Layout {
    const char* name;
    Shape a_batch, b_batch;  // prepended to [M,K] and [K,N]
  };
  const Layout layouts[] = {
      {"Plain2D", {}, {}},
      {"FoldBatchIntoM", {2, 3}, {}},    // [B,T,K] x [K,N]: one GEMM
      {"FoldBatchOfOne", {3}, {1}},      // B's batch is all ones
      {"EqualBatch", {4}, {4}},          // strided batch
      {"BroadcastA", {}, {3}},           // A shared: batch stride 0
      {"BroadcastARank", {1}, {2, 3}},   // A broadcast over two dims
      {"OuterLoop", {2, 1}, {1, 3}},     // 2 calls of a 3-batch
      {"MixedInnerOuter", {2, 3}, {3}},  // inner [3] strided, outer [2] with B broadcast
  };
  std::vector<MatMulCase> cases;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    int i = 0;
    for (const Layout& l : layouts) {
      // Alternate odd and aligned matrix sizes.
      const bool odd = (i++ % 2) == 0;
      const int64_t m = odd ? 37 : 64, k = odd ? 61 : 128, n = odd ? 53 : 32;
      MatMulCase c;
      c.name = absl::StrCat(DTypeName(d), "_", l.name);
      c.dtype = d;
      c.a = l.a_batch;
      c.a.push_back(m);
      c.a.push_back(k);
      c.b = l.b_batch;
      c.b.push_back(k);
      c.b.push_back(n);
      cases.push_back(c);
      if (d != DType::kF32 && (std::string(l.name) == "FoldBatchIntoM" || std::string(l.name) == "EqualBatch")) {
        c.name += "_OutF32";
        c.f32_output = true;
        cases.push_back(c);
      }
    }
  }
  return cases;
}

class CudaMatMul : public ::testing::TestWithParam<MatMulCase> {};

TEST_P(CudaMatMul, MatchesCpuBackend) {
  const MatMulCase& c = GetParam();
  AttrMap attrs;
  if (c.f32_output) attrs.Set("mpc_output_dtype", kOnnxFloat);
  auto problem = BuildNode(
      "MatMul", {"A", "B"},
      {RandomTensor(DType::kF32, c.a, 21).CastTo(c.dtype), RandomTensor(DType::kF32, c.b, 22).CastTo(c.dtype)}, attrs);
  ASSERT_NE(problem, nullptr);
  ExpectCudaMatchesCpu(*problem, Tolerance(c.dtype, false), false);
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaMatMul, ::testing::ValuesIn(MatMulCases()), MatMulCaseName);

// ---- the wrapper's aux and backward epilogues --------------------------------------------

// op(A)[M,K] op(B)[K,N] in f64, row-major storage as LtGemmSpec describes.
std::vector<double> HostGemm(const Tensor& a, const Tensor& b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  std::vector<double> y(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += a.GetAsDouble(ta ? p * m + i : i * k + p) * b.GetAsDouble(tb ? j * k + p : p * n + j);
      y[i * n + j] = acc;
    }
  }
  return y;
}

double RelErr(const Tensor& got, const std::vector<double>& ref) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double g = got.GetAsDouble(static_cast<int64_t>(i));
    if (!std::isfinite(g)) return INFINITY;
    diff += (g - ref[i]) * (g - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

// cuBLASLt's GELU: the tanh approximation, and its derivative.
constexpr double kSqrt2OverPi = 0.7978845608028654;
double Gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x))); }
double GeluGrad(double x) {
  const double t = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
}

#define MPC_CUDA_BACKEND_OR_SKIP(var)                                              \
  MPC_GPU_OR_SKIP(var##_backend);                                                  \
  cuda::CudaBackend* var##_ptr = dynamic_cast<cuda::CudaBackend*>(&var##_backend); \
  ASSERT_NE(var##_ptr, nullptr);                                                   \
  cuda::CudaBackend& var = *var##_ptr

constexpr int64_t kM = 64, kN = 96, kK = 80, kK2 = 48;

// Operands, output, bias and aux all in the parameter dtype (f32 or bf16).
class CublasLtEpilogues : public ::testing::TestWithParam<DType> {
 protected:
  DType dtype() const { return GetParam(); }
  Tensor Random(const Shape& shape, uint64_t seed) const {
    return RandomTensor(DType::kF32, shape, seed).CastTo(dtype());
  }
  double Tol() const { return dtype() == DType::kF32 ? 1e-5 : 1e-2; }
  // cuBLASLt may evaluate GELU's tanh approximately.
  double GeluTol() const { return dtype() == DType::kF32 ? 2e-3 : 1e-2; }
  cuda::LtGemmSpec Spec(int64_t m, int64_t n, int64_t k) const {
    cuda::LtGemmSpec s;
    s.m = m;
    s.n = n;
    s.k = k;
    s.operand = dtype();
    s.out = dtype();
    return s;
  }
};

std::string DTypeParamName(const ::testing::TestParamInfo<DType>& info) { return DTypeName(info.param); }

// Forward GELU with bias writing its input (aux), then the backward dGELU + bias gradient
// reading it: the pair a fused MLP block uses.
TEST_P(CublasLtEpilogues, GeluAuxBiasThenDGeluBGrad) {
  MPC_CUDA_BACKEND_OR_SKIP(gpu);
  DeviceBuffers dev(gpu);
  const Tensor a = Random({kM, kK}, 31), b = Random({kK, kN}, 32), bias = Random({kN}, 33);
  cuda::LtGemmSpec fwd = Spec(kM, kN, kK);
  fwd.bias = true;
  fwd.epilogue = cuda::LtEpilogue::kGeluAux;
  auto gemm = cuda::CublasLtGemm::Create(gpu, fwd);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const int64_t ld = cuda::LtAuxLd(fwd);
  ASSERT_GE(ld, kN);
  ASSERT_EQ(cuda::LtAuxBytes(fwd), kM * ld * static_cast<int64_t>(DTypeSize(dtype())));
  cuda::LtGemmArgs args;
  args.a = dev.Upload(a);
  args.b = dev.Upload(b);
  args.bias = dev.Upload(bias);
  args.y = dev.Zeros(dtype(), kM * kN);
  args.aux = dev.Zeros(dtype(), kM * ld);
  ASSERT_TRUE(args.a && args.b && args.bias && args.y && args.aux);
  absl::Status st = (*gemm)->Run(args);
  ASSERT_TRUE(st.ok()) << st;
  const Tensor y = dev.Download(args.y, dtype(), {kM, kN});
  const Tensor aux = dev.Download(args.aux, dtype(), {kM, ld});
  std::vector<double> z = HostGemm(a, b, kM, kN, kK, false, false), gelu_z(z.size()), aux_z(z.size());
  Tensor aux_packed(DType::kF64, {kM, kN});
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      z[i * kN + j] += bias.GetAsDouble(j);
      gelu_z[i * kN + j] = Gelu(z[i * kN + j]);
      aux_z[i * kN + j] = aux.GetAsDouble(i * ld + j);
      aux_packed.data<double>()[i * kN + j] = aux_z[i * kN + j];
    }
  }
  EXPECT_LT(RelErr(aux_packed, z), Tol()) << "aux = the GELU input";
  EXPECT_LT(RelErr(y, gelu_z), GeluTol()) << "Y = GELU(AB + bias)";

  // Backward: dZ = (dY W) * gelu'(Z), db = sum over rows of dZ.
  const Tensor dy = Random({kM, kK2}, 34), w = Random({kK2, kN}, 35);
  cuda::LtGemmSpec bwd = Spec(kM, kN, kK2);
  bwd.epilogue = cuda::LtEpilogue::kDGeluBGrad;
  ASSERT_EQ(cuda::LtAuxLd(bwd), ld);
  auto back = cuda::CublasLtGemm::Create(gpu, bwd);
  ASSERT_TRUE(back.ok()) << back.status();
  cuda::LtGemmArgs bargs;
  bargs.a = dev.Upload(dy);
  bargs.b = dev.Upload(w);
  bargs.y = dev.Zeros(dtype(), kM * kN);
  bargs.aux = args.aux;
  bargs.bias_grad = dev.Zeros(dtype(), kN);
  ASSERT_TRUE(bargs.a && bargs.b && bargs.y && bargs.bias_grad);
  st = (*back)->Run(bargs);
  ASSERT_TRUE(st.ok()) << st;
  const Tensor dz = dev.Download(bargs.y, dtype(), {kM, kN});
  const Tensor db = dev.Download(bargs.bias_grad, dtype(), {kN});
  std::vector<double> dz_ref = HostGemm(dy, w, kM, kN, kK2, false, false), db_ref(kN, 0.0);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      dz_ref[i * kN + j] *= GeluGrad(aux_z[i * kN + j]);
      db_ref[j] += dz_ref[i * kN + j];
    }
  }
  EXPECT_LT(RelErr(dz, dz_ref), GeluTol()) << "dZ = (dY W) * gelu'(Z)";
  EXPECT_LT(RelErr(db, db_ref), GeluTol()) << "db = column sums of dZ";
}

// Forward ReLU with bias writing its bit-mask, then dReLU + bias gradient reading it.
TEST_P(CublasLtEpilogues, ReluAuxBiasThenDReluBGrad) {
  MPC_CUDA_BACKEND_OR_SKIP(gpu);
  DeviceBuffers dev(gpu);
  const Tensor a = Random({kM, kK}, 41), b = Random({kN, kK}, 42), bias = Random({kN}, 43);
  cuda::LtGemmSpec fwd = Spec(kM, kN, kK);
  fwd.tb = true;  // the Linear layer's X W^T
  fwd.bias = true;
  fwd.epilogue = cuda::LtEpilogue::kReluAux;
  auto gemm = cuda::CublasLtGemm::Create(gpu, fwd);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  EXPECT_EQ(cuda::LtAuxLd(fwd) % 128, 0);
  cuda::LtGemmArgs args;
  args.a = dev.Upload(a);
  args.b = dev.Upload(b);
  args.bias = dev.Upload(bias);
  args.y = dev.Zeros(dtype(), kM * kN);
  args.aux = dev.Upload(nullptr, static_cast<size_t>(cuda::LtAuxBytes(fwd)));
  ASSERT_TRUE(args.a && args.b && args.bias && args.y && args.aux);
  absl::Status st = (*gemm)->Run(args);
  ASSERT_TRUE(st.ok()) << st;
  const Tensor y = dev.Download(args.y, dtype(), {kM, kN});
  std::vector<double> ref = HostGemm(a, b, kM, kN, kK, false, true);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) ref[i * kN + j] = std::max(0.0, ref[i * kN + j] + bias.GetAsDouble(j));
  }
  EXPECT_LT(RelErr(y, ref), Tol()) << "Y = ReLU(A B^T + bias)";

  const Tensor dy = Random({kM, kK2}, 44), w = Random({kK2, kN}, 45);
  cuda::LtGemmSpec bwd = Spec(kM, kN, kK2);
  bwd.epilogue = cuda::LtEpilogue::kDReluBGrad;
  auto back = cuda::CublasLtGemm::Create(gpu, bwd);
  ASSERT_TRUE(back.ok()) << back.status();
  cuda::LtGemmArgs bargs;
  bargs.a = dev.Upload(dy);
  bargs.b = dev.Upload(w);
  bargs.y = dev.Zeros(dtype(), kM * kN);
  bargs.aux = args.aux;
  bargs.bias_grad = dev.Zeros(dtype(), kN);
  ASSERT_TRUE(bargs.a && bargs.b && bargs.y && bargs.bias_grad);
  st = (*back)->Run(bargs);
  ASSERT_TRUE(st.ok()) << st;
  const Tensor dz = dev.Download(bargs.y, dtype(), {kM, kN});
  const Tensor db = dev.Download(bargs.bias_grad, dtype(), {kN});
  // The mask is Z > 0, i.e. the device's own Y > 0 (no host rounding decides a bit).
  std::vector<double> dz_ref = HostGemm(dy, w, kM, kN, kK2, false, false), db_ref(kN, 0.0);
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      if (!(y.GetAsDouble(i * kN + j) > 0.0)) dz_ref[i * kN + j] = 0.0;
      db_ref[j] += dz_ref[i * kN + j];
    }
  }
  EXPECT_LT(RelErr(dz, dz_ref), Tol()) << "dZ = (dY W) * (Z > 0)";
  EXPECT_LT(RelErr(db, db_ref), Tol()) << "db = column sums of dZ";
}

// dW = dY^T X with db = sum over the batch of dY fused (bias gradient of A), and the
// mirrored dW^T = X^T dY (bias gradient of B).
TEST_P(CublasLtEpilogues, BiasGradientsOfAAndB) {
  MPC_CUDA_BACKEND_OR_SKIP(gpu);
  DeviceBuffers dev(gpu);
  constexpr int64_t kBatch = 128, kOut = 64, kIn = 96;
  const Tensor dy = Random({kBatch, kOut}, 51), x = Random({kBatch, kIn}, 52);
  std::vector<double> db_ref(kOut, 0.0);
  for (int64_t r = 0; r < kBatch; ++r) {
    for (int64_t o = 0; o < kOut; ++o) db_ref[o] += dy.GetAsDouble(r * kOut + o);
  }
  for (bool grad_of_a : {true, false}) {
    SCOPED_TRACE(grad_of_a ? "bias gradient of A" : "bias gradient of B");
    // Of A: Y[kOut, kIn] = dY^T X. Of B: Y[kIn, kOut] = X^T dY.
    const Tensor& a = grad_of_a ? dy : x;
    const Tensor& b = grad_of_a ? x : dy;
    cuda::LtGemmSpec s = Spec(grad_of_a ? kOut : kIn, grad_of_a ? kIn : kOut, kBatch);
    s.ta = true;
    s.epilogue = grad_of_a ? cuda::LtEpilogue::kBGradA : cuda::LtEpilogue::kBGradB;
    auto gemm = cuda::CublasLtGemm::Create(gpu, s);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    cuda::LtGemmArgs args;
    args.a = dev.Upload(a);
    args.b = dev.Upload(b);
    args.y = dev.Zeros(dtype(), s.m * s.n);
    args.bias_grad = dev.Zeros(dtype(), kOut);
    ASSERT_TRUE(args.a && args.b && args.y && args.bias_grad);
    const absl::Status st = (*gemm)->Run(args);
    ASSERT_TRUE(st.ok()) << st;
    const Tensor y = dev.Download(args.y, dtype(), {s.m, s.n});
    const Tensor db = dev.Download(args.bias_grad, dtype(), {kOut});
    EXPECT_LT(RelErr(y, HostGemm(a, b, s.m, s.n, s.k, true, false)), Tol()) << "the product";
    EXPECT_LT(RelErr(db, db_ref), Tol()) << "the bias gradient";
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CublasLtEpilogues, ::testing::Values(DType::kF32, DType::kBF16), DTypeParamName);

TEST(CublasLtGemm, InconsistentSpecsAndArgumentsAreErrors) {
  MPC_CUDA_BACKEND_OR_SKIP(gpu);
  cuda::LtGemmSpec s;
  s.m = 32;
  s.n = 32;
  s.k = 32;
  {
    cuda::LtGemmSpec bad = s;
    bad.bias = true;
    bad.epilogue = cuda::LtEpilogue::kDRelu;
    EXPECT_EQ(cuda::CublasLtGemm::Create(gpu, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.amax_d = true;  // only for an FP8 output
    EXPECT_EQ(cuda::CublasLtGemm::Create(gpu, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.operand = DType::kBF16;
    bad.out = DType::kF16;
    EXPECT_EQ(cuda::CublasLtGemm::Create(gpu, bad).status().code(), absl::StatusCode::kUnimplemented);
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.k = 0;
    EXPECT_EQ(cuda::CublasLtGemm::Create(gpu, bad).status().code(), absl::StatusCode::kInvalidArgument);
  }
  cuda::LtGemmSpec with_bias = s;
  with_bias.bias = true;
  auto gemm = cuda::CublasLtGemm::Create(gpu, with_bias);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  DeviceBuffers dev(gpu);
  void* buf = dev.Zeros(DType::kF32, 32 * 32);
  ASSERT_NE(buf, nullptr);
  const absl::Status missing_bias = (*gemm)->Run(buf, buf, nullptr, buf);
  EXPECT_EQ(missing_bias.code(), absl::StatusCode::kInvalidArgument) << missing_bias;
  EXPECT_NE(missing_bias.message().find("bias"), std::string::npos) << missing_bias;
  const absl::Status misaligned = (*gemm)->Run(static_cast<char*>(buf) + 4, buf, buf, buf);
  EXPECT_EQ(misaligned.code(), absl::StatusCode::kInvalidArgument) << misaligned;
}

TEST(CudaBackend, CapabilitiesAreSane) {
  MPC_GPU_OR_SKIP(gpu);
  const Capabilities& caps = gpu.capabilities();
  EXPECT_EQ(gpu.name(), "cuda");
  EXPECT_EQ(caps.device.rfind("cuda:0 (", 0), 0u) << caps.device;
  EXPECT_NE(caps.device.find(", sm_"), std::string::npos) << caps.device;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) EXPECT_TRUE(caps.Native(d)) << DTypeName(d);
  EXPECT_EQ(caps.PadMultiple(DType::kBF16), 8);
  EXPECT_EQ(caps.PadMultiple(DType::kF16), 8);
  if (caps.fp8) {
    EXPECT_TRUE(caps.tf32);
    EXPECT_EQ(caps.PadMultiple(DType::kF8E4M3), 16);
  }
  if (caps.tf32) {
    EXPECT_EQ(caps.PadMultiple(DType::kF32), 4);
  }
  EXPECT_TRUE(caps.HasKernel("Gemm", DType::kBF16));
  EXPECT_FALSE(caps.HasKernel("NoSuchOp", DType::kF32));
  // The H100 this project is verified on is sm_90: TF32 and FP8 both present.
  if (caps.device.find("H100") != std::string::npos) {
    EXPECT_TRUE(caps.tf32);
    EXPECT_TRUE(caps.fp8);
  }
}

TEST(CudaBackend, AllocateAndCopyRoundTrip) {
  MPC_GPU_OR_SKIP(gpu);
  constexpr size_t kCount = (1 << 20) + 3;  // not a multiple of anything convenient
  std::vector<float> host(kCount), back(kCount, -1.0f);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  auto p = gpu.Allocate(kCount * sizeof(float));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_NE(*p, nullptr);
  ASSERT_TRUE(gpu.CopyToDevice(*p, host.data(), kCount * sizeof(float)).ok());
  ASSERT_TRUE(gpu.CopyToHost(back.data(), *p, kCount * sizeof(float)).ok());
  EXPECT_EQ(std::memcmp(host.data(), back.data(), kCount * sizeof(float)), 0);
  ASSERT_TRUE(gpu.Synchronize().ok());
  gpu.Free(*p);
}

// The engine pins its batch buffers (engine/pinned_host_buffers.h): a copy from pinned
// memory returns before the DMA ends and must land intact once the stream is synchronised;
// pinning the same memory twice is an error that names cudaHostRegister and leaves no
// error behind for the next launch.
TEST(CudaBackend, CopyFromPinnedHostBufferRoundTrip) {
  MPC_GPU_OR_SKIP(gpu);
  constexpr size_t kCount = (size_t{8} << 20) + 5;  // 32 MiB and a bit
  std::vector<float> host(kCount), back(kCount, -1.0f);
  for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(i % 65521) * 0.25f - 3.0f;
  auto pinned = gpu.PinHostBuffer(host.data(), kCount * sizeof(float));
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  EXPECT_TRUE(*pinned);
  auto again = gpu.PinHostBuffer(host.data(), kCount * sizeof(float));
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("cudaHostRegister"), std::string::npos) << again.status();
  auto p = gpu.Allocate(kCount * sizeof(float));
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE(gpu.CopyToDevice(*p, host.data(), kCount * sizeof(float)).ok());
  ASSERT_TRUE(gpu.Synchronize().ok()) << "the refused registration left an error behind";
  gpu.UnpinHostBuffer(host.data());
  ASSERT_TRUE(gpu.CopyToHost(back.data(), *p, kCount * sizeof(float)).ok());
  EXPECT_EQ(std::memcmp(host.data(), back.data(), kCount * sizeof(float)), 0);
  gpu.Free(*p);
}

// Uploads ahead (Backend::UploadAhead / CopyFromUpload) as the engine makes them: the
// second upload into the same staging buffer is started before the step's stream has
// copied the first one out, so only the staging_read_ event keeps it from overwriting
// data still to be read; each destination must get its own round's data. Then the
// failures: CopyFromUpload before any upload on a fresh backend is an error naming the
// call to make first.
TEST(CudaBackend, UploadsAheadLandInOrderThroughOneStagingBuffer) {
  MPC_GPU_OR_SKIP(gpu);
  constexpr size_t kCount = size_t{32} << 20;  // 128 MiB: the copy out takes ~0.1 ms
  constexpr size_t kBytes = kCount * sizeof(float);
  std::vector<float> round_a(kCount), round_b(kCount), back(kCount);
  for (size_t i = 0; i < kCount; ++i) {
    round_a[i] = static_cast<float>(i % 9973) * 0.5f + 1.0f;
    round_b[i] = -static_cast<float>(i % 7919) * 0.25f - 2.0f;
  }
  for (std::vector<float>* host : {&round_a, &round_b}) {
    auto pinned = gpu.PinHostBuffer(host->data(), kBytes);
    ASSERT_TRUE(pinned.ok() && *pinned) << pinned.status();
  }
  testing::DeviceBuffers buffers(gpu);
  void* staging = buffers.Zeros(DType::kF32, kCount);
  void* dst_a = buffers.Zeros(DType::kF32, kCount);
  void* dst_b = buffers.Zeros(DType::kF32, kCount);
  ASSERT_TRUE(staging && dst_a && dst_b);
  auto up_a = gpu.UploadAhead(staging, round_a.data(), kBytes);
  ASSERT_TRUE(up_a.ok()) << up_a.status();
  EXPECT_TRUE(*up_a) << "the CUDA backend uploads ahead";
  ASSERT_TRUE(gpu.CopyFromUpload(dst_a, staging, kBytes).ok());
  auto up_b = gpu.UploadAhead(staging, round_b.data(), kBytes);
  ASSERT_TRUE(up_b.ok() && *up_b) << up_b.status();
  ASSERT_TRUE(gpu.CopyFromUpload(dst_b, staging, kBytes).ok());
  ASSERT_TRUE(gpu.Synchronize().ok());
  gpu.UnpinHostBuffer(round_a.data());
  gpu.UnpinHostBuffer(round_b.data());
  ASSERT_TRUE(gpu.CopyToHost(back.data(), dst_a, kBytes).ok());
  EXPECT_EQ(std::memcmp(back.data(), round_a.data(), kBytes), 0) << "the first round was overwritten before it was read";
  ASSERT_TRUE(gpu.CopyToHost(back.data(), dst_b, kBytes).ok());
  EXPECT_EQ(std::memcmp(back.data(), round_b.data(), kBytes), 0);

  auto fresh = CreateBackend("cuda:0");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  const absl::Status early = (*fresh)->CopyFromUpload(dst_a, staging, 16);
  EXPECT_EQ(early.code(), absl::StatusCode::kFailedPrecondition) << early;
  EXPECT_NE(early.message().find("call UploadAhead first"), std::string::npos) << early;
}

TEST(CudaBackend, AbsurdAllocationIsAnErrorNamingCudaMalloc) {
  MPC_GPU_OR_SKIP(gpu);
  auto p = gpu.Allocate(size_t{1} << 50);  // 1 PiB
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("cudaMalloc"), std::string::npos) << p.status();
}

TEST(CudaBackend, CreateBackendNamesCuda) {
  auto b = CreateBackend("cuda:0");
  MPC_GPU_OR_SKIP(gpu);
  (void)gpu;
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->name(), "cuda");
}

}  // namespace
}  // namespace mpc
