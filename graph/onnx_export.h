// Graph -> ONNX ModelProto. Parameters, state and constants are written as
// initializers with their current `Value::data`; ops of domain "mpc" keep that domain
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
};

absl::StatusOr<onnx::ModelProto> ExportOnnxModel(const Graph& graph, const ExportOptions& options);
// Writes binary ONNX atomically (temp file, fsync, rename).
absl::Status ExportOnnxFile(const Graph& graph, const ExportOptions& options, const std::string& path);

}  // namespace mpc
