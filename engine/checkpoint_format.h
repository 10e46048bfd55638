// The checkpoint format's pieces shared by writing (checkpoint.cc) and loading
// (checkpoint_load.cc): directory names, the checksummed manifest file and the header of
// a checkpoint as one byte string.
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "graph/graph.h"
#include "graph/tensor.h"
#include "proto/checkpoint.pb.h"

namespace mpc {

constexpr char kManifestMagic[] = "MPCCKPT2";  // 8 bytes, then the CRC-32C, then the proto
constexpr int kCheckpointFormat = 2;

// A checkpoint as one byte string (Engine::SaveCheckpointToBytes): the magic (8 bytes), the
// length of the manifest that follows (8 bytes, little-endian), the manifest exactly as
// manifest.pb holds it (EncodeManifest: its own magic and CRC-32C), then the tensor data
// exactly as tensors.bin holds it (data_bytes, each tensor with its CRC-32C in the manifest).
constexpr char kBytesMagic[] = "MPCCKPTB";
constexpr size_t kBytesMagicSize = 8;
constexpr size_t kBytesHeaderSize = kBytesMagicSize + 8;

// "step-00000400" and back.
std::string StepDirName(int64_t step);
bool ParseStepDirName(const std::string& name, int64_t* step);
// A value's shape as the model has it (padding removed).
Shape ModelShape(const Value& v);

// The manifest file's bytes: magic, CRC-32C of the serialized proto (little-endian), proto.
std::string EncodeManifest(const CheckpointManifest& manifest);
// Its inverse; `path` names the file in errors (empty, truncated, checksum, not a manifest).
// `remedy` says in errors what to do instead ("": resume from an older checkpoint of the
// directory or start over, what a checkpoint directory offers).
absl::StatusOr<CheckpointManifest> DecodeManifest(std::string_view bytes, const std::string& path,
                                                  const std::string& remedy = "");

// The loader's checks on the data file, from any stream of its `data_size` bytes (LoadCheckpoint
// passes tensors.bin; tools/fuzz/checkpoint_fuzzer.cc in-memory bytes): the size against the
// manifest's data_bytes, then every tensor's range and CRC-32C, read in 1 MiB pieces.
// `data_path` names the file and `where` the checkpoint in errors, `remedy` as DecodeManifest's.
absl::Status VerifyCheckpointData(const CheckpointManifest& m, std::istream& data, uint64_t data_size,
                                  const std::string& data_path, const std::string& where,
                                  const std::string& remedy = "");
// A manifest entry against the model's value `v`: the same dtype, model shape and byte
// size, or an error saying what the checkpoint has. Returns the entry's dtype.
absl::StatusOr<DType> CheckCheckpointTensor(const CheckpointTensor& t, const Value& v, const std::string& where);
// One entry's bytes (after VerifyCheckpointData and CheckCheckpointTensor), its CRC-32C
// checked again: the file may have changed since it was verified.
absl::StatusOr<Tensor> ReadCheckpointTensor(std::istream& data, const CheckpointTensor& t, DType dtype);

}  // namespace mpc
