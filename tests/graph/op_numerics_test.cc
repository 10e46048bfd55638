// Op numerics, after ggml's test-backend-ops: one table of cases (op, attributes,
// inputs, a float64 reference written here as plain loops) and one harness that runs
// every case twice:
//   OpForward   the op on the CPU backend in f32, f64, bf16 and f16 against the
//               reference, with docs/numerics.md's tolerances (||out - ref|| / ||ref||: f32
//               < 1e-5, bf16 < 1e-2, f16 < 2e-3; NaN never passes). A bf16/f16 run
//               rounds the inputs to the format first and the reference computes in
//               f64 from those rounded values, so the check measures the kernel alone;
//               and, sharper, every bf16/f16 output element must be within 1 ulp of
//               the reference rounded to the format ("compute in f32, round once");
//   OpGradient  the op in f64 under a scalar loss L = sum(out * R) (R fixed, random),
//               autodiff's gradient of L against central finite differences.
// TF32 cases (mpc_tf32 = 1, f32 operands) are held to 1e-6 against a reference on the
// operands rounded to TF32 (the CPU emulates TF32 exactly), and OpForwardTf32 checks that
// they differ from true f32.
// Backward-only ops (ReluGrad, SoftmaxGrad, ReduceSumTo...) have forward cases too, so
// the kernels autocast paints for the backward pass are checked in every dtype.
// OpCoverage fails when an op in the registry has no forward case, or is
// differentiable and has no gradient case. The OpHarness* suites check that the
// checks themselves can fail (a wrong reference, a wrong gradient, a missing op).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iostream>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "graph/graph.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"
#include "tests/graph/op_cases.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::RandomTensor;
using ::mpc::testing::RelativeError;

using namespace ::mpc::opcases;  // NOLINT: the case model is this test's vocabulary

std::vector<OpCase> ForwardCases() {
  std::vector<OpCase> out;
  for (const OpCase& c : AllCases()) {
    if (c.forward()) out.push_back(c);
  }
  return out;
}

std::vector<OpCase> GradientCases() {
  std::vector<OpCase> out;
  for (const OpCase& c : AllCases()) {
    if (c.gradient) out.push_back(c);
  }
  return out;
}

// ---------------------------------------------------------------------------------
// The harness.

Backend& Cpu() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

// The one-node graphs themselves are built and run by op_case_util.cc (shared with
// tests/gpu/cuda_conformance_test.cc); every program here runs on the CPU.
absl::StatusOr<std::unique_ptr<Executor>> Compile(const Graph& graph) { return CompileOn(graph, Cpu()); }

struct ForwardRun {
  std::vector<Tensor> inputs;   // as f64, for the reference
  std::vector<Tensor> outputs;  // every output of the node
};

absl::StatusOr<ForwardRun> RunForward(const OpCase& c, DType float_dtype) {
  const std::vector<Tensor> inputs = MakeInputs(c, float_dtype, CaseSeed(c, float_dtype));
  auto outputs = RunCase(c, Cpu(), inputs);
  if (!outputs.ok()) return outputs.status();
  ForwardRun run;
  for (const Tensor& t : inputs) run.inputs.push_back(t.CastTo(DType::kF64));
  run.outputs = std::move(*outputs);
  return run;
}

