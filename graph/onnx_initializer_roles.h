// Which initializers of an ONNX model are trained. An ONNX file does not say which of its
// initializers are parameters: PyTorch buffers (causal masks, rotary tables, position ids,
// running statistics) arrive beside the weights. PyTorch never trains a buffer, so mpc
// trains an initializer only when the model says it is a parameter or nothing says it is
// not, and reports every decision with its reason (`mpc compile`).
//
// In order, for each initializer (first rule that applies):
//   1. mpc's own exporter marked it state or constant (doc_string)         -> as marked
//   2. not floating point                                                   -> constant
//   3. used only where ONNX takes configuration (Reshape's shape, ...)      -> constant
//   4. used only as BatchNormalization's running mean / variance            -> state
//   5. PyTorch's dynamo exporter says PARAMETER / BUFFER / CONSTANT_TENSOR  -> trained /
//      (`pkg.torch.export.graph_signature.InputSpec.kind`)                     constant
//   6. holds a NaN or an infinity (an additive -inf mask)                    -> constant
//      or flows into an op mpc computes only at import (Sin, Cos, Trilu, ...: a rotary
//      inv_freq table; graph/onnx_fold_constants.h)                           -> constant
//   7. folded by the dynamo exporter's optimizer (`folded_from`): trained when a source it
//      was folded from is a parameter (one the model still has, or a removed one whose
//      placeholder %p_... some node's FX node names, or one named *.weight / *.bias),
//      else constant
//   8. any other initializer of a dynamo export (the signature lists every parameter) -> constant
//   9. otherwise (TorchScript and other exporters say nothing)               -> trained
// The spec's `freeze` patterns then exclude trained ones from the update (autodiff).
//
// Shared initializers are untied where sharing cannot be what the model meant:
//   - a BatchNormalization running statistic shared with a weight or with another
//     BatchNormalization (onnxscript's optimizer merges equal initializers of up to 1024
//     elements: a fresh BatchNorm's running variance equals its weight, all ones) gets a
//     private state copy per BatchNormalization;
//   - in a dynamo export, a parameter read by a node whose FX node does not name it (it was
//     merged into an equal one: every LayerNorm weight of ones becomes one initializer)
//     gets a private copy for that node, named after the placeholder it replaced.
#pragma once

#include <onnx/onnx_pb.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"

namespace mpc {

enum class InitializerKind { kParameter, kConstant, kState };

struct InitializerPlan {
  struct Decision {
    Decision() = default;
    Decision(InitializerKind k, std::string why, bool was_folded = false, std::vector<std::string> from = {})
        : kind(k), reason(std::move(why)), folded(was_folded), folded_from(std::move(from)) {}
    InitializerKind kind = InitializerKind::kParameter;
    std::string reason;
    // A trained constant the exporter's optimizer folded from parameters (rule 7): the
    // importer re-derives it from the parameter where it can (onnx_import.cc,
    // DeriveFoldedParameters), so a weight read twice stays one weight.
    bool folded = false;
    std::vector<std::string> folded_from;
  };
  std::map<std::string, Decision> decisions;  // by initializer name
  // A private copy of an initializer: `name` holds `source`'s initial value.
  struct Copy {
    std::string name;
    std::string source;
    Decision decision;
  };
  std::vector<Copy> copies;
  // (node index, input index) -> the copy that input reads instead of its initializer.
  std::map<std::pair<int, int>, std::string> redirects;
  bool dynamo_export = false;  // the model carries PyTorch's graph-signature metadata
  // The FX placeholders (%p_..., %b_...) some initializer still carries
  // (pkg.torch.onnx.original_node_name): a placeholder a node's FX node names that is not
  // here was removed or merged by the exporter's optimizer.
  std::set<std::string> present_placeholders;
};

// What the caller, which decoded each initializer's data, knows of it: whether its dtype is
// a float type and whether its values are all finite.
struct InitializerFacts {
  bool floating = false;
  bool finite = true;
};
InitializerPlan PlanInitializers(const onnx::GraphProto& graph, const std::map<std::string, InitializerFacts>& facts,
                                 const std::string& state_marker, const std::string& constant_marker);

// The kind as reports name it: "trained", "state" or "constant".
std::string InitializerKindName(InitializerKind kind);

}  // namespace mpc
