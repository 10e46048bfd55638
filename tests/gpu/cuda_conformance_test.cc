// Cross-backend conformance (docs/numerics.md): every op-numerics case
// (tests/graph/*_op_cases.cc), plus this file's cases for the kernels those tables do
// not reach, runs on the CUDA backend and on the CPU backend, the numerics reference,
// over the same fresh random inputs, and everything must agree:
//   CudaForward    every case (forward and gradient-only ones alike: the comparison
//                  needs no f64 reference) in each run dtype f32, bf16 and f16 (and in
//                  i64, i32, u8, bool, f8e4m3 and f8e5m2 where the CPU runs the op in
//                  them: data movement, comparisons); every output of the node and
//                  the state it updates in place: ||cuda - cpu|| / max(||cpu||, tiny)
//                  within docs/numerics.md's tolerance for the output's dtype (f32 1e-5, bf16
//                  1e-2, f16 2e-3, f8 1e-1; a TF32 case's f32 outputs 1e-3; NaN never
//                  passes); integer and bool
//                  outputs, data movement (cases marked exact) and Dropout equal value
//                  for value. Dropout in training mode draws its mask from the
//                  counter-based UniformAt(seed, node id, step, element) on both
//                  backends and scales in f32, so output and mask must be identical.
//   CudaGradient   every differentiable case in f32 under op_numerics_test's scalar
//                  loss L = sum(out * R): the loss and autodiff's gradients (the
//                  backward graph, run on each backend) within the tolerance.
// Each test is one (case, run dtype), named <case>_<dtype>; a case whose inputs all
// have fixed dtypes is the same graph in every run and runs once, named by the dtype
// its kernel is selected by. The GPU has no f64 (the CPU's f64 kernels are the
// reference), so cases that read or write f64 tensors are not instantiated here.
// Inputs are drawn from the case's value ranges with a seed of their own (not
// op_numerics_test's): MPC_CONFORMANCE_SEED=<n> mixes <n> in, to rerun everything on
// other inputs; a failure prints the seed it ran with. The CPU side runs first, so the
// graphs are exercised on every machine; then each test skips, with the reason, when
// there is no CUDA device. A missing CUDA kernel for (op, dtype) fails the test (the
// registry's error names the op, the backend and the dtype): it is never skipped.
// CudaConformanceCoverage fails, without a GPU, for every (op, dtype) the CPU
// registers (less f64) that no test here runs; CudaConformanceHarness checks that the
// comparison can fail and that the CPU backend agrees with itself on every instance.
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cuda/cuda_backend.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/graph/op_cases.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using namespace ::mpc::opcases;  // NOLINT: the case model is this test's vocabulary

absl::StatusOr<Backend*> Gpu() { return ::mpc::testing::SharedGpu(); }
Backend& Cpu() { return ::mpc::testing::SharedCpu(); }

// The float dtypes the GPU trains in: every case whose inputs take the run's dtype
// runs in each of them.
constexpr DType kRunDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
// And in these too, where the CPU registers the case's op for them and the graph
// builds (data movement, comparisons, shapes): integer, bool and FP8 data.
constexpr DType kOtherRunDTypes[] = {DType::kI64,  DType::kI32,    DType::kU8,
                                     DType::kBool, DType::kF8E4M3, DType::kF8E5M2};

// ---------------------------------------------------------------------------------
// Cases for kernels the op-numerics tables do not reach (they check ops against f64
// references; these only need the CPU): mpc's training-step ops (optimizer updates,
// loss scaling, FP8 scaling, running statistics), which update persistent state in
// place (Role::kState: compared after the step); the padding ops; and Cast from and to
// the integer and bool dtypes.

In ScalarF32(const std::string& name, double v) {  // a fed f32 scalar (lr, loss scale, flags)
  In in;
  in.name = name;
  in.role = Role::kFed;
  in.dtype = DType::kF32;
  in.value = Tensor::FromVector<float>({}, {static_cast<float>(v)});
  return in;
}

In FedF32(const std::string& name, const std::vector<float>& v) {
  In in = ScalarF32(name, 0);
  in.shape = {static_cast<int64_t>(v.size())};
  in.value = Tensor::FromVector<float>(in.shape, v);
  return in;
}

// Persistent f32 state: random in [lo, hi], or fixed values.
In StateF32(const std::string& name, const Shape& shape, double lo = -1, double hi = 1) {
  In in = XTyped(name, shape, DType::kF32);
  in.role = Role::kState;
  in.lo = lo;
  in.hi = hi;
  return in;
}
// The bf16/f16 copy of a parameter an update rewrites (lowp_copy=1).
In StateLowp(const std::string& name, const Shape& shape, DType dtype) {
  In in = XTyped(name, shape, dtype);
  in.role = Role::kState;
  return in;
}
In StateF32Values(const std::string& name, const Shape& shape, const std::vector<float>& v) {
  In in = StateF32(name, shape);
  in.value = Tensor::FromVector<float>(shape, v);
  return in;
}

OpCase Make(const std::string& name, const std::string& op, std::vector<In> inputs, bool exact = false) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.inputs = std::move(inputs);
  c.exact = exact;
  c.gradient = false;
  return c;
}

