// What the passes learn about a program, one typed struct per pass. A pass writes only its
// own struct (given to it when it is made) and reads the structs of earlier passes it was
// handed (const); the engine and `mpc compile --report` read them after the pipeline. So
// "who decides X" has one answer: the writer named above each struct.
//
// Values are referred to by pointer. A rewrite that puts a new producer behind a value
// keeps the Value itself (Graph::DetachOutput / AdoptOutput), so these stay valid to
// the end of the pipeline.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace mpc {

// (parameter, its gradient), in parameter order.
using ParamGrads = std::vector<std::pair<Value*, Value*>>;

// Writer: attach-loss. Readers: autodiff (where differentiation starts), the engine
// (fetches the loss each step).
struct LossResult {
  Value* loss = nullptr;    // scalar training loss
  Value* labels = nullptr;  // the labels input the engine feeds
};

// Writer: fuse-softmax. Reader: the report.
struct FuseSoftmaxResult {
  struct Fusion {
    std::string node;  // the MaskedSoftmax node that replaced the chain
    bool masked = false;
    double scale = 1;
    int nodes_replaced = 0;
  };
  std::vector<Fusion> fused;
};

// Writer: fuse-attention. Reader: the report.
struct FuseAttentionResult {
  struct Fusion {
    std::string node;     // the FusedAttention node that replaced the chain
    bool causal = false;  // a triangular mask recognised: causal = 1, no Bias
    bool biased = false;  // a mask kept as the Bias input
    double scale = 1;
    int nodes_replaced = 0;
  };
  struct Skip {
    std::string softmax;  // the Softmax of an attention chain left as it is
    std::string reason;
  };
  std::vector<Fusion> fused;
  std::vector<Skip> skipped;
};

// Writer: triangular-operands. Reader: the report.
struct TriangularOperandsResult {
  int zero_above = 0;  // MatMuls whose A as read is zero above its diagonal (P·V, dS·K)
  int zero_below = 0;  // ... and below it (P^T·dO, dS^T·Q)
};

// Writer: fold-batch-transposes. Reader: the report.
struct FoldBatchTransposesResult {
  int operand_transposes = 0;  // Transposes now read in place by the MatMuls after them
  int result_transposes = 0;   // Transposes now written in place by the MatMul before them
};

// Writer: fuse-layer-norm-edges. Reader: the report.
struct FuseLayerNormEdgesResult {
  int narrowed_outputs = 0;   // Casts after a LayerNormalization now its mpc_output_dtype
  int accumulated_grads = 0;  // Adds after a LayerNormGrad now its addend input
  int summed_columns = 0;     // ReduceSumTos of a LayerNormGrad's dX now its 4th output
  int narrowed_grads = 0;     // Casts of a LayerNormGrad's dX to 16 bits now its 5th output
};

// Writer: fuse-silu. Reader: the report.
struct FuseSiluResult {
  std::vector<std::string> fused;  // the Silu nodes that replaced x * Sigmoid(x)
};

// Writer: fuse-rms-norm. Reader: the report.
struct FuseRmsNormResult {
  struct Fusion {
    std::string node;     // the RmsNorm node that replaced the chain
    int chain_nodes = 0;  // how many nodes it replaced (6 without the weight Mul, 7 with)
    bool scaled = false;  // the weight Mul was folded in
  };
  std::vector<Fusion> fused;
};

// Writer: fuse-gelu. Reader: the report.
struct FuseGeluResult {
  struct Fusion {
    std::string node;         // the Gelu node that replaced the chain
    std::string approximate;  // "none" (erf form) or "tanh"
    int nodes_replaced = 0;
  };
  std::vector<Fusion> fused;
};

// Writer: channels-last. Reader: the report.
struct ChannelsLastResult {
  std::vector<std::string> converted;  // nodes now channels-last (forward graph), in order
  int transposes = 0;                  // layout Transposes left at the ends of the runs
};

// One autocast paint decision: every node gets one.
struct PaintDecision {
  std::string node;
  std::string op;
  DType dtype = DType::kF32;
  std::string reason;
};

// Writer: autocast. Readers: fp8 (the GEMMs' low-precision dtype), the report.
struct AutocastResult {
  DType compute_dtype = DType::kF32;  // the low-precision dtype it targeted (f32: none)
  std::vector<PaintDecision> paint;   // one per node, then one per inserted cast
  int64_t casts_inserted = 0;
};

// Writer: pad-dims. Reader: the report.
struct PadDimsResult {
  struct Padding {
    std::string value;
    int dim = 0;
    int64_t from = 0, to = 0;
  };
  std::vector<Padding> padding;
  double extra_flops_pct = 0;  // GEMM FLOPs added by padding, % of unpadded
  double extra_bytes_pct = 0;  // parameter bytes added by padding, %
};

