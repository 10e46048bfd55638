// IDX loader (the MNIST / Fashion-MNIST file format): a big-endian header followed by
// raw unsigned bytes. Files may be gzip-compressed or plain; zlib's gzread handles both,
// so the loader never looks at the file name to decide.
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "engine/dataset.h"

namespace mpc {
namespace {

constexpr uint32_t kImagesMagic = 0x00000803;  // unsigned byte, 3 dimensions
constexpr uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, 1 dimension

// zlib's message for the last error, without the "PATH: " prefix zlib puts on it (our
// messages already start with the path).
std::string GzErrorMessage(gzFile file, const std::string& path, int* errnum) {
  std::string message = gzerror(file, errnum);
  if (message.rfind(path + ": ", 0) == 0) message.erase(0, path.size() + 2);
  return message;
}

// Reads the whole (decompressed) contents of a file. A missing file gets NotFound so
// callers and users can tell "wrong path" from "bad file".
absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(path, ": file not found"));
  }
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory; expected an IDX file (e.g. train-images-idx3-ubyte.gz)"));
  }
  errno = 0;
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot open: ", errno != 0 ? std::strerror(errno) : "out of memory"));
  }
  gzbuffer(file, 1 << 17);  // bigger reads: the training images are ~47 MB decompressed
  std::string contents;
  constexpr unsigned kChunk = 1 << 20;
  while (true) {
    const size_t old_size = contents.size();
    contents.resize(old_size + kChunk);
    const int n = gzread(file, contents.data() + old_size, kChunk);
    if (n < 0) {
      int errnum = 0;
      const std::string message = GzErrorMessage(file, path, &errnum);
      gzclose(file);
      return absl::DataLossError(
          absl::StrCat(path, ": corrupt or truncated gzip data (", message, "); re-download or re-extract the file"));
    }
    contents.resize(old_size + static_cast<size_t>(n));
    if (n == 0) break;
  }
  // A gzip stream cut short ends without a read error: zlib records it (Z_BUF_ERROR,
  // "unexpected end of file") in the stream state, which gzerror reports.
  int errnum = Z_OK;
  const std::string message = GzErrorMessage(file, path, &errnum);
  const int close_rc = gzclose(file);
  if (errnum != Z_OK || close_rc != Z_OK) {
    return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated gzip data (",
                                            errnum != Z_OK ? message : absl::StrCat("zlib error ", close_rc),
                                            "); re-download or re-extract the file"));
  }
  return contents;
}

uint32_t ReadBigEndian32(const std::string& bytes, size_t offset) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + offset;
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Names the kind of file a magic number belongs to, so a swapped images/labels pair
// gets a hint instead of just two hex numbers.
std::string DescribeMagic(uint32_t magic) {
  if (magic == kImagesMagic) return " (an IDX images file)";
  if (magic == kLabelsMagic) return " (an IDX labels file)";
  if ((magic >> 16) == 0x1f8b) return " (gzip data inside gzip: decompress it once)";
  return " (not an IDX file)";
}

absl::Status CheckMagic(const std::string& path, const std::string& bytes, uint32_t want, const char* what) {
  if (bytes.size() < 4) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated: %d bytes, too short for an IDX header", path, bytes.size()));
  }
  const uint32_t magic = ReadBigEndian32(bytes, 0);
  if (magic != want) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: bad magic number 0x%08x%s; expected 0x%08x for an IDX %s file "
                        "(are the images and labels paths swapped?)",
                        path, magic, DescribeMagic(magic), want, what));
  }
  return absl::OkStatus();
}

