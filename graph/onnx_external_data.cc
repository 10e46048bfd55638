// ONNX external data reading and writing (see onnx_external_data.h). Reads stream
// straight into the tensor's buffer and writes stream straight from it, so a model of
// many GiB never has a second copy of its weights in memory.
#include "graph/onnx_external_data.h"

#include <fcntl.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace mpc {
namespace {

// How to make a self-contained model out of one with external data, for messages.
constexpr char kResaveHint[] =
    "re-save the model with its data beside it (Python: m = onnx.load(path); onnx.save_model(m, out_path, "
    "save_as_external_data=True, location='model.data')) or inside it (save_as_external_data=False)";

absl::StatusOr<int64_t> ParseEntry(const std::string& key, const std::string& value, const std::string& what) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(value, &n) || n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": external data '", key, "' is '", value,
                                                   "', expected a non-negative byte count; ", kResaveHint));
  }
  return n;
}

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  return absl::InternalError(absl::StrCat(path, ": ", what, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, const char* data, size_t bytes, const std::string& path) {
  size_t written = 0;
  while (written < bytes) {
    const ssize_t n = ::write(fd, data + written, bytes - written);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("write failed", path);
    }
    written += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

bool UsesExternalData(const onnx::TensorProto& tensor) { return tensor.data_location() == onnx::TensorProto::EXTERNAL; }

std::string ExternalDataLocation(const onnx::TensorProto& tensor) {
  for (const auto& entry : tensor.external_data()) {
    if (entry.key() == "location") return entry.value();
  }
  return "";
}

absl::StatusOr<std::string> ResolveExternalDataPath(const onnx::TensorProto& tensor, const std::string& model_dir,
                                                    const std::string& what) {
  const std::string location = ExternalDataLocation(tensor);
  if (location.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is marked as external data but has no 'location' entry naming its data file; ", kResaveHint));
  }
  // The ONNX spec (and its checker) requires a path relative to the model's directory
  // that stays inside it: a model file must not make the reader open arbitrary files.
  const std::filesystem::path rel(location);
  if (rel.is_absolute()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": external data location '", location,
                     "' is an absolute path; ONNX requires a path relative to the model's directory. Move the data "
                     "file next to the model and set location to its file name, or ",
                     kResaveHint));
  }
  for (const auto& part : rel.lexically_normal()) {
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": external data location '", location,
                       "' points outside the model's directory; ONNX requires the data file to be inside it. Move "
                       "the data file into the model's directory (or a subdirectory) and set location to match, or ",
                       kResaveHint));
    }
  }
  return (std::filesystem::path(model_dir.empty() ? "." : model_dir) / rel).lexically_normal().string();
}

absl::StatusOr<std::string> FindExternalDataFile(const onnx::TensorProto& tensor, const std::string& model_dir,
                                                 const std::string& what) {
  auto path = ResolveExternalDataPath(tensor, model_dir, what);
  if (!path.ok()) return path.status();
  std::error_code ec;
  if (!std::filesystem::exists(*path, ec)) {
    return absl::NotFoundError(absl::StrCat(what, ": its external data file '", ExternalDataLocation(tensor),
                                            "' is not at ", *path,
                                            "; copy the data file next to the model file (locations are relative "
                                            "to the model's directory) or fix the location"));
  }
  return path;
}

