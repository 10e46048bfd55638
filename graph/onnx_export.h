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
  // When set, axis 0 of the graph inputs and outputs is written as this symbolic
  // dimension (e.g. "batch"), so the model loads with any batch size; intermediate
  // value_info entries are then omitted.
  std::string batch_dim_param;
};

absl::StatusOr<onnx::ModelProto> ExportOnnxModel(const Graph& graph, const ExportOptions& options);
// Writes binary ONNX atomically (temp file, fsync, rename).
absl::Status ExportOnnxFile(const Graph& graph, const ExportOptions& options, const std::string& path);

}  // namespace mpc
