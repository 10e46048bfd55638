// CPU BatchNormalization, BatchNormGrad and BatchNormStatsUpdate (graph/ops_norm.cc) over
// X viewed as [N, C, spatial] (channels-last X [N, spatial..., C] as [N * spatial, C, 1]),
// in f32, f64, bf16 and f16. Each OpenMP thread owns a range of
// channels and walks it sample by sample in memory order; per-channel sums are simd
// reductions in Acc<T> (per-element partial sums where planes are tiny: kExpandedPlaneMax),
// and the loops are compiled for each vector ISA (cpu_isa.h). The statistics update copies
// the new running mean and variance into their state in place.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "graph/ops_conv_util.h"
#include "graph/ops_norm.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// ---------------------------------------------------------------------------------
// BatchNormalization: X viewed as [N, C, S].

struct ChannelSplit {
  int64_t n = 1, c = 1, s = 1;
};

// Channels-last X [N, spatial..., C] is [N * spatial, C, 1]: a plane of one value.
ChannelSplit SplitChannels(const Node& node, const Shape& x) {
  ChannelSplit cs;
  if (conv::ChannelsLast(node)) {
    cs.c = x.back();
    cs.n = NumElements(x) / cs.c;
    return cs;
  }
  cs.n = x[0];
  cs.c = x[1];
  for (size_t i = 2; i < x.size(); ++i) cs.s *= x[i];
  return cs;
}

// The loops below walk X in memory order: one call covers a contiguous run of `channels`
// planes of S values (the channels [c0, c1) of one sample), and per-channel results go to
// arrays indexed from c0. Walking a channel's N planes one after another instead (a jump
// of C * S values between planes) left the hardware prefetcher behind on every plane:
// ResNet-18's BatchNormGrad spent half its time on the first load of each plane.
// Each is compiled for each vector ISA (cpu_isa.h); the sums are simd reductions in Acc<T>.
template <typename T>
MPC_ISA_CLONES void AddChannelSums(const T* x, int64_t channels, int64_t s, Acc<T>* sum) {
  using A = Acc<T>;
  for (int64_t c = 0; c < channels; ++c) {
    const T* p = x + c * s;
    A acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t k = 0; k < s; ++k) acc += A(p[k]);
    sum[c] += acc;
  }
}

template <typename T>
MPC_ISA_CLONES void AddChannelSquaredDeviations(const T* x, int64_t channels, int64_t s, const Acc<T>* mean,
                                                Acc<T>* sq) {
  using A = Acc<T>;
  for (int64_t c = 0; c < channels; ++c) {
    const T* p = x + c * s;
    const A m = mean[c];
    A acc = 0;
#pragma omp simd reduction(+ : acc)
    for (int64_t k = 0; k < s; ++k) {
      const A d = A(p[k]) - m;
      acc += d * d;
    }
    sq[c] += acc;
  }
}

// y = (x - mean) * a + shift per channel (subtracting the mean first: x * a - mean * a
// would cancel catastrophically when the mean is large against the spread).
template <typename T>
MPC_ISA_CLONES void ApplyChannelAffine(const T* x, T* y, int64_t channels, int64_t s, const Acc<T>* mean,
                                       const Acc<T>* a, const Acc<T>* shift) {
  using A = Acc<T>;
  for (int64_t c = 0; c < channels; ++c) {
    const T* p = x + c * s;
    T* q = y + c * s;
    const A m = mean[c], ac = a[c], b = shift[c];
#pragma omp simd
    for (int64_t k = 0; k < s; ++k) StoreRounded(q + k, (A(p[k]) - m) * ac + b);
  }
}