// Writer: autodiff. Readers: fp8 (the backward GEMMs are downstream of the seed),
// loss-scaling (scales the seed, unscales the gradients), optimizer (when loss-scaling
// produced no gradients of its own).
struct AutodiffResult {
  ParamGrads param_grads;           // d(loss)/d(parameter), as the backward graph computes them
  Value* loss_seed = nullptr;       // dL/dL, a constant 1 until loss-scaling replaces its uses
  std::vector<std::string> frozen;  // parameters left out (freeze patterns): no gradient, no update
};

// Writer: accumulate-gradients. Readers: loss-scaling and optimizer (the gradients they
// check and apply, and the hold flag that keeps them from acting on a micro-batch that
// does not end a step), the engine (feeds the flags, runs `steps` micro-batches a step).
struct GradAccumulationResult {
  int steps = 1;           // micro-batches per optimizer step
  ParamGrads param_grads;  // (parameter, gradient summed so far); empty when steps == 1
  Value* first = nullptr;  // scalar f32 input: 1 on a step's first micro-batch
  Value* hold = nullptr;   // scalar f32 input: 1 on every micro-batch but a step's last
};

// Writer: data-parallel. Readers: loss-scaling and optimizer (the averaged gradients they
// check and apply), the engine (the global loss; the collectives for the program
// fingerprint), the report.
struct DataParallelResult {
  int world_size = 1;
  // ZeRO-1: param_grads hold this rank's slices of the averaged gradients (graph/sharding.h).
  int zero_stage = 0;
  ParamGrads param_grads;  // (parameter, gradient averaged over the ranks); empty when world_size == 1
  struct Bucket {
    std::string node;  // its AllReduce (ReduceScatter under ZeRO-1)
    int64_t bytes = 0;
    std::vector<std::string> params;
  };
  std::vector<Bucket> buckets;  // in the order the pass made them
  Value* mean_loss = nullptr;   // output: the loss averaged over the ranks (null: single process)
  std::string fp8_amax_node;    // FP8: the AllReduceInPlace (max) of the amax histories ("" without FP8)
};

// The gradients as the last pass that rewrote them before loss-scaling left them: the
// ranks' average (data-parallel), else the micro-batches' sum (accumulate-gradients), else
// autodiff's. Either pointer may be null.
inline const ParamGrads& LatestGradients(const AutodiffResult& autodiff, const GradAccumulationResult* accumulation,
                                         const DataParallelResult* data_parallel) {
  if (data_parallel && !data_parallel->param_grads.empty()) return data_parallel->param_grads;
  if (accumulation && !accumulation->param_grads.empty()) return accumulation->param_grads;
  return autodiff.param_grads;
}

// Writer: fp8. Readers: the engine (fp8.report_tensor metrics), the report.
struct Fp8Result {
  struct Gemm {
    std::string node;
    std::string format_a, format_b;  // operand formats, "e4m3" | "e5m2"
    std::string forward_node;        // the forward GEMM (itself for a forward GEMM)
    // How each operand is scaled: "delayed" (per tensor, from the amax history), or just in
    // time per "tensor", "rows", "1x128 tiles", "128x128 blocks".
    std::string scaling_a, scaling_b;
  };
  std::string recipe;                                        // fp8.recipe: delayed, current, rowwise, block
  std::vector<Gemm> gemms;                                   // forward and backward, in FP8
  std::vector<std::pair<std::string, std::string>> skipped;  // forward GEMMs left alone: (node, reason)
  std::vector<std::string> tensors;                          // "<gemm>/input" etc.; their states add ".fp8_scale"...
  std::string fallback;                                      // FP8 requested but left in bf16: why
};

// Writer: fp8-lower. Reader: the report.
struct Fp8LowerResult {
  struct Decision {
    std::string node;  // the GEMM (mpc_fp8 = 1) by name
    bool lowered = false;
    std::string reason;  // why it stayed emulated or went ("" when lowered)
    // Lowered: whether it accumulates fast (no periodic f32 promotion), and why (or why not).
    bool fast_accumulation = false;
    std::string accumulation;
  };
  std::vector<Decision> decisions;                            // every FP8 GEMM, in topological order
  std::vector<std::string> lowered;                           // became Fp8Gemm
  std::vector<std::pair<std::string, std::string>> emulated;  // stayed emulated: (node, reason)
};

// Writer: tf32. Readers: the report.
struct Tf32Result {
  struct Marked {
    std::string node;
    std::string op;  // Gemm, MatMul, Conv, ConvGradInput, ConvGradWeight
  };
  bool enabled = false;        // precision tf32
  std::vector<Marked> marked;  // every f32 GEMM / convolution now mpc_tf32 = 1, in graph order
};