std::vector<OpCase> TrainingStepCases() {
  std::vector<OpCase> cases;
  const Shape p = {5, 6};
  auto sgd = [&](const std::string& name, bool with_buf, float momentum, bool nesterov, float wd, int gate,
                 std::optional<DType> copy = std::nullopt) {
    std::vector<In> in = {StateF32("param", p), XTyped("grad", p, DType::kF32), ScalarF32("lr", 0.1)};
    if (with_buf) in.push_back(StateF32("momentum_buf", p));
    if (copy) in.push_back(StateLowp("param_lowp", p, *copy));
    if (gate >= 0) in.push_back(ScalarF32("found_nonfinite", gate));
    OpCase c = Make(name, "SgdUpdate", in);
    if (copy) c.attrs.Set("lowp_copy", int64_t{1});
    if (momentum != 0) c.attrs.Set("momentum", momentum);
    if (nesterov) c.attrs.Set("nesterov", int64_t{1});
    if (wd != 0) c.attrs.Set("weight_decay", wd);
    if (gate >= 0) c.attrs.Set("gated", int64_t{1});
    c.exact = gate == 1;  // a skipped step leaves everything exactly as it was
    return c;
  };
  cases.push_back(sgd("SgdUpdate_Plain", false, 0, false, 0, -1));
  cases.push_back(sgd("SgdUpdate_Momentum", true, 0.9f, false, 0, -1));
  cases.push_back(sgd("SgdUpdate_NesterovWeightDecay", true, 0.9f, true, 0.01f, -1));
  cases.push_back(sgd("SgdUpdate_GatedClean", true, 0.9f, false, 0, 0));
  cases.push_back(sgd("SgdUpdate_GatedSkipped", true, 0.9f, false, 0, 1));
  cases.push_back(sgd("SgdUpdate_MomentumLowpCopyBf16", true, 0.9f, false, 0, -1, DType::kBF16));

  auto adamw = [&](const std::string& name, float wd, bool custom, int gate, std::optional<DType> copy = std::nullopt) {
    std::vector<In> in = {StateF32("param", p),        XTyped("grad", p, DType::kF32), ScalarF32("lr", 1e-3),
                          StateF32("m", p, -0.1, 0.1), StateF32("v", p, 0, 0.01),      StateF32Values("step", {}, {3})};
    if (copy) in.push_back(StateLowp("param_lowp", p, *copy));
    if (gate >= 0) in.push_back(ScalarF32("found_nonfinite", gate));
    OpCase c = Make(name, "AdamWUpdate", in);
    if (copy) c.attrs.Set("lowp_copy", int64_t{1});
    if (wd != 0) c.attrs.Set("weight_decay", wd);
    if (custom) {
      c.attrs.Set("beta1", 0.8f);
      c.attrs.Set("beta2", 0.99f);
      c.attrs.Set("eps", 1e-6f);
    }
    if (gate >= 0) c.attrs.Set("gated", int64_t{1});
    c.exact = gate == 1;
    return c;
  };
  cases.push_back(adamw("AdamWUpdate_Default", 0, false, -1));
  cases.push_back(adamw("AdamWUpdate_WeightDecayBetasEps", 0.01f, true, -1));
  cases.push_back(adamw("AdamWUpdate_GatedClean", 0.01f, false, 0));
  cases.push_back(adamw("AdamWUpdate_GatedSkipped", 0.01f, false, 1));
  cases.push_back(adamw("AdamWUpdate_LowpCopyBf16", 0.01f, false, -1, DType::kBF16));
  cases.push_back(adamw("AdamWUpdate_GatedLowpCopyF16", 0.01f, false, 0, DType::kF16));

  // Multi-tensor updates (graph/multi_tensor_update.h): parameters of mixed sizes (one
  // spans several 16,384-element chunks and ends in a partial float4, one is 7 elements),
  // mixed copies (none, bf16, f16), per-parameter step counters; 35 parameters need two
  // launches of at most 32.
  const std::vector<Shape> multi_shapes = {{130, 311}, {7}, {64, 33}, {1}, {4096}};
  const std::vector<std::optional<DType>> multi_copies = {std::nullopt, DType::kBF16, DType::kF16, std::nullopt,
                                                          DType::kBF16};
  auto multi = [&](const std::string& name, bool adamw, int tensors, int gate, float momentum = 0.9f) {
    std::vector<In> in = {ScalarF32("lr", adamw ? 1e-3 : 0.1)};
    if (gate >= 0) in.push_back(ScalarF32("found_nonfinite", gate));
    std::vector<int64_t> copies;
    for (int t = 0; t < tensors; ++t) {
      const Shape& shape = multi_shapes[t % multi_shapes.size()];
      const std::optional<DType> copy = multi_copies[t % multi_copies.size()];
      const std::string id = std::to_string(t);
      in.push_back(StateF32("param" + id, shape));
      in.push_back(XTyped("grad" + id, shape, DType::kF32));
      if (adamw) {
        in.push_back(StateF32("m" + id, shape, -0.1, 0.1));
        in.push_back(StateF32("v" + id, shape, 0, 0.01));
        in.push_back(StateF32Values("step" + id, {}, {static_cast<float>(3 + t)}));
      } else if (momentum != 0) {
        in.push_back(StateF32("momentum_buf" + id, shape));
      }
      if (copy) in.push_back(StateLowp("param_lowp" + id, shape, *copy));
      copies.push_back(copy ? 1 : 0);
    }
    OpCase c = Make(name, adamw ? "MultiAdamWUpdate" : "MultiSgdUpdate", in);
    c.attrs.Set("lowp_copies", copies);
    if (adamw) {
      c.attrs.Set("weight_decay", 0.01f);
    } else if (momentum != 0) {
      c.attrs.Set("momentum", momentum);
      c.attrs.Set("nesterov", int64_t{1});
    }
    if (gate >= 0) c.attrs.Set("gated", int64_t{1});
    c.exact = gate == 1;
    return c;
  };
  cases.push_back(multi("MultiSgdUpdate_Plain", false, 5, -1, 0.0f));
  cases.push_back(multi("MultiSgdUpdate_NesterovMixedCopies", false, 5, -1));
  cases.push_back(multi("MultiSgdUpdate_GatedSkipped", false, 5, 1));
  cases.push_back(multi("MultiSgdUpdate_TwoLaunches", false, 35, 0));
  cases.push_back(multi("MultiAdamWUpdate_MixedCopies", true, 5, -1));
  cases.push_back(multi("MultiAdamWUpdate_GatedClean", true, 5, 0));
  cases.push_back(multi("MultiAdamWUpdate_GatedSkipped", true, 5, 1));
  cases.push_back(multi("MultiAdamWUpdate_TwoLaunches", true, 35, -1));

  // Loss scaling: unscale (with the non-finite check), clipping, the scale update.
  {
    OpCase c = Make("UnscaleGradients_Finite", "UnscaleGradients",
                    {ScalarF32("scale", 1000), XTyped("g1", {4, 5}, DType::kF32), XTyped("g2", {7}, DType::kF32)});
    c.inputs[1].lo = c.inputs[2].lo = -3000;
    c.inputs[1].hi = c.inputs[2].hi = 3000;
    cases.push_back(std::move(c));
  }
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  // A power-of-two scale divides exactly; the non-finite elements pass through.
  cases.push_back(Make("UnscaleGradients_Inf", "UnscaleGradients",
                       {ScalarF32("scale", 65536), XTyped("g1", {3, 4}, DType::kF32), FedF32("g2", {1, -inf, 2})},
                       /*exact=*/true));
  cases.push_back(Make("UnscaleGradients_NaN", "UnscaleGradients",
                       {ScalarF32("scale", 0.5), FedF32("g1", {nan, 1, 2}), XTyped("g2", {6}, DType::kF32)},
                       /*exact=*/true));
  cases.push_back(Make("FindNonFinite_Finite", "FindNonFinite",
                       {XTyped("g1", {4, 5}, DType::kF32), XTyped("g2", {7}, DType::kF32)}, /*exact=*/true));
  cases.push_back(Make("FindNonFinite_Inf", "FindNonFinite",
                       {XTyped("g1", {3, 4}, DType::kF32), FedF32("g2", {1, -inf, 2})}, /*exact=*/true));
  cases.push_back(Make("FindNonFinite_NaN", "FindNonFinite",
                       {FedF32("g1", {nan, 1, 2}), XTyped("g2", {6}, DType::kF32)}, /*exact=*/true));
  for (auto [name, max_norm] : std::vector<std::pair<const char*, float>>{{"ClipByGlobalNorm_Clips", 0.5f},
                                                                          {"ClipByGlobalNorm_Within", 100.0f}}) {
    OpCase c = Make(name, "ClipByGlobalNorm", {XTyped("g1", {4, 5}, DType::kF32), XTyped("g2", {6}, DType::kF32)});
    c.attrs.Set("max_norm", max_norm);
    cases.push_back(std::move(c));
  }
  for (auto [name, step, value] :
       std::vector<std::tuple<const char*, int64_t, const char*>>{{"InjectNonFinite_InfThisStep", kRunStep, "inf"},
                                                                  {"InjectNonFinite_NaNThisStep", kRunStep, "nan"},
                                                                  {"InjectNonFinite_OtherStep", kRunStep + 1, "inf"}}) {
    OpCase c = Make(name, "InjectNonFinite", {XTyped("g", {3, 4}, DType::kF32)}, /*exact=*/true);
    c.attrs.Set("step", step);
    c.attrs.Set("value", std::string(value));
    cases.push_back(std::move(c));
  }
  struct Scaler {
    const char* name;
    float scale, tracker, found, min_scale, max_scale;
  };
  for (const Scaler& s : std::vector<Scaler>{{"UpdateLossScale_Counts", 1024, 0, 0, 0, 0},
                                             {"UpdateLossScale_Grows", 1024, 2, 0, 0, 0},
                                             {"UpdateLossScale_GrowsToMax", 1024, 2, 0, 0, 1500},
                                             {"UpdateLossScale_BacksOff", 1024, 1, 1, 0, 0},
                                             {"UpdateLossScale_BacksOffToMin", 1024, 1, 1, 1000, 0}}) {
    OpCase c = Make(s.name, "UpdateLossScale",
                    {StateF32Values("scale", {}, {s.scale}), StateF32Values("growth_tracker", {}, {s.tracker}),
                     ScalarF32("found_nonfinite", s.found)},
                    /*exact=*/true);
    c.attrs.Set("growth_interval", int64_t{3});
    if (s.min_scale) c.attrs.Set("min_scale", s.min_scale);
    if (s.max_scale) c.attrs.Set("max_scale", s.max_scale);
    cases.push_back(std::move(c));
  }
  // Gradient accumulation's hold flag: the scale and tracker stay as they are, overflow or not.
  for (float found : {0.0f, 1.0f}) {
    OpCase c = Make(absl::StrCat("UpdateLossScale_Held", found ? "_Overflow" : ""), "UpdateLossScale",
                    {StateF32Values("scale", {}, {1024}), StateF32Values("growth_tracker", {}, {2}),
                     ScalarF32("found_nonfinite", found), ScalarF32("hold", 1)},
                    /*exact=*/true);
    c.attrs.Set("growth_interval", int64_t{3});
    cases.push_back(std::move(c));
  }
  // Gradient accumulation (the running sum, restarted on a step's first micro-batch) and the
  // weight average, plain and held by the skip flag.
  for (float first : {0.0f, 1.0f}) {
    cases.push_back(Make(absl::StrCat("AccumulateGradient", first ? "_First" : "_Adds"), "AccumulateGradient",
                         {StateF32("acc", p), XTyped("grad", p, DType::kF32), ScalarF32("first", first)},
                         /*exact=*/true));
  }
  for (int gate : {-1, 0, 1}) {
    std::vector<In> in = {StateF32("ema", p), StateF32("param", p)};
    if (gate >= 0) in.push_back(ScalarF32("skip", gate));
    OpCase c = Make(gate < 0 ? "EmaUpdate_Plain"
                    : gate   ? "EmaUpdate_Skipped"
                             : "EmaUpdate_GatedClean",
                    "EmaUpdate", in, /*exact=*/true);  // the same two products and one sum, no FMA, on both backends
    c.attrs.Set("decay", 0.9f);
    if (gate >= 0) c.attrs.Set("gated", int64_t{1});
    cases.push_back(std::move(c));
  }

  // FP8 delayed scaling: quantize (recording the amax), then the scale update.
  for (auto [name, format, scale, history] : std::vector<std::tuple<const char*, const char*, float, bool>>{
           {"Fp8Quantize_E4M3", "e4m3", 64.0f, false},
           {"Fp8Quantize_E5M2_AmaxHistory", "e5m2", 1000.0f, true},
           {"Fp8Quantize_E4M3_Saturating_AmaxHistory", "e4m3", 300.0f, true}}) {
    std::vector<In> in = {X("x", {4, 8}, -3, 3), ScalarF32("scale", scale), ScalarF32("scale_inv", 1.0 / scale)};
    if (history) in.push_back(StateF32Values("amax_history", {4}, {0.5f, 1, 2, 0.25f}));
    OpCase c = Make(name, "Fp8Quantize", in);
    c.attrs.Set("format", std::string(format));
    cases.push_back(std::move(c));
  }
  for (auto [name, algo, margin] : std::vector<std::tuple<const char*, const char*, int64_t>>{
           {"Fp8UpdateScales_Max", "max", 0}, {"Fp8UpdateScales_MostRecent_Margin1", "most_recent", 1}}) {
    std::vector<In> in;
    for (int t = 0; t < 2; ++t) {
      in.push_back(StateF32Values(absl::StrCat("scale", t), {}, {1.0f}));
      in.push_back(StateF32Values(absl::StrCat("scale_inv", t), {}, {1.0f}));
      in.push_back(StateF32(absl::StrCat("amax_history", t), {8}, 0.1, 10));
      in.push_back(StateF32Values(absl::StrCat("last_amax", t), {}, {0.0f}));
    }
    OpCase c = Make(name, "Fp8UpdateScales", in);
    c.attrs.Set("fp8_max", std::vector<float>{448.0f, 57344.0f});
    c.attrs.Set("algo", std::string(algo));
    c.attrs.Set("margin", margin);
    c.attrs.Set("amax_floor", 1e-3f);
    cases.push_back(std::move(c));
  }

  // BatchNormalization's running statistics, in the run's dtype: copied in place.
  {
    In mean = X("running_mean", {6});
    mean.role = Role::kState;
    In var = X("running_var", {6}, 0.5, 1.5);
    var.role = Role::kState;
    cases.push_back(Make("BatchNormStatsUpdate_Channels6", "BatchNormStatsUpdate",
                         {mean, var, X("batch_mean", {6}), X("batch_var", {6}, 0.5, 1.5)}, /*exact=*/true));
  }
  return cases;
}

