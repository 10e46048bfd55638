// Re-deriving the parameters an exporter's optimizer folded into constants. onnxscript's
// constant folding (torch.onnx.export's default optimize=True) evaluates any node whose
// inputs are all initializers, parameters included, and writes the result as a new
// initializer: a tied weight read through a Transpose becomes a second, independent copy
// (GPT-2's lm_head beside its token embedding), and a parameter broadcast over the batch
// becomes one copy per example (ViT's cls_token expanded to [batch, 1, width], BERT's token
// type row expanded to [batch, positions, width]). Trained as they are, these train
// differently from the module. mpc recognises the folds by their values:
//   - the folded tensor equals a parameter the model still has, reshaped or (2-D)
//     transposed: it becomes Reshape / Transpose of that parameter (the tie is kept);
//   - it repeats along some axes (every slice equal, and not one value throughout, which a
//     freshly initialised norm's ones or zeros would be): it becomes Expand of a parameter
//     of the collapsed shape, which autodiff sums the gradients into, as PyTorch does.
// Anything else stays a parameter of its own (a transposed weight the model no longer has
// is the same training either way).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "graph/tensor.h"

namespace mpc {

struct FoldedDerivation {
  enum class Kind { kNone, kReshape, kTranspose, kExpand };
  Kind kind = Kind::kNone;
  std::string source;  // kReshape / kTranspose: the parameter it is derived from
  Tensor base;         // kExpand: the collapsed values, a new parameter
  std::string reason;  // for the compile report
};

// `parameters`: the model's parameters (name, initial value) other than `folded` itself.
FoldedDerivation DeriveFoldedParameter(const Tensor& folded,
                                       const std::vector<std::pair<std::string, const Tensor*>>& parameters);

}  // namespace mpc
