// The CPU convolution kernels of one program share a value's reorder into a oneDNN layout
// (backends/cpu/shared_reorders.h): a block's input for its 3x3 and 1x1 convolutions and
// for the weight gradient, the gradient dY for the data and the weight gradient. Sharing
// must not change a bit: each output of the four-kernel program equals the same op run
// alone (in a program of its own, where nothing is shared), in f32 and bf16, on a second
// step with fresh inputs too (a kernel reading a copy left from the first step would give
// the first step's result), and the program must actually share.
#include "backends/cpu/shared_reorders.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

constexpr int64_t kN = 4, kC = 32, kM = 32, kH = 8;

struct Inputs {
  Tensor x, w3, w1, dy;
};

Inputs RandomInputs(uint64_t seed) {
  return {testing::RandomTensor(DType::kF32, {kN, kC, kH, kH}, seed),
          testing::RandomTensor(DType::kF32, {kM, kC, 3, 3}, seed + 1, -0.2, 0.2),
          testing::RandomTensor(DType::kF32, {kM, kC, 1, 1}, seed + 2, -0.2, 0.2),
          testing::RandomTensor(DType::kF32, {kN, kM, kH, kH}, seed + 3)};
}

AttrMap Conv3x3() {
  AttrMap attrs;
  attrs.Set("kernel_shape", std::vector<int64_t>{3, 3});
  attrs.Set("pads", std::vector<int64_t>{1, 1, 1, 1});
  return attrs;
}

// The ops, by name: y3 = Conv3x3(x, w3), y1 = Conv1x1(x, w1), dx = ConvGradInput(dy, w3),
// dw = ConvGradWeight(dy, x). `only` names the one op to build (empty: all four).
std::unique_ptr<Graph> BuildProgram(DType dtype, const std::string& only) {
  auto owned = std::make_unique<Graph>();
  Graph& g = *owned;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", dtype, {kN, kC, kH, kH});
  Value* w3 = g.AddInput("w3", dtype, {kM, kC, 3, 3});
  Value* w1 = g.AddInput("w1", dtype, {kM, kC, 1, 1});
  Value* dy = g.AddInput("dy", dtype, {kN, kM, kH, kH});
  std::vector<Value*> outputs;
  auto add = [&](const std::string& name, Value* v) {
    if (!v) return;
    EXPECT_TRUE(g.RenameValue(v, name).ok());
    outputs.push_back(v);
  };
  if (only.empty() || only == "y3") add("y3", b.Op("Conv", {x, w3}, Conv3x3()));
  if (only.empty() || only == "y1") add("y1", b.Op("Conv", {x, w1}));
  if (only.empty() || only == "dx") {
    AttrMap attrs = Conv3x3();
    attrs.Set("input_shape", std::vector<int64_t>{kN, kC, kH, kH});
    add("dx", b.Op("ConvGradInput", {dy, w3}, attrs));
  }
  if (only.empty() || only == "dw") add("dw", b.Op("ConvGradWeight", {dy, x}, Conv3x3()));
  EXPECT_TRUE(b.status().ok()) << b.status();
  g.SetOutputs(outputs);
  return owned;
}

void SetInputs(Executor& ex, const Inputs& in, DType dtype) {
  EXPECT_TRUE(ex.SetInput("x", in.x.CastTo(dtype)).ok());
  EXPECT_TRUE(ex.SetInput("w3", in.w3.CastTo(dtype)).ok());
  EXPECT_TRUE(ex.SetInput("w1", in.w1.CastTo(dtype)).ok());
  EXPECT_TRUE(ex.SetInput("dy", in.dy.CastTo(dtype)).ok());
}

// `name` computed by a program holding only that op.
Tensor Alone(const std::string& name, const Inputs& in, DType dtype) {
  const std::unique_ptr<Graph> g = BuildProgram(dtype, name);
  auto ex = testing::ExecutorFor(*g, Cpu());
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return Tensor();
  SetInputs(**ex, in, dtype);
  EXPECT_TRUE((*ex)->Run(0, 0).ok());
  return *(*ex)->Fetch(name);
}

void ExpectBitwiseEqual(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.bytes(), want.bytes()) << what;
  EXPECT_EQ(std::memcmp(got.raw(), want.raw(), got.bytes()), 0) << what;
}

class SharedReordersTest : public ::testing::TestWithParam<DType> {};

TEST_P(SharedReordersTest, SharingProgramMatchesEachOpAloneStepAfterStep) {
  const DType dtype = GetParam();
  const std::unique_ptr<Graph> g = BuildProgram(dtype, "");
  const int64_t shared_before = cpu::SharedReorderCount();
  auto ex = testing::ExecutorFor(*g, Cpu());
  ASSERT_TRUE(ex.ok()) << ex.status();
  // The weight gradient takes x's reorder from a forward convolution and dy's from the data
  // gradient (or the other way round, by schedule); the 1x1 convolution may take x's too.
  // oneDNN's bf16 convolutions need AVX-512 (an AVX2-only CPU runs them on plain layouts,
  // with no reorders to share); the values below are checked either way.
  const bool blocked = dtype != DType::kBF16 || __builtin_cpu_supports("avx512bw");
  if (blocked) {
    EXPECT_GE(cpu::SharedReorderCount() - shared_before, 2) << "the program's kernels must share reorders";
  }
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(absl::StrCat("step ", step));
    const Inputs in = RandomInputs(100 + 10 * static_cast<uint64_t>(step));
    SetInputs(**ex, in, dtype);
    ASSERT_TRUE((*ex)->Run(0, step).ok());
    for (const std::string name : {"y3", "y1", "dx", "dw"}) {
      ExpectBitwiseEqual(*(*ex)->Fetch(name), Alone(name, in, dtype), name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, SharedReordersTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace mpc
