// mpc-train: trains a model as a TrainSpec describes. Uses engine/mpc.h, the public
// embedding API, and engine/tensorboard_writer.h for --tensorboard. On a terminal it draws
// a progress bar; otherwise it prints one plain line per epoch (and every
// log_every_n_steps). Exit code 1 on any error, with a one-line message.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "distributed/communicator.h"
#include "engine/mpc.h"
#include "engine/output_lock.h"
#include "engine/tensorboard_writer.h"
#include "tools/flag_normalize.h"

ABSL_FLAG(std::string, model, "", "ONNX model (.onnx or text .onnxtxt); overrides the spec's `model`");
ABSL_FLAG(std::string, spec, "", "training spec, mpc.TrainSpec in protobuf text format (required)");
ABSL_FLAG(std::string, metrics, "", "write JSON Lines metrics (train/eval/summary records) to this file");
ABSL_FLAG(std::string, tensorboard, "",
          "write TensorBoard event files (scalars: train/, eval/, fp8/, stats/) into this directory");
ABSL_FLAG(std::string, checkpoint_dir, "", "checkpoint directory; overrides the spec's checkpoint.dir");
ABSL_FLAG(std::string, device, "", "cpu, cuda, or auto (the GPU when available); overrides the spec's device");
ABSL_FLAG(bool, resume, false,
          "continue from the newest checkpoint in the checkpoint directory (an error when there is none)");
ABSL_FLAG(bool, resume_if_present, false,
          "continue from the newest checkpoint in the checkpoint directory if there is one, else start at step 0 "
          "(for job schedulers that restart jobs)");
ABSL_FLAG(bool, overwrite_checkpoints, false,
          "start over although the checkpoint directory holds checkpoints: removes them (without this, such a run "
          "stops at start)");
ABSL_FLAG(std::string, export_onnx, "", "after training, write the model with its trained weights here");
ABSL_FLAG(bool, export_external_data, false,
          "--export_onnx / --export_ema_onnx write the weights into FILE.data beside the model (ONNX external "
          "data); automatic above 1800 MiB of weights");
ABSL_FLAG(std::string, export_ema_onnx, "",
          "after training, write the model with the moving average of its weights here (needs `ema` in the spec)");
ABSL_FLAG(std::string, precision, "", "f32, tf32, bf16, fp16 or fp8; overrides the spec's precision.compute");
ABSL_FLAG(std::string, fp8_recipe, "",
          "delayed, current, rowwise or block: the FP8 scaling recipe with --precision fp8; overrides the spec's "
          "fp8.recipe");
ABSL_FLAG(std::string, recompute, "",
          "none, selective, full or auto (the least that fits memory.limit_mb): activations recomputed in the "
          "backward instead of kept; overrides the spec's memory.recompute");
ABSL_FLAG(std::string, loss_scaling, "", "off, dynamic or static:S; overrides the spec's loss_scaling");
ABSL_FLAG(int32_t, pad_multiple, 0,
          "pad Gemm, MatMul and Conv weights to this multiple (1: no padding); overrides the spec");
ABSL_FLAG(bool, profile, false, "print the time spent per op kind after training");
ABSL_FLAG(std::string, disable_passes, "",
          "comma-separated compiler passes to skip (as mpc compile's), to measure what one gains or find where a "
          "problem comes from");
ABSL_FLAG(bool, fused_attention, false,
          "compile attention to one FusedAttention op even on the CPU (whose own path is faster): the graph a GPU "
          "with fused attention runs, to check its numerics here");
ABSL_FLAG(bool, check_numerics, false,
          "check every op's outputs each step and stop at the first NaN/inf, naming the op (slow: for debugging)");
ABSL_FLAG(int32_t, tensor_stats, 0,
          "every N steps, write statistics of every activation, gradient and FP8 tensor to the metrics file");