std::vector<OpCase> PaddingAndCastCases() {
  std::vector<OpCase> cases;
  for (auto [name, from, to] : std::vector<std::tuple<const char*, Shape, Shape>>{
           {"Rank2", {5, 7}, {3, 4}}, {"Rank3_KeepsLeadingDims", {2, 5, 9}, {2, 3, 8}}}) {
    OpCase slice = Make(absl::StrCat("SliceTo_", name), "SliceTo", {X("x", from)}, /*exact=*/true);
    slice.attrs.Set("shape", to);
    cases.push_back(std::move(slice));
    OpCase pad = Make(absl::StrCat("PadTo_", name), "PadTo", {X("x", to)}, /*exact=*/true);
    pad.attrs.Set("shape", from);
    cases.push_back(std::move(pad));
  }
  // Cast between the integer, bool and float dtypes the GPU has. Values stay where
  // every conversion is defined (C++ leaves out-of-range float -> integer undefined):
  // [0, 200] into u8, [-100, 100] elsewhere; bool sources are a fixed pattern.
  const std::vector<DType> ints = {DType::kI64, DType::kI32, DType::kU8, DType::kBool};
  const std::vector<DType> all = {DType::kF32, DType::kBF16, DType::kF16, DType::kI64,
                                  DType::kI32, DType::kU8,   DType::kBool};
  auto cast = [&](DType from, DType to) {
    In x = XTyped("x", {4, 7}, from);
    if (from == DType::kBool) x = Mask("x", {4, 7});
    x.lo = to == DType::kU8 || from == DType::kU8 ? 0 : -100;
    x.hi = to == DType::kU8 || from == DType::kU8 ? 200 : 100;
    auto title = [](DType d) {  // f32 -> F32, as the tables name their casts
      std::string n = DTypeName(d);
      n[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(n[0])));
      return n;
    };
    OpCase c = Make(absl::StrCat("Cast_", title(from), "To", title(to)), "Cast", {x}, /*exact=*/true);
    c.attrs.Set("to", static_cast<int64_t>(DTypeToOnnx(to)));
    c.out_dtypes = {to};
    return c;
  };
  for (DType from : ints) {
    for (DType to : all) {
      if (from != to) cases.push_back(cast(from, to));
    }
  }
  for (DType from : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (DType to : ints) cases.push_back(cast(from, to));
  }
  // The integer forms of the generators the tables check in i64 and in floats.
  {
    OpCase c = Make("ConstantOfShape_I32Shape", "ConstantOfShape", {ConstInts("shape", {2, 3})}, /*exact=*/true);
    c.inputs[0].dtype = DType::kI32;
    c.inputs[0].value = c.inputs[0].value.CastTo(DType::kI32);
    c.attrs.Set("value", 2.5f);
    cases.push_back(std::move(c));
  }
  {
    std::vector<In> in;
    for (auto [name, v] : std::vector<std::pair<const char*, int32_t>>{{"start", -4}, {"limit", 9}, {"delta", 3}}) {
      In s;
      s.name = name;
      s.role = Role::kConst;
      s.dtype = DType::kI32;
      s.value = Tensor::FromVector<int32_t>({}, {v});
      in.push_back(s);
    }
    cases.push_back(Make("Range_I32", "Range", in, /*exact=*/true));
  }
  return cases;
}

