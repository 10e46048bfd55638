// The checkpoint format's pieces shared by writing (checkpoint.cc) and loading
// (checkpoint_load.cc): directory names and the checksummed manifest file.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "proto/checkpoint.pb.h"

namespace mpc {

constexpr char kManifestMagic[] = "MPCCKPT2";  // 8 bytes, then the CRC-32C, then the proto
constexpr int kCheckpointFormat = 2;

// "step-00000400" and back.
std::string StepDirName(int64_t step);
bool ParseStepDirName(const std::string& name, int64_t* step);
// A value's shape as the model has it (padding removed).
Shape ModelShape(const Value& v);

// The manifest file's bytes: magic, CRC-32C of the serialized proto (little-endian), proto.
std::string EncodeManifest(const CheckpointManifest& manifest);
// Its inverse; `path` names the file in errors (empty, truncated, checksum, not a manifest).
absl::StatusOr<CheckpointManifest> DecodeManifest(const std::string& bytes, const std::string& path);

}  // namespace mpc
