// The table of graph/onnx_opsets.h. Rows were checked against ONNX 1.23.2's schema history
// (tools/onnx_opsets/since_versions.py); "types" means the definition only widened the
// type constraints (bfloat16, float8, int4, ...) and reads as the one before for the types
// mpc has.
#include "graph/onnx_opsets.h"

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace mpc {
namespace {

constexpr bool kRead = true;

const std::vector<OnnxDefinition>& Rows() {
  static const auto* rows = new std::vector<OnnxDefinition>{
      // Elementwise arithmetic: mpc op of the same name (numpy broadcasting).
      {"Add", 13, kRead, "Add"},
      {"Add", 14, kRead, "types (uint8/int8/int16, bfloat16); Add"},
      {"Sub", 13, kRead, "Sub"},
      {"Sub", 14, kRead, "types; Sub"},
      {"Mul", 13, kRead, "Mul"},
      {"Mul", 14, kRead, "types; Mul"},
      {"Div", 13, kRead, "Div"},
      {"Div", 14, kRead, "types; Div"},
      {"Pow", 13, kRead, "Pow"},
      {"Pow", 15, kRead, "types (bfloat16 exponent); Pow"},
      {"Neg", 13, kRead, "Neg"},
      {"Reciprocal", 13, kRead, "Reciprocal"},
      {"Sqrt", 13, kRead, "Sqrt"},
      {"Exp", 13, kRead, "Exp"},
      {"Log", 13, kRead, "Log"},
      {"Erf", 13, kRead, "Erf (fuse-gelu makes exact GELU of it)"},
      {"Tanh", 13, kRead, "Tanh"},
      {"Sigmoid", 13, kRead, "Sigmoid"},
      {"Relu", 13, kRead, "Relu"},
      {"Relu", 14, kRead, "types (int8..int64); Relu"},
      {"Gelu", 20, kRead, "Gelu, approximate 'none' (erf) or 'tanh'"},
      {"Clip", 13, kRead, "expanded to Where(Less/Greater) with constant bounds (graph/onnx_expand.h)"},
      {"HardSigmoid", 6, kRead, "expanded: Clip(alpha*x + beta, 0, 1)"},
      {"HardSigmoid", 22, kRead, "types; expanded as 6"},
      {"HardSwish", 14, kRead, "expanded: x * HardSigmoid(x, 1/6, 1/2)"},
      {"HardSwish", 22, kRead, "types; expanded as 14"},
      {"LeakyRelu", 6, kRead, "expanded: Where(x > 0, x, alpha*x) (PyTorch's gradient: alpha at 0)"},
      {"LeakyRelu", 16, kRead, "types (bfloat16); expanded as 6"},
      // Comparison and logic: mpc ops of the same name (bool outputs).
      {"Equal", 13, kRead, "Equal"},
      {"Equal", 19, kRead, "types (string, which mpc refuses as a dtype); Equal"},
      {"Less", 13, kRead, "Less"},
      {"LessOrEqual", 12, kRead, "LessOrEqual"},
      {"LessOrEqual", 16, kRead, "types (bfloat16); LessOrEqual"},
      {"Greater", 13, kRead, "Greater"},
      {"GreaterOrEqual", 12, kRead, "GreaterOrEqual"},
      {"GreaterOrEqual", 16, kRead, "types (bfloat16); GreaterOrEqual"},
      {"Not", 1, kRead, "Not"},
      {"And", 7, kRead, "And"},
      {"Or", 7, kRead, "Or"},
      {"Xor", 7, kRead, "Xor"},
      {"Where", 9, kRead, "Where"},
      {"Where", 16, kRead, "types (bfloat16); Where"},
      // GEMMs, normalisations, activations with a softmax.
      {"Gemm", 13, kRead, "Gemm (alpha, beta, transA, transB; C broadcast)"},
      {"MatMul", 13, kRead, "MatMul (numpy batching)"},
      {"Softmax", 13, kRead, "Softmax over one axis (fuse-softmax makes attention's MaskedSoftmax of it)"},
      {"LogSoftmax", 13, kRead, "LogSoftmax over one axis"},
      {"LayerNormalization", 17, kRead, "LayerNormalization (axis, epsilon, stash_type 1)"},
      {"BatchNormalization", 9, kRead, "BatchNormalization; set-mode decides training or inference"},
      {"BatchNormalization", 14, kRead, "training_mode attribute and the running-statistics outputs; set-mode decides"},
      {"BatchNormalization", 15, kRead, "types (scale/bias and mean/var typed apart); as 14"},
      {"Dropout", 13, kRead, "Dropout (ratio and training_mode inputs); set-mode decides"},
      {"Dropout", 22, kRead, "types; as 13"},
      {"SoftmaxCrossEntropyLoss", 13, kRead, "SoftmaxCrossEntropyLoss"},
      // Convolution and pooling.
      {"Conv", 11, kRead, "Conv (1-3 spatial axes, groups, dilations, auto_pad)"},
      {"Conv", 22, kRead, "types; as 11"},
      {"MaxPool", 12, kRead, "MaxPool (ceil_mode, dilations; no Indices output)"},
      {"MaxPool", 22, kRead, "types; as 12 (from opset 19 ceil_mode drops a window starting in the end padding)"},
      {"AveragePool", 11, kRead, "AveragePool (ceil_mode, count_include_pad)"},
      {"AveragePool", 19, kRead, "dilations attribute; AveragePool with dilations; ceil_mode drops a window starting in the end padding"},
      {"AveragePool", 22, kRead, "types; as 19"},
      {"GlobalAveragePool", 1, kRead, "GlobalAveragePool"},
      {"GlobalAveragePool", 22, kRead, "types; as 1"},
      {"GlobalMaxPool", 1, kRead, "GlobalMaxPool"},
      {"GlobalMaxPool", 22, kRead, "types; as 1"},
      // Reductions.
      {"ReduceSum", 13, kRead, "ReduceSum, axes as input 1 (noop_with_empty_axes)"},
      {"ReduceMean", 13, kRead, "ReduceMean, axes as attribute"},
      {"ReduceMean", 18, kRead, "axes moved to input 1 (noop_with_empty_axes); ReduceMean"},
      // Shapes, indexing and data movement: static shape arithmetic folds at import.
      {"Cast", 13, kRead, "Cast"},
      {"Cast", 19, kRead, "saturate attribute for float8 targets; Cast (saturates, as saturate = 1 says)"},
      {"Cast", 21, kRead, "types (int4/uint4); Cast"},
      {"Cast", 23, kRead, "types (float4); Cast"},
      {"CastLike", 15, kRead, "expanded: Cast to the dtype of input 1"},
      {"CastLike", 19, kRead, "saturate attribute; expanded as 15"},
      {"CastLike", 21, kRead, "types; expanded as 15"},
      {"CastLike", 23, kRead, "types; expanded as 15"},
      {"Constant", 13, kRead, "a constant value (value, value_float(s), value_int(s))"},
      {"Constant", 19, kRead, "types; as 13"},
      {"Constant", 21, kRead, "types; as 13"},
      {"Constant", 23, kRead, "types; as 13"},
      {"ConstantOfShape", 9, kRead, "ConstantOfShape"},
      {"ConstantOfShape", 20, kRead, "types (float8); ConstantOfShape"},
      {"ConstantOfShape", 21, kRead, "types; as 9"},
      {"ConstantOfShape", 23, kRead, "types; as 9"},
      {"Identity", 13, kRead, "Identity"},
      {"Identity", 14, kRead, "types (sequences, which mpc refuses); Identity"},
      {"Identity", 16, kRead, "types (optionals); Identity"},
      {"Identity", 19, kRead, "types; Identity"},
      {"Identity", 21, kRead, "types; Identity"},
      {"Identity", 23, kRead, "types; Identity"},
      {"Shape", 13, kRead, "Shape"},
      {"Shape", 15, kRead, "start and end attributes; Shape of that range"},
      {"Shape", 19, kRead, "types; as 15"},
      {"Shape", 21, kRead, "types; as 15"},
      {"Shape", 23, kRead, "types; as 15"},
      {"Reshape", 13, kRead, "Reshape (0 copies the input's extent)"},
      {"Reshape", 14, kRead, "allowzero attribute; Reshape"},
      {"Reshape", 19, kRead, "types; as 14"},
      {"Reshape", 21, kRead, "types; as 14"},
      {"Reshape", 23, kRead, "types; as 14"},
      {"Flatten", 13, kRead, "Flatten"},
      {"Flatten", 21, kRead, "types; as 13"},
      {"Flatten", 23, kRead, "types; as 13"},
      {"Squeeze", 13, kRead, "Squeeze, axes as input 1"},
      {"Squeeze", 21, kRead, "types; as 13"},
      {"Squeeze", 23, kRead, "types; as 13"},
      {"Unsqueeze", 13, kRead, "Unsqueeze, axes as input 1"},
      {"Unsqueeze", 21, kRead, "types; as 13"},
      {"Unsqueeze", 23, kRead, "types; as 13"},
      {"Transpose", 13, kRead, "Transpose"},
      {"Transpose", 21, kRead, "types; as 13"},
      {"Transpose", 23, kRead, "types; as 13"},
      {"Concat", 13, kRead, "Concat"},
      {"Split", 13, kRead, "Split, sizes as input 1 or equal parts per output"},
      {"Split", 18, kRead, "num_outputs attribute (the last part may be smaller); Split"},
      {"Slice", 13, kRead, "Slice (starts, ends, axes, steps as constant inputs)"},
      {"Gather", 13, kRead, "Gather (embeddings: a gradient into the table)"},
      {"Expand", 13, kRead, "Expand"},
      {"Range", 11, kRead, "Range (folds at import on constant inputs)"},
      {"Pad", 13, kRead, "expanded: mode 'constant' as Concat of constant blocks"},
      {"Pad", 18, kRead, "axes as input 3; expanded as 13 over those axes"},
      {"Pad", 19, kRead, "mode 'wrap' added (refused: only 'constant'); expanded as 18"},
      {"Pad", 21, kRead, "types; expanded as 18"},
      {"Pad", 23, kRead, "types; expanded as 18"},
      // Layers ONNX defines as one op, expanded into mpc's ops (graph/onnx_expand_layers.h).
      {"RMSNormalization", 23, kRead, "expanded: X * Reciprocal(Sqrt(ReduceMean(X*X) + eps)) * scale"},
      {"RotaryEmbedding", 23, kRead, "expanded: Gather of the caches, Slice, Mul, Sub/Add, Concat"},
      {"GroupNormalization", 18, kRead, "expanded: group statistics; scale and bias per group"},
      {"GroupNormalization", 21, kRead, "scale and bias per channel, stash_type; expanded"},
      {"InstanceNormalization", 6, kRead, "expanded as GroupNormalization with a group per channel"},
      {"InstanceNormalization", 22, kRead, "types; expanded as 6"},
      {"Resize", 13, kRead, "expanded: nearest/linear over the last two axes as MatMuls with interpolation matrices"},
      {"Resize", 18, kRead, "antialias, axes, keep_aspect_ratio_policy; expanded as 13 (no antialias)"},
      {"Resize", 19, kRead, "half_pixel_symmetric added (refused); expanded as 13"},
      {"IsNaN", 13, kRead, "expanded: Not(Equal(x, x))"},
      {"IsNaN", 20, kRead, "types; expanded as 13"},
      {"Attention", 23, kRead, "expanded: MatMul, scale, mask (Where/Add), Softmax, MatMul; no KV cache"},
      // torch.split in un-optimized dynamo exports: imported as Slice of each part.
      {"SplitToSequence", 11, kRead, "recorded at import; each SequenceAt of it becomes a Slice"},
      {"SequenceAt", 11, kRead, "Slice (and Squeeze) of a SplitToSequence part at a constant position"},
      // Read only on constant inputs, computed at import (graph/onnx_fold_constants.h):
      // buffers' arithmetic such as rotary tables and causal masks.
      {"Sin", 7, kRead, "folded at import on constant inputs"},
      {"Sin", 22, kRead, "types; folded as 7"},
      {"Cos", 7, kRead, "folded at import on constant inputs"},
      {"Cos", 22, kRead, "types; folded as 7"},
      {"Trilu", 14, kRead, "folded at import on constant inputs"},
      {"Mod", 13, kRead, "folded at import on constant inputs (fmod 0 or 1)"},
      {"Abs", 13, kRead, "folded at import on constant inputs"},
      {"Floor", 13, kRead, "folded at import on constant inputs"},
      {"Ceil", 13, kRead, "folded at import on constant inputs"},
      {"Max", 13, kRead, "folded at import on two constant inputs"},
      {"ScatterND", 13, kRead, "folded at import on constant inputs"},
      {"ScatterND", 16, kRead, "reduction attribute; folded when 'none'"},
      {"ScatterND", 18, kRead, "reductions max/min; folded when 'none'"},
      {"GatherElements", 13, kRead, "folded at import on constant inputs"},
      {"GatherND", 13, kRead, "folded on constants; on computed data at constant indices a Gather of a view (batch_dims 0)"},
      {"CumSum", 11, kRead, "folded at import on constant inputs"},
      {"CumSum", 14, kRead, "types; folded as 11"},
      {"Min", 13, kRead, "folded at import on two constant inputs"},
  };
  return *rows;
}

struct Index {
  absl::flat_hash_map<std::string, std::vector<const OnnxDefinition*>> by_op;
};

const Index& GetIndex() {
  static const Index* index = [] {
    auto* built = new Index;
    for (const OnnxDefinition& row : Rows()) built->by_op[row.op].push_back(&row);
    return built;
  }();
  return *index;
}

}  // namespace

const std::vector<OnnxDefinition>& OnnxDefinitions() { return Rows(); }

OnnxDefinitionLookup LookUpOnnxDefinition(const std::string& op, int64_t opset) {
  OnnxDefinitionLookup out;
  const auto it = GetIndex().by_op.find(op);
  if (it == GetIndex().by_op.end()) return out;
  out.known_op = true;
  out.first_since = it->second.front()->since;
  for (const OnnxDefinition* row : it->second) {
    if (row->read) out.read_since.push_back(row->since);
    // The rows list every definition from the first on, so the newest one not after the
    // model's opset is the one in force; before the first row the op means an older
    // definition the table does not describe.
    if (row->since <= opset) out.definition = row;
  }
  return out;
}

std::string UnreadDefinitionMessage(const std::string& op, int64_t opset) {
  const OnnxDefinitionLookup found = LookUpOnnxDefinition(op, opset);
  if (!found.known_op || (found.definition && found.definition->read)) return "";
  const std::string reads = absl::StrJoin(found.read_since, ", ");
  if (found.definition) {
    return absl::StrCat(op, " at opset ", opset, " means its opset-", found.definition->since, " definition (",
                        found.definition->note, "); mpc reads the definitions of opsets ", reads);
  }
  if (opset < found.first_since && found.first_since > kMinOnnxOpset) {
    return absl::StrCat(op, " does not exist at opset ", opset, "; ONNX introduced it at opset ", found.first_since);
  }
  return absl::StrCat(op, " at opset ", opset, " means a definition older than opset ", found.first_since,
                      "; mpc reads the definitions of opsets ", reads);
}

}  // namespace mpc
