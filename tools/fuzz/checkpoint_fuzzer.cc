// libFuzzer target: a checkpoint's bytes through the checks LoadCheckpoint makes before it
// writes anything (engine/checkpoint_load.cc): DecodeManifest (magic, CRC-32C, proto,
// format version), VerifyCheckpointData (data size, every tensor's range and CRC-32C),
// then for each entry CheckCheckpointTensor against a model value and ReadCheckpointTensor
// (padded as LoadCheckpoint pads). Any input must give a Status, never a crash.
//
// Input layout (tests/fuzz_corpus/checkpoint/ holds real checkpoints in it; see
// tools/fuzz/RESULTS.md for how they were made):
//   byte 0       flags (below)
//   bytes 1..4   N, little-endian: manifest.pb is the next min(N, what is left) bytes
//   the rest     tensors.bin
// Flags, so that mutations get past the checksums to the checks behind them:
//   0x01  rewrite the manifest's CRC-32C (bytes 8..11) to match its payload;
//   0x02  parse the payload and set every in-range tensor's crc32c from the data, then
//         re-serialize it (and rewrite the manifest CRC);
//   0x04  the model's values differ from the entries (last dim + 1): the mismatch errors;
//   0x08  the model's values are padded (dims rounded up to a multiple of 4, the entry's
//         shape as logical_shape), so loaded tensors go through Tensor::PaddedTo.
// The model is made from the manifest's own entries (a model matching its checkpoint),
// only those with a known dtype and at most 4096 elements: a real model's shapes are
// trusted and bounded, the manifest's are not.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "base/crc32c.h"
#include "engine/checkpoint_format.h"

namespace {

constexpr size_t kHeader = 12;  // "MPCCKPT2" + CRC-32C
constexpr int64_t kMaxModelElements = 4096;
constexpr int kMaxModelValues = 64;

void SetManifestCrc(std::string* manifest) {
  if (manifest->size() < kHeader) return;
  const uint32_t crc = mpc::Crc32c(std::string_view(*manifest).substr(kHeader));
  for (int i = 0; i < 4; ++i) (*manifest)[8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
}

void SetTensorCrcs(const std::string& data, std::string* manifest) {
  if (manifest->size() < kHeader) return;
  mpc::CheckpointManifest m;
  if (!m.ParseFromArray(manifest->data() + kHeader, static_cast<int>(manifest->size() - kHeader))) return;
  for (mpc::CheckpointTensor& t : *m.mutable_tensors()) {
    if (t.offset() < 0 || t.size_bytes() < 0) continue;
    const uint64_t offset = static_cast<uint64_t>(t.offset()), size = static_cast<uint64_t>(t.size_bytes());
    if (offset > data.size() || size > data.size() - offset) continue;
    t.set_crc32c(mpc::Crc32cExtend(0, data.data() + offset, size));
  }
  *manifest = manifest->substr(0, kHeader) + m.SerializeAsString();
  SetManifestCrc(manifest);
}

// A model value for entry `t`, or false where the entry cannot be one.
bool ModelValue(const mpc::CheckpointTensor& t, uint8_t flags, mpc::Value* v) {
  auto dtype = mpc::DTypeFromName(t.dtype());
  if (!dtype.ok()) return false;
  mpc::Shape shape;
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    if (d < 0 || d > kMaxModelElements || n * d > kMaxModelElements) return false;
    n *= d;
    shape.push_back(d);
  }
  if ((flags & 0x04) && !shape.empty()) ++shape.back();
  v->name = t.name();
  v->dtype = *dtype;
  v->kind = mpc::ValueKind::kState;
  if (flags & 0x08) {
    v->logical_shape = shape;
    for (int64_t& d : shape) d = (d + 3) / 4 * 4;
  }
  v->shape = shape;
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool verbose = std::getenv("MPC_FUZZ_VERBOSE") != nullptr;  // replay: print each result
  if (size < 5) return 0;
  const uint8_t flags = data[0];
  const uint32_t n = static_cast<uint32_t>(data[1]) | static_cast<uint32_t>(data[2]) << 8 |
                     static_cast<uint32_t>(data[3]) << 16 | static_cast<uint32_t>(data[4]) << 24;
  const size_t manifest_size = std::min<size_t>(n, size - 5);
  std::string manifest(reinterpret_cast<const char*>(data) + 5, manifest_size);
  const std::string bytes(reinterpret_cast<const char*>(data) + 5 + manifest_size, size - 5 - manifest_size);
  if (flags & 0x02) {
    SetTensorCrcs(bytes, &manifest);
  } else if (flags & 0x01) {
    SetManifestCrc(&manifest);
  }

  auto m = mpc::DecodeManifest(manifest, "<fuzz>/manifest.pb");
  if (!m.ok()) {
    if (verbose) std::fprintf(stderr, "%s\n", m.status().ToString().c_str());
    return 0;
  }
  std::istringstream in(bytes);
  const absl::Status verified = mpc::VerifyCheckpointData(*m, in, bytes.size(), "<fuzz>/tensors.bin", "<fuzz>");
  if (!verified.ok()) {
    if (verbose) std::fprintf(stderr, "%s\n", verified.ToString().c_str());
    return 0;
  }
  int loaded = 0, refused = 0;
  for (const mpc::CheckpointTensor& t : m->tensors()) {
    if (loaded + refused >= kMaxModelValues) break;
    mpc::Value v;
    if (!ModelValue(t, flags, &v)) continue;
    auto dtype = mpc::CheckCheckpointTensor(t, v, "<fuzz>");
    if (!dtype.ok()) {
      if (verbose) std::fprintf(stderr, "%s\n", dtype.status().ToString().c_str());
      ++refused;
      continue;
    }
    in.clear();
    auto tensor = mpc::ReadCheckpointTensor(in, t, *dtype);
    if (!tensor.ok()) {
      if (verbose) std::fprintf(stderr, "%s\n", tensor.status().ToString().c_str());
      ++refused;
      continue;
    }
    if (!v.logical_shape.empty()) *tensor = tensor->PaddedTo(v.shape);
    if (tensor->bytes() > 0) {
      const auto* p = static_cast<const unsigned char*>(tensor->raw());
      volatile unsigned char sink = p[0] ^ p[tensor->bytes() - 1];
      (void)sink;
    }
    ++loaded;
  }
  if (verbose) {
    std::fprintf(stderr, "OK: step %lld, %d tensors, %d loaded, %d refused\n", static_cast<long long>(m->step()),
                 m->tensors_size(), loaded, refused);
  }
  return 0;
}
