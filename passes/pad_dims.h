// pad-dims: pads GEMM and convolution dimensions to the tensor-core multiple without
// changing what the model computes. It runs after autocast (the multiple depends on each
// GEMM's dtype) and before autodiff (so the backward pass is built on the padded graph).
//
// Padding is done at the parameter level: a Gemm's or MatMul's 2-D weight (and bias) is
// stored padded with zeros in the training state, so there is no per-step pad copy for it.
// A padded output width N' carries zeros in its extra columns, and flows on through ops
// whose registry padding rule keeps zeros zero (ReLU, tanh, casts, dropout, add/sub/mul
// with a zero-padded parameter) into the next Gemm, whose contraction dimension is padded
// to match. Convolutions (group 1) are padded the same way along the channel axis: the
// weight's output channels and the bias, the next Conv's input channels following them,
// and the padding carried through per-channel ops (BatchNormalization with its scale,
// bias and running statistics zero-padded; pools) and a Flatten of [N, C, 1, 1] into the
// classifier's contraction. Before an op that must see the model's shape (softmax,
// losses, norms, reductions, graph outputs) a SliceTo restores it — so the class
// dimension is padded too and the padded logits never reach the loss. Padded rows,
// columns and channels receive zero gradients and stay zero under every optimizer
// (weight decay included). Checkpoints, exports and user-visible tensors are unpadded
// via Value::logical_shape.
#pragma once

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

struct PadDimsOptions {
  // Pad to this multiple: 0 takes the backend's preference per GEMM dtype
  // (Capabilities::PadMultiple), 1 pads nothing.
  int multiple = 0;
};

class PadDimsPass : public Pass {
 public:
  PadDimsPass(PadDimsOptions options, const Capabilities& caps, PadDimsResult* result)
      : options_(options), caps_(caps), result_(result) {}
  std::string_view name() const override { return "pad-dims"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  PadDimsOptions options_;
  const Capabilities& caps_;
  PadDimsResult* result_;
};

}  // namespace mpc
