// CPU pooling kernels: MaxPool, AveragePool, their gradients MaxPoolGrad and
// AveragePoolGrad, GlobalAveragePool and GlobalMaxPool, in f32, f64, bf16 and f16.
// Plain loops, OpenMP-parallel over the N x C planes (each plane is independent, so
// the backward kernels scatter into a private f32/f64 plane buffer and round once on
// store). Values are loaded into Acc<T>; sums and the division happen there.
//
// These are plain loops rather than oneDNN pooling on purpose: ONNX's window rules
// (ceil_mode keeping a last window that starts in the end padding, which sees no input
// and gives 0; count_include_pad counting explicit pads but not the ceil_mode overhang;
// MaxPoolGrad recomputing the first maximum from X instead of a forward workspace) are
// stated once here and match the forward exactly. Pooling is memory-bound; max pooling
// whose windows all lie inside the input (no pad taps, no ceil_mode overhang, dilation 1:
// the usual 2x2/2 and 3x3/2) takes a fast path with fixed-size window loops, and with
// disjoint windows its gradient writes dX directly instead of through an accumulator;
// with padding, the interior windows (all but the border) take the same fixed-size loop.
// The fast paths visit the same taps in the same order with the same strict comparison,
// so their results are bit-identical to the general loops (tests/graph/conv_op_cases.cc
// holds cases of both kinds, ties included).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/ops_conv_util.h"

namespace mpc {
namespace {

// Taps of a window along one axis: start, and the range of tap indices [k0, k1) that
// land inside [0, in).
struct Taps {
  int64_t start, k0, k1;
};

struct PoolGeom {
  int64_t planes = 0;  // N x C
  conv::Window2D w;
  bool include_pad = false;
  std::vector<Taps> th, tw;     // per output row / column, computed once per node
  std::vector<int64_t> ch, cw;  // averaging divisor factors per output row / column
  bool full_windows = false;    // every window lies inside the input, dilation 1
};

Taps TapsOf(int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t k, int64_t in) {
  Taps t{o * stride - pad, 0, k};
  while (t.k0 < k && t.start + t.k0 * dil < 0) ++t.k0;
  while (t.k1 > t.k0 && t.start + (t.k1 - 1) * dil >= in) --t.k1;
  return t;
}

// The averaging divisor along one axis: valid taps, or (count_include_pad) taps inside
// the explicitly padded extent [-pad_begin, in + pad_end).
int64_t CountOf(const Taps& t, int64_t dil, int64_t k, int64_t in, int64_t pad_begin, int64_t pad_end,
                bool include_pad) {
  if (!include_pad) return t.k1 - t.k0;
  int64_t n = 0;
  for (int64_t i = 0; i < k; ++i) {
    const int64_t p = t.start + i * dil;
    n += p >= -pad_begin && p < in + pad_end;
  }
  return n;
}

// x_shape: the forward input's shape; kernel from kernel_shape.
absl::StatusOr<PoolGeom> PoolGeomOf(const Node& node, const Shape& x_shape) {
  auto win = conv::ResolveWindow(node, std::vector<int64_t>(x_shape.begin() + 2, x_shape.end()),
                                 node.attrs.GetInts("kernel_shape", {}), /*pooling=*/true);
  if (!win.ok()) {
    return absl::Status(win.status().code(),
                        absl::StrCat("cpu ", node.op, " kernel for node '", node.name, "': ", win.status().message()));
  }
  PoolGeom g;
  g.planes = x_shape[0] * x_shape[1];
  g.w = conv::To2D(*win);
  g.include_pad = node.attrs.GetInt("count_include_pad", 0) != 0;
  const conv::Window2D& d = g.w;
  for (int64_t oh = 0; oh < d.oh; ++oh) {
    g.th.push_back(TapsOf(oh, d.sh, d.pt, d.dh, d.kh, d.ih));
    g.ch.push_back(CountOf(g.th.back(), d.dh, d.kh, d.ih, d.pt, d.pb, g.include_pad));
  }
  for (int64_t ow = 0; ow < d.ow; ++ow) {
    g.tw.push_back(TapsOf(ow, d.sw, d.pl, d.dw, d.kw, d.iw));
    g.cw.push_back(CountOf(g.tw.back(), d.dw, d.kw, d.iw, d.pl, d.pr, g.include_pad));
  }
  g.full_windows = d.dh == 1 && d.dw == 1;
  for (const Taps& t : g.th) g.full_windows &= t.k0 == 0 && t.k1 == d.kh;
  for (const Taps& t : g.tw) g.full_windows &= t.k0 == 0 && t.k1 == d.kw;
  return g;
}

// Index within the plane of the first maximum of window (oh, ow); -1 if empty.
template <typename T>
inline int64_t ArgMax(const T* xp, const PoolGeom& g, int64_t oh, int64_t ow) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = g.w;
  const Taps& th = g.th[oh];
  const Taps& tw = g.tw[ow];
  int64_t best = -1;
  A best_v = -std::numeric_limits<A>::infinity();
  for (int64_t kh = th.k0; kh < th.k1; ++kh) {
    const int64_t ih = th.start + kh * d.dh;
    for (int64_t kw = tw.k0; kw < tw.k1; ++kw) {
      const int64_t i = ih * d.iw + tw.start + kw * d.dw;
      const A v = A(xp[i]);
      // Strict: ties keep the first maximum. A NaN always wins (PyTorch's rule), so it
      // propagates as IEEE arithmetic would.
      if (best < 0 || v > best_v || v != v) {
        best = i;
        best_v = v;
      }
    }
  }
  return best;
}

// ArgMax for a window wholly inside the input (PoolGeom::full_windows), whose top-left
// tap is `first`: KH x KW fixed at compile time (0: the runtime kh x kw). Row-major order
// and comparison as ArgMax; starting from the first tap, which compares equal to itself,
// gives the same first maximum (and the same last NaN).
template <typename T, int KH, int KW>
inline int64_t ArgMaxFull(const T* xp, int64_t iw, int64_t first, int64_t kh, int64_t kw) {
  using A = cpu::Acc<T>;
  const int64_t rows = KH > 0 ? KH : kh, cols = KW > 0 ? KW : kw;
  int64_t best = first;
  A best_v = A(xp[first]);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = first + r * iw + c;
      const A v = A(xp[i]);
      if (v > best_v || v != v) {
        best = i;
        best_v = v;
      }
    }
  }
  return best;
}

