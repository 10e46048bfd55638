// The CUDA backend against the CPU backend. Each test computes what it can on the CPU
// first (so the graph construction is exercised on every machine), then creates the
// CUDA backend and skips, with the reason, when that fails: there is no GPU in CI or on
// the development machines, so these only really run on the H100 (ctest -L gpu).
//   Gemm*       one Gemm node through Graph -> PlanMemory -> Executor on both backends,
//               same random inputs; ||cuda - cpu|| / ||cpu|| within DESIGN.md's
//               tolerances (f32 1e-5, tf32 1e-3, bf16 1e-2, f16 2e-3).
//   Capabilities, AllocateAndCopyRoundTrip: the device basics.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "engine/executor.h"
#include "graph/graph.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::RandomTensor;

constexpr int64_t kOnnxFloat = 1;

// The CUDA backend for this test binary (created once), or the reason there is none.
absl::StatusOr<Backend*> Gpu() {
  static absl::StatusOr<Backend*>* gpu = [] {
    auto b = CreateCudaBackend(0);
    if (!b.ok()) return new absl::StatusOr<Backend*>(b.status());
    return new absl::StatusOr<Backend*>(b->release());
  }();
  return *gpu;
}

#define MPC_GPU_OR_SKIP(var)                                           \
  auto var##_or = Gpu();                                               \
  if (!var##_or.ok()) GTEST_SKIP() << var##_or.status().message();     \
  Backend& var = **var##_or

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

struct GemmCase {
  DType dtype;
  bool ta, tb;
  bool bias;
  bool relu;
  bool f32_output;  // mpc_output_dtype = f32 (bf16/f16 only)
  bool tf32;        // mpc_tf32 (f32 only)
  float alpha;
};

std::string GemmCaseName(const ::testing::TestParamInfo<GemmCase>& info) {
  const GemmCase& c = info.param;
  return absl::StrCat(DTypeName(c.dtype), "_tA", c.ta, "_tB", c.tb, c.bias ? "_Bias" : "", c.relu ? "_Relu" : "",
                      c.f32_output ? "_OutF32" : "", c.tf32 ? "_Tf32" : "", c.alpha != 1.0f ? "_Alpha" : "");
}

std::vector<GemmCase> GemmCases() {
  std::vector<GemmCase> cases;
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int ta = 0; ta < 2; ++ta) {
      for (int tb = 0; tb < 2; ++tb) {
        for (int bias = 0; bias < 2; ++bias) cases.push_back({d, ta != 0, tb != 0, bias != 0, false, false, false, 1.0f});
      }
    }
    cases.push_back({d, false, true, true, true, false, false, 1.0f});   // the fused Linear+ReLU form
    cases.push_back({d, true, false, true, false, false, false, 0.7f});  // alpha with a bias
    if (d != DType::kF32) {
      cases.push_back({d, false, false, false, false, true, false, 1.0f});
      cases.push_back({d, false, true, true, true, true, false, 1.0f});
    }
  }
  cases.push_back({DType::kF32, false, true, true, false, false, true, 1.0f});
  return cases;
}

double Tolerance(const GemmCase& c) {
  if (c.tf32) return 1e-3;
  switch (c.dtype) {
    case DType::kBF16: return 1e-2;
    case DType::kF16: return 2e-3;
    default: return 1e-5;
  }
}

struct GemmProblem {
  Graph graph;
  std::vector<std::string> names;
  std::vector<Tensor> feeds;
  std::string out;
};

std::unique_ptr<GemmProblem> BuildGemm(const GemmCase& c, int64_t m, int64_t k, int64_t n) {
  auto p = std::make_unique<GemmProblem>();
  const Shape a_shape = c.ta ? Shape{k, m} : Shape{m, k}, b_shape = c.tb ? Shape{n, k} : Shape{k, n};
  p->feeds = {RandomTensor(DType::kF32, a_shape, 11).CastTo(c.dtype),
              RandomTensor(DType::kF32, b_shape, 12).CastTo(c.dtype)};
  p->names = {"A", "B"};
  if (c.bias) {
    p->feeds.push_back(RandomTensor(DType::kF32, {n}, 13).CastTo(c.dtype));
    p->names.push_back("C");
  }
  std::vector<Value*> operands;
  for (size_t i = 0; i < p->feeds.size(); ++i) {
    operands.push_back(p->graph.AddInput(p->names[i], c.dtype, p->feeds[i].shape()));
  }
  AttrMap attrs;
  if (c.ta) attrs.Set("transA", int64_t{1});
  if (c.tb) attrs.Set("transB", int64_t{1});
  if (c.alpha != 1.0f) attrs.Set("alpha", c.alpha);
  if (c.relu) attrs.Set("mpc_activation", std::string("Relu"));
  if (c.f32_output) attrs.Set("mpc_output_dtype", kOnnxFloat);
  if (c.tf32) attrs.Set("mpc_tf32", int64_t{1});
  auto node = p->graph.AddNode("Gemm", operands, attrs, "gemm");
  if (!node.ok()) {
    ADD_FAILURE() << node.status();
    return nullptr;
  }
  p->graph.SetOutputs({(*node)->outputs[0]});
  p->out = (*node)->outputs[0]->name;
  return p;
}

absl::StatusOr<Tensor> RunOn(const GemmProblem& p, Backend& backend) {
  CompileInfo info;
  auto order = p.graph.TopologicalOrder();
  if (!order.ok()) return order.status();
  info.order = *order;
  auto plan = PlanMemory(p.graph, info.order);
  if (!plan.ok()) return plan.status();
  info.plan = *plan;
  auto ex = Executor::Create(p.graph, info, backend);
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

class CudaGemm : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CudaGemm, MatchesCpuBackend) {
  const GemmCase& c = GetParam();
  // Odd sizes (not multiples of 8) as well as aligned ones.
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{37, 61, 53}, {128, 256, 64}}) {
    SCOPED_TRACE(absl::StrCat("M=", m, " K=", k, " N=", n));
    auto problem = BuildGemm(c, m, k, n);
    ASSERT_NE(problem, nullptr);
    auto ref = RunOn(*problem, Cpu());
    ASSERT_TRUE(ref.ok()) << ref.status();
    MPC_GPU_OR_SKIP(gpu);
    auto got = RunOn(*problem, gpu);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->dtype(), ref->dtype());
    ASSERT_EQ(got->shape(), ref->shape());
    const double err = RelErr(*got, *ref);
    EXPECT_LT(err, Tolerance(c)) << "cuda vs cpu relative error";
    if (c.relu) {
      for (int64_t i = 0; i < got->num_elements(); ++i) ASSERT_GE(got->GetAsDouble(i), 0.0) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaGemm, ::testing::ValuesIn(GemmCases()), GemmCaseName);

TEST(CudaGemm, FullCIsUnimplementedNamingTheNode) {
  Graph graph;
  Value* a = graph.AddInput("A", DType::kF32, {4, 8});
  Value* b = graph.AddInput("B", DType::kF32, {8, 6});
  Value* cc = graph.AddInput("C", DType::kF32, {4, 6});
  auto node = graph.AddNode("Gemm", {a, b, cc}, AttrMap(), "full_c_gemm");
  ASSERT_TRUE(node.ok()) << node.status();
  MPC_GPU_OR_SKIP(gpu);
  auto kernel = gpu.CreateKernel(**node);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(kernel.status().message().find("full_c_gemm"), std::string::npos) << kernel.status();
  EXPECT_NE(kernel.status().message().find("not yet on CUDA"), std::string::npos) << kernel.status();
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
