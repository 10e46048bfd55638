// CPU BatchNormalization, BatchNormGrad and BatchNormStatsUpdate (graph/ops_norm.cc),
// one channel at a time over [N, C, spatial], in f32, f64, bf16 and f16. Per-channel sums
// are simd reductions in Acc<T>; the statistics update copies the new running mean and
// variance into their state in place.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
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
        if (training) {
          // The per-channel sums run over N x S values: simd reductions (partial sums
          // per vector lane) instead of one serial chain of dependent adds.
          A sum = 0;
          for (int64_t i = 0; i < cs.n; ++i) {
            const T* p = x + (i * cs.c + c) * cs.s;
#pragma omp simd reduction(+ : sum)
            for (int64_t k = 0; k < cs.s; ++k) sum += A(p[k]);
          }
          mean = sum / static_cast<A>(m);
          A sq = 0;
          for (int64_t i = 0; i < cs.n; ++i) {
            const T* p = x + (i * cs.c + c) * cs.s;
#pragma omp simd reduction(+ : sq)
            for (int64_t k = 0; k < cs.s; ++k) {
              const A dlt = A(p[k]) - mean;
              sq += dlt * dlt;
            }
          }
          var = sq / static_cast<A>(m);
          unbiased = unbiased_update ? sq / static_cast<A>(m - 1) : var;
        } else {
          mean = static_cast<A>(LoadAt(in_mean, c));
          var = static_cast<A>(LoadAt(in_var, c));
        }
        const A inv = A(1) / std::sqrt(var + static_cast<A>(eps));
        const A a = inv * scale[c];
        for (int64_t i = 0; i < cs.n; ++i) {
          const T* p = x + (i * cs.c + c) * cs.s;
          T* q = y + (i * cs.c + c) * cs.s;
          for (int64_t k = 0; k < cs.s; ++k) q[k] = static_cast<T>((A(p[k]) - mean) * a + bias[c]);
        }
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
        A sdy = 0, sdyx = 0;
        for (int64_t i = 0; i < cs.n; ++i) {
          const int64_t o = (i * cs.c + c) * cs.s;
#pragma omp simd reduction(+ : sdy, sdyx)
          for (int64_t k = 0; k < cs.s; ++k) {
            const A g = A(dy[o + k]);
            sdy += g;
            sdyx += g * (A(x[o + k]) - mean) * inv;
          }
        }
        const A a = scale * inv;
        const A mdy = sdy / static_cast<A>(m), mdyx = sdyx / static_cast<A>(m);
        for (int64_t i = 0; i < cs.n; ++i) {
          const int64_t o = (i * cs.c + c) * cs.s;
          for (int64_t k = 0; k < cs.s; ++k) {
            const A g = A(dy[o + k]);
            dx[o + k] = static_cast<T>(training ? a * (g - mdy - (A(x[o + k]) - mean) * inv * mdyx) : a * g);
          }
        }
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