// Ops that only the CPU backend has: fuse-softmax makes MaskedSoftmax (and autodiff its
// gradient) only where Capabilities::HasKernel finds both, so on CUDA the unfused chain runs.
bool CpuOnlyOp(const std::string& op) { return op == "MaskedSoftmax" || op == "MaskedSoftmaxGrad"; }

// The op-numerics cases of CPU-only forms: the channels-last ops (mpc_channels_last), which
// the channels-last pass makes only for backends whose capabilities ask for them (the
// CPU's; the CUDA kernels reject the attribute), MatMuls with permuted operands (mpc_perm_*,
// likewise: Capabilities::matmul_permuted_operands), the fused LayerNormalization edges
// (a 16-bit Y from f32 X, LayerNormGrad's addend and epilogue outputs:
// Capabilities::layer_norm_fused_edges; the CUDA kernels reject them), and the CPU-only
// ops above.
// FusedAttention's CUDA kernels are cuDNN's flash attention: rank 4, head dims multiples of
// 8 up to 256 (what fuse-attention makes); the other op cases are the CPU's own.
bool CudnnAttentionShape(const OpCase& c) {
  const size_t q = c.op == "FusedAttentionGrad" ? 1 : 0;
  if (c.inputs.size() < q + 3) return false;
  for (size_t i = q; i < q + 3; ++i) {
    const Shape& s = c.inputs[i].shape;
    if (s.size() != 4 || s.back() % 8 != 0 || s.back() > 256) return false;
  }
  return true;
}

bool CpuOnlyForm(const OpCase& c) {
  const bool attention = c.op == "FusedAttention" || c.op == "FusedAttentionGrad";
  if (attention && !CudnnAttentionShape(c)) return true;
  const bool fused_layer_norm_edge =
      (c.op == "LayerNormalization" && c.attrs.Has("mpc_output_dtype")) ||
      (c.op == "LayerNormGrad" &&
       (c.inputs.size() > 5 || c.attrs.Has("mpc_dx_column_sum") || c.attrs.Has("mpc_narrow_dx_dtype")));
  return c.attrs.GetInt("mpc_channels_last", 0) != 0 || CpuOnlyOp(c.op) || c.attrs.Has("mpc_perm_a") ||
         c.attrs.Has("mpc_perm_b") || c.attrs.Has("mpc_perm_y") || fused_layer_norm_edge;
}

// Every case the conformance tests run: the op-numerics tables, then the above.
// Channels-last convolutions (backends/cuda/kernels_conv.cc runs bf16/f16 convolutions
// NHWC behind the graph's NCHW): every convolution case again with the layout forced to
// NHWC (attribute mpc_conv_layout), and the group-1 cases widened to 8 input and 16 output
// channels, which bf16/f16 run channels-last by themselves, in that automatic choice and
// with NCHW forced.
std::vector<OpCase> ChannelsLastConvCases() {
  std::vector<OpCase> cases;
  auto with_layout = [](OpCase c, const std::string& suffix, const char* layout) {
    c.name += suffix;
    if (layout) c.attrs.Set("mpc_conv_layout", std::string(layout));
    c.gradient = false;
    c.ref = nullptr;  // the CPU backend is the reference here
    return c;
  };
  for (const OpCase& c : AllCases()) {
    const bool conv = c.op == "Conv", grad_input = c.op == "ConvGradInput", grad_weight = c.op == "ConvGradWeight";
    if ((!conv && !grad_input && !grad_weight) || CpuOnlyForm(c)) continue;
    cases.push_back(with_layout(c, "_ForcedNHWC", "nhwc"));
    if (c.attrs.GetInt("group", 1) != 1) continue;
    // Inputs: Conv (X, W[, B]), ConvGradInput (dY, W), ConvGradWeight (dY, X).
    OpCase wide = with_layout(c, "_Wide8x16", nullptr);
    constexpr int64_t kC = 8, kM = 16;
    if (conv) {
      wide.inputs[0].shape[1] = kC;
      wide.inputs[1].shape[0] = kM;
      wide.inputs[1].shape[1] = kC;
      if (wide.inputs.size() > 2) wide.inputs[2].shape[0] = kM;
    } else {
      wide.inputs[0].shape[1] = kM;
      if (grad_input) {
        wide.inputs[1].shape[0] = kM;
        wide.inputs[1].shape[1] = kC;
        std::vector<int64_t> x_shape = wide.attrs.GetInts("input_shape", {});
        x_shape[1] = kC;
        wide.attrs.Set("input_shape", x_shape);
      } else {
        wide.inputs[1].shape[1] = kC;
      }
    }
    cases.push_back(wide);
    cases.push_back(with_layout(wide, "_ForcedNCHW", "nchw"));
  }
  return cases;
}

