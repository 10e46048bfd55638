// CPU FusedAttention and FusedAttentionGrad (graph/ops_attention.cc) in f32, f64, bf16 and
// f16: the reference the fused GPU kernels (cuDNN's flash attention) are checked against,
// and what runs fuse-attention's output when a test compiles it for the CPU. The CPU's own
// training path for attention is the unfused chain (fuse-softmax, fold-batch-transposes,
// triangular operands), so these loops favour plainness over speed: one query row at a
// time, scores in Acc<T>, the probabilities rebuilt from the row's log-sum-exp in the
// backward as a flash-attention kernel does, so both sides see the same algorithm.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// Sizes of one FusedAttention, and where each batch's bias rows start.
struct Geometry {
  int64_t batches = 1, sq = 0, sk = 0, d = 0, dv = 0;
  float scale = 1;
  bool causal = false;
  bool has_bias = false;
  std::vector<int64_t> bias_base;  // per batch
  int64_t bias_row_stride = 0, bias_col_stride = 0;
};

// q, k, v: the input indices of Q, K and V; bias: Bias's (absent when past the inputs).
Geometry GeometryOf(const Node& node, int q, int bias) {
  const Shape& qs = node.inputs[q]->shape;
  const Shape& ks = node.inputs[q + 1]->shape;
  const Shape& vs = node.inputs[q + 2]->shape;
  const int rank = static_cast<int>(qs.size());
  Geometry g;
  for (int i = 0; i < rank - 2; ++i) g.batches *= qs[i];
  g.sq = qs[rank - 2];
  g.d = qs[rank - 1];
  g.sk = ks[rank - 2];
  g.dv = vs[rank - 1];
  g.scale = node.attrs.GetFloat("scale", 1.0f);
  g.causal = node.attrs.GetInt("causal", 0) != 0;
  g.has_bias = bias < static_cast<int>(node.inputs.size()) && node.inputs[bias];
  if (g.has_bias) {
    Shape scores = qs;
    scores[rank - 1] = g.sk;
    const std::vector<int64_t> strides = BroadcastStrides(node.inputs[bias]->shape, scores);
    g.bias_row_stride = strides[rank - 2];
    g.bias_col_stride = strides[rank - 1];
    g.bias_base.resize(g.batches);
    for (int64_t b = 0; b < g.batches; ++b) {
      int64_t rem = b, off = 0;
      for (int k = rank - 3; k >= 0; --k) {
        off += (rem % qs[k]) * strides[k];
        rem /= qs[k];
      }
      g.bias_base[b] = off;
    }
  }
  return g;
}

// Row i of batch b's scores into s[0, sk): scale * q.k + bias, -inf where masked.
template <typename T>
void ScoreRow(const Geometry& g, const T* q, const T* k, const T* bias, int64_t b, int64_t i, Acc<T>* s) {
  using A = Acc<T>;
  const T* qi = q + (b * g.sq + i) * g.d;
  const T* kb = k + b * g.sk * g.d;
  for (int64_t j = 0; j < g.sk; ++j) {
    if (g.causal && j > i) {
      s[j] = -std::numeric_limits<A>::infinity();
      continue;
    }
    const T* kj = kb + j * g.d;
    A dot = 0;
    for (int64_t c = 0; c < g.d; ++c) dot += A(qi[c]) * A(kj[c]);
    s[j] = A(g.scale) * dot;
    if (bias) s[j] += A(bias[g.bias_base[b] + i * g.bias_row_stride + j * g.bias_col_stride]);
  }
}

template <typename T>
struct FusedAttentionKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const Geometry g = GeometryOf(node, 0, 3);
    return MakeKernel([g](KernelContext& ctx) {
      using A = Acc<T>;
      const T* q = ctx.inputs[0].as<T>();
      const T* k = ctx.inputs[1].as<T>();
      const T* v = ctx.inputs[2].as<T>();
      const T* bias = g.has_bias ? ctx.inputs[3].as<T>() : nullptr;
      T* y = ctx.outputs[0].as<T>();
      A* stats = ctx.outputs.size() > 1 ? ctx.outputs[1].as<A>() : nullptr;
      const int64_t rows = g.batches * g.sq;
#pragma omp parallel
      {
        std::vector<A> s(g.sk), acc(g.dv);
#pragma omp for
        for (int64_t r = 0; r < rows; ++r) {
          const int64_t b = r / g.sq, i = r % g.sq;
          ScoreRow(g, q, k, bias, b, i, s.data());
          A max = -std::numeric_limits<A>::infinity();
          for (int64_t j = 0; j < g.sk; ++j) max = std::max(max, s[j]);
          std::fill(acc.begin(), acc.end(), A(0));
          A sum = 0;
          if (std::isfinite(max)) {
            const T* vb = v + b * g.sk * g.dv;
            for (int64_t j = 0; j < g.sk; ++j) {
              const A p = std::exp(s[j] - max);
              if (p == A(0)) continue;
              sum += p;
              for (int64_t c = 0; c < g.dv; ++c) acc[c] += p * A(vb[j * g.dv + c]);
            }
          }
          T* yr = y + r * g.dv;
          for (int64_t c = 0; c < g.dv; ++c) StoreRounded(yr + c, sum > A(0) ? acc[c] / sum : A(0));
          if (stats) stats[r] = sum > A(0) ? max + std::log(sum) : -std::numeric_limits<A>::infinity();
        }
      }
      return absl::OkStatus();
    });
  }
};

