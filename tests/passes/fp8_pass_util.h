// Shared by the fp8 pass tests (fp8_test.cc, fp8_recipes_test.cc, fp8_lower_test.cc,
// fp8_batch_rows_test.cc): a small MLP graph, the passes up to fp8 run by hand, as the
// training or evaluation pipeline would, and what a step left behind.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "graph/capabilities.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "passes/autocast.h"
#include "passes/compile_results.h"
#include "passes/fp8.h"
#include "passes/pad_dims.h"

namespace mpc::fp8_testing {

struct Model {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Value* loss = nullptr;
};

// x[B,in] -> (Gemm -> Relu)* -> Gemm -> SoftmaxCrossEntropyLoss; Gemm i is "gemm<i>"
// (transB = 1, weights [out, in]).
Model Mlp(const std::vector<int64_t>& widths, bool with_loss = true, int64_t batch = 8);

struct PassRun {
  AutocastOptions autocast;
  PadDimsOptions pad;
  Fp8Options fp8;
  CompileResults results;
  Capabilities caps;
  PassRun() {
    autocast.precision = Precision::kFP8;
    fp8.enabled = true;
  }
  // autocast, pad-dims, (autodiff when the model has a loss), fp8.
  absl::StatusOr<bool> Compile(Model& m);
  // The GEMMs in FP8 (forward only: without their backward GEMMs).
  std::vector<std::string> Fp8Nodes(bool forward_only) const;
  std::string SkipReason(const std::string& node) const;
};

// After a step: every parameter gradient (as f32, by parameter name), and every FP8 tensor's
// state (scale, scale_inv, amax history, last amax; by state name).
using Floats = std::map<std::string, std::vector<float>>;
Floats FetchGradients(const Executor& ex, const AutodiffResult& autodiff);
Floats ReadFp8State(const Executor& ex, const Fp8Result& fp8);

// ||got - want|| / ||want|| over the elements, in double.
double RelativeRms(const std::vector<float>& got, const std::vector<float>& want);

// One Fp8QuantizeDynamic (E4M3 unless e4m3 is false, tile 128) run by the CPU backend's
// kernel: the dequantized values.
std::vector<float> QuantizeDynamicOnCpu(const Tensor& x, const std::string& granularity, int64_t axis,
                                        bool e4m3 = true);

}  // namespace mpc::fp8_testing
