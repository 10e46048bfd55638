// The closed op set. Each OpDef says what an op accepts (arity), what it produces
// (shape and dtype inference) and how to differentiate it (gradient builder).
// Passes consult the registry instead of special-casing op names.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc {

class GraphBuilder;

struct TensorType {
  DType dtype;
  Shape shape;
};

// Infers output types from a node whose inputs and attributes are set.
using InferFn = std::function<absl::StatusOr<std::vector<TensorType>>(const Node& node)>;

// Builds the gradient of a node. `output_grads[i]` is dL/d(output i) or nullptr when
// that output does not reach the loss. Returns dL/d(input j) for each input, nullptr
// for inputs that are not differentiable (integer labels, shapes, masks).
using GradFn = std::function<absl::StatusOr<std::vector<Value*>>(GraphBuilder& b, const Node& node,
                                                                 const std::vector<Value*>& output_grads)>;

// How an op treats zero padding of its operands (passes/pad_dims.h). A padded activation is
// padded along one axis: the last for GEMM outputs, the channel axis (1, NCHW) for Conv's.
//   kOpaque: padded operands are sliced back to the model's shape before the op.
//   kZeroPreservingUnary: f(0) = 0 elementwise (Relu, Tanh, Neg, casts, dropout),
//     so padded zeros stay zeros and the padded width flows through.
//   kZeroPreservingBinary: elementwise with f(0, 0) = 0 (Add, Sub, Mul) when the other
//     operand is zero-padded too (a parameter is padded with zeros to match).
//   kContraction: Gemm, and MatMul with a 2-D parameter B — the pass pads the weight (and a
//     bias) directly.
//   kChannelContraction: Conv with group 1 — the pass pads the weight's output channels
//     (and the bias), and its input channels to follow a channel-padded input.
//   kChannelwise: per-channel ops on NCHW (pools, BatchNormalization) that keep an all-zero
//     channel zero once their per-channel operands (scale, bias, running statistics) are
//     zero-padded too.
//   kFlatten: Flatten carries a padded axis when it is the first flattened one and every
//     axis after it is 1 (GlobalAveragePool's [N, C, 1, 1] -> [N, C]).
enum class PaddingRule {
  kOpaque,
  kZeroPreservingUnary,
  kZeroPreservingBinary,
  kContraction,
  kChannelContraction,
  kChannelwise,
  kFlatten,
};

struct OpDef {
  std::string name;
  std::string domain;  // "" for ONNX ops, "mpc" for ops the compiler introduces
  int min_inputs = 0;
  int max_inputs = 0;
  int min_outputs = 1;
  int max_outputs = 1;
  InferFn infer;
  GradFn grad;                    // null: the op has no gradient (error if one is needed)
  bool has_side_effects = false;  // writes persistent state in place; never removed or merged
  bool stochastic = false;        // draws random numbers; never merged by CSE
  // Output 0 is input 0's bytes unchanged under another shape (Reshape and its kin): the
  // memory plan places it at the input's offset, so its copy kernel finds src == dst.
  bool view = false;
  // Output 0 is input 0, persistent state that the op rewrites in place and also hands on
  // as an activation (AccumulateGradient's running sum): the memory plan gives the output
  // the state's bytes instead of arena space.
  bool output_is_state_input = false;
  PaddingRule padding = PaddingRule::kOpaque;
};

class OpRegistry {
 public:
  // The process-wide registry with every op mpc supports.
  static const OpRegistry& Global();

  void Register(OpDef def);
  const OpDef* Find(const std::string& op) const;
  // Error naming the op, the node and the supported set.
  absl::StatusOr<const OpDef*> FindOrError(const std::string& op, const std::string& node_name) const;
  std::vector<std::string> OpNames() const;

 private:
  absl::flat_hash_map<std::string, OpDef> ops_;
};

// One registration function per op family (graph/ops_*.cc).
void RegisterElementwiseOps(OpRegistry& registry);
void RegisterNnOps(OpRegistry& registry);
void RegisterShapeOps(OpRegistry& registry);
void RegisterLossOps(OpRegistry& registry);
void RegisterTrainingOps(OpRegistry& registry);
void RegisterLossScalingOps(OpRegistry& registry);
void RegisterFp8Ops(OpRegistry& registry);
void RegisterFp8GemmOps(OpRegistry& registry);     // graph/ops_fp8_gemm.cc: Fp8Cast, Fp8Gemm (fp8-lower)
void RegisterConvOps(OpRegistry& registry);        // graph/ops_conv.cc: Conv, pooling
void RegisterNormOps(OpRegistry& registry);        // graph/ops_norm.cc: normalisations, math, reductions
void RegisterRmsNormOps(OpRegistry& registry);     // graph/ops_rms_norm.cc: RmsNorm (fuse-rms-norm)
void RegisterAttentionOps(OpRegistry& registry);   // graph/ops_attention.cc: FusedAttention (fuse-attention)
void RegisterTensorOps(OpRegistry& registry);      // graph/ops_tensor.cc: indexing and data movement
void RegisterCollectiveOps(OpRegistry& registry);  // graph/ops_collective.cc: AllReduce (data-parallel)

}  // namespace mpc
