// Window arithmetic shared by Conv and the pooling ops, their gradient ops and their
// CPU kernels: reading strides / dilations / pads / auto_pad / ceil_mode from a node and
// resolving them, for a given input extent and kernel, into explicit begin/end pads and
// output extents, with ONNX opset-17 semantics. ceil_mode: out = ceil(span / stride) + 1,
// as ONNX 1.12's shape inference (and so the output shapes torch.onnx.export declares)
// computes it. PyTorch itself drops a last window that starts at or past the end of the
// input (inside the end padding); ONNX keeps it, and such a window sees no input: the
// pooling kernels give 0 there (MaxPool and AveragePool) and route no gradient. ONNX's
// opset 19+ definitions drop it as PyTorch does: the importer marks those nodes
// (mpc_ceil_drops_padded_window), and the window arithmetic then drops it too.
// Also the channels-last form (attribute mpc_channels_last, set by passes/channels_last.h)
// of Conv, its gradient ops and BatchNormalization: the channel axis last instead of 1.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/graph.h"

namespace mpc::conv {

// One spatial window per axis, all vectors of the spatial rank.
struct Window {
  std::vector<int64_t> in, kernel, stride, dilation, pad_begin, pad_end, out;
  int rank() const { return static_cast<int>(in.size()); }
};

// Resolves the window attributes of `node` (strides, dilations, pads, auto_pad and,
// when `pooling`, ceil_mode) for spatial input extents `in` and kernel extents `kernel`.
// Pooling also requires every pad to be smaller than the (dilated) kernel. Errors name
// the attribute, the shapes and a fix (the caller's node prefix is added by AddNode).
absl::StatusOr<Window> ResolveWindow(const Node& node, const std::vector<int64_t>& in,
                                     const std::vector<int64_t>& kernel, bool pooling);

// A 1-D or 2-D window as 2-D (a 1-D window gets H = 1, kernel 1, stride 1, no pads),
// the form the CPU kernels compute in.
struct Window2D {
  int64_t ih = 1, iw = 1, kh = 1, kw = 1, oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;  // top, left, bottom, right
};
Window2D To2D(const Window& w);

// Channels-last ops (mpc_channels_last = 1) read and write activations as [N, spatial...,
// C] instead of ONNX's [N, C, spatial...]; weights stay [M, C/group, kernel...]. Shape
// rules are written for the channels-first form and applied through these views.
bool ChannelsLast(const Node& node);
// [N, spatial..., C] -> [N, C, spatial...] and back (rank >= 2).
Shape ChannelsFirstView(const Shape& channels_last);
Shape ChannelsLastView(const Shape& channels_first);
// The activation's shape in channels-first form: `s` itself unless the node is channels-last.
Shape AsChannelsFirst(const Node& node, const Shape& s);
// ... and back: `s` (channels-first) in the node's own form.
Shape InNodeLayout(const Node& node, const Shape& s);
// Transpose permutations: channels-first -> channels-last ([0, 2, ..., r-1, 1]) and back.
std::vector<int64_t> ToChannelsLastPerm(int rank);
std::vector<int64_t> ToChannelsFirstPerm(int rank);

}  // namespace mpc::conv
