// Checkpoint loading (see checkpoint.h): which checkpoint (DIR/latest), the manifest,
// the identity checks with errors naming the difference, every size and checksum
// verified, and only then the tensors written into the executor. Another precision
// loads the precision-independent tensors and re-derives or resets the rest. A directory
// and bytes (LoadCheckpointFromBytes) differ only in where the manifest and the data come
// from: both go through LoadTensors.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <streambuf>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/crc32c.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "engine/checkpoint.h"
#include "engine/checkpoint_format.h"
#include "graph/sharding.h"

namespace mpc {
namespace fs = std::filesystem;
namespace {

std::string Describe(const std::string& dtype, const Shape& shape) { return dtype + ShapeToString(shape); }

std::string StepNames(const CheckpointDirContents& contents) {
  std::vector<std::string> names;
  for (const auto& [step, name] : contents.steps) names.push_back(name);
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

// The checkpoint directory to load: the one DIR/latest names (or the newest complete one
// when `latest` is missing, e.g. a crash between the rename and its update).
absl::StatusOr<std::string> ResolveLatest(const std::string& dir, std::vector<std::string>* notices) {
  const CheckpointDirContents contents = InspectCheckpointDir(dir);
  if (!contents.exists) {
    return absl::NotFoundError(absl::StrCat("checkpoint directory ", dir, " does not exist"));
  }
  if (contents.has_latest) {
    const std::string latest = (fs::path(dir) / kLatestFile).string();
    MPC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(latest));
    const std::string name(absl::StripAsciiWhitespace(text));
    int64_t step = 0;
    if (name.empty() || !ParseStepDirName(name, &step)) {
      return absl::DataLossError(absl::StrCat(
          latest, text.empty() ? " is empty (0 bytes)" : " does not name a checkpoint ('" + name.substr(0, 40) + "')",
          "; write the name of a checkpoint in ", dir, " into it (available: ", StepNames(contents), ")"));
    }
    const std::string path = (fs::path(dir) / name).string();
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      return absl::NotFoundError(absl::StrCat(latest, " names ", name, ", which does not exist; write the name of a ",
                                              "checkpoint in ", dir, " into it (available: ", StepNames(contents),
                                              ")"));
    }
    return path;
  }
  for (auto it = contents.steps.rbegin(); it != contents.steps.rend(); ++it) {
    std::error_code ec;
    if (!fs::exists(fs::path(dir) / it->second / kManifestFile, ec)) continue;
    if (notices) {
      notices->push_back(
          absl::StrCat(dir, "/", kLatestFile, " is missing; loading the newest complete checkpoint, ", it->second));
    }
    return (fs::path(dir) / it->second).string();
  }
  if (contents.old_format) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, "/", kOldCheckpointFile, " is a checkpoint in the old single-file format (format 1), which this mpc ",
        "does not read; finish that run with the mpc that wrote it, or start over with --overwrite_checkpoints"));
  }
  return absl::NotFoundError(absl::StrCat("no checkpoint in ", dir));
}

// Model and optimizer: the same, or an error naming what differs.
absl::Status CheckModel(const CheckpointManifest& m, const std::vector<const Value*>& values,
                        const CheckpointIdentity& identity, const std::string& where) {
  if (m.optimizer() != identity.optimizer) {
    return absl::FailedPreconditionError(absl::StrCat(
        where, ": written for a different optimizer: the checkpoint has optimizer state for '", m.optimizer(),
        "', this spec trains with '", identity.optimizer, "'; use the checkpoint's optimizer, another checkpoint_dir, ",
        "or --overwrite_checkpoints to start over"));
  }
  if (m.model_fingerprint() == identity.model_fingerprint) return absl::OkStatus();
  std::map<std::string, std::string> in_checkpoint, in_model;
  for (const CheckpointTensor& t : m.tensors()) {
    if (!t.precision_state()) in_checkpoint[t.name()] = Describe(t.dtype(), Shape(t.shape().begin(), t.shape().end()));
  }
  for (const Value* v : values) {
    if (!IsPrecisionState(v->name)) in_model[v->name] = Describe(DTypeName(v->dtype), ModelShape(*v));
  }
  std::vector<std::string> diffs;
  for (const auto& [name, desc] : in_model) {
    auto it = in_checkpoint.find(name);
    if (it == in_checkpoint.end()) {
      diffs.push_back(absl::StrCat("the model's '", name, "' ", desc, " is not in the checkpoint"));
    } else if (it->second != desc) {
      diffs.push_back(absl::StrCat("'", name, "' is ", it->second, " in the checkpoint but ", desc, " in the model"));
    }
  }
  for (const auto& [name, desc] : in_checkpoint) {
    if (!in_model.count(name))
      diffs.push_back(absl::StrCat("the checkpoint's '", name, "' ", desc, " is not in the model"));
  }
  if (diffs.empty()) diffs.push_back("the tensors' order differs");
  const size_t shown = std::min<size_t>(diffs.size(), 4);
  return absl::FailedPreconditionError(
      absl::StrCat(where, ": written for a different model: ",
                   absl::StrJoin(std::vector<std::string>(diffs.begin(), diffs.begin() + shown), "; "),
                   diffs.size() > shown ? absl::StrCat(" (and ", diffs.size() - shown, " more)") : "",
                   "; use another checkpoint_dir or --overwrite_checkpoints to start over"));
}

