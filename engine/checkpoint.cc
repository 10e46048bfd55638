// Checkpoint save/load (see checkpoint.h).
#include "engine/checkpoint.h"

#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace mpc {

std::string CheckpointPath(const std::string& dir) { return (std::filesystem::path(dir) / kCheckpointFile).string(); }

bool CheckpointExists(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::exists(CheckpointPath(dir), ec);
}

absl::Status SaveCheckpoint(const std::string& dir, const Executor& executor, const TrainingPosition& position,
                            const std::string& model_fingerprint) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("checkpoint dir ", dir, ": cannot create: ", ec.message()));
  Checkpoint ckpt;
  ckpt.set_step(position.step);
  ckpt.set_epoch(position.epoch);
  ckpt.set_batch_in_epoch(position.batch_in_epoch);
  ckpt.set_seed(position.seed);
  ckpt.set_model_fingerprint(model_fingerprint);
  for (const Value* v : executor.PersistentValues()) {
    MPC_ASSIGN_OR_RETURN(Tensor t, executor.ReadPersistent(v->name));
    if (!v->logical_shape.empty()) t = t.SlicedTo(v->logical_shape);  // checkpoints are model shaped
    // Never write a state training cannot continue from; what the directory holds stays.
    if (const int64_t bad = t.NonFiniteCount(); bad > 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "not writing a checkpoint at step ", position.step, " to ", dir, ": ",
          v->kind == ValueKind::kParameter ? "parameter '" : "state '", v->name, "' holds ", bad, " non-finite value",
          bad == 1 ? "" : "s", "; the checkpoint already in ", dir, " (if any) is kept"));
    }
    TensorData* td = v->kind == ValueKind::kParameter ? ckpt.add_parameters() : ckpt.add_state();
    td->set_name(v->name);
    td->set_dtype(DTypeName(t.dtype()));
    for (int64_t d : t.shape()) td->add_shape(d);
    td->set_data(t.raw(), t.bytes());
  }
  std::string bytes;
  if (!ckpt.SerializeToString(&bytes)) return absl::InternalError("checkpoint serialization failed");
  return WriteFileAtomically(CheckpointPath(dir), bytes);
}

absl::StatusOr<TrainingPosition> LoadCheckpoint(const std::string& dir, Executor& executor,
                                                const std::string& model_fingerprint) {
  const std::string path = CheckpointPath(dir);
  MPC_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
  Checkpoint ckpt;
  if (!ckpt.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat(path, ": not a valid mpc checkpoint (corrupt or truncated)"));
  }
  if (ckpt.model_fingerprint() != model_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": the checkpoint was written for a different model or optimizer (fingerprint ",
                     ckpt.model_fingerprint(), ", this program ", model_fingerprint, "); use another checkpoint_dir"));
  }
  // Decode and check every tensor first; only then write them into the live state.
  std::vector<std::pair<std::string, Tensor>> decoded;
  auto decode = [&](const TensorData& td) -> absl::Status {
    MPC_ASSIGN_OR_RETURN(DType dtype, DTypeFromName(td.dtype()));
    Tensor t(dtype, Shape(td.shape().begin(), td.shape().end()));
    if (td.data().size() != t.bytes()) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor '", td.name(), "' has ", td.data().size(), " bytes, expected ", t.bytes()));
    }
    std::memcpy(t.raw(), td.data().data(), t.bytes());
    MPC_ASSIGN_OR_RETURN(Tensor current, executor.ReadPersistent(td.name()));
    const Value* value = nullptr;
    for (const Value* v : executor.PersistentValues()) {
      if (v->name == td.name()) value = v;
    }
    if (value && !value->logical_shape.empty() && t.shape() == value->logical_shape) {
      t = t.PaddedTo(current.shape());  // back into the padded training layout, zeros outside
    }
    if (current.dtype() != t.dtype() || current.shape() != t.shape()) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": tensor '", td.name(), "' is ", td.dtype(),
                                                        ShapeToString(t.shape()), " but the model has ",
                                                        DTypeName(current.dtype()), ShapeToString(current.shape())));
    }
    decoded.emplace_back(td.name(), std::move(t));
    return absl::OkStatus();
  };
  for (const TensorData& td : ckpt.parameters()) MPC_RETURN_IF_ERROR(decode(td));
  for (const TensorData& td : ckpt.state()) MPC_RETURN_IF_ERROR(decode(td));
  if (decoded.size() != executor.PersistentValues().size()) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": has ", decoded.size(), " tensors, the program needs ",
                                                      executor.PersistentValues().size()));
  }
  for (auto& [name, t] : decoded) MPC_RETURN_IF_ERROR(executor.WritePersistent(name, t));
  TrainingPosition pos;
  pos.step = ckpt.step();
  pos.epoch = ckpt.epoch();
  pos.batch_in_epoch = ckpt.batch_in_epoch();
  pos.seed = ckpt.seed();
  return pos;
}

}  // namespace mpc
