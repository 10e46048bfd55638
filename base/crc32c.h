// CRC-32C (Castagnoli), the checksum of TFRecord files (TensorBoard's event files,
// engine/tensorboard_writer.h). Our abseil predates absl/crc and zlib only has CRC-32
// (another polynomial), so this is a small table-driven implementation of its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace mpc {

// The CRC-32C of `data` appended to bytes whose CRC-32C is `crc` (0 for none), so a
// stream can be checksummed in pieces: Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);
inline uint32_t Crc32c(std::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

// TFRecord (and LevelDB) store CRCs masked, because the CRC of bytes that contain their
// own CRC is degenerate: rotate right by 15 bits and add a constant.
inline uint32_t MaskCrc32c(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

}  // namespace mpc
