// The per-element optimizer formulas on the device, shared by the single-parameter
// updates (kernels_optimizer.cu) and the multi-tensor ones (kernels_multi_tensor_update.cu),
// so the two compute the same bits; plus LowpCopyAt, which both use to set up a launch. Each formula uses the _rn
// intrinsics in the CPU's evaluation order (backends/cpu/kernels_optimizer.cc): nvcc would otherwise contract a*b + c
// into an FMA, and the CPU build (x86-64 without -mfma) rounds every product.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backends/backend.h"

namespace mpc::cuda {

// The low-precision copy an update writes, if any (at most one pointer is set).
struct LowpCopyPtr {
  __nv_bfloat16* bf16 = nullptr;
  __half* f16 = nullptr;
};

// The bf16/f16 copy at input `index` of a kernel's context; none when index < 0.
inline LowpCopyPtr LowpCopyAt(const KernelContext& ctx, int index) {
  LowpCopyPtr c;
  if (index < 0) return c;
  const TensorView& v = ctx.inputs[index];
  if (v.dtype == DType::kBF16) c.bf16 = v.as<__nv_bfloat16>();
  if (v.dtype == DType::kF16) c.f16 = v.as<__half>();
  return c;
}

__device__ __forceinline__ void StoreCopy(const LowpCopyPtr& c, int64_t i, float w) {
  if (c.bf16) c.bf16[i] = __float2bfloat16_rn(w);
  if (c.f16) c.f16[i] = __float2half_rn(w);
}

__device__ __forceinline__ void StoreCopy4(const LowpCopyPtr& c, int64_t quad, const float4& w) {
  if (!c.bf16 && !c.f16) return;
  StoreCopy(c, 4 * quad, w.x);
  StoreCopy(c, 4 * quad + 1, w.y);
  StoreCopy(c, 4 * quad + 2, w.z);
  StoreCopy(c, 4 * quad + 3, w.w);
}

// ---- SGD: g += wd*p; buf = momentum*buf + g; g = nesterov ? g + momentum*buf : buf; p -= lr*g

struct SgdHyper {
  float momentum;
  float weight_decay;
  bool nesterov;
};

template <bool kMomentum>
__device__ __forceinline__ void SgdElement(float& p, float g, float& buf, float lr, const SgdHyper& h) {
  float d = __fadd_rn(g, __fmul_rn(h.weight_decay, p));
  if constexpr (kMomentum) {
    buf = __fadd_rn(__fmul_rn(h.momentum, buf), d);
    d = h.nesterov ? __fadd_rn(d, __fmul_rn(h.momentum, buf)) : buf;
  }
  p = __fsub_rn(p, __fmul_rn(lr, d));
}

// ---- AdamW: t = step + 1; p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
//             p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)

struct AdamWHyper {
  float b1, b2;
  float one_minus_b1, one_minus_b2;  // 1 - b in f32, as the CPU evaluates it
  float eps;
  float weight_decay;
};

// One step's coefficients, computed once per block from the device scalars.
struct AdamWStepCoefs {
  float step_size;  // lr / (1 - b1^t)
  float bc2_sqrt;   // sqrt(1 - b2^t)
  float decay;      // 1 - lr*wd
};

// The coefficients of step t. b^t: the CPU calls powf (glibc, < 1 ulp). pow in f64
// rounded once to f32 is the correctly rounded value in all but vanishingly rare cases,
// so the two agree wherever glibc is correctly rounded. Once per block: its cost does
// not matter.
__device__ __forceinline__ AdamWStepCoefs AdamWCoefsAt(float t, float lr, const AdamWHyper& h) {
  const float b1t = static_cast<float>(::pow(static_cast<double>(h.b1), static_cast<double>(t)));
  const float b2t = static_cast<float>(::pow(static_cast<double>(h.b2), static_cast<double>(t)));
  const float bc1 = __fsub_rn(1.0f, b1t), bc2 = __fsub_rn(1.0f, b2t);
  AdamWStepCoefs c;
  c.step_size = __fdiv_rn(lr, bc1);
  c.bc2_sqrt = __fsqrt_rn(bc2);
  c.decay = __fsub_rn(1.0f, __fmul_rn(lr, h.weight_decay));
  return c;
}

__device__ __forceinline__ void AdamWElement(float& p, float g, float& m, float& v, const AdamWHyper& h,
                                             const AdamWStepCoefs& c) {
  p = __fmul_rn(p, c.decay);
  m = __fadd_rn(__fmul_rn(h.b1, m), __fmul_rn(h.one_minus_b1, g));
  v = __fadd_rn(__fmul_rn(h.b2, v), __fmul_rn(__fmul_rn(h.one_minus_b2, g), g));  // ((1-b2)*g)*g as on the CPU
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bc2_sqrt), h.eps);
  p = __fsub_rn(p, __fdiv_rn(__fmul_rn(c.step_size, m), denom));
}

}  // namespace mpc::cuda