// Per batch (one thread owns a batch's dK and dV): p_ij = exp(s_ij - Stats_i),
// ds_ij = p_ij (dY_i.v_j - dY_i.Y_i), dQ_i = scale sum_j ds_ij k_j,
// dK_j = scale sum_i ds_ij q_i, dV_j = sum_i p_ij dY_i.
template <typename T>
struct FusedAttentionGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const Geometry g = GeometryOf(node, 1, 6);
    return MakeKernel([g](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* q = ctx.inputs[1].as<T>();
      const T* k = ctx.inputs[2].as<T>();
      const T* v = ctx.inputs[3].as<T>();
      const T* y = ctx.inputs[4].as<T>();
      const std::vector<A> stats = LoadAll<A>(ctx.inputs[5]);  // f32 from FusedAttention; any float in tests
      const T* bias = g.has_bias ? ctx.inputs[6].as<T>() : nullptr;
      T* dq = ctx.outputs[0].as<T>();
      T* dk = ctx.outputs[1].as<T>();
      T* dv = ctx.outputs[2].as<T>();
#pragma omp parallel
      {
        std::vector<A> s(g.sk), dk_acc(g.sk * g.d), dv_acc(g.sk * g.dv), dq_row(g.d);
#pragma omp for
        for (int64_t b = 0; b < g.batches; ++b) {
          std::fill(dk_acc.begin(), dk_acc.end(), A(0));
          std::fill(dv_acc.begin(), dv_acc.end(), A(0));
          const T* kb = k + b * g.sk * g.d;
          const T* vb = v + b * g.sk * g.dv;
          for (int64_t i = 0; i < g.sq; ++i) {
            const int64_t r = b * g.sq + i;
            const T* dyi = dy + r * g.dv;
            const T* qi = q + r * g.d;
            std::fill(dq_row.begin(), dq_row.end(), A(0));
            const A lse = stats[r];
            if (std::isfinite(lse)) {
              ScoreRow(g, q, k, bias, b, i, s.data());
              A dy_dot_y = 0;
              for (int64_t c = 0; c < g.dv; ++c) dy_dot_y += A(dyi[c]) * A(y[r * g.dv + c]);
              for (int64_t j = 0; j < g.sk; ++j) {
                const A p = std::exp(s[j] - lse);
                if (p == A(0)) continue;
                A dp = 0;
                for (int64_t c = 0; c < g.dv; ++c) {
                  dp += A(dyi[c]) * A(vb[j * g.dv + c]);
                  dv_acc[j * g.dv + c] += p * A(dyi[c]);
                }
                const A ds = A(g.scale) * p * (dp - dy_dot_y);
                for (int64_t c = 0; c < g.d; ++c) {
                  dq_row[c] += ds * A(kb[j * g.d + c]);
                  dk_acc[j * g.d + c] += ds * A(qi[c]);
                }
              }
            }
            for (int64_t c = 0; c < g.d; ++c) StoreRounded(dq + r * g.d + c, dq_row[c]);
          }
          for (int64_t e = 0; e < g.sk * g.d; ++e) StoreRounded(dk + b * g.sk * g.d + e, dk_acc[e]);
          for (int64_t e = 0; e < g.sk * g.dv; ++e) StoreRounded(dv + b * g.sk * g.dv + e, dv_acc[e]);
        }
      }
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuAttentionKernels(KernelRegistry& r) {
  RegisterFloatKernels<FusedAttentionKernel>(r, "FusedAttention");
  RegisterFloatKernels<FusedAttentionGradKernel>(r, "FusedAttentionGrad");
}

}  // namespace mpc