// "the loss scale and its growth tracker (to their initial values); the FP8 scaling
// state (amax history, scales) of 3 tensors (...)"; other names listed as they are.
std::string DescribeReset(const std::vector<std::string>& names, bool reset = true) {
  std::vector<std::string> parts, fp8, other;
  bool loss_scale = false;
  for (const std::string& n : names) {
    if (n == "loss_scale" || n == "loss_scale_growth_tracker") {
      loss_scale = true;
    } else if (const size_t at = n.find(".fp8_"); at != std::string::npos) {
      if (std::find(fp8.begin(), fp8.end(), n.substr(0, at)) == fp8.end()) fp8.push_back(n.substr(0, at));
    } else {
      other.push_back(n);
    }
  }
  if (loss_scale) {
    parts.push_back(absl::StrCat("the loss scale and its growth tracker", reset ? " (to their initial values)" : ""));
  }
  if (!fp8.empty()) {
    parts.push_back(absl::StrCat("the FP8 scaling state (amax history, scales) of ", fp8.size(), " tensor",
                                 fp8.size() == 1 ? "" : "s", " (", absl::StrJoin(fp8, ", "), ")"));
  }
  if (!other.empty()) parts.push_back(absl::StrJoin(other, ", "));
  return absl::StrJoin(parts, "; ");
}

// A read-only stream over bytes the caller owns (no copy of a checkpoint's data).
class ViewStreambuf : public std::streambuf {
 public:
  explicit ViewStreambuf(std::string_view bytes) {
    char* begin = const_cast<char*>(bytes.data());  // never written: get area only
    setg(begin, begin, begin + bytes.size());
  }

 protected:
  pos_type seekoff(off_type off, std::ios_base::seekdir dir, std::ios_base::openmode which) override {
    if (!(which & std::ios_base::in)) return pos_type(off_type(-1));
    const off_type base = dir == std::ios_base::beg   ? 0
                          : dir == std::ios_base::cur ? gptr() - eback()
                                                      : egptr() - eback();
    const off_type pos = base + off;
    if (pos < 0 || pos > egptr() - eback()) return pos_type(off_type(-1));
    setg(eback(), eback() + pos, egptr());
    return pos_type(pos);
  }
  pos_type seekpos(pos_type pos, std::ios_base::openmode which) override {
    return seekoff(off_type(pos), std::ios_base::beg, which);
  }
};

// Whether the checkpoint's precision-specific state is the program's. The fingerprints
// agree, or the precision is the same and so are its loss-scale and FP8 tensors (names,
// dtypes, model shapes) once the low-precision weight copies (`.lowp`) are left out: those
// follow the master weights whatever the checkpoint holds (Executor::WritePersistent), and
// a ZeRO job, whose updates write slices, keeps none. So a checkpoint of a ZeRO job resumed
// by one process (or the other way round) keeps its loss scale and FP8 scaling state.
bool SamePrecisionState(const CheckpointManifest& m, const std::vector<const Value*>& values,
                        const CheckpointIdentity& identity) {
  if (m.precision_fingerprint() == identity.precision_fingerprint) return true;
  if (m.precision() != identity.precision) return false;
  std::map<std::string, const CheckpointTensor*> saved;
  for (const CheckpointTensor& t : m.tensors()) {
    if (t.precision_state() && !absl::EndsWith(t.name(), ".lowp")) saved[t.name()] = &t;
  }
  size_t matched = 0;
  for (const Value* v : values) {
    if (!IsPrecisionState(v->name) || absl::EndsWith(v->name, ".lowp")) continue;
    auto it = saved.find(v->name);
    if (it == saved.end() || !CheckCheckpointTensor(*it->second, *v, "").ok()) return false;
    ++matched;
  }
  return matched == saved.size();
}

