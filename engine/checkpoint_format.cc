// Checkpoint directory names and the checksummed manifest file (see checkpoint_format.h).
#include "engine/checkpoint_format.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"
#include "base/status_macros.h"

namespace mpc {

std::string StepDirName(int64_t step) { return absl::StrFormat("step-%08d", step); }

bool ParseStepDirName(const std::string& name, int64_t* step) {
  return absl::StartsWith(name, "step-") && name.find('.') == std::string::npos &&
         absl::SimpleAtoi(name.substr(5), step) && *step >= 0;
}

Shape ModelShape(const Value& v) { return v.logical_shape.empty() ? v.shape : v.logical_shape; }

constexpr size_t kMagicBytes = 8;
constexpr size_t kHeaderBytes = kMagicBytes + 4;

std::string EncodeManifest(const CheckpointManifest& manifest) {
  CheckpointManifest m = manifest;
  m.set_format_version(kCheckpointFormat);
  const std::string payload = m.SerializeAsString();
  const uint32_t crc = Crc32c(payload);
  std::string out(kManifestMagic, kMagicBytes);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((crc >> (8 * i)) & 0xff);
  return out + payload;
}

namespace {

// What a damaged checkpoint directory leaves to do: another checkpoint, or start over.
std::string Remedy(const std::string& remedy) {
  return remedy.empty() ? "resume from an older checkpoint (write its name into the directory's `latest` file) or "
                          "start over with --overwrite_checkpoints"
                        : remedy;
}

}  // namespace

absl::StatusOr<CheckpointManifest> DecodeManifest(std::string_view bytes, const std::string& path,
                                                  const std::string& remedy) {
  if (bytes.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": the checkpoint manifest is empty (0 bytes): the file was ",
                                            "truncated; ", Remedy(remedy)));
  }
  if (bytes.size() < kHeaderBytes || bytes.compare(0, kMagicBytes, kManifestMagic, kMagicBytes) != 0) {
    const bool prefix =
        bytes.compare(0, std::min(bytes.size(), kMagicBytes), kManifestMagic, std::min(bytes.size(), kMagicBytes)) == 0;
    return absl::DataLossError(
        absl::StrCat(path, ": ",
                     prefix ? absl::StrCat("truncated checkpoint manifest (", bytes.size(), " bytes)")
                            : "not an mpc checkpoint manifest (wrong magic bytes)",
                     "; the checkpoint is damaged: ", Remedy(remedy)));
  }
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i)
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[kMagicBytes + i])) << (8 * i);
  const std::string_view payload(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  if (Crc32c(payload) != stored) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch in the checkpoint manifest (", bytes.size(),
                                            " bytes): the file is corrupt or truncated; ", Remedy(remedy)));
  }
  CheckpointManifest m;
  if (!m.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return absl::DataLossError(absl::StrCat(path,
                                            ": the checkpoint manifest does not parse although its checksum "
                                            "matches (written by another program?)"));
  }
  if (m.format_version() != kCheckpointFormat) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": checkpoint format ", m.format_version(), ", this mpc reads format ", kCheckpointFormat));
  }
  return m;
}

absl::Status VerifyCheckpointData(const CheckpointManifest& m, std::istream& data, uint64_t data_size,
                                  const std::string& data_path, const std::string& where, const std::string& remedy) {
  if (static_cast<int64_t>(data_size) != m.data_bytes()) {
    return absl::DataLossError(absl::StrCat(
        data_path, data_size == 0 ? ": empty (0 bytes)" : absl::StrCat(": ", data_size, " bytes"),
        " but the manifest says ", m.data_bytes(),
        static_cast<int64_t>(data_size) < m.data_bytes() ? ": the file is truncated" : ": the file is corrupt", "; ",
        Remedy(remedy)));
  }
  std::vector<char> buffer(std::min<uint64_t>(data_size, 1 << 20));  // no more than the data
  for (const CheckpointTensor& t : m.tensors()) {
    // offset + size_bytes > data_bytes, without overflowing int64 (offset and size_bytes come from the file).
    if (t.offset() < 0 || t.size_bytes() < 0 || t.offset() > m.data_bytes() ||
        t.size_bytes() > m.data_bytes() - t.offset()) {
      return absl::DataLossError(
          absl::StrCat(where, ": tensor '", t.name(), "' lies outside ", m.data_file(), " (corrupt manifest)"));
    }
    data.seekg(t.offset());
    uint32_t crc = 0;
    for (int64_t left = t.size_bytes(); left > 0;) {
      const int64_t n = std::min<int64_t>(left, static_cast<int64_t>(buffer.size()));
      if (!data.read(buffer.data(), n)) return absl::DataLossError(absl::StrCat(data_path, ": read failed"));
      crc = Crc32cExtend(crc, buffer.data(), static_cast<size_t>(n));
      left -= n;
    }
    if (crc != t.crc32c()) {
      return absl::DataLossError(absl::StrCat(data_path, ": checksum mismatch at tensor '", t.name(), "' (bytes ",
                                              t.offset(), "..", t.offset() + t.size_bytes(),
                                              "): the checkpoint is corrupt; ", Remedy(remedy)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<DType> CheckCheckpointTensor(const CheckpointTensor& t, const Value& v, const std::string& where) {
  MPC_ASSIGN_OR_RETURN(DType dtype, DTypeFromName(t.dtype()));
  const Shape shape(t.shape().begin(), t.shape().end());
  if (dtype != v.dtype || shape != ModelShape(v) ||
      t.size_bytes() != static_cast<int64_t>(NumElements(shape) * DTypeSize(dtype))) {
    return absl::FailedPreconditionError(
        absl::StrCat(where, ": tensor '", v.name, "' is ", t.dtype(), ShapeToString(shape), " (", t.size_bytes(),
                     " bytes) but the model has ", DTypeName(v.dtype), ShapeToString(ModelShape(v))));
  }
  return dtype;
}

absl::StatusOr<Tensor> ReadCheckpointTensor(std::istream& data, const CheckpointTensor& t, DType dtype) {
  Tensor out(dtype, Shape(t.shape().begin(), t.shape().end()));
  data.seekg(t.offset());
  if (!data.read(static_cast<char*>(out.raw()), static_cast<std::streamsize>(out.bytes()))) {
    return absl::DataLossError(absl::StrCat("tensor '", t.name(), "': read failed"));
  }
  if (Crc32cExtend(0, out.raw(), out.bytes()) != t.crc32c()) {  // changed since it was verified
    return absl::DataLossError(
        absl::StrCat("tensor '", t.name(), "': checksum mismatch (the file changed while loading)"));
  }
  return out;
}

}  // namespace mpc