// Images: magic, count, rows, cols, then count*rows*cols bytes.
absl::StatusOr<Tensor> ParseImages(const std::string& path, const std::string& bytes) {
  MPC_RETURN_IF_ERROR(CheckMagic(path, bytes, kImagesMagic, "images"));
  constexpr size_t kHeader = 16;
  if (bytes.size() < kHeader) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated: %d bytes, too short for the 16-byte IDX images header", path, bytes.size()));
  }
  const uint64_t count = ReadBigEndian32(bytes, 4);
  const uint64_t rows = ReadBigEndian32(bytes, 8);
  const uint64_t cols = ReadBigEndian32(bytes, 12);
  if (count == 0 || rows == 0 || cols == 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: header says %d images of %dx%d; every dimension must be positive", path, count, rows, cols));
  }
  const uint64_t available = bytes.size() - kHeader;
  const uint64_t image_bytes = rows * cols;  // < 2^64: both factors are < 2^32
  // Compare by division so a corrupt header with huge dimensions cannot overflow.
  if (available / image_bytes < count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated: header says %d images of %dx%d but only %d bytes follow; "
                        "re-download the file",
                        path, count, rows, cols, available));
  }
  const uint64_t needed = count * image_bytes;
  if (available != needed) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: header says %d images of %dx%d (%d bytes) but %d bytes follow; the file is "
                        "not a valid IDX images file",
                        path, count, rows, cols, needed, available));
  }
  Tensor images(DType::kF32, {static_cast<int64_t>(count), static_cast<int64_t>(rows), static_cast<int64_t>(cols)});
  const auto* src = reinterpret_cast<const unsigned char*>(bytes.data()) + kHeader;
  float* dst = images.data<float>();
  for (uint64_t i = 0; i < needed; ++i) dst[i] = static_cast<float>(src[i]);
  return images;
}

// Labels: magic, count, then count bytes.
absl::StatusOr<Tensor> ParseLabels(const std::string& path, const std::string& bytes) {
  MPC_RETURN_IF_ERROR(CheckMagic(path, bytes, kLabelsMagic, "labels"));
  constexpr size_t kHeader = 8;
  if (bytes.size() < kHeader) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: truncated: %d bytes, too short for the 8-byte IDX labels header", path, bytes.size()));
  }
  const uint64_t count = ReadBigEndian32(bytes, 4);
  const uint64_t available = bytes.size() - kHeader;
  if (count == 0) {
    return absl::InvalidArgumentError(absl::StrFormat("%s: header says 0 labels; the file holds no examples", path));
  }
  if (available < count) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: truncated: header says %d labels but only %d bytes follow; re-download the file", path, count, available));
  }
  if (available != count) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: header says %d labels but %d bytes follow; the file is not a valid IDX labels "
                        "file",
                        path, count, available));
  }
  Tensor labels(DType::kI64, {static_cast<int64_t>(count)});
  const auto* src = reinterpret_cast<const unsigned char*>(bytes.data()) + kHeader;
  int64_t* dst = labels.data<int64_t>();
  for (uint64_t i = 0; i < count; ++i) dst[i] = src[i];
  return labels;
}

}  // namespace

absl::StatusOr<Tensor> ParseIdxImages(const std::string& bytes, const std::string& source_name) {
  return ParseImages(source_name, bytes);
}

absl::StatusOr<Tensor> ParseIdxLabels(const std::string& bytes, const std::string& source_name) {
  return ParseLabels(source_name, bytes);
}

absl::StatusOr<Dataset> LoadIdx(const std::string& images_path, const std::string& labels_path) {
  Dataset data;
  {
    // Scoped so the raw bytes are freed before the labels are read.
    MPC_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(images_path));
    MPC_ASSIGN_OR_RETURN(data.features, ParseImages(images_path, bytes));
  }
  {
    MPC_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(labels_path));
    MPC_ASSIGN_OR_RETURN(data.labels, ParseLabels(labels_path, bytes));
  }
  const int64_t num_images = data.features.shape()[0];
  const int64_t num_labels = data.labels.shape()[0];
  if (num_images != num_labels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s has %d images but %s has %d labels; the two files must describe the same "
                        "examples (train images with train labels, t10k with t10k)",
                        images_path, num_images, labels_path, num_labels));
  }
  return data;
}

}  // namespace mpc