// Checks outputs[i] against ref[i]: dtype, shape, no NaN, relative error below tol
// (tol 0: bit-exact values).
::testing::AssertionResult CompareOutputs(const std::vector<Tensor>& got, const std::vector<Tensor>& ref,
                                          const std::vector<DType>& dtypes, double tol) {
  if (got.size() < ref.size()) {
    return ::testing::AssertionFailure() << "the op produced " << got.size() << " outputs, the reference "
                                         << ref.size();
  }
  for (size_t i = 0; i < ref.size(); ++i) {
    if (got[i].dtype() != dtypes[i]) {
      return ::testing::AssertionFailure()
             << "output " << i << " has dtype " << DTypeName(got[i].dtype()) << ", expected " << DTypeName(dtypes[i]);
    }
    if (got[i].shape() != ref[i].shape()) {
      return ::testing::AssertionFailure() << "output " << i << " has shape " << ShapeToString(got[i].shape())
                                           << ", the reference " << ShapeToString(ref[i].shape());
    }
    for (int64_t k = 0; k < got[i].num_elements(); ++k) {
      if (!std::isfinite(got[i].GetAsDouble(k))) {
        return ::testing::AssertionFailure() << "output " << i << " element " << k << " is " << got[i].GetAsDouble(k);
      }
    }
    const double err = RelativeError(got[i], ref[i]);
    if (!(err <= tol)) {
      std::ostringstream worst;
      double max_diff = -1;
      for (int64_t k = 0; k < ref[i].num_elements(); ++k) {
        const double d = std::abs(got[i].GetAsDouble(k) - ref[i].GetAsDouble(k));
        if (d > max_diff) {
          max_diff = d;
          worst.str("");
          worst << "element " << k << ": got " << got[i].GetAsDouble(k) << ", reference " << ref[i].GetAsDouble(k);
        }
      }
      return ::testing::AssertionFailure()
             << "output " << i << ": relative error " << err << " > " << tol << "; worst " << worst.str();
    }
  }
  return ::testing::AssertionSuccess();
}

// A 16-bit kernel computes in f32 from its (already rounded) inputs and rounds each
// output once, so every element is the f64 reference rounded to the format, give or
// take one ulp where the f32 evaluation lands across a rounding boundary. An f16/bf16
// accumulator, or a second rounding, shows up here long before the norm tolerance.
// The exception is an element that is the small difference of much larger terms (a
// normalised value next to its channel's mean): it carries the f32 evaluation's absolute
// error, which is set by the terms, not by the element. Elements within 2^-20 of the
// largest |output| of the reference (8 f32 ulps of it; a 16-bit ulp of it is 2^-8 or
// 2^-11) are held to that instead.
::testing::AssertionResult CheckRoundedOnce(const std::vector<Tensor>& got, const std::vector<Tensor>& ref,
                                            DType dtype) {
  auto ordered = [](uint16_t h) -> int64_t { return (h & 0x8000) ? -int64_t(h & 0x7fff) : int64_t(h & 0x7fff); };
  for (size_t i = 0; i < ref.size(); ++i) {
    if (got[i].dtype() != dtype) continue;  // fixed-dtype outputs (masks, f32 products)
    double largest = 0;
    for (int64_t k = 0; k < ref[i].num_elements(); ++k) largest = std::max(largest, std::abs(ref[i].GetAsDouble(k)));
    const double f32_noise = std::ldexp(largest, -20);
    for (int64_t k = 0; k < ref[i].num_elements(); ++k) {
      if (std::abs(got[i].GetAsDouble(k) - ref[i].GetAsDouble(k)) <= f32_noise) continue;
      const double want = RoundToFormat(ref[i].GetAsDouble(k), dtype);
      const Tensor want_t = Tensor::FromVector<double>({}, {want}).CastTo(dtype);  // exact: want is in the format
      const int64_t ulps = std::abs(ordered(got[i].data<uint16_t>()[k]) - ordered(want_t.data<uint16_t>()[0]));
      if (ulps > 1) {
        return ::testing::AssertionFailure()
               << "output " << i << " element " << k << ": got " << got[i].GetAsDouble(k) << ", the reference "
               << ref[i].GetAsDouble(k) << " rounds to " << want << " (" << ulps << " ulp apart)";
      }
    }
  }
  return ::testing::AssertionSuccess();
}

// docs/numerics.md's tolerance for a run in `float_dtype` (f64: the reference dtype itself).
double Tolerance(DType float_dtype) {
  switch (float_dtype) {
    case DType::kF64:
      return kF64Tol;
    case DType::kBF16:
      return kBf16Tol;
    case DType::kF16:
      return kF16Tol;
    default:
      return kF32Tol;
  }
}

