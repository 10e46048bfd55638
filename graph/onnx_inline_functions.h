// ONNX local functions (ModelProto.functions) inlined into the main graph before import.
//
// An exporter may write a model as calls to functions defined in the file: PyTorch's
// TorchScript exporter does for `export_modules_as_functions` (one function per module
// class: `torch.nn.modules.normalization.GroupNorm`, a transformer block, ...), and
// onnxscript-authored models call their own functions. mpc's ops are the ONNX operators,
// so every call is replaced by the function's body, read at the model's opset: inputs and
// outputs bound to the call's values, internal values renamed under the call's node name
// (unique in the graph), attributes that refer to the function's (`ref_attr_name`) taken
// from the call or from the function's declared default (IR 9's `attribute_proto`), and
// nested calls inlined the same way. Functions are told apart by (domain, name, overload)
// (IR 10); the overload fields, which Debian's ONNX 1.12 classes predate, are read from
// the unknown fields as graph/onnx_metadata.h reads metadata_props.
//
// Refused with an error naming the call and the function: a function that calls itself,
// one whose body imports a different default-domain opset than the model (mpc reads one
// opset per model; onnx.version_converter aligns them), and subgraph attributes inside a
// body (control flow, which mpc does not import anyway).
#pragma once

#include <onnx/onnx_pb.h>

#include <string>

#include "absl/status/status.h"

namespace mpc {

// Whether any node of the main graph calls a function the model defines.
bool CallsLocalFunctions(const onnx::ModelProto& model);

// Replaces every call to a local function in `model`'s main graph by the function's body
// (recursively) and removes the function definitions. `source` names the model in errors.
// A model without functions is left as it is.
absl::Status InlineLocalFunctions(onnx::ModelProto& model, const std::string& source);

}  // namespace mpc
