// Checkpoints: FP32 master weights and every piece of persistent training state
// (optimizer moments, step counters; later the loss scaler and FP8 meta) plus the
// position in the run, as one mpc.Checkpoint proto written atomically to
// DIR/checkpoint.pb. Loading validates everything before touching the live state,
// so a bad checkpoint never leaves a half-restored model.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/executor.h"
#include "proto/checkpoint.pb.h"

namespace mpc {

struct TrainingPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  uint64_t seed = 0;
};

constexpr char kCheckpointFile[] = "checkpoint.pb";

std::string CheckpointPath(const std::string& dir);
bool CheckpointExists(const std::string& dir);

absl::Status SaveCheckpoint(const std::string& dir, const Executor& executor, const TrainingPosition& position,
                            const std::string& model_fingerprint);
absl::StatusOr<TrainingPosition> LoadCheckpoint(const std::string& dir, Executor& executor,
                                                const std::string& model_fingerprint);

}  // namespace mpc
