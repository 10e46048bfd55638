// TensorBoard output (mpc-train --tensorboard DIR): scalar summaries in TensorFlow's event
// file format, written without TensorFlow. A file is a sequence of TFRecords, each an
// Event message (proto/tensorboard_event.proto); the first says the format version, the
// others each carry one step's (or one evaluation's) scalars. Tags:
//   train/loss, train/lr, train/loss_scale, train/skipped (0/1), train/skipped_total,
//   train/grad_norm (when clipping), fp8/<tensor>.amax and fp8/<tensor>.scale,
//   stats/<tensor>/{amax,zero_fraction,nonfinite,subnormal_fraction} (--tensor-stats),
//   eval/loss, eval/accuracy, eval/{top_k_accuracy,macro_f1,perplexity} (where they apply).
// Every record is flushed as it is written, so a run that crashes keeps all it logged.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/mpc.h"
#include "engine/output_lock.h"

namespace mpc {

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) when needed, locks it for this writer's life
  // (engine/output_lock.h: a directory another run writes is refused, naming that run),
  // and a new event file in it, events.out.tfevents.<unix seconds>.<hostname>
  // (TensorBoard reads every file whose name contains "tfevents"), then writes the
  // file-version event and a session-start event at `first_step`: TensorBoard drops what
  // earlier files logged from that step on, so after a resume from a checkpoint older than
  // a crashed run's last step each step is shown once (the metrics file's later record wins
  // the same way).
  static absl::StatusOr<std::unique_ptr<TensorBoardWriter>> Open(const std::string& dir, int64_t first_step = 1);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // One event with one scalar. TensorBoard stores scalars as float32.
  absl::Status WriteScalar(const std::string& tag, int64_t step, double value);
  // One event with several scalars of the same step.
  absl::Status WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  // A training step's scalars (see the tags above). Counts skipped steps for
  // train/skipped_total from the steps written through this writer.
  absl::Status WriteStep(const StepMetrics& m);
  absl::Status WriteEval(const EvalMetrics& m);

  const std::string& path() const { return path_; }

 private:
  TensorBoardWriter(std::FILE* file, std::string path, std::unique_ptr<OutputLock> lock)
      : file_(file), path_(std::move(path)), lock_(std::move(lock)) {}
  // One TFRecord: length, masked CRC-32C of the length, the bytes, their masked CRC-32C.
  absl::Status WriteRecord(const std::string& bytes);

  std::FILE* file_;
  std::string path_;
  std::unique_ptr<OutputLock> lock_;  // released after the file is closed
  int64_t skipped_total_ = 0;
};

}  // namespace mpc
