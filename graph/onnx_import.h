// ONNX ModelProto -> Graph. Accepts binary (.onnx) and protobuf text (.onnxtxt or any
// file that fails to parse as binary but parses as text). Default-domain opsets 13-23, each
// op by the definitions graph/onnx_opsets.h says mpc reads. Which initializers are trained
// parameters, state or constants is graph/onnx_initializer_roles.h's decision; Constant
// nodes become constants. A dynamic (symbolic or unset) dimension 0 of a graph input
// is bound to `batch_size`; any other unknown dimension is an error.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

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

// How the importer classified one initializer of the model: "trained", "state" or
// "constant", and why (graph/onnx_initializer_roles.h). `mpc compile` reports them.
struct InitializerRole {
  std::string name;
  std::string kind;
  std::string reason;
};

struct ImportOptions {
  int64_t batch_size = 1;  // value for a dynamic leading dimension of the graph inputs
  // The directory that external data locations (onnx_external_data.h) are relative to:
  // the model file's directory. ImportOnnxFile sets it; when it is empty (a model from
  // bytes) a tensor with external data is an error that names it.
  std::string external_data_dir;
  // One example's shape per graph input (without the batch axis), which binds the input's
  // symbolic dimensions past axis 0 (an export with dynamic_axes on the sequence): mpc-train
  // takes it from the training data. A dim_param bound on one input binds the same name on
  // the others (an attention mask's 'seq').
  std::map<std::string, Shape> input_rows;
  // When set, receives one entry per initializer (and per untied copy), in model order.
  std::vector<InitializerRole>* initializer_roles = nullptr;
};

// Reads and parses a model file; errors name the file. Tensors with external data stay
// external (their side files are checked to exist and are read by ImportOnnxModel with
// external_data_dir = ModelDirectory(path)).
absl::StatusOr<onnx::ModelProto> ReadOnnxModelFile(const std::string& path);

// The checks ReadOnnxModelFile makes on a parsed model: its opsets and every op's definition
// (graph/onnx_opsets.h), then ONNX's checker where Debian's ONNX 1.12 knows the model's
// opset and IR version (17 and 8); newer models are checked by the import itself.
absl::Status CheckOnnxModel(const onnx::ModelProto& model, const std::string& source_name);

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
