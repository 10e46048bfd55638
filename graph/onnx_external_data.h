// ONNX external data (onnx/docs/ExternalData.md): a TensorProto with data_location
// EXTERNAL keeps its bytes in a side file named by external_data "location" (relative
// to the model file's directory), from "offset" (default 0) for "length" bytes (default:
// to the end of the file). Models above protobuf's 2 GiB message limit can only be
// stored this way, so the importer reads such tensors and the exporter writes them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace onnx {
class TensorProto;
}

namespace mpc {

// True when the tensor's data lives in a side file.
bool UsesExternalData(const onnx::TensorProto& tensor);

// The tensor's "location" entry, or "" when it has none.
std::string ExternalDataLocation(const onnx::TensorProto& tensor);

// Checks the location as ONNX's checker does (a relative path that stays inside the
// model directory) and returns the side file's path under `model_dir`. `what` names the
// tensor in messages ("initializer 'w1'").
absl::StatusOr<std::string> ResolveExternalDataPath(const onnx::TensorProto& tensor, const std::string& model_dir,
                                                    const std::string& what);

// ResolveExternalDataPath, and the file must exist (the error names the tensor, the
// location and the path tried).
absl::StatusOr<std::string> FindExternalDataFile(const onnx::TensorProto& tensor, const std::string& model_dir,
                                                 const std::string& what);

// Reads the tensor's `bytes` bytes of external data into `dst`, streaming from the
// side file (no copy of the file in memory). Errors say which tensor, which file and
// how the offset/length disagree with the file or the tensor's size.
absl::Status ReadExternalData(const onnx::TensorProto& tensor, const std::string& model_dir, const std::string& what,
                              void* dst, size_t bytes);

// Writes tensors one after another into one side file. The data goes to
// "<path>.tmp.<pid>" and becomes `path` only at Commit (fsync + rename), so a failed
// export leaves any previous side file untouched; an uncommitted writer removes its
// temporary file. Offsets are aligned to kAlignment so that readers may mmap tensors
// (onnxruntime aligns the same way; ONNX's Python helper writes them back to back,
// which readers accept as well).
class ExternalDataWriter {
 public:
  static constexpr int64_t kAlignment = 4096;

  // `path` is the side file; `location` is what the model records (its name relative
  // to the model's directory).
  ExternalDataWriter(std::string path, std::string location);
  ~ExternalDataWriter();
  ExternalDataWriter(const ExternalDataWriter&) = delete;
  ExternalDataWriter& operator=(const ExternalDataWriter&) = delete;

  // Appends `bytes` bytes at the next aligned offset and points `tensor` at them
  // (data_location EXTERNAL with location, offset and length; raw_data cleared).
  absl::Status Append(const void* data, size_t bytes, onnx::TensorProto* tensor);
  // Flushes, fsyncs and renames the temporary file onto the side file's path; writes
  // nothing when nothing was appended.
  absl::Status Commit();

  const std::string& path() const { return path_; }
  int64_t size() const { return size_; }

 private:
  absl::Status Open();

  std::string path_;
  std::string location_;
  std::string tmp_;
  int fd_ = -1;
  int64_t size_ = 0;
  bool committed_ = false;
};

}  // namespace mpc