namespace {

// In a data-parallel job the error names this rank and ends every rank: the others would
// wait for this one in their next collective.
int Fail(const std::string& message) {
  if (mpc::LaunchedWorldSize() > 1) {
    absl::StatusOr<mpc::Communicator*> world = mpc::JoinWorld(/*timeout_s=*/300);
    if (world.ok() && *world) {
      std::fprintf(stderr, "mpc-train: rank %d of %d: error: %s\n", (*world)->rank(), (*world)->size(),
                   message.c_str());
      (*world)->Abort(1);
    }
  }
  std::fprintf(stderr, "mpc-train: error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "trains a model on the CPU (or GPU) backend.\n"
      "usage: mpc-train --spec S [--model M] [--metrics FILE] [--tensorboard DIR] [--checkpoint_dir DIR]\n"
      "                 [--device cpu|cuda|auto]\n"
      "                 [--precision f32|tf32|bf16|fp16|fp8] [--fp8-recipe delayed|current|rowwise|block]\n"
      "                 [--loss-scaling off|dynamic|static:S]\n"
      "                 [--pad-multiple N] [--resume | --resume_if_present | --overwrite_checkpoints]\n"
      "                 [--export_onnx FILE [--export_external_data]] [--export_ema_onnx FILE] [--profile]\n"
      "                 [--check-numerics] [--tensor-stats N] [--disable-passes a,b]");
  auto storage = mpc::NormalizeFlagNames(argc, argv);
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) return Fail(absl::StrFormat("unexpected argument '%s'; see --help", positional[1]));
  mpc::EngineOptions options;
  options.spec_path = absl::GetFlag(FLAGS_spec);
  options.model_path = absl::GetFlag(FLAGS_model);
  options.metrics_path = absl::GetFlag(FLAGS_metrics);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.device = absl::GetFlag(FLAGS_device);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.resume_if_present = absl::GetFlag(FLAGS_resume_if_present);
  options.overwrite_checkpoints = absl::GetFlag(FLAGS_overwrite_checkpoints);
  options.profile = absl::GetFlag(FLAGS_profile);
  for (absl::string_view name : absl::StrSplit(absl::GetFlag(FLAGS_disable_passes), ',', absl::SkipEmpty())) {
    options.disabled_passes.emplace_back(name);
  }
  options.export_external_data = absl::GetFlag(FLAGS_export_external_data);
  options.fused_attention = absl::GetFlag(FLAGS_fused_attention);
  options.precision = absl::GetFlag(FLAGS_precision);
  options.loss_scaling = absl::GetFlag(FLAGS_loss_scaling);
  options.fp8_recipe = absl::GetFlag(FLAGS_fp8_recipe);
  options.recompute = absl::GetFlag(FLAGS_recompute);
  options.pad_multiple = absl::GetFlag(FLAGS_pad_multiple);
  options.check_numerics = absl::GetFlag(FLAGS_check_numerics);
  options.tensor_stats_every_n_steps = absl::GetFlag(FLAGS_tensor_stats);
  if (options.spec_path.empty()) return Fail("--spec is required; see --help");