const std::vector<OpCase>& ConformanceCases() {
  static const std::vector<OpCase>* cases = [] {
    auto* all = new std::vector<OpCase>();
    for (const OpCase& c : AllCases()) {
      if (CpuOnlyForm(c)) continue;
      all->push_back(c);
      // The gradient cases run in f32, which CUDA's FusedAttention lacks; its backward is
      // the FusedAttentionGrad cases' (bf16, f16) and cuda_attention_test.cc's.
      if (c.op == "FusedAttention") all->back().gradient = false;
    }
    for (auto family : {TrainingStepCases, PaddingAndCastCases, ChannelsLastConvCases}) {
      for (OpCase& c : family()) all->push_back(std::move(c));
    }
    return all;
  }();
  return *cases;
}

// ---------------------------------------------------------------------------------
// Which (case, run dtype) pairs run.

struct ConformanceCase {
  OpCase c;
  DType run = DType::kF32;  // the dtype inputs without a fixed dtype take
};

void PrintTo(const ConformanceCase& p, std::ostream* os) { *os << p.c.name << " in " << DTypeName(p.run); }

// The dtype input spec i has in a run in `run`.
DType SpecDType(const OpCase& c, size_t i, DType run) {
  const In& in = c.inputs[i];
  if (in.same_as >= 0) return SpecDType(c, static_cast<size_t>(in.same_as), run);
  return in.dtype.value_or(run);
}

// The dtype the node's kernel is looked up by (KernelDType: its first input's).
DType KernelDTypeOf(const OpCase& c, DType run) { return c.inputs.empty() ? run : SpecDType(c, 0, run); }

// Whether the run dtype changes the graph: some input takes it.
bool FollowsRunDType(const OpCase& c) {
  for (const In& in : c.inputs) {
    if (in.same_as < 0 && !in.dtype) return true;
  }
  return false;
}

// f64 stays on the CPU: a case that feeds or declares an f64 tensor is not the GPU's.
bool TouchesF64(const OpCase& c, DType run) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (SpecDType(c, i, run) == DType::kF64) return true;
  }
  for (const std::optional<DType>& d : c.out_dtypes) {
    if (d == DType::kF64) return true;
  }
  return false;
}

// Fresh inputs: the case's value ranges, a seed of this test's own per (case, dtype),
// and MPC_CONFORMANCE_SEED mixed in when set.
constexpr uint64_t kConformanceSalt = 0x6a09e667f3bcc908ull;

uint64_t ConformanceSeed(const OpCase& c, DType run) {
  uint64_t seed = HashName(c.name) ^ kConformanceSalt ^ (0x9e3779b97f4a7c15ull * (static_cast<uint64_t>(run) + 1));
  if (const char* env = std::getenv("MPC_CONFORMANCE_SEED")) seed ^= HashName(env) * 0xbf58476d1ce4e5b9ull;
  return seed;
}

// MakeInputs, except that in an integer or bool run the inputs that take the run's
// dtype are random integers (u8 [0, 255], bool 0/1, else [-100, 100]) rather than
// [lo, hi] floats truncated to mostly zeros.
std::vector<Tensor> ConformanceInputs(const OpCase& c, DType run, uint64_t seed) {
  std::vector<Tensor> in = MakeInputs(c, run, seed);
  if (IsFloating(run)) return in;
  const double lo = run == DType::kI64 || run == DType::kI32 ? -100 : 0;
  const double hi = run == DType::kU8 ? 256 : run == DType::kBool ? 2 : 101;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& spec = c.inputs[i];
    if (spec.same_as >= 0) {
      in[i] = in[spec.same_as];
      continue;
    }
    const bool random = spec.role == Role::kFloat || (spec.role == Role::kState && spec.value.empty());
    if (!random || spec.dtype) continue;
    Tensor x = ::mpc::testing::RandomTensor(DType::kF64, spec.shape, seed + 7919 * (i + 1), lo, hi);
    for (int64_t k = 0; k < x.num_elements(); ++k) x.data<double>()[k] = std::floor(x.data<double>()[k]);
    in[i] = x.CastTo(run);
  }
  return in;
}

// Whether the CPU can run the case in `run`: it registers the kernel, and the graph
// builds (the op's type rules accept the dtype).
bool CpuRuns(const OpCase& c, DType run) {
  if (!Cpu().kernels().Has(c.op, "cpu", KernelDTypeOf(c, run))) return false;
  return BuildOpGraph(c, ConformanceInputs(c, run, ConformanceSeed(c, run))).ok();
}

std::vector<ConformanceCase> Instances(bool gradient) {
  std::vector<ConformanceCase> out;
  for (const OpCase& c : ConformanceCases()) {
    if (gradient && !c.gradient) continue;
    std::vector<DType> runs = {DType::kF32};  // gradients in f32; fixed input dtypes: one graph
    if (!gradient && FollowsRunDType(c)) {
      runs.assign(std::begin(kRunDTypes), std::end(kRunDTypes));
      for (DType d : kOtherRunDTypes) {
        if (CpuRuns(c, d)) runs.push_back(d);
      }
    }
    for (DType run : runs) {
      // cuDNN's fused attention is 16-bit only (the registry coverage test's exemption).
      const bool attention = c.op == "FusedAttention" || c.op == "FusedAttentionGrad";
      if (attention && run != DType::kBF16 && run != DType::kF16) continue;
      if (!TouchesF64(c, run)) out.push_back({c, run});
    }
  }
  return out;
}

std::string InstanceName(const ::testing::TestParamInfo<ConformanceCase>& info) {
  const ConformanceCase& p = info.param;
  return absl::StrCat(p.c.name, "_", DTypeName(FollowsRunDType(p.c) ? p.run : KernelDTypeOf(p.c, p.run)));
}

// ---------------------------------------------------------------------------------
// The comparison.

// docs/numerics.md's tolerance (||out - ref|| / ||ref||) for an output of dtype `d`.
double Tolerance(DType d) {
  switch (d) {
    case DType::kBF16:
      return kBf16Tol;
    case DType::kF16:
      return kF16Tol;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return 1e-1;
    default:
      return kF32Tol;
  }
}

