// The checkpoint format's pieces shared by writing (checkpoint.cc) and loading
// (checkpoint_load.cc): directory names and the checksummed manifest file.
#pragma once

#include <cstdint>
#include <istream>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/tensor.h"
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

// The loader's checks on the data file, from any stream of its `data_size` bytes (LoadCheckpoint
// passes tensors.bin; tools/fuzz/checkpoint_fuzzer.cc in-memory bytes): the size against the
// manifest's data_bytes, then every tensor's range and CRC-32C, read in 1 MiB pieces.
// `data_path` names the file and `where` the checkpoint in errors.
absl::Status VerifyCheckpointData(const CheckpointManifest& m, std::istream& data, uint64_t data_size,
                                  const std::string& data_path, const std::string& where);
// A manifest entry against the model's value `v`: the same dtype, model shape and byte
// size, or an error saying what the checkpoint has. Returns the entry's dtype.
absl::StatusOr<DType> CheckCheckpointTensor(const CheckpointTensor& t, const Value& v, const std::string& where);
// One entry's bytes (after VerifyCheckpointData and CheckCheckpointTensor), its CRC-32C
// checked again: the file may have changed since it was verified.
absl::StatusOr<Tensor> ReadCheckpointTensor(std::istream& data, const CheckpointTensor& t, DType dtype);

}  // namespace mpc
