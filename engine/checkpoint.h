// Checkpoints (format 2, docs/training.md "Checkpoints"): FP32 master weights and every
// piece of persistent training state (optimizer moments and step counters, the loss
// scaler, FP8 meta, EMA) plus the position in the run. One directory per checkpoint,
// DIR/step-NNNNNNNN/: `tensors.bin` streamed tensor by tensor (no whole copy in memory,
// no size limit) and `manifest.pb` written last (name, dtype, shape, bytes and CRC-32C per
// tensor; itself checksummed). It is written under a temporary name and renamed into
// place, then DIR/latest is rewritten atomically to name it; older ones beyond keep_last
// are removed. Loading verifies every size and checksum before it writes anything into
// the executor, so a bad checkpoint leaves the training state untouched. The same
// checkpoint also goes into one byte string (SaveCheckpointToBytes; its layout in
// checkpoint_format.h), written and loaded by the same code as the directory's.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/executor.h"

namespace mpc {

struct TrainingPosition {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t batch_in_epoch = 0;
  uint64_t seed = 0;
};

constexpr char kLatestFile[] = "latest";
constexpr char kManifestFile[] = "manifest.pb";
constexpr char kDataFile[] = "tensors.bin";
constexpr char kOldCheckpointFile[] = "checkpoint.pb";  // format 1: refused, with a message

// What a checkpoint must match to load. The model part (optimizer and every precision
// independent tensor) must be equal; a different precision part loads with the
// precision-specific state re-derived or reset (and a notice saying so).
struct CheckpointIdentity {
  std::string model_fingerprint;
  std::string optimizer;  // a description, e.g. "sgd momentum"
  std::string precision_fingerprint;
  std::string precision;  // a description, e.g. "compute bf16, loss scaling dynamic"
};

// Precision-specific state: low-precision weight copies (`<param>.lowp`), the loss scale
// and its growth tracker, FP8 scaling state (`<tensor>.fp8_*`).
bool IsPrecisionState(const std::string& name);

// The identity of a program's checkpoints from its persistent values.
CheckpointIdentity MakeCheckpointIdentity(const std::vector<const Value*>& persistent, const std::string& optimizer,
                                          const std::string& precision);

// What a checkpoint directory holds.
struct CheckpointDirContents {
  bool exists = false;
  bool has_latest = false;
  bool old_format = false;                             // DIR/checkpoint.pb (format 1)
  std::vector<std::pair<int64_t, std::string>> steps;  // step-NNNNNNNN directories, ascending
  std::vector<std::string> temporaries;                // *.tmp.* left by interrupted writes
  bool HoldsCheckpoint() const { return has_latest || old_format || !steps.empty(); }
};
CheckpointDirContents InspectCheckpointDir(const std::string& dir);

// ZeRO-1's sliced state (Value::sharded_from; graph/sharding.h) in a checkpoint: written
// whole, so a checkpoint does not depend on the world size, and loaded into this rank's
// slice. Saving needs `whole`: every sliced state gathered from all the ranks, in its
// padded shape sharded_from (Engine::Impl::GatherSlicedState). Null where nothing is sliced.
struct SlicedState {
  int rank = 0;
  int world_size = 1;
  std::map<std::string, Tensor> whole;
};

// Writes the checkpoint of `position.step` into `dir`, points DIR/latest at it and keeps
// the newest `keep_last` (0: all). Returns the checkpoint's directory.
absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, const Executor& executor,
                                           const TrainingPosition& position, const CheckpointIdentity& identity,
                                           int keep_last, const SlicedState* sliced = nullptr);

// Loads the checkpoint DIR/latest names into `executor`. `notices` receives what the
// load re-derived or reset (another precision) and anything else worth saying.
absl::StatusOr<TrainingPosition> LoadCheckpoint(const std::string& dir, Executor& executor,
                                                const CheckpointIdentity& identity, std::vector<std::string>* notices,
                                                const SlicedState* sliced = nullptr);

// The checkpoint `SaveCheckpoint` writes, as one byte string (nothing on disk).
absl::StatusOr<std::string> SaveCheckpointToBytes(const Executor& executor, const TrainingPosition& position,
                                                  const CheckpointIdentity& identity,
                                                  const SlicedState* sliced = nullptr);

// Loads bytes SaveCheckpointToBytes returned into `executor`, with LoadCheckpoint's checks
// and notices: every checksum verified before anything is written.
absl::StatusOr<TrainingPosition> LoadCheckpointFromBytes(std::string_view bytes, Executor& executor,
                                                         const CheckpointIdentity& identity,
                                                         std::vector<std::string>* notices,
                                                         const SlicedState* sliced = nullptr);

// Removes the *.tmp.* files and directories interrupted writes left in `dir` (none of a
// live process), with a notice.
absl::Status RemoveStaleTemporaries(const std::string& dir, std::vector<std::string>* notices);
// Removes every checkpoint in `dir` (--overwrite_checkpoints), with a notice.
absl::Status RemoveCheckpoints(const std::string& dir, std::vector<std::string>* notices);

}  // namespace mpc