// ZeRO-1: this rank's slice (graph/sharding.h) of `whole`, the sliced state `v` in its
// padded shape, zero-padded to v's length. One process (no `sliced`) is rank 0 of 1.
Tensor SliceOf(const Tensor& whole, const Value& v, const SlicedState* sliced) {
  const int rank = sliced ? sliced->rank : 0, world = sliced ? sliced->world_size : 1;
  Tensor slice(DType::kF32, v.shape);
  float* out = slice.data<float>();
  std::fill(out, out + slice.num_elements(), 0.0f);
  const ShardRange range = ShardRangeOf(whole.num_elements(), world, rank);
  std::copy_n(whole.data<float>() + range.begin, std::min(range.count, slice.num_elements()), out);
  return slice;
}

// The one loader behind LoadCheckpoint and LoadCheckpointFromBytes: the manifest `m`
// against the model, then the data (`data_size` bytes from `data`: tensors.bin, or the
// tail of the bytes) verified tensor by tensor, and only then every tensor written into
// the executor. `where` names the checkpoint, `data_path` its data and `remedy` what to do
// in errors (DecodeManifest's).
absl::StatusOr<TrainingPosition> LoadTensors(const CheckpointManifest& m, std::istream& data, uint64_t data_size,
                                             const std::string& where, const std::string& data_path,
                                             const std::string& remedy, Executor& executor,
                                             const CheckpointIdentity& identity, std::vector<std::string>* notices,
                                             const SlicedState* sliced) {
  const std::vector<const Value*> values = executor.PersistentValues();
  MPC_RETURN_IF_ERROR(CheckModel(m, values, identity, where));
  const bool same_precision = SamePrecisionState(m, values, identity);
  // Every tensor verified before anything is written: a bad checkpoint leaves the state as it was.
  MPC_RETURN_IF_ERROR(VerifyCheckpointData(m, data, data_size, data_path, where, remedy));
  std::map<std::string, const CheckpointTensor*> by_name;
  for (const CheckpointTensor& t : m.tensors()) by_name[t.name()] = &t;
  struct Load {
    const Value* value;
    const CheckpointTensor* entry;
    DType dtype;
  };
  std::vector<Load> loads;
  std::vector<std::string> recomputed, reset;
  for (const Value* v : values) {
    auto it = by_name.find(v->name);
    const bool precision = IsPrecisionState(v->name);
    if (precision && !same_precision) {
      (absl::EndsWith(v->name, ".lowp") ? recomputed : reset).push_back(v->name);
      continue;
    }
    // A copy the checkpoint lacks (it came from a ZeRO job) follows its master weight.
    if (it == by_name.end() && absl::EndsWith(v->name, ".lowp")) continue;
    if (it == by_name.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(where, ": has no tensor '", v->name, "' (", m.precision(), "); the checkpoint is inconsistent"));
    }
    MPC_ASSIGN_OR_RETURN(const DType dtype, CheckCheckpointTensor(*it->second, *v, where));
    loads.push_back({v, it->second, dtype});
  }
  data.clear();  // VerifyCheckpointData may have read to the end
  for (const Load& load : loads) {
    MPC_ASSIGN_OR_RETURN(Tensor t, ReadCheckpointTensor(data, *load.entry, load.dtype));
    const Value& v = *load.value;
    if (!v.sharded_from.empty()) {
      t = SliceOf(t.PaddedTo(v.sharded_from), v, sliced);  // ZeRO-1: this rank keeps its slice of the whole
    } else if (!v.logical_shape.empty()) {
      t = t.PaddedTo(v.shape);  // the padded layout, zeros outside
    }
    MPC_RETURN_IF_ERROR(executor.WritePersistent(v.name, t));
  }
  // Another precision: the low-precision copies follow the master weights written above
  // (Executor::WritePersistent); the loss scale and the FP8 state restart from their
  // initial values.
  if (!same_precision) {
    for (const Value* v : values) {
      if (IsPrecisionState(v->name) && !absl::EndsWith(v->name, ".lowp")) {
        MPC_RETURN_IF_ERROR(executor.WritePersistent(v->name, v->data));
      }
    }
    std::string notice = absl::StrCat("resumed ", where, " (written with ", m.precision(), ") with ",
                                      identity.precision, ": carried the FP32 master weights and optimizer state");
    if (!recomputed.empty()) {
      absl::StrAppend(&notice, "; recomputed from the master weights: ", absl::StrJoin(recomputed, ", "));
    }
    if (!reset.empty()) absl::StrAppend(&notice, "; reset: ", DescribeReset(reset));
    std::vector<std::string> unused;
    for (const CheckpointTensor& t : m.tensors()) {
      if (t.precision_state()) unused.push_back(t.name());
    }
    if (!unused.empty()) {
      absl::StrAppend(
          &notice, "; not used (the checkpoint's precision-specific state): ", DescribeReset(unused, /*reset=*/false));
    }
    if (notices) notices->push_back(notice);
  }
  TrainingPosition pos;
  pos.step = m.step();
  pos.epoch = m.epoch();
  pos.batch_in_epoch = m.batch_in_epoch();
  pos.seed = m.seed();
  return pos;
}

}  // namespace