// Data movement, integer and bool outputs, and Dropout (same RNG and scale on both
// backends) must agree value for value; everything else within the dtype's tolerance.
bool ExactCase(const OpCase& c) { return c.exact || c.op == "Dropout"; }

// got[i] (CUDA) against want[i] (CPU): dtype, shape, then value for value (exact;
// NaN only where the CPU has NaN) or finite and within the relative tolerance of the
// output's dtype. `names` labels the outputs in messages.
::testing::AssertionResult MatchesCpu(const std::vector<Tensor>& got, const std::vector<Tensor>& want, bool exact,
                                      const std::vector<std::string>& names, bool tf32 = false) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "CUDA produced " << got.size() << " outputs, the CPU " << want.size();
  }
  bool failed = false;
  std::ostringstream msg;
  for (size_t i = 0; i < want.size(); ++i) {
    const std::string name = i < names.size() ? names[i] : absl::StrCat("output ", i);
    const Tensor& g = got[i];
    const Tensor& w = want[i];
    if (g.dtype() != w.dtype() || g.shape() != w.shape()) {
      failed = true;
      msg << "\n  " << name << ": CUDA " << DTypeName(g.dtype()) << ShapeToString(g.shape()) << ", CPU "
          << DTypeName(w.dtype()) << ShapeToString(w.shape());
      continue;
    }
    const int64_t n = w.num_elements();
    if (exact || !IsFloating(w.dtype())) {
      int64_t differ = 0;
      std::ostringstream first;
      for (int64_t k = 0; k < n; ++k) {
        const double a = g.GetAsDouble(k), b = w.GetAsDouble(k);
        // A NaN agrees only with a NaN in the same place (InjectNonFinite, unscaling).
        if (a == b || (std::isnan(a) && std::isnan(b))) continue;
        if (++differ <= 5) first << " [" << k << "] cuda " << a << " cpu " << b << ";";
      }
      if (differ) {
        failed = true;
        msg << "\n  " << name << " (" << DTypeName(w.dtype()) << ", must match exactly): " << differ << " of " << n
            << " elements differ:" << first.str();
      }
      continue;
    }
    double diff2 = 0, norm2 = 0, worst = -1;
    int64_t worst_k = 0, non_finite = -1;
    for (int64_t k = 0; k < n; ++k) {
      const double a = g.GetAsDouble(k), b = w.GetAsDouble(k);
      if (!std::isfinite(a) || !std::isfinite(b)) {
        non_finite = k;
        break;
      }
      diff2 += (a - b) * (a - b);
      norm2 += b * b;
      if (std::abs(a - b) > worst) {
        worst = std::abs(a - b);
        worst_k = k;
      }
    }
    if (non_finite >= 0) {
      failed = true;
      msg << "\n  " << name << ": element " << non_finite << " is cuda " << g.GetAsDouble(non_finite) << ", cpu "
          << w.GetAsDouble(non_finite);
      continue;
    }
    const double err = std::sqrt(diff2) / std::max(std::sqrt(norm2), std::numeric_limits<double>::min());
    // A TF32 case: the tensor cores' operand conversion need not round as the CPU's
    // emulation does (round to nearest even), so CUDA is held to the tf32 tolerance.
    const double tol = tf32 && w.dtype() == DType::kF32 ? kTf32Tol : Tolerance(w.dtype());
    if (!(err <= tol)) {
      failed = true;
      msg << "\n  " << name << " (" << DTypeName(w.dtype()) << "): relative error " << err << " > " << tol
          << "; worst element " << worst_k << ": cuda " << g.GetAsDouble(worst_k) << ", cpu " << w.GetAsDouble(worst_k);
    }
  }
  if (failed) return ::testing::AssertionFailure() << "CUDA differs from the CPU backend:" << msg.str();
  return ::testing::AssertionSuccess();
}

// sqrt(sum x^2) over every element, in f64.
double L2Norm(const Tensor& t) {
  double sum = 0.0;
  for (int64_t k = 0; k < t.num_elements(); ++k) sum += t.GetAsDouble(k) * t.GetAsDouble(k);
  return std::sqrt(sum);
}

// RunCase's results: the node's outputs, then the state it updated in place.
std::vector<std::string> OutputNames(const OpCase& c, size_t n) {
  std::vector<std::string> states;
  for (const In& in : c.inputs) {
    if (in.role == Role::kState && in.same_as < 0) states.push_back("state " + in.name + " after the step");
  }
  std::vector<std::string> names;
  for (size_t i = 0; i + states.size() < n; ++i) names.push_back(absl::StrCat("output ", i));
  names.insert(names.end(), states.begin(), states.end());
  return names;
}

// {loss, dL/d<input>...} for a gradient case.
std::vector<std::string> GradientNames(const OpCase& c) {
  std::vector<std::string> names = {"loss"};
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].role == Role::kFloat && c.inputs[i].same_as < 0) names.push_back("dL/d" + c.inputs[i].name);
  }
  return names;
}

// ---------------------------------------------------------------------------------
// The conformance tests: one per (case, run dtype).

class CudaForward : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(CudaForward, MatchesCpuBackend) {
  const OpCase& c = GetParam().c;
  const DType run = GetParam().run;
  const uint64_t seed = ConformanceSeed(c, run);
  SCOPED_TRACE(absl::StrCat(c.op, " (case ", c.name, ") in ", DTypeName(run), ", kernel dtype ",
                            DTypeName(KernelDTypeOf(c, run)), ", input seed ", seed));
  const std::vector<Tensor> inputs = ConformanceInputs(c, run, seed);
  auto want = RunCase(c, Cpu(), inputs);
  ASSERT_TRUE(want.ok()) << "the CPU reference run failed: " << want.status();
  MPC_GPU_OR_SKIP(gpu);
  auto got = RunCase(c, gpu, inputs);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(MatchesCpu(*got, *want, ExactCase(c), OutputNames(c, want->size()), c.tf32));
}

INSTANTIATE_TEST_SUITE_P(, CudaForward, ::testing::ValuesIn(Instances(/*gradient=*/false)), InstanceName);

class CudaGradient : public ::testing::TestWithParam<ConformanceCase> {};