::testing::AssertionResult CheckForward(const OpCase& c, DType float_dtype) {
  auto run = RunForward(c, float_dtype);
  if (!run.ok()) return ::testing::AssertionFailure() << run.status();
  const std::vector<Tensor> ref = c.ref(run->inputs);
  std::vector<DType> dtypes;
  for (size_t i = 0; i < ref.size(); ++i) {
    dtypes.push_back(i < c.out_dtypes.size() && c.out_dtypes[i] ? *c.out_dtypes[i] : float_dtype);
  }
  // Kernels compute in at least f32 from the inputs they are given (the reference sees
  // the same values), so the error is set by the outputs' dtype: an f32 product of bf16
  // operands (mpc_output_dtype) is held to f32's tolerance, in an f64 run as well.
  double tol = 0;
  for (DType d : dtypes) {
    if (IsFloating(d)) tol = std::max(tol, Tolerance(d));
  }
  // TF32 is emulated exactly: the reference rounds the operands as the kernel does.
  if (c.tf32) tol = kTf32EmulationTol;
  ::testing::AssertionResult close = CompareOutputs(run->outputs, ref, dtypes, c.exact ? 0.0 : tol);
  if (!close || (float_dtype != DType::kBF16 && float_dtype != DType::kF16)) return close;
  return CheckRoundedOnce(run->outputs, ref, float_dtype);
}

struct GradSample {
  std::string input;
  int64_t index;
  double analytic, numeric;
};

// Up to kFdMaxElements element indices of a tensor: all of them, or a seeded sample
// that always includes the first and the last.
std::vector<int64_t> SampleIndices(int64_t n, uint64_t seed) {
  std::vector<int64_t> all(n);
  std::iota(all.begin(), all.end(), 0);
  if (n <= kFdMaxElements) return all;
  std::mt19937_64 rng(seed);
  std::shuffle(all.begin() + 1, all.end() - 1, rng);
  std::vector<int64_t> picked(all.begin(), all.begin() + kFdMaxElements - 1);
  picked.push_back(n - 1);
  std::sort(picked.begin(), picked.end());
  return picked;
}

absl::StatusOr<std::vector<GradSample>> RunGradientCheck(const OpCase& c) {
  // L = sum_k sum(out_k * R_k) in f64, and autodiff's gradients of it.
  auto built = BuildGradientGraph(c, MakeInputs(c, DType::kF64, CaseSeed(c, DType::kF64)), DType::kF64);
  if (!built.ok()) return built.status();
  OpGraph& g = built->g;
  Graph& graph = *g.graph;
  Value* loss = built->loss;
  const std::vector<int>& wrt_specs = built->wrt_specs;
  const std::vector<Value*>& grads = built->grads;
  auto ex = Compile(graph);
  if (!ex.ok()) return ex.status();
  Executor& e = **ex;
  if (absl::Status st = Feed(e, g, c); !st.ok()) return st;
  if (absl::Status st = e.Run(kRunSeed, kRunStep); !st.ok()) return st;
  std::vector<Tensor> analytic;
  for (size_t j = 0; j < grads.size(); ++j) {
    auto t = e.Fetch(grads[j]->name);
    if (!t.ok()) return t.status();
    analytic.push_back(std::move(*t));
  }

  auto loss_at = [&](const std::string& name, const Tensor& x) -> absl::StatusOr<double> {
    if (absl::Status st = e.SetInput(name, x); !st.ok()) return st;
    if (absl::Status st = e.Run(kRunSeed, kRunStep); !st.ok()) return st;
    auto l = e.Fetch(loss->name);
    if (!l.ok()) return l.status();
    return l->GetAsDouble(0);
  };

  std::vector<GradSample> samples;
  for (size_t j = 0; j < grads.size(); ++j) {
    const int s = wrt_specs[j];
    const Tensor& x0 = g.data[s];
    const std::string& name = g.values[s]->name;
    for (int64_t idx : SampleIndices(x0.num_elements(), HashName(c.name) + j)) {
      Tensor xp = x0.CastTo(DType::kF64), xm = x0.CastTo(DType::kF64);
      xp.data<double>()[idx] += c.fd_step;
      xm.data<double>()[idx] -= c.fd_step;
      // Perturb in the input's own dtype and divide by the step actually taken.
      xp = xp.CastTo(x0.dtype());
      xm = xm.CastTo(x0.dtype());
      const double step = xp.GetAsDouble(idx) - xm.GetAsDouble(idx);
      auto lp = loss_at(name, xp);
      if (!lp.ok()) return lp.status();
      auto lm = loss_at(name, xm);
      if (!lm.ok()) return lm.status();
      samples.push_back({c.inputs[s].name, idx, analytic[j].GetAsDouble(idx), (*lp - *lm) / step});
    }
    if (absl::Status st = e.SetInput(name, x0); !st.ok()) return st;
  }
  return samples;
}

