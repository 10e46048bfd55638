// The training and evaluation pipelines (see pipelines.h). Each line says why the pass
// sits where it does; the passes' own headers say what they do.
#include "passes/pipelines.h"

#include <memory>

#include "passes/accumulate_gradients.h"
#include "passes/attach_loss.h"
#include "passes/autodiff.h"
#include "passes/batch_norm_stats.h"
#include "passes/channels_last.h"
#include "passes/defer_widening_casts.h"
#include "passes/ema.h"
#include "passes/fold_batch_transposes.h"
#include "passes/fold_gradient_casts.h"
#include "passes/fold_output_casts.h"
#include "passes/fold_transposes.h"
#include "passes/fuse_attention.h"
#include "passes/fp8_lower.h"
#include "passes/fuse_epilogues.h"
#include "passes/fuse_gelu.h"
#include "passes/fuse_silu.h"
#include "passes/fuse_layer_norm_edges.h"
#include "passes/fuse_rms_norm.h"
#include "passes/fuse_softmax.h"
#include "passes/fuse_updates.h"
#include "passes/memory_plan.h"
#include "passes/recompute.h"
#include "passes/set_mode.h"
#include "passes/shard_parameters.h"
#include "passes/simplify.h"
#include "passes/tf32.h"
#include "passes/triangular_operands.h"

