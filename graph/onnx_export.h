// Graph -> ONNX ModelProto. Parameters, state and constants are written as
// initializers with their current `Value::data` (large ones optionally, and above 2 GiB
// always, in an external data file next to the model); ops of domain "mpc" keep that domain
// (with an opset_import entry), so a compiled training program can be opened in
// Netron and diffed. Metadata entries are written to ModelProto.metadata_props.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace onnx {
class ModelProto;
}

namespace mpc {

struct ExportOptions {
  std::map<std::string, std::string> metadata;
  std::string producer = "mpc";
  int64_t opset = 17;
  // When set, axis 0 of the graph inputs and outputs is written as this symbolic
  // dimension (e.g. "batch"), so the model loads with any batch size; intermediate
  // value_info entries are then omitted.
  std::string batch_dim_param;

  // External data (ONNX's layout, onnx/docs/ExternalData.md), used by ExportOnnxFile
  // only: initializers of at least `external_data_threshold` bytes are written to one
  // side file next to the model, at 4096-aligned offsets, and the model records their
  // location, offset and length. Off by default, but switched on automatically when the
  // initializers total more than `max_inline_bytes`, because protobuf cannot serialize
  // a message over 2 GiB: an export never fails for size.
  bool external_data = false;
  // The side file's name, in the model's directory; empty: "<model file name>.data".
  std::string external_data_file;
  int64_t external_data_threshold = 1024;  // bytes, as onnx.save_model's size_threshold
  // Below protobuf's 2 GiB limit with room for the graph itself; tests lower it.
  static constexpr int64_t kMaxInlineOnnxBytes = int64_t{1800} << 20;
  int64_t max_inline_bytes = kMaxInlineOnnxBytes;
};

absl::StatusOr<onnx::ModelProto> ExportOnnxModel(const Graph& graph, const ExportOptions& options);
// Writes binary ONNX atomically (temp file, fsync, rename), with the external data side
// file (when used) written the same way and renamed first.
absl::Status ExportOnnxFile(const Graph& graph, const ExportOptions& options, const std::string& path);

}  // namespace mpc
