// attach-loss: turns the model into something to train. It adds the labels input and the
// loss node reading the model's logits, and makes the loss the program's only output
// (the other outputs' computations go unless something else needs them).
//   softmax cross-entropy: labels are class indices, i64 [batch] (one class per example)
//     or [batch, T...] (one per position: the logits must then be [batch*T..., classes]
//     and the labels are flattened to match); the loss is the mean over labelled rows.
//     With label smoothing eps, the target is (1-eps)*onehot + eps/classes (PyTorch's
//     cross_entropy(label_smoothing=eps)), composed as (1-eps)*CE + eps*mean(-LogSoftmax).
//   mean squared error: labels have the logits' dtype and shape; the mean over elements.
//   binary cross-entropy with logits (multi-label): f32 labels of the logits' shape; the
//     mean over elements of max(x,0) - x*y + log(1+exp(-|x|)) (PyTorch's BCEWithLogitsLoss).
// Both additions are composed from ops that have gradients and CPU and CUDA kernels, so
// every backend runs them; the ops are autocast deny ops or fed by one, so they stay f32.
// It runs first in the training pipeline, so every later pass sees the loss.
#pragma once

#include <cstdint>
#include <string>

#include "graph/shape.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct AttachLossOptions {
  enum class Kind { kSoftmaxCrossEntropy, kMeanSquaredError, kBinaryCrossEntropyWithLogits };
  Kind kind = Kind::kSoftmaxCrossEntropy;
  float label_smoothing = 0;      // softmax cross-entropy only, in [0, 1)
  std::string logits;             // the model output the loss reads
  std::string labels = "labels";  // the name of the labels input to add
  int64_t batch_size = 1;
  // One example's labels without the batch axis: empty for one class per example, [T...]
  // for one class per position. With no data to look at (`mpc compile`), logits of shape
  // [batch*T, classes] imply [T].
  Shape label_row;
};

class AttachLossPass : public Pass {
 public:
  AttachLossPass(AttachLossOptions options, LossResult* result) : options_(std::move(options)), result_(result) {}
  std::string_view name() const override { return "attach-loss"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  AttachLossOptions options_;
  LossResult* result_;
};

// select-outputs: keeps only the named outputs of the model (an evaluation program's
// logits), in that order.
class SelectOutputsPass : public Pass {
 public:
  explicit SelectOutputsPass(std::vector<std::string> outputs) : outputs_(std::move(outputs)) {}
  std::string_view name() const override { return "select-outputs"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  std::vector<std::string> outputs_;
};

}  // namespace mpc