absl::StatusOr<TrainingPosition> LoadCheckpoint(const std::string& dir, Executor& executor,
                                                const CheckpointIdentity& identity, std::vector<std::string>* notices,
                                                const SlicedState* sliced) {
  MPC_ASSIGN_OR_RETURN(const std::string ckpt, ResolveLatest(dir, notices));
  const std::string manifest_path = (fs::path(ckpt) / kManifestFile).string();
  std::error_code ec;
  if (!fs::exists(manifest_path, ec)) {
    return absl::DataLossError(absl::StrCat(ckpt, ": missing manifest (", kManifestFile, "): the checkpoint is ",
                                            "incomplete; resume from an older checkpoint or start over with ",
                                            "--overwrite_checkpoints"));
  }
  MPC_ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(manifest_path));
  MPC_ASSIGN_OR_RETURN(const CheckpointManifest m, DecodeManifest(bytes, manifest_path));
  // The data file is named by the manifest: a plain name inside the checkpoint directory,
  // never a path that leads elsewhere (an absolute path, "..").
  if (m.data_file().empty() || fs::path(m.data_file()).filename().string() != m.data_file() || m.data_file() == "." ||
      m.data_file() == "..") {
    return absl::DataLossError(absl::StrCat(manifest_path, ": data_file '", m.data_file(),
                                            "' is not a file name in the checkpoint directory; the manifest is "
                                            "damaged or was not written by mpc"));
  }
  const std::string data_path = (fs::path(ckpt) / m.data_file()).string();
  const auto size = fs::file_size(data_path, ec);
  if (ec) {
    return absl::DataLossError(
        absl::StrCat(data_path, ": missing (", ec.message(), "); the checkpoint is incomplete: ", ckpt));
  }
  std::ifstream in(data_path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(data_path, ": cannot open"));
  return LoadTensors(m, in, size, ckpt, data_path, /*remedy=*/"", executor, identity, notices, sliced);
}

absl::StatusOr<TrainingPosition> LoadCheckpointFromBytes(std::string_view bytes, Executor& executor,
                                                         const CheckpointIdentity& identity,
                                                         std::vector<std::string>* notices, const SlicedState* sliced) {
  const std::string remedy =
      "load another copy of the bytes SaveCheckpointToBytes returned, or a checkpoint directory (LoadCheckpoint)";
  const std::string what = absl::StrCat("checkpoint bytes (", bytes.size(), " bytes)");
  if (bytes.empty()) {
    return absl::InvalidArgumentError(
        "checkpoint bytes: empty (0 bytes); pass the string SaveCheckpointToBytes returned, whole");
  }
  const size_t magic = std::min(bytes.size(), kBytesMagicSize);
  if (bytes.compare(0, magic, std::string_view(kBytesMagic, magic)) != 0) {
    const bool manifest = bytes.compare(0, magic, std::string_view(kManifestMagic, magic)) == 0;
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": not a checkpoint from SaveCheckpointToBytes (it starts with \"", kBytesMagic, "\")",
        manifest ? "; these are a checkpoint directory's manifest.pb: load the directory with LoadCheckpoint(dir)"
                 : "; pass the string SaveCheckpointToBytes returned, whole"));
  }
  if (bytes.size() < kBytesHeaderSize) {
    return absl::DataLossError(absl::StrCat(what, ": truncated within the ", kBytesHeaderSize,
                                            "-byte header; pass the string SaveCheckpointToBytes returned, whole"));
  }
  uint64_t manifest_size = 0;
  for (size_t i = 0; i < 8; ++i) {
    manifest_size |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[kBytesMagicSize + i])) << (8 * i);
  }
  if (manifest_size > bytes.size() - kBytesHeaderSize) {
    return absl::DataLossError(absl::StrCat(what, ": truncated: the header gives the manifest ", manifest_size,
                                            " bytes but only ", bytes.size() - kBytesHeaderSize,
                                            " follow; pass the string SaveCheckpointToBytes returned, whole"));
  }
  MPC_ASSIGN_OR_RETURN(const CheckpointManifest m,
                       DecodeManifest(bytes.substr(kBytesHeaderSize, manifest_size), what + ", manifest", remedy));
  const std::string_view data = bytes.substr(kBytesHeaderSize + manifest_size);
  ViewStreambuf buffer(data);
  std::istream in(&buffer);
  return LoadTensors(m, in, data.size(), absl::StrCat("the checkpoint bytes of step ", m.step()),
                     what + ", tensor data", remedy, executor, identity, notices, sliced);
}

}  // namespace mpc
