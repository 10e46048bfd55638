// Checkpoint writing (to a directory or to bytes, both through WriteTensors), the
// checkpoint directory (inspection, retention, cleanup) and the identity a checkpoint must
// match (see checkpoint.h). Loading is in checkpoint_load.cc.
#include "engine/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/crc32c.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "engine/checkpoint_format.h"
#include "proto/checkpoint.pb.h"

namespace mpc {
namespace fs = std::filesystem;

bool IsPrecisionState(const std::string& name) {
  return absl::EndsWith(name, ".lowp") || absl::StrContains(name, ".fp8_") || name == "loss_scale" ||
         name == "loss_scale_growth_tracker";
}

CheckpointIdentity MakeCheckpointIdentity(const std::vector<const Value*>& persistent, const std::string& optimizer,
                                          const std::string& precision) {
  std::string model = optimizer;
  std::string lowp = precision;
  for (const Value* v : persistent) {
    // Model shapes, so a padded and an unpadded run share checkpoints.
    const std::string entry = absl::StrCat("|", v->name, ":", DTypeName(v->dtype), ShapeToString(ModelShape(*v)));
    absl::StrAppend(IsPrecisionState(v->name) ? &lowp : &model, entry);
  }
  return {absl::StrFormat("%016x", std::hash<std::string>()(model)), optimizer,
          absl::StrFormat("%016x", std::hash<std::string>()(lowp)), precision};
}

CheckpointDirContents InspectCheckpointDir(const std::string& dir) {
  CheckpointDirContents out;
  std::error_code ec;
  out.exists = fs::is_directory(dir, ec);
  if (!out.exists) return out;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = 0;
    if (name == kLatestFile) {
      out.has_latest = true;
    } else if (name == kOldCheckpointFile) {
      out.old_format = true;
    } else if (absl::StrContains(name, ".tmp.")) {
      out.temporaries.push_back(name);
    } else if (ParseStepDirName(name, &step) && e.is_directory(ec)) {
      out.steps.emplace_back(step, name);
    }
  }
  std::sort(out.steps.begin(), out.steps.end());
  std::sort(out.temporaries.begin(), out.temporaries.end());
  return out;
}

namespace {

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write failed (disk full?)", path);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

void SyncDirectory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// A file written whole and fsynced (inside the temporary checkpoint directory).
absl::Status WriteSyncedFile(const std::string& path, const std::string& contents) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", path);
  absl::Status st = WriteAll(fd, contents.data(), contents.size(), path);
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError("fsync failed", path);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("close failed", path);
  return st;
}

// The one reader of the executor's state for checkpoints, directory and bytes alike:
// every persistent tensor, model shaped, handed to `write` in turn (tensors.bin's layout),
// and the manifest describing them with the position and identity. `dir` names where the
// checkpoint goes in errors ("": into bytes).
absl::StatusOr<CheckpointManifest> WriteTensors(const Executor& executor, const TrainingPosition& position,
                                                const CheckpointIdentity& identity, const std::string& dir,
                                                const SlicedState* sliced,
                                                const std::function<absl::Status(const Tensor&)>& write) {
  CheckpointManifest manifest;
  int64_t offset = 0;
  for (const Value* v : executor.PersistentValues()) {
    Tensor t;
    if (!v->sharded_from.empty()) {  // ZeRO-1: this rank holds a slice; write the gathered whole
      if (!sliced || !sliced->whole.count(v->name)) {
        return absl::InternalError(absl::StrCat("checkpoint at step ", position.step, ": state '", v->name,
                                                "' is sliced across the ranks (ZeRO-1) and was not gathered"));
      }
      t = sliced->whole.at(v->name);
    } else {
      MPC_ASSIGN_OR_RETURN(t, executor.ReadPersistent(v->name));
    }
    if (!v->logical_shape.empty()) t = t.SlicedTo(v->logical_shape);  // checkpoints are model shaped
    // Never write a state training cannot continue from; what the directory holds stays.
    if (const int64_t bad = t.NonFiniteCount(); bad > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("not writing a checkpoint at step ", position.step, dir.empty() ? " to bytes" : " to " + dir,
                       ": ", v->kind == ValueKind::kParameter ? "parameter '" : "state '", v->name, "' holds ", bad,
                       " non-finite value", bad == 1 ? "" : "s",
                       dir.empty() ? "; restore a finite state (LoadCheckpoint, LoadCheckpointFromBytes) before saving"
                                   : absl::StrCat("; the checkpoint already in ", dir, " (if any) is kept")));
    }
    MPC_RETURN_IF_ERROR(write(t));
    CheckpointTensor* e = manifest.add_tensors();
    e->set_name(v->name);
    e->set_dtype(DTypeName(t.dtype()));
    for (int64_t d : t.shape()) e->add_shape(d);
    e->set_offset(offset);
    e->set_size_bytes(static_cast<int64_t>(t.bytes()));
    e->set_crc32c(Crc32cExtend(0, t.raw(), t.bytes()));
    e->set_parameter(v->kind == ValueKind::kParameter);
    e->set_precision_state(IsPrecisionState(v->name));
    offset += static_cast<int64_t>(t.bytes());
  }
  manifest.set_data_bytes(offset);
  manifest.set_step(position.step);
  manifest.set_epoch(position.epoch);
  manifest.set_batch_in_epoch(position.batch_in_epoch);
  manifest.set_seed(position.seed);
  manifest.set_model_fingerprint(identity.model_fingerprint);
  manifest.set_optimizer(identity.optimizer);
  manifest.set_precision_fingerprint(identity.precision_fingerprint);
  manifest.set_precision(identity.precision);
  return manifest;
}