absl::Status ReadExternalData(const onnx::TensorProto& tensor, const std::string& model_dir, const std::string& what,
                              void* dst, size_t bytes) {
  auto path = FindExternalDataFile(tensor, model_dir, what);
  if (!path.ok()) return path.status();
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& entry : tensor.external_data()) {
    // "checksum" (a SHA-1 digest) is optional in the spec and not verified here.
    if (entry.key() == "offset") {
      auto n = ParseEntry(entry.key(), entry.value(), what);
      if (!n.ok()) return n.status();
      offset = *n;
    } else if (entry.key() == "length") {
      auto n = ParseEntry(entry.key(), entry.value(), what);
      if (!n.ok()) return n.status();
      length = *n;
    }
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(*path, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": its external data ", *path, " is not a regular file"));
  }
  const int64_t file_size = static_cast<int64_t>(std::filesystem::file_size(*path, ec));
  if (ec) return absl::InternalError(absl::StrCat(what, ": cannot read the size of ", *path, ": ", ec.message()));
  if (offset > file_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": external data offset ", offset, " is beyond the end of ",
                                                   *path, " (", file_size,
                                                   " bytes); the data file is truncated or belongs to another "
                                                   "model: ",
                                                   kResaveHint));
  }
  if (length < 0) {
    length = file_size - offset;  // the spec's default: the rest of the file
  } else if (length > file_size - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": external data offset ", offset, " + length ", length,
                                                   " runs past the end of ", *path, " (", file_size,
                                                   " bytes); the data file is truncated or belongs to another "
                                                   "model: ",
                                                   kResaveHint));
  }
  if (static_cast<uint64_t>(length) != bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": its external data in ", *path, " is ", length,
                                                   " bytes (offset ", offset, "), but its type and shape need ", bytes,
                                                   " bytes; the model and its data file do not match: ", kResaveHint));
  }
  if (bytes == 0) return absl::OkStatus();
  std::ifstream in(*path, std::ios::binary);
  if (!in) {
    return absl::PermissionDeniedError(
        absl::StrCat(what, ": cannot open its external data ", *path, ": ", std::strerror(errno)));
  }
  in.seekg(offset);
  in.read(static_cast<char*>(dst), static_cast<std::streamsize>(bytes));
  if (!in || static_cast<size_t>(in.gcount()) != bytes) {
    return absl::DataLossError(absl::StrCat(what, ": reading ", bytes, " bytes at offset ", offset, " of ", *path,
                                            " failed after ", in.gcount(), " bytes"));
  }
  return absl::OkStatus();
}

ExternalDataWriter::ExternalDataWriter(std::string path, std::string location)
    : path_(std::move(path)), location_(std::move(location)), tmp_(absl::StrCat(path_, ".tmp.", ::getpid())) {}

ExternalDataWriter::~ExternalDataWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && fd_ != -1) ::unlink(tmp_.c_str());
}

absl::Status ExternalDataWriter::Open() {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    fd_ = -1;
    return ErrnoError("cannot create the external data file", tmp_);
  }
  return absl::OkStatus();
}

absl::Status ExternalDataWriter::Append(const void* data, size_t bytes, onnx::TensorProto* tensor) {
  if (committed_) return absl::FailedPreconditionError(absl::StrCat(path_, ": append after commit"));
  if (fd_ < 0) {
    if (auto st = Open(); !st.ok()) return st;
  }
  const int64_t offset = (size_ + kAlignment - 1) / kAlignment * kAlignment;
  if (offset > size_) {
    static const char kZeros[kAlignment] = {};
    if (auto st = WriteAll(fd_, kZeros, static_cast<size_t>(offset - size_), tmp_); !st.ok()) return st;
  }
  if (auto st = WriteAll(fd_, static_cast<const char*>(data), bytes, tmp_); !st.ok()) return st;
  size_ = offset + static_cast<int64_t>(bytes);
  tensor->clear_raw_data();
  tensor->clear_external_data();
  tensor->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [tensor](const std::string& key, const std::string& value) {
    auto* entry = tensor->add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  };
  add("location", location_);
  add("offset", absl::StrCat(offset));
  add("length", absl::StrCat(bytes));
  return absl::OkStatus();
}

absl::Status ExternalDataWriter::Commit() {
  if (fd_ == -1) {  // nothing was appended: the model names no side file, so none is written
    committed_ = true;
    return absl::OkStatus();
  }
  if (::fsync(fd_) != 0) return ErrnoError("fsync failed", tmp_);
  if (::close(fd_) != 0) {
    fd_ = -2;  // closed: the destructor only unlinks
    return ErrnoError("close failed", tmp_);
  }
  fd_ = -2;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) return ErrnoError("rename failed", path_);
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace mpc