::testing::AssertionResult JudgeGradients(const std::vector<GradSample>& samples, double tol) {
  if (samples.empty()) return ::testing::AssertionFailure() << "no gradient samples";
  int bad = 0;
  double largest = 0;
  std::ostringstream msg;
  for (const GradSample& s : samples) {
    largest = std::max(largest, std::abs(s.numeric));
    const bool ok = std::isfinite(s.analytic) && std::isfinite(s.numeric) &&
                    std::abs(s.analytic - s.numeric) <= tol * std::max(1.0, std::abs(s.numeric));
    if (!ok && ++bad <= 10) {
      msg << "\n  d/d " << s.input << "[" << s.index << "]: analytic " << s.analytic << ", numeric " << s.numeric;
    }
  }
  if (bad) {
    return ::testing::AssertionFailure() << bad << " of " << samples.size()
                                         << " gradient elements differ from central differences:" << msg.str();
  }
  // A check where every derivative is zero proves nothing.
  if (largest < 1e-3) return ::testing::AssertionFailure() << "degenerate case: every numeric derivative is ~0";
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult CheckGradient(const OpCase& c) {
  auto samples = RunGradientCheck(c);
  if (!samples.ok()) return ::testing::AssertionFailure() << samples.status();
  return JudgeGradients(*samples, kFdTol);
}

std::string CaseName(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

// ---------------------------------------------------------------------------------
// Forward: every case in f32, bf16 and f16 (docs/numerics.md tolerances) and in f64 (the
// reference dtype the gradient checks run in).

class OpForward : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpForward, F32MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kF32)); }
TEST_P(OpForward, F64MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kF64)); }
TEST_P(OpForward, Bf16MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kBF16)); }
TEST_P(OpForward, F16MatchesFloat64Reference) { EXPECT_TRUE(CheckForward(GetParam(), DType::kF16)); }

INSTANTIATE_TEST_SUITE_P(, OpForward, ::testing::ValuesIn(ForwardCases()), CaseName);

// Gradient: every differentiable case in f64 against central differences.

class OpGradient : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradient, MatchesCentralDifferences) { EXPECT_TRUE(CheckGradient(GetParam())); }

INSTANTIATE_TEST_SUITE_P(, OpGradient, ::testing::ValuesIn(GradientCases()), CaseName);

// ---------------------------------------------------------------------------------
// TF32 must change the result. Each TF32 case (OpCase::tf32) also runs as true f32
// (mpc_tf32 = 0) on the same random inputs: the two differ by far more than the
// emulation tolerance, and the f32 result misses the TF32 reference. So neither the
// kernels' operand rounding nor the reference's can silently be a no-op.