  auto engine = mpc::Engine::Create(options);
  if (!engine.ok()) return Fail(std::string(engine.status().message()));
  mpc::Engine& e = **engine;
  // A data-parallel job prints from rank 0 only (every rank steps alike); errors still come
  // from the rank that has them, on stderr.
  if (e.rank() != 0 && !std::freopen("/dev/null", "w", stdout)) return Fail("cannot silence stdout of this rank");
  for (const std::string& notice : e.notices()) std::printf("mpc-train: note: %s\n", notice.c_str());
  // Asked for before training, so a spec without an average fails now, not after the run.
  const std::string export_ema_path = absl::GetFlag(FLAGS_export_ema_onnx);
  if (!export_ema_path.empty() && !e.keeps_weight_average()) {
    return Fail("--export_ema_onnx: the spec keeps no moving average of the weights; add ema { decay: 0.999 }");
  }
  // The export paths locked now, so a second run exporting to the same file is refused at
  // start rather than after training (engine/output_lock.h).
  std::vector<std::unique_ptr<mpc::OutputLock>> export_locks;
  for (const auto& [flag, path] : {std::pair<std::string, std::string>{"--export_onnx", absl::GetFlag(FLAGS_export_onnx)},
                                   {"--export_ema_onnx", export_ema_path}}) {
    if (path.empty() || e.rank() != 0) continue;
    auto lock = mpc::OutputLock::Acquire(mpc::OutputLock::ForFile(path), absl::StrCat(flag, " ", path),
                                         "export to another file");
    if (!lock.ok()) return Fail(std::string(lock.status().message()));
    export_locks.push_back(std::move(*lock));
  }
  // Opened after the spec is validated (a bad spec leaves no empty event file behind) and
  // before the first step. A write that fails later stops the logging, not the training:
  // a warning then, and exit code 1 after the run.
  std::unique_ptr<mpc::TensorBoardWriter> tensorboard;
  absl::Status tensorboard_error;
  if (const std::string dir = absl::GetFlag(FLAGS_tensorboard); !dir.empty() && e.rank() == 0) {
    auto writer = mpc::TensorBoardWriter::Open(dir, e.step() + 1);  // after a resume, its first step
    if (!writer.ok()) return Fail(std::string(writer.status().message()));
    tensorboard = std::move(*writer);
  }
  auto log_tensorboard = [&](const absl::Status& st) {
    if (st.ok()) return;
    std::fprintf(stderr, "\nmpc-train: warning: %s; no more TensorBoard records this run\n",
                 std::string(st.message()).c_str());
    tensorboard_error = st;
    tensorboard.reset();
  };
  const bool tty = isatty(STDOUT_FILENO);
  const int64_t total = e.total_steps();
  std::printf("mpc-train: %lld steps, planned activation memory %.1f MiB%s\n", static_cast<long long>(total),
              e.planned_peak_bytes() / 1048576.0,
              e.step() > 0 ? absl::StrFormat(", resumed at step %d", e.step()).c_str() : "");
  std::fflush(stdout);