// sum(dY) and sum(dY * xhat) per channel, xhat = (X - mean) * inv.
template <typename T>
MPC_ISA_CLONES void AddChannelGradSums(const T* dy, const T* x, int64_t channels, int64_t s, const Acc<T>* mean,
                                       const Acc<T>* inv, Acc<T>* sum_dy, Acc<T>* sum_dy_xhat) {
  using A = Acc<T>;
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t o = c * s;
    const A m = mean[c], iv = inv[c];
    A sdy = 0, sdyx = 0;
#pragma omp simd reduction(+ : sdy, sdyx)
    for (int64_t k = 0; k < s; ++k) {
      const A g = A(dy[o + k]);
      sdy += g;
      sdyx += g * (A(x[o + k]) - m) * iv;
    }
    sum_dy[c] += sdy;
    sum_dy_xhat[c] += sdyx;
  }
}

// dX = a * (dY - mdy - (X - mean) * k) per channel.
template <typename T>
MPC_ISA_CLONES void ApplyChannelGrad(const T* dy, const T* x, T* dx, int64_t channels, int64_t s, const Acc<T>* a,
                                     const Acc<T>* mdy, const Acc<T>* mean, const Acc<T>* k) {
  using A = Acc<T>;
  for (int64_t c = 0; c < channels; ++c) {
    const int64_t o = c * s;
    const A ac = a[c], md = mdy[c], m = mean[c], kc = k[c];
#pragma omp simd
    for (int64_t j = 0; j < s; ++j) StoreRounded(dx + o + j, ac * (A(dy[o + j]) - md - (A(x[o + j]) - m) * kc));
  }
}

// Small planes (ResNet's last stages: 4x4 and 2x2 values a channel) leave the loops above
// a few values per channel and their per-channel overhead dominates. There the passes run
// over a sample's whole run of channels [c0, c1) (nc * S contiguous values) element by
// element, with per-element partial sums over the samples and the per-channel constants
// expanded to one per element (each array nc * S values, cached); the partial sums of a
// channel are added after the last sample. Planes of up to kExpandedPlaneMax values take
// this form, and so does channels-last X (a plane of one value: rows of C channels).
constexpr int64_t kExpandedPlaneMax = 16;

// Each walks `rows` runs of `run` values, `stride` apart (one run per sample):
// part[j] += x[r * stride + j]; the forms below likewise, element by element.
template <typename T>
MPC_ISA_CLONES void AddRunValues(const T* x, int64_t rows, int64_t stride, int64_t run, Acc<T>* part) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < run; ++j) part[j] += A(xr[j]);
  }
}

template <typename T>
MPC_ISA_CLONES void AddRunSquaredDeviations(const T* x, int64_t rows, int64_t stride, int64_t run, const Acc<T>* mean,
                                            Acc<T>* part) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < run; ++j) {
      const A d = A(xr[j]) - mean[j];
      part[j] += d * d;
    }
  }
}

template <typename T>
MPC_ISA_CLONES void ApplyRunAffine(const T* x, T* y, int64_t rows, int64_t stride, int64_t run, const Acc<T>* mean,
                                   const Acc<T>* a, const Acc<T>* shift) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * stride;
    T* yr = y + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < run; ++j) StoreRounded(yr + j, (A(xr[j]) - mean[j]) * a[j] + shift[j]);
  }
}

template <typename T>
MPC_ISA_CLONES void AddRunGradSums(const T* dy, const T* x, int64_t rows, int64_t stride, int64_t run,
                                   const Acc<T>* mean, const Acc<T>* inv, Acc<T>* part_dy, Acc<T>* part_dy_xhat) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * stride;
    const T* xr = x + r * stride;
#pragma omp simd
    for (int64_t j = 0; j < run; ++j) {
      const A g = A(dyr[j]);
      part_dy[j] += g;
      part_dy_xhat[j] += g * (A(xr[j]) - mean[j]) * inv[j];
    }
  }
}