TEST(OpForwardTf32, DiffersFromF32OnRandomInputs) {
  int cases = 0;
  double worst_emulation = 0, least_difference = INFINITY;
  for (const OpCase& tf32 : AllCases()) {
    if (!tf32.tf32) continue;
    ++cases;
    SCOPED_TRACE(tf32.name);
    OpCase f32 = tf32;
    f32.attrs.Set("mpc_tf32", int64_t{0});
    auto a = RunForward(tf32, DType::kF32);
    auto b = RunForward(f32, DType::kF32);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    const std::vector<Tensor> ref = tf32.ref(a->inputs);
    worst_emulation = std::max(worst_emulation, RelativeError(a->outputs[0], ref[0]));
    const double difference = RelativeError(a->outputs[0], b->outputs[0]);
    least_difference = std::min(least_difference, difference);
    EXPECT_GT(difference, 20 * kTf32EmulationTol) << "the TF32 result is (nearly) the f32 one";
    EXPECT_FALSE(CompareOutputs(b->outputs, ref, {DType::kF32}, kTf32EmulationTol))
        << "true f32 passes for TF32: the check cannot tell them apart";
  }
  EXPECT_GE(cases, 19) << "TF32 cases missing";
  std::cout << cases << " TF32 cases: worst relative error against the TF32 reference " << worst_emulation
            << ", least relative difference from true f32 " << least_difference << "\n";
}

// ---------------------------------------------------------------------------------
// Dropout in training mode: random, so checked by its properties, not a reference.

struct DropoutRun {
  Tensor x, y, mask;
};

class DropoutProgram {
 public:
  // Dropout(x, ratio, training_mode) on a [rows, cols] input.
  DropoutProgram(DType dtype, double ratio, bool by_attr, int64_t rows = 100, int64_t cols = 100) {
    x_ = RandomTensor(dtype, {rows, cols}, 77 + static_cast<uint64_t>(ratio * 1000), 0.1, 2.0);
    Value* x = graph_.AddInput("x", dtype, {rows, cols});
    Value* r = graph_.AddConstant("ratio", Tensor::FromVector<double>({}, {ratio}).CastTo(dtype));
    Tensor mode(DType::kBool, {});
    mode.data<uint8_t>()[0] = by_attr ? 0 : 1;  // with the attribute, it must override the input
    Value* m = graph_.AddConstant("training_mode", mode);
    AttrMap attrs;
    if (by_attr) attrs.Set("mpc_training", int64_t{1});
    auto node = graph_.AddNode("Dropout", {x, r, m}, attrs, "dropout");
    EXPECT_TRUE(node.ok()) << node.status();
    node_ = *node;
    graph_.SetOutputs(node_->outputs);
    auto ex = Compile(graph_);
    EXPECT_TRUE(ex.ok()) << ex.status();
    ex_ = std::move(*ex);
    EXPECT_TRUE(ex_->SetInput("x", x_).ok());
  }

  DropoutRun Run(uint64_t seed, int64_t step) {
    EXPECT_TRUE(ex_->Run(seed, step).ok());
    DropoutRun run{x_, *ex_->Fetch(node_->outputs[0]->name), *ex_->Fetch(node_->outputs[1]->name)};
    return run;
  }

 private:
  Graph graph_;
  Node* node_ = nullptr;
  std::unique_ptr<Executor> ex_;
  Tensor x_;
};

int64_t CountDifferent(const Tensor& a, const Tensor& b) {
  int64_t n = 0;
  for (int64_t i = 0; i < a.num_elements(); ++i) n += a.GetAsDouble(i) != b.GetAsDouble(i);
  return n;
}

class OpForwardDropoutTraining : public ::testing::TestWithParam<std::tuple<DType, double, bool>> {};