TEST_P(CudaGradient, MatchesCpuBackend) {
  const OpCase& c = GetParam().c;
  const DType run = GetParam().run;
  const uint64_t seed = ConformanceSeed(c, run) ^ 0x9d;  // not the forward test's inputs
  SCOPED_TRACE(absl::StrCat(c.op, " (case ", c.name, ") backward in ", DTypeName(run), ", input seed ", seed));
  const std::vector<Tensor> inputs = ConformanceInputs(c, run, seed);
  auto want = RunGradientCase(c, Cpu(), inputs, run);
  ASSERT_TRUE(want.ok()) << "the CPU reference run failed: " << want.status();
  MPC_GPU_OR_SKIP(gpu);
  auto got = RunGradientCase(c, gpu, inputs, run);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_FALSE(want->empty());
  ASSERT_EQ(got->size(), want->size());
  // The loss is one number, a sum whose terms may cancel (L = -0.58 from thousands of
  // terms): its relative error is not the forward tolerance. Outputs within that
  // tolerance, ||dout|| <= tol ||out||, move L by at most tol * sum_k ||out_k|| ||R_k||
  // (Cauchy-Schwarz), the bound it is held to; the gradients keep the relative one.
  auto forward = RunCase(c, Cpu(), inputs);
  ASSERT_TRUE(forward.ok()) << "the CPU forward run failed: " << forward.status();
  double loss_bound = 0.0;
  for (int k : c.loss_outputs) {
    const Tensor& out = forward->at(static_cast<size_t>(k));
    loss_bound += Tolerance(run) * L2Norm(out) * L2Norm(opcases::LossWeights(c, k, out.shape()));
  }
  const double loss_got = got->front().GetAsDouble(0), loss_want = want->front().GetAsDouble(0);
  EXPECT_TRUE(std::isfinite(loss_got) && std::abs(loss_got - loss_want) <= loss_bound)
      << "loss: cuda " << loss_got << ", cpu " << loss_want << ", bound " << loss_bound;
  const std::vector<std::string> names = GradientNames(c);
  EXPECT_TRUE(MatchesCpu(std::vector<Tensor>(got->begin() + 1, got->end()),
                         std::vector<Tensor>(want->begin() + 1, want->end()), /*exact=*/false,
                         std::vector<std::string>(names.begin() + 1, names.end())));
}

INSTANTIATE_TEST_SUITE_P(, CudaGradient, ::testing::ValuesIn(Instances(/*gradient=*/true)), InstanceName);

// ---------------------------------------------------------------------------------
// Coverage: every (op, dtype) kernel the CPU registers, f64 aside, is the kernel of at
// least one CudaForward test (the dtype being the node's first input's). Needs no GPU.

// Registrations that no graph looks up by (op, first input's dtype), with the reason.
// Where is found by its bool condition; it is registered under every dtype so that
// autocast's Capabilities::HasKernel sees it in bf16/f16, so its data dtype (input 1)
// is what a case exercises.
constexpr std::pair<const char*, int> kLookedUpByInput[] = {{"Where", 1}};
// The CPU's Cast rejects FP8 (Unimplemented: FP8 goes through the fp8 pass's quantize
// ops), so there is nothing to compare a CUDA Cast to or from FP8 with. The collectives
// need a job (a Communicator on each backend, NCCL on CUDA): cuda_collective_test.cc runs
// them in a one-rank NCCL job, and the CPU's in a 2-rank MPI job (data_parallel_test.cc).
// FusedAttention has no f32 CUDA kernel (cuDNN's fused attention is 16-bit; the registry
// coverage test exempts it), so its f32 CPU kernel has nothing to be compared with.
bool Incomparable(const std::string& op, const std::string& dtype) {
  if ((op == "FusedAttention" || op == "FusedAttentionGrad") && dtype == "f32") return true;
  if (op == "AllReduce" || op == "AllReduceInPlace" || op == "ReduceScatter" || op == "Shard" ||
      op == "AllGatherInPlace" || op == "AllGather") {
    return true;
  }
  return op == "Cast" && (dtype == "f8e4m3" || dtype == "f8e5m2");
}

TEST(CudaConformanceCoverage, EveryCpuKernelButF64HasAConformanceTest) {
  std::set<std::pair<std::string, std::string>> exercised;
  for (const ConformanceCase& p : Instances(/*gradient=*/false)) {
    exercised.insert({p.c.op, DTypeName(KernelDTypeOf(p.c, p.run))});
    for (const auto& [op, input] : kLookedUpByInput) {
      if (p.c.op == op && input < static_cast<int>(p.c.inputs.size())) {
        exercised.insert({p.c.op, DTypeName(SpecDType(p.c, input, p.run))});
      }
    }
  }
  const auto cpu = Cpu().kernels().Entries("cpu");
  ASSERT_GE(cpu.size(), 50u) << "the CPU registry lists suspiciously few kernels";
  std::map<std::string, std::vector<std::string>> missing;  // op -> dtypes
  int count = 0;
  for (const auto& [op, dtype] : cpu) {
    if (dtype == "f64" || exercised.count({op, dtype}) || Incomparable(op, dtype) || CpuOnlyOp(op)) continue;
    missing[op].push_back(dtype);
    ++count;
  }
  std::vector<std::string> lines;
  for (const auto& [op, dtypes] : missing) lines.push_back(absl::StrCat(op, " (", absl::StrJoin(dtypes, " "), ")"));
  EXPECT_TRUE(missing.empty()) << count << " (op, dtype) kernels the CPU registers are run by no conformance test "
                               << "(add a case to tests/graph/*_op_cases.cc, or to this file's tables for ops "
                               << "without an f64 reference, whose first input has that dtype): "
                               << absl::StrJoin(lines, ", ");
}

// ---------------------------------------------------------------------------------
// The harness itself, without a GPU.

TEST(CudaConformanceHarness, RejectsWhatDiffers) {
  Tensor ref = Tensor::FromVector<double>({4}, {1.0, -2.0, 3.0, 0.5}).CastTo(DType::kF32);
  EXPECT_TRUE(MatchesCpu({ref}, {ref}, false, {"y"}));
  EXPECT_TRUE(MatchesCpu({ref}, {ref}, true, {"y"}));
  // 1e-4 relative in one element: inside bf16's tolerance, outside f32's.
  Tensor off = Tensor::FromVector<double>({4}, {1.0, -2.0, 3.0 * (1 + 1e-4), 0.5}).CastTo(DType::kF32);
  EXPECT_FALSE(MatchesCpu({off}, {ref}, false, {"y"}));
  EXPECT_FALSE(MatchesCpu({off}, {ref}, true, {"y"}));
  EXPECT_TRUE(MatchesCpu({off.CastTo(DType::kBF16)}, {ref.CastTo(DType::kBF16)}, false, {"y"}));
  Tensor nan = ref;
  nan.data<float>()[1] = NAN;
  // NaN never passes a tolerance; exactly, it agrees only with a NaN in its place.
  EXPECT_FALSE(MatchesCpu({nan}, {ref}, false, {"y"}));
  EXPECT_FALSE(MatchesCpu({nan}, {nan}, false, {"y"}));
  EXPECT_FALSE(MatchesCpu({nan}, {ref}, true, {"y"}));
  EXPECT_FALSE(MatchesCpu({ref}, {nan}, true, {"y"}));
  EXPECT_TRUE(MatchesCpu({nan}, {nan}, true, {"y"}));
  // Integer outputs are exact even when the case is not.
  Tensor i = Tensor::FromVector<int64_t>({3}, {1, 2, 3});
  Tensor j = Tensor::FromVector<int64_t>({3}, {1, 2, 4});
  EXPECT_FALSE(MatchesCpu({j}, {i}, false, {"indices"}));
  // Dtype, shape and output-count mismatches.
  EXPECT_FALSE(MatchesCpu({ref.CastTo(DType::kBF16)}, {ref}, false, {"y"}));
  EXPECT_FALSE(
      MatchesCpu({Tensor::FromVector<double>({2, 2}, {1.0, -2.0, 3.0, 0.5}).CastTo(DType::kF32)}, {ref}, false, {"y"}));
  EXPECT_FALSE(MatchesCpu({}, {ref}, false, {"y"}));
  // All-zero on both sides agrees (max(||cpu||, tiny) keeps the ratio defined).
  Tensor zeros = Tensor::FromVector<double>({2}, {0.0, 0.0}).CastTo(DType::kF32);
  EXPECT_TRUE(MatchesCpu({zeros}, {zeros}, false, {"y"}));
  EXPECT_FALSE(MatchesCpu({ref.CastTo(DType::kF32)},
                          {Tensor::FromVector<double>({4}, {0, 0, 0, 0}).CastTo(DType::kF32)}, false, {"y"}));
}