// WriteTensors into TMP/tensors.bin, fsynced.
absl::StatusOr<CheckpointManifest> WriteDataFile(const std::string& tmp, const std::string& dir,
                                                 const Executor& executor, const TrainingPosition& position,
                                                 const CheckpointIdentity& identity, const SlicedState* sliced) {
  const std::string path = (fs::path(tmp) / kDataFile).string();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("cannot create", path);
  absl::StatusOr<CheckpointManifest> manifest =
      WriteTensors(executor, position, identity, dir, sliced,
                   [fd, &path](const Tensor& t) { return WriteAll(fd, t.raw(), t.bytes(), path); });
  absl::Status st = manifest.status();
  if (st.ok() && ::fsync(fd) != 0) st = ErrnoError("fsync failed", path);
  if (::close(fd) != 0 && st.ok()) st = ErrnoError("close failed", path);
  MPC_RETURN_IF_ERROR(st);
  return manifest;
}

// Removes the oldest checkpoints so that `keep_last` remain, never the one just written.
void ApplyRetention(const std::string& dir, int64_t written_step, int keep_last) {
  if (keep_last <= 0) return;
  CheckpointDirContents contents = InspectCheckpointDir(dir);
  int kept = 1;  // the one just written
  for (auto it = contents.steps.rbegin(); it != contents.steps.rend(); ++it) {
    if (it->first >= written_step) continue;  // itself; newer ones are another run's, left alone
    std::error_code ec;
    if (kept < keep_last) {
      ++kept;
    } else {
      // The manifest first: a removal cut short leaves an incomplete checkpoint, never
      // one that looks complete with data missing.
      fs::remove(fs::path(dir) / it->second / kManifestFile, ec);
      fs::remove_all(fs::path(dir) / it->second, ec);
    }
  }
}

}  // namespace

absl::StatusOr<std::string> SaveCheckpoint(const std::string& dir, const Executor& executor,
                                           const TrainingPosition& position, const CheckpointIdentity& identity,
                                           int keep_last, const SlicedState* sliced) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat("checkpoint dir ", dir, ": cannot create: ", ec.message()));
  const std::string name = StepDirName(position.step);
  const std::string final_dir = (fs::path(dir) / name).string();
  const std::string tmp = absl::StrCat(final_dir, ".tmp.", ::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directory(tmp, ec);
  if (ec) return absl::InternalError(absl::StrCat(tmp, ": cannot create the checkpoint directory: ", ec.message()));
  auto cleanup = [&](absl::Status st) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    return st;
  };
  absl::StatusOr<CheckpointManifest> manifest = WriteDataFile(tmp, dir, executor, position, identity, sliced);
  if (!manifest.ok()) return cleanup(manifest.status());
  // The manifest last: a checkpoint directory without one is incomplete.
  if (absl::Status st = WriteSyncedFile((fs::path(tmp) / kManifestFile).string(), EncodeManifest(*manifest));
      !st.ok()) {
    return cleanup(st);
  }
  SyncDirectory(tmp);
  // Into place. A checkpoint of the same step (a run resumed at its end, or one that went
  // back) is swapped atomically with the new one (renameat2 RENAME_EXCHANGE), so that
  // DIR/latest never names a missing directory; the old one is then removed.
  if (fs::exists(final_dir, ec)) {
    if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      fs::remove_all(tmp, ec);  // now the previous checkpoint
    } else if (errno == EINVAL || errno == ENOSYS) {
      // A filesystem without the exchange: the old one aside, the new one in (a crash
      // between the two leaves DIR/latest naming a missing directory; the error says so).
      const std::string old = absl::StrCat(final_dir, ".tmp.old.", ::getpid());
      if (::rename(final_dir.c_str(), old.c_str()) != 0) {
        return cleanup(ErrnoError("cannot move the previous checkpoint of this step aside", final_dir));
      }
      if (::rename(tmp.c_str(), final_dir.c_str()) != 0) return cleanup(ErrnoError("rename failed", final_dir));
      fs::remove_all(old, ec);
    } else {
      return cleanup(ErrnoError("cannot replace the previous checkpoint of this step", final_dir));
    }
  } else if (::rename(tmp.c_str(), final_dir.c_str()) != 0) {
    return cleanup(ErrnoError("rename failed", final_dir));
  }
  SyncDirectory(dir);
  MPC_RETURN_IF_ERROR(WriteFileAtomically((fs::path(dir) / kLatestFile).string(), name + "\n"));
  ApplyRetention(dir, position.step, keep_last);
  return final_dir;
}