  double last_loss = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_steps = 0;
  int64_t skipped = 0;
  const int64_t every = e.log_every_n_steps();
  mpc::TrainCallbacks callbacks;
  callbacks.on_step = [&](const mpc::StepMetrics& s) {
    if (tensorboard) log_tensorboard(tensorboard->WriteStep(s));
    last_loss = s.loss;
    skipped += s.skipped;
    if (!s.skipped) {
      epoch_loss_sum += s.loss;
      ++epoch_steps;
    }
    if (tty && (s.step % 10 == 0 || s.step == total)) {
      const int width = 30;
      const int filled = static_cast<int>(width * s.step / std::max<int64_t>(1, total));
      std::printf("\r[%s%s] step %lld/%lld  loss %.4f  lr %.3g%s ", std::string(filled, '#').c_str(),
                  std::string(width - filled, '.').c_str(), static_cast<long long>(s.step),
                  static_cast<long long>(total), s.loss, s.lr,
                  skipped ? absl::StrFormat("  skipped %d", skipped).c_str() : "");
      std::fflush(stdout);
    } else if (!tty && every > 0 && s.step % every == 0) {
      // Logs and CI get one plain line per N steps (the spec's log_every_n_steps).
      std::printf("step %lld/%lld  loss %.4f  lr %.3g%s\n", static_cast<long long>(s.step),
                  static_cast<long long>(total), s.loss, s.lr,
                  skipped ? absl::StrFormat("  skipped %d", skipped).c_str() : "");
      std::fflush(stdout);
    }
  };
  std::string last_eval;
  callbacks.on_eval = [&](const mpc::EvalMetrics& m) {
    if (tensorboard) log_tensorboard(tensorboard->WriteEval(m));
    if (m.averaged_weights) {  // follows the trained weights' evaluation (spec ema.evaluate)
      absl::StrAppendFormat(&last_eval, "  ema: loss %.4f  accuracy %.4f", m.loss, m.accuracy);
      return;
    }
    last_eval = absl::StrFormat("  eval loss %.4f  accuracy %.4f", m.loss, m.accuracy);
    if (m.macro_f1 >= 0) absl::StrAppendFormat(&last_eval, "  F1 %.4f", m.macro_f1);
    if (m.top_k_accuracy >= 0) absl::StrAppendFormat(&last_eval, "  top-%d %.4f", m.top_k, m.top_k_accuracy);
    if (m.perplexity >= 0) absl::StrAppendFormat(&last_eval, "  ppl %.3f", m.perplexity);
  };
  callbacks.on_epoch_end = [&](int64_t epoch, int64_t epochs) {
    if (tty) std::printf("\n");
    std::printf("epoch %lld/%lld  step %lld  train loss %.4f%s%s\n", static_cast<long long>(epoch + 1),
                static_cast<long long>(epochs), static_cast<long long>(e.step()),
                epoch_steps ? epoch_loss_sum / epoch_steps : last_loss, last_eval.c_str(),
                skipped ? absl::StrFormat("  (skipped steps so far: %d)", skipped).c_str() : "");
    std::fflush(stdout);
    epoch_loss_sum = 0;
    epoch_steps = 0;
    last_eval.clear();
  };
  auto summary = e.Train(callbacks);
  if (!summary.ok()) {
    if (tty) std::printf("\n");
    return Fail(std::string(summary.status().message()));
  }
  if (tty && epoch_steps) std::printf("\n");
  std::printf("done: %lld steps (%lld skipped) in %.2f s (%.1f ms/step)%s\n", static_cast<long long>(summary->steps),
              static_cast<long long>(summary->skipped_steps), summary->wall_s,
              summary->steps ? 1000.0 * summary->wall_s / summary->steps : 0.0,
              summary->evaluated ? absl::StrFormat(", final accuracy %.4f", summary->last_eval.accuracy).c_str() : "");
  if (summary->rank_ms_per_step.size() > 1) {
    std::string times;
    for (size_t r = 0; r < summary->rank_ms_per_step.size(); ++r) {
      absl::StrAppendFormat(&times, "%s rank %d %.1f", r ? "," : "", r, summary->rank_ms_per_step[r]);
    }
    std::printf("data-parallel: %d ranks, ms/step:%s\n", e.world_size(), times.c_str());
  }
  if (options.profile) {
    std::printf("profile (time per op kind, all programs):\n");
    for (const mpc::OpProfile& p : e.Profile()) {
      std::printf("  %-28s %8lld calls %10.1f ms\n", p.op.c_str(), static_cast<long long>(p.calls), p.total_ms);
    }
  }
  // In a job every rank holds the same weights: rank 0 exports them. Under ZeRO-3 each rank
  // holds slices, so every rank takes part in gathering them and rank 0 writes.
  for (const auto& [flag_path, weights] :
       {std::pair<std::string, mpc::Engine::Weights>{absl::GetFlag(FLAGS_export_onnx), mpc::Engine::Weights::kTrained},
        {export_ema_path, mpc::Engine::Weights::kAverage}}) {
    if (flag_path.empty() || (e.rank() != 0 && !e.holds_parameter_slices())) continue;
    const std::string path = e.rank() == 0 ? flag_path : std::string();
    if (absl::Status st = e.ExportOnnx(path, weights); !st.ok()) return Fail(std::string(st.message()));
    if (!path.empty()) {
      std::printf("exported %s%s\n", path.c_str(),
                  weights == mpc::Engine::Weights::kAverage ? " (moving average of the weights)" : "");
    }
  }
  if (!tensorboard_error.ok()) return Fail(std::string(tensorboard_error.message()));
  return 0;
}