template <typename T>
MPC_ISA_CLONES void ApplyRunGrad(const T* dy, const T* x, T* dx, int64_t rows, int64_t stride, int64_t run,
                                 const Acc<T>* a, const Acc<T>* mdy, const Acc<T>* mean, const Acc<T>* k) {
  using A = Acc<T>;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * stride;
#pragma omp simd
    for (int64_t j = 0; j < run; ++j) {
      StoreRounded(dx + o + j, a[j] * (A(dy[o + j]) - mdy[j] - (A(x[o + j]) - mean[j]) * k[j]));
    }
  }
}

// Per-channel sums of per-element partial sums: out[c] += part[c * s .. c * s + s).
template <typename A>
void FoldRun(const A* part, int64_t channels, int64_t s, A* out) {
  for (int64_t c = 0; c < channels; ++c) {
    A acc = 0;
    for (int64_t k = 0; k < s; ++k) acc += part[c * s + k];
    out[c] += acc;
  }
}

// Each channel's value repeated S times.
template <typename A>
void ExpandRun(const A* per_channel, int64_t channels, int64_t s, A* out) {
  for (int64_t c = 0; c < channels; ++c) std::fill(out + c * s, out + (c + 1) * s, per_channel[c]);
}

// Channels-last X is `rows` rows of C channels. Its passes split the rows into fixed
// chunks of kRowChunk, spread over the OpenMP threads (splitting the channels instead left
// each thread a few values a row); each chunk sums into its own row of partial sums, and
// the chunks are added in order, so the sums do not depend on the thread count.
constexpr int64_t kRowChunk = 128;

int64_t RowChunks(int64_t rows) { return (rows + kRowChunk - 1) / kRowChunk; }

// body(chunk, first_row, row_count) for every chunk.
template <typename Body>
void ForRowChunks(int64_t rows, int64_t channels, Body body) {
  const int64_t chunks = RowChunks(rows);
#pragma omp parallel for schedule(static) if (rows * channels > 16384)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t r0 = k * kRowChunk;
    body(k, r0, std::min(rows, r0 + kRowChunk) - r0);
  }
}

// Within a chunk, rows go in groups of GroupRows(C) (q rows, q * C contiguous values, at
// least 256 where C allows): the run functions see a group as one run, with the
// per-channel constants tiled q times, so a few channels still make long vector loops.
int64_t GroupRows(int64_t channels) {
  int64_t q = 1;
  while (q * 2 * channels <= 256 && q * 2 <= kRowChunk) q *= 2;  // a power of two: it divides kRowChunk
  return q;
}

// Calls f(first_row, groups, values) for a chunk's rows [r0, r0 + nr): its whole groups as
// `groups` runs of q * C values, then any rows left over as one shorter run.
template <typename F>
void ForGroups(int64_t r0, int64_t nr, int64_t q, int64_t channels, F f) {
  const int64_t groups = nr / q;
  if (groups > 0) f(r0, groups, q * channels);
  if (nr % q != 0) f(r0 + groups * q, int64_t{1}, (nr % q) * channels);
}

