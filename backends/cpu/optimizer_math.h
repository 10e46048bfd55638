// The element maths of the CPU optimizer updates, shared by the single-parameter kernels
// (kernels_optimizer.cc) and the multi-tensor ones (kernels_multi_tensor_update.cc), so
// fusing the updates changes no value. torch.optim semantics:
//   SGD:   g += wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf; p -= lr*g
//   AdamW: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//          p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// A weight's bf16/f16 copy (lowp_copy) is rewritten in the same loop. The loops are
// instantiated per copy type so the plain f32 update stays a branch-free vector loop, and
// per gradient type: the multi-tensor updates read a bf16/f16 gradient directly where the
// compiler folded its widening Cast (passes/fold_gradient_casts.h); widening is exact, so
// the update is the same as on the f32 copy.
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/backend.h"
#include "backends/cpu/cpu_isa.h"
#include "graph/half_types.h"

namespace mpc::cpu {

struct NoCopy {};

// Calls loop(copy_pointer_or_NoCopy) with the element type of the copy at input
// copy_index (-1: none); store a weight with StoreCopy(copy, i, w).
template <typename Loop>
inline void WithCopyAt(const KernelContext& ctx, int copy_index, Loop loop) {
  if (copy_index < 0) return loop(static_cast<NoCopy*>(nullptr));
  const TensorView& v = ctx.inputs[copy_index];
  if (v.dtype == DType::kBF16) return loop(v.as<Bf16>());
  loop(v.as<Half>());
}

// The single updates' copy is the input before the gate flag, or the last.
template <typename Loop>
inline void WithCopy(const KernelContext& ctx, bool has_copy, bool gated, Loop loop) {
  WithCopyAt(ctx, has_copy ? static_cast<int>(ctx.inputs.size()) - (gated ? 2 : 1) : -1, loop);
}

inline void StoreCopy(NoCopy*, int64_t, float) {}
// Writes the bits member: assigning a Bf16/Half temporary would keep the loop scalar
// (cpu_kernel_util.h, StoreRounded).
inline void StoreCopy(Bf16* copy, int64_t i, float w) { copy[i].bits = FloatToBf16(w); }
inline void StoreCopy(Half* copy, int64_t i, float w) { copy[i].bits = FloatToHalf(w); }

// The update loops take everything as plain arguments (no closure captures), so each
// instantiation is the same vector loop; with NoCopy, StoreCopy vanishes. Each runs over
// one thread's range, compiled for every vector ISA (cpu_isa.h).
template <typename G, typename C>
MPC_ISA_CLONES void SgdRange(int64_t begin, int64_t end, float* p, const G* g, float* buf, float lr, float momentum,
                             float wd, bool nesterov, C* copy) {
  if (buf) {
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) {
      float d = static_cast<float>(g[i]) + wd * p[i];
      buf[i] = momentum * buf[i] + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
      p[i] -= lr * d;
      StoreCopy(copy, i, p[i]);
    }
    return;
  }
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    p[i] -= lr * (static_cast<float>(g[i]) + wd * p[i]);
    StoreCopy(copy, i, p[i]);
  }
}

template <typename G, typename C>
inline void SgdLoop(int64_t n, float* p, const G* g, float* buf, float lr, float momentum, float wd, bool nesterov,
                    C* copy) {
  ParallelRanges(
      n, 32768, [&](int64_t begin, int64_t end) { SgdRange(begin, end, p, g, buf, lr, momentum, wd, nesterov, copy); });
}

struct AdamWCoefs {
  float b1, b2, eps, step_size, bc2_sqrt, decay;
};

// Advances a step counter and returns this step's coefficients (torch.optim.AdamW's).
inline AdamWCoefs NextAdamWStep(float* step, float lr, float b1, float b2, float eps, float wd) {
  const float t = step[0] + 1.0f;
  step[0] = t;
  const float bc1 = 1.0f - std::pow(b1, t), bc2 = 1.0f - std::pow(b2, t);
  return AdamWCoefs{b1, b2, eps, lr / bc1, std::sqrt(bc2), 1.0f - lr * wd};
}

template <typename G, typename C>
MPC_ISA_CLONES void AdamWRange(int64_t begin, int64_t end, float* p, const G* grad, float* m, float* v,
                               const AdamWCoefs c, C* copy) {
  const float b1 = c.b1, b2 = c.b2, eps = c.eps, step_size = c.step_size, bc2_sqrt = c.bc2_sqrt, decay = c.decay;
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float g = static_cast<float>(grad[i]);
    p[i] *= decay;
    m[i] = b1 * m[i] + (1.0f - b1) * g;
    v[i] = b2 * v[i] + (1.0f - b2) * g * g;
    p[i] -= step_size * m[i] / (std::sqrt(v[i]) / bc2_sqrt + eps);
    StoreCopy(copy, i, p[i]);
  }
}

template <typename G, typename C>
inline void AdamWLoop(int64_t n, float* p, const G* g, float* m, float* v, const AdamWCoefs c, C* copy) {
  ParallelRanges(n, 32768, [&](int64_t begin, int64_t end) { AdamWRange(begin, end, p, g, m, v, c, copy); });
}

}  // namespace mpc::cpu
