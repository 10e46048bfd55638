// The pass interface (after XLA's HloPassInterface): a pass has a kebab-case name and
// rewrites a Graph, returning whether it changed anything. What one pass learns that
// a later one needs (the loss value, the parameter gradients, the memory plan) is kept
// in CompileInfo, reached through the PassContext.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "graph/graph.h"
#include "proto/train_spec.pb.h"

namespace mpc {

// The buffer plan: every activation gets an offset in one arena.
struct MemoryPlan {
  std::map<const Value*, int64_t> offsets;  // activations only
  int64_t peak_bytes = 0;                   // arena size
  int64_t total_activation_bytes = 0;       // what one buffer per activation would take
  int64_t persistent_bytes = 0;             // parameters + state, outside the arena
  int64_t unplanned_bytes = 0;              // inputs + constants + persistent, outside the arena
};

// One autocast paint decision, for the report: every node gets one.
struct PaintDecision {
  std::string node;
  std::string op;
  DType dtype = DType::kF32;
  std::string reason;
};

struct CompileInfo {
  Value* loss = nullptr;                          // scalar training loss
  std::vector<std::pair<Value*, Value*>> param_grads;  // (parameter, gradient), parameter order
  Value* learning_rate = nullptr;                 // scalar f32 input fed each step
  std::vector<Node*> order;                       // execution order fixed by memory-plan
  MemoryPlan plan;
  std::vector<PaintDecision> paint;               // autocast: one per node after the pass
  int64_t casts_inserted = 0;
  DType compute_dtype = DType::kF32;              // the low-precision dtype autocast targeted
  Value* loss_seed = nullptr;        // dL/dL: constant 1, replaced by the loss scale
  Value* loss_scale = nullptr;       // state: the current scale (loss scaling on)
  Value* found_nonfinite = nullptr;  // output: 1 when this step's gradients overflowed
  Value* grad_norm = nullptr;        // output: global gradient norm (clipping on)
  struct Padding {
    std::string value;
    int dim = 0;
    int64_t from = 0, to = 0;
  };
  std::vector<Padding> padding;      // pad-dims decisions
  double padding_extra_flops_pct = 0;  // GEMM FLOPs added by padding, % of unpadded
  double padding_extra_bytes_pct = 0;  // parameter bytes added by padding, %
  // fp8 pass (passes/fp8.h): the GEMMs that run in FP8 (forward and backward), the
  // forward GEMMs it left in the autocast dtype and why, and its meta tensors.
  struct Fp8Gemm {
    std::string node;
    std::string format_a, format_b;  // operand formats, "e4m3" | "e5m2"
    std::string forward_node;        // the forward GEMM (itself for a forward GEMM)
  };
  std::vector<Fp8Gemm> fp8_gemms;
  std::vector<std::pair<std::string, std::string>> fp8_skipped;  // (node, reason)
  std::vector<std::string> fp8_tensors;  // "<gemm>/input" etc.; states add ".fp8_scale"...
  std::string fp8_fallback;              // FP8 requested but left in bf16: why
  // fp8-lower (passes/fp8_lower.h), on a backend with FP8 tensor cores: the FP8 GEMMs
  // that became real FP8 GEMMs, and those left emulated (quantize + f32 GEMM) and why.
  std::vector<std::string> fp8_lowered;
  std::vector<std::pair<std::string, std::string>> fp8_emulated;  // (node, reason)
};

struct PassContext {
  const TrainSpec* spec = nullptr;
  const Capabilities* capabilities = nullptr;
  CompileInfo* info = nullptr;
};

class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string_view name() const = 0;
  virtual absl::StatusOr<bool> Run(Graph& graph, const PassContext& ctx) = 0;
};

}  // namespace mpc