// Writer: loss-scaling. Readers: optimizer (applies param_grads, gates on
// found_nonfinite), the engine (reads the scale, the skip flag and the norm each step).
struct LossScalingResult {
  ParamGrads param_grads;            // unscaled (and clipped) gradients; empty if unchanged
  Value* loss_scale = nullptr;       // state: the current scale (scaling on)
  Value* found_nonfinite = nullptr;  // output: 1 when this step's gradients overflowed
  Value* grad_norm = nullptr;        // output: the global gradient norm (clipping on)
};

// Writer: optimizer. Reader: the engine (feeds the scheduled rate every step).
struct OptimizerResult {
  Value* learning_rate = nullptr;  // scalar f32 input
  // Every update, with the parameter group that set it (-1: the optimizer's own settings).
  struct ParamUpdate {
    std::string param;
    int group = -1;
    float weight_decay = 0;
    float lr_scale = 1;
  };
  std::vector<ParamUpdate> updates;
  Value* skip = nullptr;  // the flag every update is gated on (null: ungated)
};

// Writer: ema. Readers: the engine (evaluates and exports the averaged weights), the report.
struct EmaResult {
  std::vector<std::pair<std::string, std::string>> averaged;  // (parameter, its average's state)
};

// Writer: shard-parameters (ZeRO-3). Readers: the report.
struct ShardParametersResult {
  std::vector<std::string> sharded;  // parameters held as this rank's slice
  int gathers = 0;                   // AllGather nodes (forward and backward)
  int gathers_16bit = 0;             // of them, gathering the bf16/fp16 copy
  int64_t sharded_bytes = 0;         // the whole parameters' bytes, of which a rank keeps 1/W
};

// Writer: recompute. Readers: the report, mpc compile's memory table.
struct RecomputeResult {
  std::string policy = "none";  // "none" | "selective" | "full"
  // FULL: the activations kept as block inputs, and how they were found ("residual forks",
  // "one in K of C cut points", "pattern ...").
  std::vector<std::string> boundaries;
  std::string boundaries_from;
  int blocks_recomputed = 0;  // FULL: the segments before the first this many block inputs run again
  double chosen_for_limit_mb = 0;  // AUTO: the memory.limit_mb it chose this policy for (0: not AUTO)
  int saved = 0;              // activations the backward reads from the forward, without recomputation
  int64_t saved_bytes = 0;
  int recomputed = 0;         // of them, recomputed in the backward instead of kept
  int64_t recomputed_bytes = 0;
  int cloned_nodes = 0;       // forward nodes run again in the backward
  double extra_flops = 0;     // their FLOPs (graph/flops.h)
  double step_flops = 0;      // the step's FLOPs without recomputation
};

// The buffer plan: every activation gets an offset in one arena.
struct MemoryPlan {
  std::map<const Value*, int64_t> offsets;  // activations only
  // Activations that are a persistent value's bytes (OpDef::output_is_state_input), not in the arena.
  std::map<const Value*, const Value*> state_aliases;
  int64_t peak_bytes = 0;              // arena size
  int64_t total_activation_bytes = 0;  // what one buffer per activation would take
  int64_t persistent_bytes = 0;        // parameters + state, outside the arena
  int64_t unplanned_bytes = 0;         // inputs + constants + persistent, outside the arena
};

// Writer: memory-plan. Readers: the executor (runs nodes in `order` over the arena), the
// report, the engine (planned peak).
struct MemoryPlanResult {
  std::vector<Node*> order;  // execution order
  MemoryPlan plan;
};

// Every pass's result for one program. The pipelines (passes/pipelines.cc) hand each
// pass pointers into one of these.
struct CompileResults {
  LossResult loss;
  FuseGeluResult fuse_gelu;
  FuseSiluResult fuse_silu;
  FuseRmsNormResult fuse_rms_norm;
  FuseAttentionResult fuse_attention;
  FuseSoftmaxResult fuse_softmax;
  FoldBatchTransposesResult fold_batch_transposes;
  TriangularOperandsResult triangular_operands;
  FuseLayerNormEdgesResult fuse_layer_norm_edges;
  AutocastResult autocast;
  PadDimsResult pad_dims;
  ChannelsLastResult channels_last;
  AutodiffResult autodiff;
  Fp8Result fp8;
  Fp8LowerResult fp8_lower;
  GradAccumulationResult grad_accumulation;
  DataParallelResult data_parallel;
  LossScalingResult loss_scaling;
  OptimizerResult optimizer;
  EmaResult ema;
  Tf32Result tf32;
  ShardParametersResult shard_parameters;
  RecomputeResult recompute;
  MemoryPlanResult memory_plan;
};

}  // namespace mpc