// Each per-channel value repeated q times: [v0 .. vC-1, v0 .. vC-1, ...].
template <typename A>
std::vector<A> Tile(const std::vector<A>& v, int64_t q) {
  std::vector<A> out;
  out.reserve(v.size() * static_cast<size_t>(q));
  for (int64_t i = 0; i < q; ++i) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// out[c] += the partial sums part[r * channels + c] of every row r of part (the chunks'
// groups of rows, chunk by chunk), in order.
template <typename A>
void FoldChunks(const std::vector<A>& part, int64_t channels, A* out) {
  for (size_t k = 0; k * channels < part.size(); ++k) {
    for (int64_t c = 0; c < channels; ++c) out[c] += part[k * channels + c];
  }
}

// Calls body(c0, c1) on one contiguous range of channels per OpenMP thread (all of them on
// the calling thread for small tensors). Each thread owns its channels' statistics, so the
// passes over X need no barrier between them, and a channel's sums are added in the same
// order (sample by sample) whatever the number of threads.
template <typename Body>
void ForChannelRanges(const ChannelSplit& cs, Body body) {
  if (cs.c > 1 && cs.n * cs.c * cs.s > 16384) {
#pragma omp parallel
    {
      const int64_t threads = omp_get_num_threads(), t = omp_get_thread_num();
      const int64_t per = (cs.c + threads - 1) / threads;
      const int64_t c0 = std::min(cs.c, t * per), c1 = std::min(cs.c, c0 + per);
      if (c0 < c1) body(c0, c1);
    }
  } else {
    body(int64_t{0}, cs.c);
  }
}

template <typename T>
struct BatchNormKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool training = ops::BatchNormTraining(node);
    // mpc's training programs (mpc_training = 1) update running_var with the unbiased
    // batch variance, as PyTorch does; ONNX's training_mode alone with the biased one.
    const bool unbiased_update = node.attrs.GetInt("mpc_training", 0) != 0;
    const ChannelSplit cs = SplitChannels(node, node.inputs[0]->shape);
    const bool channels_last = conv::ChannelsLast(node);
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
      std::vector<A> mean(cs.c, A(0)), sq(cs.c, A(0)), a(cs.c), unbiased(cs.c);
      // Per channel, from the batch sums (mean, sq) or the running statistics: the
      // variance, the affine factor a and the statistics outputs.
      auto finish = [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          A var;
          if (training) {
            var = sq[c] / static_cast<A>(m);
            unbiased[c] = unbiased_update ? sq[c] / static_cast<A>(m - 1) : var;
          } else {
            mean[c] = static_cast<A>(LoadAt(in_mean, c));
            var = static_cast<A>(LoadAt(in_var, c));
          }
          const A inv = A(1) / std::sqrt(var + static_cast<A>(eps));
          a[c] = inv * scale[c];
          const A rm = static_cast<A>(LoadAt(in_mean, c)), rv = static_cast<A>(LoadAt(in_var, c));
          if (nout > 1) StoreAt(ctx.outputs[1], c, training ? mom * rm + (A(1) - mom) * mean[c] : rm);
          if (nout > 2) StoreAt(ctx.outputs[2], c, training ? mom * rv + (A(1) - mom) * unbiased[c] : rv);
          if (nout > 3) ctx.outputs[3].as<A>()[c] = mean[c];
          if (nout > 4) ctx.outputs[4].as<A>()[c] = inv;
        }
      };
      if (channels_last) {
        const int64_t rows = cs.n, c = cs.c, q = GroupRows(c), run = q * c;
        if (training) {
          std::vector<A> part(static_cast<size_t>(RowChunks(rows) * run), A(0));
          ForRowChunks(rows, c, [&](int64_t k, int64_t r0, int64_t nr) {
            ForGroups(r0, nr, q, c, [&](int64_t r, int64_t groups, int64_t len) {
              AddRunValues(x + r * c, groups, run, len, part.data() + k * run);
            });
          });
          FoldChunks(part, c, mean.data());
          for (A& v : mean) v /= static_cast<A>(m);
          std::fill(part.begin(), part.end(), A(0));
          const std::vector<A> mean_t = Tile(mean, q);
          ForRowChunks(rows, c, [&](int64_t k, int64_t r0, int64_t nr) {
            ForGroups(r0, nr, q, c, [&](int64_t r, int64_t groups, int64_t len) {
              AddRunSquaredDeviations(x + r * c, groups, run, len, mean_t.data(), part.data() + k * run);
            });
          });
          FoldChunks(part, c, sq.data());
        }
        finish(0, c);
        const std::vector<A> mean_t = Tile(mean, q), a_t = Tile(a, q), shift_t = Tile(bias, q);
        ForRowChunks(rows, c, [&](int64_t, int64_t r0, int64_t nr) {
          ForGroups(r0, nr, q, c, [&](int64_t r, int64_t groups, int64_t len) {
            ApplyRunAffine(x + r * c, y + r * c, groups, run, len, mean_t.data(), a_t.data(), shift_t.data());
          });
        });
        return absl::OkStatus();
      }
      const int64_t sample = cs.c * cs.s;
      const bool expanded = cs.s <= kExpandedPlaneMax;
      ForChannelRanges(cs, [&](int64_t c0, int64_t c1) {
        const int64_t nc = c1 - c0, run = nc * cs.s;
        const T* xc = x + c0 * cs.s;
        // Expanded form: per-element partial sums, then mean, a and shift per element.
        std::vector<A> part, mean_x, a_x, shift_x;
        if (expanded) {
          part.assign(static_cast<size_t>(run), A(0));
          mean_x.resize(static_cast<size_t>(run));
        }
        if (training) {
          if (expanded) {
            AddRunValues(xc, cs.n, sample, run, part.data());
            FoldRun(part.data(), nc, cs.s, mean.data() + c0);
          } else {
            for (int64_t i = 0; i < cs.n; ++i) AddChannelSums(xc + i * sample, nc, cs.s, mean.data() + c0);
          }
          for (int64_t c = c0; c < c1; ++c) mean[c] /= static_cast<A>(m);
          if (expanded) {
            ExpandRun(mean.data() + c0, nc, cs.s, mean_x.data());
            std::fill(part.begin(), part.end(), A(0));
            AddRunSquaredDeviations(xc, cs.n, sample, run, mean_x.data(), part.data());
            FoldRun(part.data(), nc, cs.s, sq.data() + c0);
          } else {
            for (int64_t i = 0; i < cs.n; ++i) {
              AddChannelSquaredDeviations(xc + i * sample, nc, cs.s, mean.data() + c0, sq.data() + c0);
            }
          }
        }
        finish(c0, c1);
        if (expanded) {
          a_x.resize(static_cast<size_t>(run));
          shift_x.resize(static_cast<size_t>(run));
          ExpandRun(mean.data() + c0, nc, cs.s, mean_x.data());  // evaluation: the running mean
          ExpandRun(a.data() + c0, nc, cs.s, a_x.data());
          ExpandRun(bias.data() + c0, nc, cs.s, shift_x.data());
          ApplyRunAffine(xc, y + c0 * cs.s, cs.n, sample, run, mean_x.data(), a_x.data(), shift_x.data());
          return;
        }
        for (int64_t i = 0; i < cs.n; ++i) {
          ApplyChannelAffine(xc + i * sample, y + c0 * cs.s + i * sample, nc, cs.s, mean.data() + c0, a.data() + c0,
                             bias.data() + c0);
        }
      });
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
    const ChannelSplit cs = SplitChannels(node, node.inputs[1]->shape);
    const bool channels_last = conv::ChannelsLast(node);
    const int64_t m = cs.n * cs.s;
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      const std::vector<A> scale = LoadAll<A>(ctx.inputs[2]);
      const std::vector<A> mean = LoadAll<A>(ctx.inputs[3]);
      const std::vector<A> inv = LoadAll<A>(ctx.inputs[4]);
      std::vector<A> sdy(cs.c, A(0)), sdyx(cs.c, A(0)), a(cs.c), mdy(cs.c), k(cs.c);
      // Per channel, from the sums: the factors of dX and the scale and bias gradients.
      auto finish = [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
          a[c] = scale[c] * inv[c];
          // Evaluation mode: the statistics are constants, dX = a * dY.
          mdy[c] = training ? sdy[c] / static_cast<A>(m) : A(0);
          k[c] = training ? inv[c] * (sdyx[c] / static_cast<A>(m)) : A(0);
          StoreAt(ctx.outputs[1], c, sdyx[c]);
          StoreAt(ctx.outputs[2], c, sdy[c]);
        }
      };
      if (channels_last) {
        const int64_t rows = cs.n, c = cs.c, q = GroupRows(c), run = q * c;
        const std::vector<A> mean_t = Tile(mean, q), inv_t = Tile(inv, q);
        std::vector<A> part_dy(static_cast<size_t>(RowChunks(rows) * run), A(0)), part_dyx(part_dy.size(), A(0));
        ForRowChunks(rows, c, [&](int64_t chunk, int64_t r0, int64_t nr) {
          ForGroups(r0, nr, q, c, [&](int64_t r, int64_t groups, int64_t len) {
            AddRunGradSums(dy + r * c, x + r * c, groups, run, len, mean_t.data(), inv_t.data(),
                           part_dy.data() + chunk * run, part_dyx.data() + chunk * run);
          });
        });
        FoldChunks(part_dy, c, sdy.data());
        FoldChunks(part_dyx, c, sdyx.data());
        finish(0, c);
        const std::vector<A> a_t = Tile(a, q), mdy_t = Tile(mdy, q), k_t = Tile(k, q);
        ForRowChunks(rows, c, [&](int64_t, int64_t r0, int64_t nr) {
          ForGroups(r0, nr, q, c, [&](int64_t r, int64_t groups, int64_t len) {
            ApplyRunGrad(dy + r * c, x + r * c, dx + r * c, groups, run, len, a_t.data(), mdy_t.data(), mean_t.data(),
                         k_t.data());
          });
        });
        return absl::OkStatus();
      }
      const int64_t sample = cs.c * cs.s;
      const bool expanded = cs.s <= kExpandedPlaneMax;
      ForChannelRanges(cs, [&](int64_t c0, int64_t c1) {
        const int64_t nc = c1 - c0, o = c0 * cs.s, run = nc * cs.s;
        // Expanded form (small planes): per-element partial sums and constants.
        std::vector<A> part_dy, part_dyx, mean_x, inv_x;
        if (expanded) {
          part_dy.assign(static_cast<size_t>(run), A(0));
          part_dyx.assign(static_cast<size_t>(run), A(0));
          mean_x.resize(static_cast<size_t>(run));
          inv_x.resize(static_cast<size_t>(run));
          ExpandRun(mean.data() + c0, nc, cs.s, mean_x.data());
          ExpandRun(inv.data() + c0, nc, cs.s, inv_x.data());
          AddRunGradSums(dy + o, x + o, cs.n, sample, run, mean_x.data(), inv_x.data(), part_dy.data(),
                         part_dyx.data());
          FoldRun(part_dy.data(), nc, cs.s, sdy.data() + c0);
          FoldRun(part_dyx.data(), nc, cs.s, sdyx.data() + c0);
        } else {
          for (int64_t i = 0; i < cs.n; ++i) {
            AddChannelGradSums(dy + o + i * sample, x + o + i * sample, nc, cs.s, mean.data() + c0, inv.data() + c0,
                               sdy.data() + c0, sdyx.data() + c0);
          }
        }
        finish(c0, c1);
        if (expanded) {
          // part_dy and inv_x are free again: they hold a and k per element now.
          std::vector<A>& a_x = part_dy;
          std::vector<A>& k_x = inv_x;
          ExpandRun(a.data() + c0, nc, cs.s, a_x.data());
          ExpandRun(k.data() + c0, nc, cs.s, k_x.data());
          ExpandRun(mdy.data() + c0, nc, cs.s, part_dyx.data());
          ApplyRunGrad(dy + o, x + o, dx + o, cs.n, sample, run, a_x.data(), part_dyx.data(), mean_x.data(),
                       k_x.data());
          return;
        }
        for (int64_t i = 0; i < cs.n; ++i) {
          ApplyChannelGrad(dy + o + i * sample, x + o + i * sample, dx + o + i * sample, nc, cs.s, a.data() + c0,
                           mdy.data() + c0, mean.data() + c0, k.data() + c0);
        }
      });
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
