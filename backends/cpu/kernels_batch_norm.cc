// CPU BatchNormalization, BatchNormGrad and BatchNormStatsUpdate (graph/ops_norm.cc),
// one channel at a time over [N, C, spatial], in f32, f64, bf16 and f16. Per-channel sums
// are simd reductions in Acc<T>, and the per-channel loops are compiled for each vector
// ISA (cpu_isa.h); the statistics update copies the new running mean and
// variance into their state in place.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "graph/ops_norm.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// ---------------------------------------------------------------------------------
// BatchNormalization: X viewed as [N, C, S].

struct ChannelSplit {
  int64_t n = 1, c = 1, s = 1;
};

ChannelSplit SplitChannels(const Shape& x) {
  ChannelSplit cs;
  cs.n = x[0];
  cs.c = x[1];
  for (size_t i = 2; i < x.size(); ++i) cs.s *= x[i];
  return cs;
}

// One channel's loops over its N planes of S values (plane i starts at x + i * stride),
// compiled for each vector ISA (cpu_isa.h). The sums are simd reductions in Acc<T>
// (partial sums per vector lane) instead of one serial chain of dependent adds.
template <typename T>
MPC_ISA_CLONES Acc<T> ChannelSum(const T* x, int64_t planes, int64_t stride, int64_t s) {
  using A = Acc<T>;
  A sum = 0;
  for (int64_t i = 0; i < planes; ++i) {
    const T* p = x + i * stride;
#pragma omp simd reduction(+ : sum)
    for (int64_t k = 0; k < s; ++k) sum += A(p[k]);
  }
  return sum;
}

template <typename T>
MPC_ISA_CLONES Acc<T> ChannelSquaredDeviation(const T* x, int64_t planes, int64_t stride, int64_t s, Acc<T> mean) {
  using A = Acc<T>;
  A sq = 0;
  for (int64_t i = 0; i < planes; ++i) {
    const T* p = x + i * stride;
#pragma omp simd reduction(+ : sq)
    for (int64_t k = 0; k < s; ++k) {
      const A d = A(p[k]) - mean;
      sq += d * d;
    }
  }
  return sq;
}

// y = (x - mean) * a + shift over the channel (subtracting the mean first: x * a - mean * a
// would cancel catastrophically when the mean is large against the spread).
template <typename T>
MPC_ISA_CLONES void ChannelAffine(const T* x, T* y, int64_t planes, int64_t stride, int64_t s, Acc<T> mean, Acc<T> a,
                                  Acc<T> shift) {
  using A = Acc<T>;
  for (int64_t i = 0; i < planes; ++i) {
    const T* p = x + i * stride;
    T* q = y + i * stride;
#pragma omp simd
    for (int64_t k = 0; k < s; ++k) StoreRounded(q + k, (A(p[k]) - mean) * a + shift);
  }
}

// sum(dY) and sum(dY * xhat) over the channel, xhat = (X - mean) * inv.
template <typename T>
MPC_ISA_CLONES void ChannelGradSums(const T* dy, const T* x, int64_t planes, int64_t stride, int64_t s, Acc<T> mean,
                                    Acc<T> inv, Acc<T>* sum_dy, Acc<T>* sum_dy_xhat) {
  using A = Acc<T>;
  A sdy = 0, sdyx = 0;
  for (int64_t i = 0; i < planes; ++i) {
    const int64_t o = i * stride;
#pragma omp simd reduction(+ : sdy, sdyx)
    for (int64_t k = 0; k < s; ++k) {
      const A g = A(dy[o + k]);
      sdy += g;
      sdyx += g * (A(x[o + k]) - mean) * inv;
    }
  }
  *sum_dy = sdy;
  *sum_dy_xhat = sdyx;
}

// dX = a * (dY - mdy - (X - mean) * k) over the channel.
template <typename T>
MPC_ISA_CLONES void ChannelGradApply(const T* dy, const T* x, T* dx, int64_t planes, int64_t stride, int64_t s,
                                     Acc<T> a, Acc<T> mdy, Acc<T> mean, Acc<T> k) {
  using A = Acc<T>;
  for (int64_t i = 0; i < planes; ++i) {
    const int64_t o = i * stride;
#pragma omp simd
    for (int64_t j = 0; j < s; ++j) StoreRounded(dx + o + j, a * (A(dy[o + j]) - mdy - (A(x[o + j]) - mean) * k));
  }
}

