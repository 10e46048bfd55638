// Checkpoint directory names and the checksummed manifest file (see checkpoint_format.h).
#include "engine/checkpoint_format.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/crc32c.h"

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

absl::StatusOr<CheckpointManifest> DecodeManifest(const std::string& bytes, const std::string& path) {
  if (bytes.empty()) {
    return absl::DataLossError(absl::StrCat(path, ": the checkpoint manifest is empty (0 bytes): the file was ",
                                            "truncated; resume from an older checkpoint (write its name into the "
                                            "directory's `latest` file) or start over with --overwrite_checkpoints"));
  }
  if (bytes.size() < kHeaderBytes || bytes.compare(0, kMagicBytes, kManifestMagic, kMagicBytes) != 0) {
    const bool prefix =
        bytes.compare(0, std::min(bytes.size(), kMagicBytes), kManifestMagic, std::min(bytes.size(), kMagicBytes)) == 0;
    return absl::DataLossError(absl::StrCat(
        path, ": ",
        prefix ? absl::StrCat("truncated checkpoint manifest (", bytes.size(), " bytes)")
               : "not an mpc checkpoint manifest (wrong magic bytes)",
        "; the checkpoint is damaged: resume from an older one or start over with --overwrite_checkpoints"));
  }
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i)
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[kMagicBytes + i])) << (8 * i);
  const std::string_view payload(bytes.data() + kHeaderBytes, bytes.size() - kHeaderBytes);
  if (Crc32c(payload) != stored) {
    return absl::DataLossError(absl::StrCat(path, ": checksum mismatch in the checkpoint manifest (", bytes.size(),
                                            " bytes): the file is corrupt or truncated; resume from an older "
                                            "checkpoint or start over with --overwrite_checkpoints"));
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

}  // namespace mpc
