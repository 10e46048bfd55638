// The compiler's two pipelines, in one place: which passes run, in what order and why
// (passes/pipelines.cc, one line per pass), and how they are wired: each pass gets its
// options from CompileOptions, the device's Capabilities, and pointers into one
// CompileResults (passes/compile_results.h) for what it reads and writes.
//
//   training:   set-mode, batch-norm-stats, attach-loss, fuse-gelu, autocast, pad-dims, autodiff,
//               fp8, fp8-lower, accumulate-gradients, loss-scaling, optimizer, simplify,
//               fuse-epilogues, fold-transposes, fold-output-casts, tf32, fuse-updates, ema,
//               defer-widening-casts, recompute, memory-plan
//   evaluation: set-mode, select-outputs, autocast, pad-dims, fp8, fp8-lower, simplify,
//               fuse-epilogues, tf32, memory-plan
#pragma once

#include <string>
#include <vector>

#include "graph/capabilities.h"
#include "passes/attach_loss.h"
#include "passes/autocast.h"
#include "passes/compile_results.h"
#include "passes/data_parallel.h"
#include "passes/ema.h"
#include "passes/fp8.h"
#include "passes/loss_scaling.h"
#include "passes/optimizer.h"
#include "passes/pad_dims.h"
#include "passes/recompute.h"
#include "passes/shard_parameters.h"
#include "passes/pass_pipeline.h"

namespace mpc {

// Every pass's options (engine/compile_options.cc builds them from a TrainSpec).
struct CompileOptions {
  AttachLossOptions loss;  // training; its `logits` is also the output evaluation keeps
  AutocastOptions autocast;
  PadDimsOptions pad_dims;
  Fp8Options fp8;
  LossScalingOptions loss_scaling;
  OptimizerOptions optimizer;
  int accumulate_steps = 1;           // micro-batches per optimizer step (accumulate-gradients)
  DataParallelOptions data_parallel;  // ranks of the job (data-parallel)
  std::vector<std::string> freeze;    // parameters not trained (autodiff)
  EmaOptions ema;
  RecomputeOptions recompute;  // training only
  // The job this program runs in (both programs; data-parallel reads world_size above,
  // which evaluation programs set to 1): ZeRO-3's slices are this rank's of this many.
  int job_ranks = 1;
  int job_rank = 0;
  // Evaluation only: keep every model output instead of the logits (mpc run), and keep
  // the model's own training_mode instead of evaluation mode.
  bool keep_all_outputs = false;
  bool keep_model_training_mode = false;
};

// `caps` and `results` must outlive the pipeline's Run.
PassPipeline MakeTrainingPipeline(const CompileOptions& options, const Capabilities& caps, CompileResults* results,
                                  PipelineOptions pipeline = {});
PassPipeline MakeEvaluationPipeline(const CompileOptions& options, const Capabilities& caps, CompileResults* results,
                                    PipelineOptions pipeline = {});

}  // namespace mpc
