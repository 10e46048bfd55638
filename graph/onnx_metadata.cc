// See onnx_metadata.h. The field numbers are onnx.proto's (IR version 10 and later).
#include "graph/onnx_metadata.h"

#include <google/protobuf/unknown_field_set.h>

namespace mpc {
namespace {

constexpr int kValueInfoMetadataField = 4;
constexpr int kNodeMetadataField = 9;
constexpr int kTensorMetadataField = 16;

// Entries from the unknown fields numbered `field` (an older ONNX library's view of the
// message); entries already parsed into a known field are added by the caller.
void AddUnknownEntries(const google::protobuf::Message& message, int field, OnnxMetadata& out) {
  const google::protobuf::UnknownFieldSet& unknown = message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField& f = unknown.field(i);
    if (f.number() != field || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED) continue;
    onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(f.length_delimited())) out[entry.key()] = entry.value();
  }
}

template <typename Message>
OnnxMetadata Collect(const Message& message, int field) {
  OnnxMetadata out;
  AddUnknownEntries(message, field, out);
  return out;
}

}  // namespace

OnnxMetadata MetadataOf(const onnx::ValueInfoProto& value) { return Collect(value, kValueInfoMetadataField); }
OnnxMetadata MetadataOf(const onnx::NodeProto& node) { return Collect(node, kNodeMetadataField); }
OnnxMetadata MetadataOf(const onnx::TensorProto& tensor) { return Collect(tensor, kTensorMetadataField); }

}  // namespace mpc