// Calls f(output index, argmax index) for every window of one plane.
template <typename T, typename F>
inline void ForEachArgMax(const T* xp, const PoolGeom& g, F f) {
  const conv::Window2D& d = g.w;
  auto full = [&](auto argmax) {
    for (int64_t oh = 0; oh < d.oh; ++oh) {
      for (int64_t ow = 0; ow < d.ow; ++ow) {
        f(oh * d.ow + ow, argmax(g.th[oh].start * d.iw + g.tw[ow].start));
      }
    }
  };
  if (!g.full_windows) {
    // Padded pooling (ResNet's 3x3/2 pad 1): only the border windows have pad taps; the
    // interior ones take the fixed-size loop, with the same taps in the same order.
    const bool dense = d.dh == 1 && d.dw == 1;
    for (int64_t oh = 0; oh < d.oh; ++oh) {
      const Taps& th = g.th[oh];
      const bool full_h = dense && th.k0 == 0 && th.k1 == d.kh;
      for (int64_t ow = 0; ow < d.ow; ++ow) {
        const Taps& tw = g.tw[ow];
        if (full_h && tw.k0 == 0 && tw.k1 == d.kw) {
          const int64_t first = th.start * d.iw + tw.start;
          f(oh * d.ow + ow, d.kh == 3 && d.kw == 3 ? ArgMaxFull<T, 3, 3>(xp, d.iw, first, 3, 3)
                                                   : ArgMaxFull<T, 0, 0>(xp, d.iw, first, d.kh, d.kw));
        } else {
          f(oh * d.ow + ow, ArgMax(xp, g, oh, ow));
        }
      }
    }
  } else if (d.kh == 2 && d.kw == 2) {
    full([&](int64_t first) { return ArgMaxFull<T, 2, 2>(xp, d.iw, first, 2, 2); });
  } else if (d.kh == 3 && d.kw == 3) {
    full([&](int64_t first) { return ArgMaxFull<T, 3, 3>(xp, d.iw, first, 3, 3); });
  } else {
    full([&](int64_t first) { return ArgMaxFull<T, 0, 0>(xp, d.iw, first, d.kh, d.kw); });
  }
}

