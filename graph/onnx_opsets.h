// Which ONNX operator definitions mpc reads, op by op. ONNX versions each op on its own: a
// model that imports opset N means, for every op it uses, the newest definition of that op
// whose since-version is <= N. So "mpc supports opset N" is really a statement per op, and
// this table makes it one: for every op of the default domain mpc imports, each definition
// ONNX has given it from the one in force at opset 13 up to kMaxOnnxOpset, whether mpc reads
// it and how it maps onto mpc's ops (the way ONNX Runtime registers kernels per version
// range). The importer asks the table, not Debian's ONNX 1.12 schema registry, which knows
// opsets up to 17 only and must not decide what newer models mean.
//
// A definition older than the table's first row for its op (an opset-11 model's Softmax) or
// newer than the model's opset (Gelu in an opset-18 model) is not read: the error says which
// definition the model means and which ones mpc reads. tools/onnx_opsets/since_versions.py
// prints ONNX's own since-version lists to check the rows against.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpc {

inline constexpr int64_t kMinOnnxOpset = 13;  // the oldest opset whose every definition mpc reads
inline constexpr int64_t kMaxOnnxOpset = 23;  // the newest opset mpc reads

// From this opset, MaxPool and AveragePool with ceil_mode drop a last window that would
// start in the end padding (ONNX's current reference and PyTorch); before it ONNX 1.12's
// shape inference kept it, and the output shapes older exports declare say so.
inline constexpr int64_t kPoolingDropsPaddedWindowOpset = 19;

struct OnnxDefinition {
  const char* op;
  int since;         // the opset that introduced this definition
  bool read;         // mpc imports nodes of this definition
  const char* note;  // what the definition changed, and how mpc reads it (or why it does not)
};

// Every row, grouped by op, each op's rows in since-version order.
const std::vector<OnnxDefinition>& OnnxDefinitions();

// What a node of `op` means in a model of default-domain opset `opset`.
struct OnnxDefinitionLookup {
  const OnnxDefinition* definition = nullptr;  // the row in force, or null (see below)
  bool known_op = false;                       // the table has rows for `op`
  int first_since = 0;                         // the oldest definition the table lists for `op`
  std::vector<int> read_since;                 // the definitions of `op` mpc reads
};
OnnxDefinitionLookup LookUpOnnxDefinition(const std::string& op, int64_t opset);

// One line for an op whose definition at `opset` mpc does not read ("" when it reads it or
// the op is not in the table): the definition meant and the ones mpc reads.
std::string UnreadDefinitionMessage(const std::string& op, int64_t opset);

}  // namespace mpc
