// ONNX ModelProto -> Graph. Accepts binary (.onnx) and protobuf text (.onnxtxt or any
// file that fails to parse as binary but parses as text). Default-domain opsets 13-17.
// Float initializers become trainable parameters; integer initializers and Constant
// nodes become constants. A dynamic (symbolic or unset) dimension 0 of a graph input
// is bound to `batch_size`; any other unknown dimension is an error.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace onnx {
class ModelProto;
}

namespace mpc {

// TensorProto.doc_string that mpc's exporter writes on initializers which are constants
// or persistent state rather than trainable parameters; the importer honours them, so
// mpc's own files re-import with the same value kinds (ONNX itself cannot say this).
inline constexpr char kOnnxConstantMarker[] = "mpc:constant";
inline constexpr char kOnnxStateMarker[] = "mpc:state";

struct ImportOptions {
  int64_t batch_size = 1;  // value for a dynamic leading dimension of the graph inputs
  // The directory that external data locations (onnx_external_data.h) are relative to:
  // the model file's directory. ImportOnnxFile sets it; when it is empty (a model from
  // bytes) a tensor with external data is an error that names it.
  std::string external_data_dir;
};

// Reads and parses a model file; errors name the file. Tensors with external data stay
// external (their side files are checked to exist and are read by ImportOnnxModel with
// external_data_dir = ModelDirectory(path)).
absl::StatusOr<onnx::ModelProto> ReadOnnxModelFile(const std::string& path);

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxModel(const onnx::ModelProto& model, const ImportOptions& options,
                                                       const std::string& source_name);

// The directory a model file's external data locations are relative to.
std::string ModelDirectory(const std::string& model_path);

absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxFile(const std::string& path, const ImportOptions& options);

// The same from a model's bytes in memory (binary or text protobuf, as a file would hold);
// errors name `source_name`. ImportOnnxFile is ReadFileToString + this; the fuzz target
// (tools/fuzz/onnx_import_fuzzer.cc) calls it directly.
absl::StatusOr<onnx::ModelProto> ParseOnnxModelBytes(const std::string& data, const std::string& source_name);
absl::StatusOr<std::unique_ptr<Graph>> ImportOnnxBytes(const std::string& data, const ImportOptions& options,
                                                       const std::string& source_name);

}  // namespace mpc