TEST_P(OpForwardDropoutTraining, KeepsScaledValuesAtTheExpectedRate) {
  const auto [dtype, p, by_attr] = GetParam();
  DropoutProgram program(dtype, p, by_attr);
  const DropoutRun run = program.Run(kRunSeed, kRunStep);
  ASSERT_EQ(run.mask.dtype(), DType::kBool);
  const int64_t n = run.x.num_elements();
  // The kernel may compute x * (1/(1-p)): allow the one rounding that adds (none in f64
  // beyond the last bit; exact when 1/(1-p) is a power of two). bf16/f16 round the
  // f32 product once to the format.
  const double ulp = dtype == DType::kF32    ? std::ldexp(1.0, -23)
                     : dtype == DType::kBF16 ? std::ldexp(1.0, -7)
                     : dtype == DType::kF16  ? std::ldexp(1.0, -10)
                                             : std::ldexp(1.0, -51);
  const double p_stored = Tensor::FromVector<double>({}, {p}).CastTo(dtype).GetAsDouble(0);
  int64_t kept = 0, bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = run.x.GetAsDouble(i), y = run.y.GetAsDouble(i);
    const bool keep = run.mask.GetAsDouble(i) != 0;
    kept += keep;
    if (keep) {
      const double want = x / (1.0 - p_stored);
      const bool exact_scale = p == 0.5;
      const bool ok = exact_scale ? y == want : std::abs(y - want) <= 2 * ulp * std::abs(want);
      if (!ok && ++bad <= 5) ADD_FAILURE() << "kept element " << i << ": y=" << y << ", x/(1-p)=" << want;
    } else if (y != 0.0) {
      if (++bad <= 5) ADD_FAILURE() << "dropped element " << i << " is " << y << ", not 0";
    }
  }
  EXPECT_EQ(bad, 0);
  // Kept fraction within 3 sigma of 1 - p.
  const double sigma = std::sqrt(p * (1 - p) / n);
  EXPECT_NEAR(static_cast<double>(kept) / n, 1 - p, 3 * sigma) << "kept " << kept << " of " << n;

  // Same seed and step: the same mask and output; another step or seed: another mask.
  const DropoutRun again = program.Run(kRunSeed, kRunStep);
  EXPECT_EQ(CountDifferent(again.mask, run.mask), 0);
  EXPECT_EQ(CountDifferent(again.y, run.y), 0);
  DropoutProgram twin(dtype, p, by_attr);  // a separately built identical program
  EXPECT_EQ(CountDifferent(twin.Run(kRunSeed, kRunStep).mask, run.mask), 0);
  // Two independent masks differ in about 2p(1-p) of the elements.
  const double expected_diff = 2 * p * (1 - p) * n;
  const double diff_sigma = std::sqrt(expected_diff * (1 - 2 * p * (1 - p)));
  const int64_t step_diff = CountDifferent(program.Run(kRunSeed, kRunStep + 1).mask, run.mask);
  const int64_t seed_diff = CountDifferent(program.Run(kRunSeed + 1, kRunStep).mask, run.mask);
  EXPECT_NEAR(static_cast<double>(step_diff), expected_diff, 4 * diff_sigma) << "another step";
  EXPECT_NEAR(static_cast<double>(seed_diff), expected_diff, 4 * diff_sigma) << "another seed";
}

std::string DropoutName(const ::testing::TestParamInfo<std::tuple<DType, double, bool>>& info) {
  const auto [dtype, p, by_attr] = info.param;
  return absl::StrCat(DTypeName(dtype), "_Ratio", Num(p), by_attr ? "_MpcTrainingAttr" : "_TrainingModeInput");
}

INSTANTIATE_TEST_SUITE_P(, OpForwardDropoutTraining,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF64, DType::kBF16, DType::kF16),
                                            ::testing::Values(0.1, 0.3, 0.5, 0.8), ::testing::Bool()),
                         DropoutName);

// ---------------------------------------------------------------------------------
// Coverage: every ONNX-domain op in the registry (plus mpc's MeanSquaredError) has a
// forward case, and a gradient case when it is differentiable. The covered lists are
// the case tables above.