absl::StatusOr<std::string> SaveCheckpointToBytes(const Executor& executor, const TrainingPosition& position,
                                                  const CheckpointIdentity& identity, const SlicedState* sliced) {
  // The data first (the manifest holds its checksums), with room reserved in front for the
  // header and the manifest, which then go in place without another copy of the data when
  // the estimate holds (a longer manifest only costs a reallocation).
  size_t data_bytes = 0, manifest_estimate = 256;
  for (const Value* v : executor.PersistentValues()) {
    data_bytes += static_cast<size_t>(NumElements(ModelShape(*v))) * DTypeSize(v->dtype);
    manifest_estimate += v->name.size() + 64;
  }
  std::string data;
  data.reserve(kBytesHeaderSize + manifest_estimate + data_bytes);
  MPC_ASSIGN_OR_RETURN(const CheckpointManifest manifest,
                       WriteTensors(executor, position, identity, /*dir=*/"", sliced, [&data](const Tensor& t) {
                         data.append(static_cast<const char*>(t.raw()), t.bytes());
                         return absl::OkStatus();
                       }));
  const std::string encoded = EncodeManifest(manifest);
  std::string head(kBytesMagic, kBytesMagicSize);
  for (int i = 0; i < 8; ++i) head += static_cast<char>((static_cast<uint64_t>(encoded.size()) >> (8 * i)) & 0xff);
  head += encoded;
  data.insert(0, head);
  return data;
}

absl::Status RemoveStaleTemporaries(const std::string& dir, std::vector<std::string>* notices) {
  const CheckpointDirContents contents = InspectCheckpointDir(dir);
  std::vector<std::string> removed;
  for (const std::string& name : contents.temporaries) {
    // "<name>.tmp.<pid>" or "<name>.tmp.old.<pid>": leave those of a live process (another run).
    int pid = 0;
    const size_t dot = name.rfind('.');
    if (absl::SimpleAtoi(name.substr(dot + 1), &pid) && pid != ::getpid() && pid > 0 && ::kill(pid, 0) == 0) continue;
    std::error_code ec;
    fs::remove_all(fs::path(dir) / name, ec);
    if (ec) {
      return absl::InternalError(absl::StrCat(dir, "/", name, ": cannot remove this leftover of an interrupted ",
                                              "checkpoint write: ", ec.message(), "; remove it by hand"));
    }
    removed.push_back(name);
  }
  if (!removed.empty() && notices) {
    notices->push_back(absl::StrCat("removed ", removed.size(), " unfinished checkpoint write",
                                    removed.size() == 1 ? "" : "s", " left in ", dir,
                                    " by an interrupted run: ", absl::StrJoin(removed, ", ")));
  }
  return absl::OkStatus();
}

absl::Status RemoveCheckpoints(const std::string& dir, std::vector<std::string>* notices) {
  const CheckpointDirContents contents = InspectCheckpointDir(dir);
  std::vector<std::string> names;
  for (const auto& [step, name] : contents.steps) names.push_back(name);
  if (contents.old_format) names.push_back(kOldCheckpointFile);
  if (contents.has_latest) names.push_back(kLatestFile);
  for (const std::string& name : names) {
    std::error_code ec;
    fs::remove_all(fs::path(dir) / name, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat(dir, "/", name, ": cannot remove (--overwrite_checkpoints): ", ec.message()));
    }
  }
  if (!names.empty() && notices) {
    notices->push_back(absl::StrCat("--overwrite_checkpoints: removed the checkpoints in ", dir, " (",
                                    absl::StrJoin(names, ", "), "); starting over from step 0"));
  }
  return absl::OkStatus();
}

}  // namespace mpc