namespace mpc {
namespace {

ShardParametersOptions ShardParameters(const CompileOptions& o, bool training) {
  ShardParametersOptions s;
  s.zero_stage = o.data_parallel.zero_stage;
  s.world_size = o.job_ranks;
  s.rank = o.job_rank;
  s.training = training;
  s.freeze = o.freeze;
  return s;
}

}  // namespace

PassPipeline MakeTrainingPipeline(const CompileOptions& o, const Capabilities& caps, CompileResults* r,
                                  PipelineOptions pipeline) {
  PassPipeline p(std::move(pipeline));
  // The model as imported, put in training mode: Dropout drops, BatchNorm uses batch
  // statistics. First, so every later pass sees the ops as they will run.
  p.Add(std::make_unique<SetModePass>(true));
  // BatchNorm's running statistics written back each step; needs the training mode.
  p.Add(std::make_unique<BatchNormStatsPass>());
  // The loss on the logits: the program's only output from here on.
  p.Add(std::make_unique<AttachLossPass>(o.loss, &r->loss));
  // GELU written out in elementary ops (opset < 20 exports) becomes one op before
  // autocast and autodiff, so both decide for the op that will run.
  p.Add(std::make_unique<FuseGeluPass>(&r->fuse_gelu));
  // SiLU written as x * Sigmoid(x) (no ONNX op before opset 24) likewise.
  p.Add(std::make_unique<FuseSiluPass>(&r->fuse_silu));
  // RMSNorm written out (Pow, ReduceMean, Add, Sqrt, Reciprocal, Mul) likewise; autocast
  // then keeps the one op in f32, as it kept the chain.
  p.Add(std::make_unique<FuseRmsNormPass>(caps, &r->fuse_rms_norm));
  // Attention as one op where the backend has a fused kernel (cuDNN's flash attention):
  // likewise before autocast, and before fuse-softmax, which would take its softmax.
  p.Add(std::make_unique<FuseAttentionPass>(caps, AttentionComputeDType(o.autocast.precision), &r->fuse_attention));
  // Attention's scale, mask and softmax as one op, for the same reason.
  p.Add(std::make_unique<FuseSoftmaxPass>(caps, &r->fuse_softmax));
  // Precision of every forward op, before autodiff: the backward pass inherits it (the
  // gradient of a Cast is a Cast).
  p.Add(std::make_unique<AutocastPass>(o.autocast, caps, &r->autocast));
  // Tensor-core padding: after autocast (the multiple depends on each GEMM's dtype),
  // before autodiff (the backward graph is built on the padded weights).
  p.Add(std::make_unique<PadDimsPass>(o.pad_dims, caps, &r->pad_dims));
  // Convolutions and what follows them on channels-last activations where the backend
  // runs them faster: on the final forward graph (padded channels included), before
  // autodiff, which builds the backward ops in the same layout.
  p.Add(std::make_unique<ChannelsLastPass>(caps, &r->channels_last));
  // The backward graph, once the forward graph is final.
  p.Add(std::make_unique<AutodiffPass>(&r->loss, &r->autodiff, o.freeze));
  // FP8 GEMMs: after autodiff, because it converts the backward GEMMs with their forward.
  p.Add(std::make_unique<Fp8Pass>(o.fp8, caps, &r->autocast, &r->autodiff, &r->fp8));
  // Real FP8 GEMMs where the device has them: right after the emulation they replace.
  p.Add(std::make_unique<Fp8LowerPass>(o.fp8.enabled, o.fp8.fast_accumulation_forward, caps, &r->fp8,
                                      &r->fp8_lower));
  // Gradient accumulation (accumulate_steps > 1): the seed divided by K and the gradients
  // summed across micro-batches, before the passes that check and apply them.
  p.Add(std::make_unique<AccumulateGradientsPass>(o.accumulate_steps, &r->autodiff, &r->grad_accumulation));
  // Data-parallel jobs: the gradients (summed over micro-batches when accumulating)
  // averaged over the ranks, before anything checks or applies them.
  p.Add(std::make_unique<DataParallelPass>(o.data_parallel, &r->loss, &r->autodiff, &r->grad_accumulation,
                                           &r->data_parallel));
  // Loss scaling: needs the gradients and the seed; before the updates it gates.
  p.Add(std::make_unique<LossScalingPass>(o.loss_scaling, &r->autocast, &r->autodiff, &r->loss_scaling,
                                          &r->grad_accumulation, &r->data_parallel));
  // The updates on the FP32 master weights, gated on the overflow flag.
  p.Add(std::make_unique<OptimizerPass>(o.optimizer, &r->autodiff, &r->loss_scaling, &r->optimizer,
                                        &r->grad_accumulation, &r->data_parallel));
  // ZeRO-3: the trained parameters become this rank's slices, gathered where they are
  // read; after the optimizer, whose Shard nodes name them and whose updates then write the
  // slices, before simplify (which must not touch the gathers, stochastic ops).
  p.Add(std::make_unique<ShardParametersPass>(ShardParameters(o, true), &r->loss, &r->shard_parameters));
  // Clean-up of the complete graph: CSE, folding, dead code.
  p.Add(std::make_unique<SimplifyPass>());
  // GEMM + ReLU epilogues: on the simplified graph, where the pattern is canonical.
  p.Add(std::make_unique<FuseEpiloguesPass>());
  // Backward GEMMs of 2-D weights read their operands transposed in place; on the
  // simplified graph, after FP8 took the GEMMs it converts.
  p.Add(std::make_unique<FoldTransposesPass>());
  // bf16/fp16 GEMMs read only by a Cast to f32 (the weight gradients) write f32 directly.
  p.Add(std::make_unique<FoldOutputCastsPass>());
  // TF32 (precision tf32) on every f32 GEMM and convolution, backward ones included: after
  // autodiff and after every pass that writes or rewrites a GEMM, so none is missed.
  p.Add(std::make_unique<Tf32Pass>(o.autocast.precision == Precision::kTF32, &r->tf32));
  // Attention's head transposes read and written in place by the batched MatMuls: after
  // every pass that writes or rewrites a MatMul (fold-output-casts and tf32 copy or edit
  // their attributes), where the backend's MatMuls take permuted views.
  p.Add(std::make_unique<FoldBatchTransposesPass>(caps, &r->fold_batch_transposes));
  // Causal attention's triangular MatMul operands: on the final MatMuls and their views
  // (fold-batch-transposes decides whether an operand is read transposed).
  p.Add(std::make_unique<TriangularOperandsPass>(&r->triangular_operands));
  // LayerNormalization's narrowing Cast, and LayerNormGrad's residual gradient sum, bias
  // gradient and Cast, folded in: on the final graph (autocast's Casts and autodiff's sums
  // are all there), where the backend's kernels take them.
  p.Add(std::make_unique<FuseLayerNormEdgesPass>(caps, &r->fuse_layer_norm_edges));
  // Multi-tensor updates: once every update exists and nothing rewrites them.
  p.Add(std::make_unique<FuseUpdatesPass>());
  // 16-bit gradients read by the fused updates directly, their Casts to f32 gone, where
  // the backend's update kernels widen as they load: after fuse-updates made them.
  p.Add(std::make_unique<FoldGradientCastsPass>(caps));
  // The weight average after each weight's update: after fuse-updates, so it orders itself
  // after the node that will write the weight.
  p.Add(std::make_unique<EmaPass>(o.ema, &r->optimizer, &r->ema));
  // Widening casts (the bf16 conv weight gradients' casts to f32) run next to their first
  // reader: the order the memory plan follows, so it goes right before the plan.
  p.Add(std::make_unique<DeferWideningCastsPass>());
  // Activations recomputed in the backward instead of kept: on the graph that will run,
  // after every pass that could merge the copies back (simplify) or reorder them, right
  // before the plan whose lifetimes it shortens.
  p.Add(std::make_unique<RecomputePass>(o.recompute, &r->loss, &r->recompute));
  // Order and arena offsets: last, for the graph that will run.
  p.Add(std::make_unique<MemoryPlanPass>(&r->memory_plan));
  return p;
}

PassPipeline MakeEvaluationPipeline(const CompileOptions& o, const Capabilities& caps, CompileResults* r,
                                    PipelineOptions pipeline) {
  PassPipeline p(std::move(pipeline));
  // Evaluation mode: Dropout is the identity, BatchNorm uses its running statistics.
  if (!o.keep_model_training_mode) p.Add(std::make_unique<SetModePass>(false));
  // The logits are the program's output; loss and accuracy are computed from them.
  if (!o.keep_all_outputs) p.Add(std::make_unique<SelectOutputsPass>(std::vector<std::string>{o.loss.logits}));
  p.Add(std::make_unique<FuseGeluPass>(&r->fuse_gelu));
  p.Add(std::make_unique<FuseSiluPass>(&r->fuse_silu));
  p.Add(std::make_unique<FuseRmsNormPass>(caps, &r->fuse_rms_norm));
  p.Add(std::make_unique<FuseAttentionPass>(caps, AttentionComputeDType(o.autocast.precision), &r->fuse_attention));
  p.Add(std::make_unique<FuseSoftmaxPass>(caps, &r->fuse_softmax));
  p.Add(std::make_unique<AutocastPass>(o.autocast, caps, &r->autocast));
  p.Add(std::make_unique<PadDimsPass>(o.pad_dims, caps, &r->pad_dims));
  p.Add(std::make_unique<ChannelsLastPass>(caps, &r->channels_last));
  // FP8 GEMMs with the scales training keeps (shared by name); no amax is recorded.
  p.Add(std::make_unique<Fp8Pass>(o.fp8, caps, &r->autocast, nullptr, &r->fp8));
  p.Add(std::make_unique<Fp8LowerPass>(o.fp8.enabled, o.fp8.fast_accumulation_forward, caps, &r->fp8,
                                      &r->fp8_lower));
  // ZeRO-3: the same slices as the training program (they share them), gathered before use.
  p.Add(std::make_unique<ShardParametersPass>(ShardParameters(o, false), nullptr, &r->shard_parameters));
  p.Add(std::make_unique<SimplifyPass>());
  p.Add(std::make_unique<FuseEpiloguesPass>());
  p.Add(std::make_unique<Tf32Pass>(o.autocast.precision == Precision::kTF32, &r->tf32));
  p.Add(std::make_unique<FoldBatchTransposesPass>(caps, &r->fold_batch_transposes));
  p.Add(std::make_unique<TriangularOperandsPass>(&r->triangular_operands));
  p.Add(std::make_unique<FuseLayerNormEdgesPass>(caps, &r->fuse_layer_norm_edges));
  p.Add(std::make_unique<MemoryPlanPass>(&r->memory_plan));
  return p;
}

}  // namespace mpc
