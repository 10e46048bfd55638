// The autocast op classes (see docs/autocast.md for each op's membership and why).
// allow: always worth running in low precision (tensor-core GEMMs); f32 accumulation
//        keeps them accurate.
// deny:  numerically dangerous in low precision, and the danger propagates downstream
//        (exp/log/pow ranges, softmax normalisation, losses).
// infer: safe in low precision unless fed by a deny op (elementwise arithmetic,
//        smooth activations).
// clear: no numeric effect (data movement, ReLU, dropout's masking): follow neighbours.
// The lists are disjoint; the autocast pass rejects a configuration where they overlap.
#pragma once

#include <set>
#include <string>

namespace mpc::autocast {

inline const std::set<std::string>& DefaultAllow() {
  static const std::set<std::string> ops = {"Gemm", "MatMul", "Conv", "FusedAttention"};
  return ops;
}

inline const std::set<std::string>& DefaultDeny() {
  static const std::set<std::string> ops = {"Exp",
                                            "Log",
                                            "Pow",
                                            "Reciprocal",
                                            "LogSoftmax",
                                            "SoftmaxCrossEntropyLoss",
                                            "MeanSquaredError",
                                            "ReduceSum",
                                            "ReduceMean",
                                            "LayerNormalization",
                                            "RmsNorm",
                                            "Erf",
                                            "Sqrt"};
  return ops;
}

inline const std::set<std::string>& DefaultInfer() {
  static const std::set<std::string> ops = {"Add",           "Sub",
                                            "Mul",           "Div",
                                            "Neg",           "Sigmoid",
                                            "Tanh",          "Gelu",
                                            "Silu",
                                            "AveragePool",   "GlobalAveragePool",
                                            "Where",         "Softmax",
                                            "MaskedSoftmax", "BatchNormalization"};
  return ops;
}

// Infer ops whose low-precision kernels read and write the low dtype but keep their
// reductions in f32, as cuDNN's and PyTorch's do. Softmax: the row maximum and the sum of
// exponentials; its outputs are probabilities in [0, 1], which bf16/f16 store to their usual
// relative precision; MaskedSoftmax (passes/fuse_softmax.h) is a Softmax with its scale and
// mask inside. BatchNormalization: the batch mean and variance, the running
// statistics and the affine parameters (its inputs 1-4 stay f32, see KeepsF32Operand). So
// the attention scores and a ResNet's activations stay low precision instead of being cast
// to f32 and kept twice for the backward pass.
inline bool ReducesInF32(const std::string& op) {
  return op == "Softmax" || op == "MaskedSoftmax" || op == "BatchNormalization";
}

// Operands that stay f32 whatever dtype their op runs in: BatchNormalization's scale, B and
// running mean/variance (f32 master parameters and state; its kernels read them as f32).
inline bool KeepsF32Operand(const std::string& op, int index) { return op == "BatchNormalization" && index >= 1; }

inline const std::set<std::string>& DefaultClear() {
  static const std::set<std::string> ops = {"Reshape", "Flatten",   "Transpose", "Identity", "Relu",
                                            "Dropout", "Slice",     "Concat",    "Split",    "Gather",
                                            "Squeeze", "Unsqueeze", "Expand",    "MaxPool",  "GlobalMaxPool"};
  return ops;
}

}  // namespace mpc::autocast

namespace mpc::autocast {

// Inputs that configure an op rather than carry data (read at compile time as
// constants): autocast never casts them.
inline bool IsConfigInput(const std::string& op, int index) {
  if (op == "Dropout") return index >= 1;  // ratio, training_mode
  if (op == "Slice") return index >= 1;    // starts, ends, axes, steps
  if (op == "Reshape" || op == "Expand" || op == "Split" || op == "Squeeze" || op == "Unsqueeze" || op == "ReduceSum" ||
      op == "ReduceMean") {
    return index == 1;  // target shape, split sizes, axes
  }
  return false;
}

}  // namespace mpc::autocast