template <typename T>
struct MaxPoolKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto g = PoolGeomOf(node, node.inputs[0]->shape);
    if (!g.ok()) return g.status();
    return cpu::MakeKernel([g = *g](KernelContext& ctx) {
      const conv::Window2D& d = g.w;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < g.planes; ++p) {
        const T* xp = x + p * d.ih * d.iw;
        T* yp = y + p * d.oh * d.ow;
        ForEachArgMax(xp, g, [&](int64_t o, int64_t i) { yp[o] = i >= 0 ? xp[i] : static_cast<T>(cpu::Acc<T>(0)); });
      }
      return absl::OkStatus();
    });
  }
};

// MaxPoolGrad(dY, X): dX[argmax] += dY.
template <typename T>
struct MaxPoolGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto g = PoolGeomOf(node, node.inputs[1]->shape);
    if (!g.ok()) return g.status();
    return cpu::MakeKernel([g = *g](KernelContext& ctx) {
      using A = cpu::Acc<T>;
      const conv::Window2D& d = g.w;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      // Disjoint full windows: every dX element gets at most one dY, so it is written
      // directly, as the accumulator would round it (0 + dY: a -0 gradient becomes +0).
      const bool disjoint = g.full_windows && d.sh >= d.kh && d.sw >= d.kw;
#pragma omp parallel
      {
        // One accumulator plane per thread, cleared per plane (not allocated per plane).
        std::vector<A> acc(disjoint ? 0 : static_cast<size_t>(d.ih * d.iw));
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.planes; ++p) {
          const T* xp = x + p * d.ih * d.iw;
          const T* dyp = dy + p * d.oh * d.ow;
          T* dxp = dx + p * d.ih * d.iw;
          if (disjoint) {
            for (int64_t i = 0; i < d.ih * d.iw; ++i) cpu::StoreRounded(dxp + i, A(0));
            ForEachArgMax(xp, g, [&](int64_t o, int64_t i) { dxp[i] = static_cast<T>(A(0) + A(dyp[o])); });
            continue;
          }
          std::fill(acc.begin(), acc.end(), A(0));
          ForEachArgMax(xp, g, [&](int64_t o, int64_t i) {
            if (i >= 0) acc[i] += A(dyp[o]);
          });
          for (int64_t i = 0; i < d.ih * d.iw; ++i) cpu::StoreRounded(dxp + i, acc[i]);
        }
      }
      return absl::OkStatus();
    });
  }
};

template <typename T>
struct AveragePoolKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto g = PoolGeomOf(node, node.inputs[0]->shape);
    if (!g.ok()) return g.status();
    return cpu::MakeKernel([g = *g](KernelContext& ctx) {
      using A = cpu::Acc<T>;
      const conv::Window2D& d = g.w;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < g.planes; ++p) {
        const T* xp = x + p * d.ih * d.iw;
        T* yp = y + p * d.oh * d.ow;
        for (int64_t oh = 0; oh < d.oh; ++oh) {
          const Taps& th = g.th[oh];
          const int64_t ch = g.ch[oh];
          for (int64_t ow = 0; ow < d.ow; ++ow) {
            const Taps& tw = g.tw[ow];
            const int64_t cw = g.cw[ow];
            A sum = 0;
            for (int64_t kh = th.k0; kh < th.k1; ++kh) {
              const int64_t ih = th.start + kh * d.dh;
              for (int64_t kw = tw.k0; kw < tw.k1; ++kw) sum += A(xp[ih * d.iw + tw.start + kw * d.dw]);
            }
            const int64_t count = ch * cw;
            yp[oh * d.ow + ow] = static_cast<T>(count > 0 ? sum / A(count) : A(0));
          }
        }
      }
      return absl::OkStatus();
    });
  }
};