TEST(CudaConformanceHarness, InstancesCoverEveryCaseOutsideF64) {
  std::set<std::string> forward, gradient, names;
  for (const ConformanceCase& p : Instances(false)) forward.insert(p.c.name);
  for (const ConformanceCase& p : Instances(true)) gradient.insert(p.c.name);
  for (const OpCase& c : ConformanceCases()) {
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    if (TouchesF64(c, DType::kF32) && TouchesF64(c, DType::kBF16)) continue;
    EXPECT_TRUE(forward.count(c.name)) << c.name;
    if (c.gradient && !TouchesF64(c, DType::kF32)) {
      EXPECT_TRUE(gradient.count(c.name)) << c.name;
    }
  }
  EXPECT_GE(forward.size(), AllCases().size() / 2);
  // Integer, bool and FP8 runs of the data-movement cases exist.
  std::set<std::string> instance_names;
  for (const ConformanceCase& p : Instances(false)) {
    instance_names.insert(InstanceName(::testing::TestParamInfo<ConformanceCase>(p, 0)));
  }
  for (const char* name :
       {"Transpose_Perm201_i64", "Transpose_Perm201_bool", "Transpose_Perm201_f8e4m3", "SliceTo_Rank2_u8",
        "Gemm_tA0_tB0_CN_alpha1_beta1_bf16", "SgdUpdate_Momentum_f32", "Cast_I64ToBf16_i64"}) {
    EXPECT_TRUE(instance_names.count(name)) << name;
  }
}

TEST(CudaConformanceHarness, InputsAreFreshAndNotZero) {
  for (const OpCase& c : AllCases()) {
    if (!FollowsRunDType(c)) continue;
    const std::vector<Tensor> ours = ConformanceInputs(c, DType::kF32, ConformanceSeed(c, DType::kF32));
    const std::vector<Tensor> numerics = MakeInputs(c, DType::kF32, CaseSeed(c, DType::kF32));
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].role != Role::kFloat || c.inputs[i].same_as >= 0 || ours[i].num_elements() == 0) continue;
      double norm = 0;
      bool same = true;
      for (int64_t k = 0; k < ours[i].num_elements(); ++k) {
        norm += std::abs(ours[i].GetAsDouble(k));
        same = same && ours[i].GetAsDouble(k) == numerics[i].GetAsDouble(k);
      }
      EXPECT_GT(norm, 0) << c.name << " input " << c.inputs[i].name << " is all zeros";
      EXPECT_FALSE(same && ours[i].num_elements() > 1)
          << c.name << " input " << c.inputs[i].name << " is op_numerics_test's, not fresh";
    }
  }
}

// In-place state is read back after the step, not as it was fed.
TEST(CudaConformanceHarness, StateIsComparedAfterTheStep) {
  auto find = [](const std::string& name) -> const OpCase& {
    for (const OpCase& c : ConformanceCases()) {
      if (c.name == name) return c;
    }
    ADD_FAILURE() << "no case " << name;
    return ConformanceCases().front();
  };
  const OpCase& grow = find("UpdateLossScale_Grows");
  auto out = RunCase(grow, Cpu(), ConformanceInputs(grow, DType::kF32, 1));
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 2u);
  EXPECT_EQ((*out)[0].GetAsDouble(0), 2048.0);  // scale, grown at the interval
  EXPECT_EQ((*out)[1].GetAsDouble(0), 0.0);     // growth tracker, reset
  EXPECT_EQ(OutputNames(grow, out->size()),
            (std::vector<std::string>{"state scale after the step", "state growth_tracker after the step"}));
  const OpCase& sgd = find("SgdUpdate_Plain");
  const std::vector<Tensor> in = ConformanceInputs(sgd, DType::kF32, 2);
  auto stepped = RunCase(sgd, Cpu(), in);
  ASSERT_TRUE(stepped.ok()) << stepped.status();
  ASSERT_EQ(stepped->size(), 1u);
  for (int64_t k = 0; k < in[0].num_elements(); ++k) {  // param - lr * grad
    EXPECT_FLOAT_EQ((*stepped)[0].GetAsDouble(k), in[0].GetAsDouble(k) - 0.1f * in[1].data<float>()[k]) << k;
  }
}

// Every instance through the very path the CUDA tests take, on the CPU twice: the
// graphs build and run, and the CPU is deterministic enough to be compared with exactly
// where the CUDA tests demand it (Dropout's RNG, data movement).
TEST(CudaConformanceHarness, CpuBackendAgreesWithItself) {
  for (bool gradient : {false, true}) {
    for (const ConformanceCase& p : Instances(gradient)) {
      SCOPED_TRACE(absl::StrCat(gradient ? "gradient " : "forward ", p.c.name, " in ", DTypeName(p.run)));
      const std::vector<Tensor> inputs = ConformanceInputs(p.c, p.run, ConformanceSeed(p.c, p.run));
      auto a = gradient ? RunGradientCase(p.c, Cpu(), inputs, p.run) : RunCase(p.c, Cpu(), inputs);
      auto b = gradient ? RunGradientCase(p.c, Cpu(), inputs, p.run) : RunCase(p.c, Cpu(), inputs);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      EXPECT_TRUE(MatchesCpu(*a, *b, gradient ? false : ExactCase(p.c),
                             gradient ? GradientNames(p.c) : OutputNames(p.c, b->size())));
    }
  }
}

}  // namespace
}  // namespace mpc
