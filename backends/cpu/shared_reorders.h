// Reorders of one value into one oneDNN layout, made once per step and read by every
// kernel of the program that needs it.
//
// mpc keeps activations in plain NCHW; oneDNN's convolutions run on blocked layouts, so each
// convolution kernel reorders its operands into buffers of its own. Several kernels of a
// training step reorder the same value into the same layout: a block's input X for its
// forward convolution and again for that convolution's weight gradient, the gradient dY for
// both the data and the weight gradient, one X for a residual block's 3x3 and 1x1 (downsample)
// convolutions. ResNet-18 f32 spent ~10 ms of an ~80 ms step in reorders, 2 ms of it on repeats.
//
// Executor::Create opens a group around the kernels of one program (Backend::
// BeginKernelGroup); they run once per step, one after another in the order they were made.
// So a kernel made later in the group may read the buffer an earlier kernel reorders the same
// value into: the earlier one has run in this step before it, the value is live (the later
// kernel reads it), so its buffer still holds it, and only its owner writes the reordered
// copy. Offer records a kernel's reordered buffer; Find returns one an earlier kernel offered.
// Outside a group (a kernel made on its own) Find returns nothing. Groups are per thread.
#pragma once

#include <optional>

#include "graph/graph.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc {
namespace cpu {

// Opens (closes) the group of the kernels made on this thread until Close (nested groups
// stack; Close ends the innermost).
void OpenReorderGroup();
void CloseReorderGroup();

// An earlier kernel's buffer holding `value` reordered into `layout` (identical desc), in
// the open group; nullopt when none (or no group is open).
std::optional<dnnl::memory> FindSharedReorder(const Value* value, const dnnl::memory::desc& layout);

// Records that `buffer` (its desc is the layout) will hold `value` reordered, every step,
// before any later kernel of the group runs. No-op outside a group.
void OfferSharedReorder(const Value* value, const dnnl::memory& buffer);

// How many reorders kernels of this thread's groups took from an earlier kernel, ever (tests).
int64_t SharedReorderCount();

}  // namespace cpu
}  // namespace mpc