// AveragePoolGrad(dY) -> dX: each dY spread evenly over its window's counted taps.
template <typename T>
struct AveragePoolGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto g = PoolGeomOf(node, node.outputs[0]->shape);
    if (!g.ok()) return g.status();
    return cpu::MakeKernel([g = *g](KernelContext& ctx) {
      using A = cpu::Acc<T>;
      const conv::Window2D& d = g.w;
      const T* dy = ctx.inputs[0].as<T>();
      T* dx = ctx.outputs[0].as<T>();
#pragma omp parallel for schedule(static)
      for (int64_t p = 0; p < g.planes; ++p) {
        std::vector<A> acc(static_cast<size_t>(d.ih * d.iw), A(0));
        const T* dyp = dy + p * d.oh * d.ow;
        for (int64_t oh = 0; oh < d.oh; ++oh) {
          const Taps& th = g.th[oh];
          const int64_t ch = g.ch[oh];
          for (int64_t ow = 0; ow < d.ow; ++ow) {
            const Taps& tw = g.tw[ow];
            const int64_t count = ch * g.cw[ow];
            if (count == 0) continue;
            const A v = A(dyp[oh * d.ow + ow]) / A(count);
            for (int64_t kh = th.k0; kh < th.k1; ++kh) {
              const int64_t ih = th.start + kh * d.dh;
              for (int64_t kw = tw.k0; kw < tw.k1; ++kw) acc[ih * d.iw + tw.start + kw * d.dw] += v;
            }
          }
        }
        T* dxp = dx + p * d.ih * d.iw;
        for (int64_t i = 0; i < d.ih * d.iw; ++i) dxp[i] = static_cast<T>(acc[i]);
      }
      return absl::OkStatus();
    });
  }
};

// GlobalAveragePool / GlobalMaxPool over any number of spatial axes.
template <bool kMax>
struct GlobalPool {
  template <typename T>
  struct For {
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
      const Shape& xs = node.inputs[0]->shape;
      const int64_t planes = xs[0] * xs[1];
      const int64_t size = NumElements(Shape(xs.begin() + 2, xs.end()));
      return cpu::MakeKernel([planes, size](KernelContext& ctx) {
        using A = cpu::Acc<T>;
        const T* x = ctx.inputs[0].as<T>();
        T* y = ctx.outputs[0].as<T>();
#pragma omp parallel for schedule(static) if (planes * size > 4096)
        for (int64_t p = 0; p < planes; ++p) {
          const T* xp = x + p * size;
          if (kMax) {
            A best = size > 0 ? A(xp[0]) : A(0);
            for (int64_t i = 1; i < size; ++i) best = A(xp[i]) > best || xp[i] != xp[i] ? A(xp[i]) : best;
            y[p] = static_cast<T>(best);
          } else {
            A sum = 0;
            for (int64_t i = 0; i < size; ++i) sum += A(xp[i]);
            y[p] = static_cast<T>(size > 0 ? sum / A(size) : A(0));
          }
        }
        return absl::OkStatus();
      });
    }
  };
};

}  // namespace

void RegisterCpuPoolKernels(KernelRegistry& r) {
  using cpu::RegisterFloatKernels;
  RegisterFloatKernels<MaxPoolKernel>(r, "MaxPool");
  RegisterFloatKernels<MaxPoolGradKernel>(r, "MaxPoolGrad");
  RegisterFloatKernels<AveragePoolKernel>(r, "AveragePool");
  RegisterFloatKernels<AveragePoolGradKernel>(r, "AveragePoolGrad");
  RegisterFloatKernels<GlobalPool<false>::For>(r, "GlobalAveragePool");
  RegisterFloatKernels<GlobalPool<true>::For>(r, "GlobalMaxPool");
}

}  // namespace mpc