template <typename T>
struct BatchNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool training = ops::BatchNormTraining(node);
    // mpc's training programs (mpc_training = 1) update running_var with the unbiased
    // batch variance, as PyTorch does; ONNX's training_mode alone with the biased one.
    const bool unbiased_update = node.attrs.GetInt("mpc_training", 0) != 0;
    const ChannelSplit cs = SplitChannels(node.inputs[0]->shape);
    const int64_t m = cs.n * cs.s;
    if (training && m < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "BatchNormalization node '", node.name, "' in training mode sees ", m, " value per channel (X ",
          ShapeToString(node.inputs[0]->shape), "); batch statistics need more than one. Use a batch size above 1"));
    }
    const float eps = node.attrs.GetFloat("epsilon", 1e-5f);
    const float momentum = node.attrs.GetFloat("momentum", 0.9f);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const std::vector<A> scale = LoadAll<A>(ctx.inputs[1]);
      const std::vector<A> bias = LoadAll<A>(ctx.inputs[2]);
      const TensorView& in_mean = ctx.inputs[3];
      const TensorView& in_var = ctx.inputs[4];
      const int nout = static_cast<int>(ctx.outputs.size());
      const A mom = static_cast<A>(momentum);
#pragma omp parallel for if (cs.c > 1 && cs.n * cs.c * cs.s > 16384)
      for (int64_t c = 0; c < cs.c; ++c) {
        A mean, var, unbiased = 0;
        const T* xc = x + c * cs.s;
        const int64_t stride = cs.c * cs.s;
        if (training) {
          mean = ChannelSum(xc, cs.n, stride, cs.s) / static_cast<A>(m);
          const A sq = ChannelSquaredDeviation(xc, cs.n, stride, cs.s, mean);
          var = sq / static_cast<A>(m);
          unbiased = unbiased_update ? sq / static_cast<A>(m - 1) : var;
        } else {
          mean = static_cast<A>(LoadAt(in_mean, c));
          var = static_cast<A>(LoadAt(in_var, c));
        }
        const A inv = A(1) / std::sqrt(var + static_cast<A>(eps));
        const A a = inv * scale[c];
        ChannelAffine(xc, y + c * cs.s, cs.n, stride, cs.s, mean, a, bias[c]);
        const A rm = static_cast<A>(LoadAt(in_mean, c)), rv = static_cast<A>(LoadAt(in_var, c));
        if (nout > 1) StoreAt(ctx.outputs[1], c, training ? mom * rm + (A(1) - mom) * mean : rm);
        if (nout > 2) StoreAt(ctx.outputs[2], c, training ? mom * rv + (A(1) - mom) * unbiased : rv);
        if (nout > 3) ctx.outputs[3].as<A>()[c] = mean;
        if (nout > 4) ctx.outputs[4].as<A>()[c] = inv;
      }
      return absl::OkStatus();
    });
  }
};

// training: dX = scale * inv * (dY - mean(dY) - xhat * mean(dY * xhat));
// evaluation: dX = scale * inv * dY.  dscale = sum(dY * xhat), dB = sum(dY) per channel.
template <typename T>
struct BatchNormGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool training = node.attrs.GetInt("training_mode", 0) != 0;
    const ChannelSplit cs = SplitChannels(node.inputs[1]->shape);
    const int64_t m = cs.n * cs.s;
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
#pragma omp parallel for if (cs.c > 1 && cs.n * cs.c * cs.s > 16384)
      for (int64_t c = 0; c < cs.c; ++c) {
        const A scale = static_cast<A>(LoadAt(ctx.inputs[2], c));
        const A mean = static_cast<A>(LoadAt(ctx.inputs[3], c));
        const A inv = static_cast<A>(LoadAt(ctx.inputs[4], c));
        const int64_t stride = cs.c * cs.s;
        A sdy = 0, sdyx = 0;
        ChannelGradSums(dy + c * cs.s, x + c * cs.s, cs.n, stride, cs.s, mean, inv, &sdy, &sdyx);
        const A a = scale * inv;
        const A mdy = sdy / static_cast<A>(m), mdyx = sdyx / static_cast<A>(m);
        // Evaluation mode: the statistics are constants, dX = a * dY.
        ChannelGradApply(dy + c * cs.s, x + c * cs.s, dx + c * cs.s, cs.n, stride, cs.s, a, training ? mdy : A(0), mean,
                         training ? inv * mdyx : A(0));
        StoreAt(ctx.outputs[1], c, sdyx);
        StoreAt(ctx.outputs[2], c, sdy);
      }
      return absl::OkStatus();
    });
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateStatsUpdate(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    for (int i : {0, 1}) {
      const TensorView& dst = ctx.inputs[i];
      const TensorView& src = ctx.inputs[i + 2];
      if (dst.data != src.data) std::memcpy(dst.data, src.data, dst.num_elements() * DTypeSize(dst.dtype));
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuBatchNormKernels(KernelRegistry& r) {
  cpu::RegisterFloatKernels<BatchNormKernel>(r, "BatchNormalization");
  cpu::RegisterFloatKernels<BatchNormGradKernel>(r, "BatchNormGrad");
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    r.Register("BatchNormStatsUpdate", "cpu", d, CreateStatsUpdate);
  }
}

}  // namespace mpc