std::vector<std::string> MissingCoverage(const std::vector<std::string>& ops, const std::vector<OpCase>& cases) {
  std::set<std::string> forward, gradient;
  for (const OpCase& c : cases) {
    if (c.forward()) forward.insert(c.op);
    if (c.gradient) gradient.insert(c.op);
  }
  std::vector<std::string> missing;
  for (const std::string& op : ops) {
    const OpDef* def = OpRegistry::Global().Find(op);
    if (!def) {
      missing.push_back(absl::StrCat(op, " (not in the registry)"));
      continue;
    }
    if (!forward.count(op)) missing.push_back(absl::StrCat(op, " (no forward case)"));
    if (def->grad && !gradient.count(op)) missing.push_back(absl::StrCat(op, " (no gradient case)"));
  }
  return missing;
}

std::vector<std::string> RequiredOps() {
  std::vector<std::string> ops = OpRegistry::Global().OpNames();
  ops.push_back("MeanSquaredError");
  return ops;
}

TEST(OpCoverage, EveryRegisteredOpHasForwardAndGradientCases) {
  const std::vector<std::string> ops = RequiredOps();
  ASSERT_GE(ops.size(), 15u) << "the registry lists suspiciously few ops: " << absl::StrJoin(ops, " ");
  const std::vector<std::string> missing = MissingCoverage(ops, AllCases());
  EXPECT_TRUE(missing.empty()) << "ops without numerics cases in op_numerics_test.cc: " << absl::StrJoin(missing, ", ");
}

TEST(OpCoverage, CasesNameRegisteredOpsAndUniqueNames) {
  std::set<std::string> names;
  for (const OpCase& c : AllCases()) {
    EXPECT_NE(OpRegistry::Global().Find(c.op), nullptr) << c.name << " tests unknown op " << c.op;
    EXPECT_TRUE(names.insert(c.name).second) << "duplicate case name " << c.name;
    EXPECT_TRUE(c.forward() || c.gradient) << c.name << " checks nothing";
  }
}

TEST(OpCoverage, RequiredVariantsArePresent) {
  std::set<std::string> names;
  for (const OpCase& c : AllCases()) names.insert(c.name);
  for (const char* required : {"Gemm_tA0_tB0_CN_alpha1_beta1",
                               "Gemm_tA0_tB1_C1N_alpha0p7_beta1",
                               "Gemm_tA1_tB0_CMN_alpha0p7_beta1p3",
                               "Gemm_tA1_tB1_Cnone_alpha1_beta1",
                               "MatMul_BroadcastBatch",
                               "MatMul_Batched3D",
                               "Div_Column",
                               "Softmax_Rank3_Axis1",
                               "LogSoftmax_Rank3_Axis0",
                               "Reshape_Zero_Minus1",
                               "Flatten_Axis0",
                               "Transpose_Perm201",
                               "Cast_F32ToF64",
                               "Cast_F64ToF32",
                               "Dropout_Eval_Ratio",
                               "Dropout_Train_MpcTraining_Ratio0p3",
                               "SoftmaxCrossEntropyLoss_Mean_IgnoreIndexM100",
                               "MeanSquaredError_Rank2",
                               "Gemm_Tf32_tA0_tB0_CN",
                               "MatMul_Tf32_BroadcastBatch",
                               "Conv_Tf32_Basic3x3_Bias",
                               "ConvGradInput_Tf32_Stride2_AsymPads",
                               "ConvGradWeight_Tf32_Group2_Pads1_Bias"}) {
    EXPECT_TRUE(names.count(required)) << required;
  }
}

// ---------------------------------------------------------------------------------
// The checks themselves must be able to fail.

const OpCase& FindCase(const std::string& name) {
  for (const OpCase& c : AllCases()) {
    if (c.name == name) return c;
  }
  ADD_FAILURE() << "no case " << name;
  return AllCases().front();
}

