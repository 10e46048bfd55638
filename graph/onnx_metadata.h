// The metadata_props that IR version 10 (ONNX 1.16) added to ValueInfoProto (field 4),
// NodeProto (field 9) and TensorProto (field 16), read from a model parsed with an older
// ONNX library. mpc links Debian's ONNX 1.12, whose generated classes predate those fields:
// protobuf keeps them as unknown fields, and they are StringStringEntryProto messages,
// which 1.12 has (ModelProto.metadata_props), so they parse as such.
//
// PyTorch's dynamo exporter writes what mpc needs there: each initializer's
// `pkg.torch.export.graph_signature.InputSpec.kind` (PARAMETER, BUFFER, CONSTANT_TENSOR)
// on its value_info, each node's `pkg.torch.onnx.fx_node` (the FX node it came from,
// naming its parameter placeholders %p_..., buffers %b_...), and onnxscript's
// `pkg.onnxscript.optimizer.folded_from` on constants its optimizer folded.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <string>

namespace mpc {

using OnnxMetadata = std::map<std::string, std::string>;

// The entries of a message's metadata_props, known field or not (empty when it has none).
OnnxMetadata MetadataOf(const onnx::ValueInfoProto& value);
OnnxMetadata MetadataOf(const onnx::NodeProto& node);
OnnxMetadata MetadataOf(const onnx::TensorProto& tensor);

// Keys of PyTorch's exporter and onnxscript's optimizer.
inline constexpr char kTorchInputKindKey[] = "pkg.torch.export.graph_signature.InputSpec.kind";
inline constexpr char kTorchOriginalNameKey[] = "pkg.torch.onnx.original_node_name";
inline constexpr char kTorchFxNodeKey[] = "pkg.torch.onnx.fx_node";
inline constexpr char kOnnxscriptFoldedFromKey[] = "pkg.onnxscript.optimizer.folded_from";
inline constexpr char kOnnxscriptRuleNameKey[] = "pkg.onnxscript.rewriter.rule_name";

}  // namespace mpc
