// channels-last: runs a backend's convolutions and batch normalizations on channels-last
// activations ([N, H, W, C]) where the backend says that is faster, keeping the graph in
// ONNX's channels-first form everywhere else (TensorFlow's layout optimizer does this
// for NHWC/NCHW on GPUs). oneDNN's convolutions run on blocked or channels-last layouts,
// never on NCHW: on NCHW buffers every convolution reordered its input in and its output
// out, each step, forward and backward (ResNet-18 f32: ~4 ms a step of activation
// reorders), while on channels-last buffers it reads and writes them as they are.
//
// Each eligible Conv becomes a channels-last Conv (mpc_channels_last = 1) between a
// Transpose of its input to channels-last and one of its output back; a BatchNormalization
// or 2-D MaxPool whose input is such a transposed-back output, and a layout-agnostic elementwise op
// (ReLU, Add, Cast, ...) all of whose operands have its output's shape and one of them is
// such an output, are converted the same way; a Transpose to channels-last of a value that
// was just transposed back reads the channels-last value instead. So a chain of
// convolutions, normalizations, activations and residual adds runs channels-last from the
// first convolution to the first op that is not converted (a pooling, the classifier),
// with one Transpose at each end. Transposes left without a reader are removed.
//
// Eligible: 2-D group-1 convolutions whose dtype has a threshold in the backend's
// Capabilities::channels_last_min_plane and whose output plane (OH * OW) reaches it (the
// CPU's tiny planes stay channels-first, where its matmul paths win). Without a threshold
// (CUDA, the fake capabilities of pass tests) the pass changes nothing.
//
// Runs on the forward graph after pad-dims and before autodiff: the backward ops are built
// channels-last from the forward ones (ConvGradInput, ConvGradWeight and BatchNormGrad
// inherit the attribute; a Transpose's gradient is the inverse Transpose).
#pragma once

#include "graph/capabilities.h"
#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class ChannelsLastPass : public Pass {
 public:
  ChannelsLastPass(const Capabilities& caps, ChannelsLastResult* result)
      : min_plane_(caps.channels_last_min_plane), result_(result) {}
  std::string_view name() const override { return "channels-last"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  std::map<DType, int64_t> min_plane_;
  ChannelsLastResult* result_;
};

}  // namespace mpc