TEST(OpForwardHarness, RejectsAWrongReference) {
  OpCase c = FindCase("Gemm_tA1_tB0_CMN_alpha0p7_beta1p3");
  ASSERT_TRUE(CheckForward(c, DType::kF32));
  const RefFn good = c.ref;
  c.ref = [good](const std::vector<Tensor>& in) {  // off by 1e-4 relative: above f32 tolerance
    std::vector<Tensor> out = good(in);
    for (int64_t i = 0; i < out[0].num_elements(); ++i) P(out[0])[i] *= 1 + 1e-4;
    return out;
  };
  EXPECT_FALSE(CheckForward(c, DType::kF32));
  c.ref = [good](const std::vector<Tensor>& in) {  // a transposed-operand mistake
    std::vector<Tensor> out = good(in);
    std::swap(P(out[0])[0], P(out[0])[1]);
    return out;
  };
  EXPECT_FALSE(CheckForward(c, DType::kF32));
  Tensor nan = F64({2});
  P(nan)[0] = NAN;
  P(nan)[1] = 1;
  EXPECT_FALSE(CompareOutputs({nan}, {Ones({2})}, {DType::kF64}, 1.0));
}

TEST(OpForwardHarness, RoundedOnceCatchesWhatTheNormToleranceLetsThrough) {
  const OpCase& c = FindCase("Softmax_Rank3_Axis1");
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    auto run = RunForward(c, dtype);
    ASSERT_TRUE(run.ok()) << run.status();
    const std::vector<Tensor> ref = c.ref(run->inputs);
    ASSERT_TRUE(CheckRoundedOnce(run->outputs, ref, dtype));
    // One element off by three ulps of the format (a bf16 accumulator, a double
    // rounding): far inside the norm tolerance, caught by the rounding check.
    std::vector<Tensor> off = ref;
    P(off[0])[7] *= 1 + 3 * std::ldexp(1.0, dtype == DType::kBF16 ? -7 : -10);
    EXPECT_TRUE(CompareOutputs(run->outputs, off, {dtype}, Tolerance(dtype))) << DTypeName(dtype);
    EXPECT_FALSE(CheckRoundedOnce(run->outputs, off, dtype)) << DTypeName(dtype);
  }
}

TEST(OpGradientHarness, RejectsAWrongGradient) {
  const OpCase& c = FindCase("Softmax_Rank3_Axis1");
  auto samples = RunGradientCheck(c);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_TRUE(JudgeGradients(*samples, kFdTol));
  std::vector<GradSample> scaled = *samples;  // 1e-4 relative error in every element
  for (GradSample& s : scaled) s.analytic *= 1 + 1e-4;
  EXPECT_FALSE(JudgeGradients(scaled, kFdTol));
  std::vector<GradSample> one_off = *samples;  // a single wrong element
  one_off[one_off.size() / 2].analytic += 1e-5;
  EXPECT_FALSE(JudgeGradients(one_off, kFdTol));
  std::vector<GradSample> zeros = *samples;  // nothing to compare
  for (GradSample& s : zeros) s.analytic = s.numeric = 0;
  EXPECT_FALSE(JudgeGradients(zeros, kFdTol));
  // The finite differences themselves are sharp: analytic and numeric agree far below
  // the tolerance on a smooth op.
  double worst = 0;
  for (const GradSample& s : *samples) worst = std::max(worst, std::abs(s.analytic - s.numeric));
  EXPECT_LT(worst, 1e-8);
}

TEST(OpCoverageHarness, ReportsAnOpWithoutCases) {
  std::vector<OpCase> without_tanh;
  for (const OpCase& c : AllCases()) {
    if (c.op != "Tanh") without_tanh.push_back(c);
  }
  const auto missing = MissingCoverage(RequiredOps(), without_tanh);
  EXPECT_EQ(missing, (std::vector<std::string>{"Tanh (no forward case)", "Tanh (no gradient case)"}));
  std::vector<OpCase> forward_only;
  for (OpCase c : AllCases()) {
    if (c.op == "Relu") c.gradient = false;
    forward_only.push_back(c);
  }
  EXPECT_EQ(MissingCoverage(RequiredOps(), forward_only), std::vector<std::string>{"Relu (no gradient case)"});
  EXPECT_EQ(MissingCoverage({"NoSuchOp"}, AllCases()), std::vector<std::string>{"NoSuchOp (not in the registry)"});
}

}  // namespace
}  // namespace mpc
