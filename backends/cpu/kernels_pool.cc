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
// stated once here and match the forward exactly. Max pooling over wide rows evaluates a
// row of windows at a time in vector lanes (MaxWindowsAcross); 2x2/2 windows tiling the
// plane take the maximum of every horizontal pair in one vector loop and then the better
// pair of each window (ForEachArgMax2x2Tiles); 3x3/2 windows with one leading pad
// (ResNet's stem pool) are separable: three-tap maxima per input row, then the best of
// three rows (ForEachArgMax3x3Stride2; when they exactly halve an even plane, straight from
// X in one loop per plane, HalvingRowMaxima); other windows inside the input go a row at a
// time without branches (ArgMaxFullRow), the rest window by window. All visit each
// window's taps in row-major order with a strict comparison, so they agree bit for bit
// (tests/graph/conv_op_cases.cc holds padded, ceil_mode, dilated and tied cases of both
// widths; tests/backends/max_pool_paths_test.cc runs the paths against each other on ties
// and NaNs); with disjoint windows the gradient writes dX directly instead of through an
// accumulator.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/ops_conv_util.h"

namespace mpc {
namespace {

// ForEachArgMaxScalar's rows of full windows are evaluated this many windows at a time.
constexpr int64_t kMaxRowWindows = 64;

// Taps of a window along one axis: start, and the range of tap indices [k0, k1) that
// land inside [0, in).
struct Taps {
  int64_t start, k0, k1;
};

struct PoolGeom {
  int64_t planes = 0;  // N x C
  conv::Window2D w;
  bool include_pad = false;
  std::vector<Taps> th, tw;       // per output row / column, computed once per node
  std::vector<int64_t> ch, cw;    // averaging divisor factors per output row / column
  bool full_windows = false;      // every window lies inside the input, dilation 1
  bool tiles_2x2 = false;         // 2x2 windows, stride 2, exactly tiling the input (see ForEachArgMax2x2Tiles)
  bool separable_3x3_s2 = false;  // 3x3 windows, stride 2, one leading pad (see ForEachArgMax3x3Stride2)
  bool halving_3x3_s2 = false;    // ... that exactly halve an even plane (see HalvingRowMaxima)
  // ForEachArgMax3x3Stride2: per window column j, whether its taps 2j-1, 2j, 2j+1 lie in the input.
  std::vector<int32_t> left_valid, middle_valid, right_valid;
  // Max pooling's scratch rows (see MaxWindowsAcross): the left padding, the input row,
  // then columns up to the last tap of the last window; valid_columns marks the input.
  int64_t scratch_width = 0;
  std::vector<int32_t> valid_columns;
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
  g.scratch_width = std::max(d.pl + d.iw, (d.ow - 1) * d.sw + (d.kw - 1) * d.dw + 1);
  g.valid_columns.assign(static_cast<size_t>(g.scratch_width), 0);
  for (int64_t k = 0; k < d.iw; ++k) g.valid_columns[static_cast<size_t>(d.pl + k)] = 1;
  g.full_windows = d.dh == 1 && d.dw == 1;
  for (const Taps& t : g.th) g.full_windows &= t.k0 == 0 && t.k1 == d.kh;
  for (const Taps& t : g.tw) g.full_windows &= t.k0 == 0 && t.k1 == d.kw;
  g.tiles_2x2 =
      g.full_windows && d.kh == 2 && d.kw == 2 && d.sh == 2 && d.sw == 2 && d.ih == 2 * d.oh && d.iw == 2 * d.ow;
  // Every window of this shape sees at least its middle tap (ONNX starts the last window
  // inside the input or the leading pad), so none is empty; trailing pads and a ceil_mode
  // overhang only drop taps, which the validity masks handle.
  g.separable_3x3_s2 = d.kh == 3 && d.kw == 3 && d.sh == 2 && d.sw == 2 && d.dh == 1 && d.dw == 1 && d.pt == 1 &&
                       d.pl == 1 && d.ih >= 2 && d.iw >= 2;
  g.halving_3x3_s2 = g.separable_3x3_s2 && d.ih == 2 * d.oh && d.iw == 2 * d.ow;
  for (int64_t j = 0; j < d.ow; ++j) {
    g.left_valid.push_back(j >= 1 && 2 * j - 1 < d.iw);
    g.middle_valid.push_back(2 * j < d.iw);
    g.right_valid.push_back(2 * j + 1 < d.iw);
  }
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

// Selects `a` where `mask` is all ones and `b` where it is zero, on the bits: no branch for
// the compiler to make (with a ternary GCC branched on every compare of the rows below).
template <typename A, typename Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>>
inline A SelectBits(Bits mask, A a, A b) {
  Bits ua, ub;
  std::memcpy(&ua, &a, sizeof(A));
  std::memcpy(&ub, &b, sizeof(A));
  const Bits r = (ua & mask) | (ub & ~mask);
  A out;
  std::memcpy(&out, &r, sizeof(A));
  return out;
}

// ArgMaxFull for a row of `count` (<= kMaxRowWindows) windows whose top-left taps are
// `stride_w` apart, one tap at a time across the row's windows and without branches. A
// window at a time, each compare waits for the previous select and "is this tap larger"
// is a coin flip on real activations: Fashion-CNN's 2x2/2 pools (14 and 7 windows per row,
// too few for the vector path) spent ~half its step mispredicting. Here the windows'
// chains are independent and nothing branches. Same taps, order and strict comparison as
// ArgMaxFull, so the same first maximum (and the same last NaN).
template <typename T, int KH, int KW>
inline void ArgMaxFullRow(const T* __restrict xp, int64_t iw, int64_t first_of_row, int64_t stride_w, int64_t count,
                          int64_t kh, int64_t kw, int32_t* __restrict best_i) {
  using A = cpu::Acc<T>;
  using Bits = std::conditional_t<sizeof(A) == 4, uint32_t, uint64_t>;
  const int64_t rows = KH > 0 ? KH : kh, cols = KW > 0 ? KW : kw;
  A best_v[kMaxRowWindows];
  for (int64_t j = 0; j < count; ++j) {
    const int64_t first = first_of_row + j * stride_w;
    best_i[j] = static_cast<int32_t>(first);
    best_v[j] = A(xp[first]);
  }
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = r == 0 ? 1 : 0; c < cols; ++c) {
      const int64_t off = first_of_row + r * iw + c;
      for (int64_t j = 0; j < count; ++j) {
        const int64_t i = off + j * stride_w;
        const A v = A(xp[i]);
        const A bv = best_v[j];
        const bool take = (v > bv) | (v != v);
        const Bits mask = Bits{0} - static_cast<Bits>(take);
        best_v[j] = SelectBits<A>(mask, v, bv);
        const uint32_t imask = static_cast<uint32_t>(mask);
        best_i[j] =
            static_cast<int32_t>((static_cast<uint32_t>(i) & imask) | (static_cast<uint32_t>(best_i[j]) & ~imask));
      }
    }
  }
}

// Calls f(output index, argmax index) for every window of one plane, one window at a time:
// for rows of fewer windows than a vector holds (the vector path below needs them wide).
template <typename T, typename F>
inline void ForEachArgMaxScalar(const T* xp, const PoolGeom& g, F f) {
  const conv::Window2D& d = g.w;
  auto full = [&](auto argmax_row) {
    int32_t best_i[kMaxRowWindows];
    for (int64_t oh = 0; oh < d.oh; ++oh) {
      for (int64_t ow0 = 0; ow0 < d.ow; ow0 += kMaxRowWindows) {
        const int64_t count = std::min<int64_t>(kMaxRowWindows, d.ow - ow0);
        argmax_row(g.th[oh].start * d.iw + g.tw[ow0].start, count, best_i);
        for (int64_t j = 0; j < count; ++j) f(oh * d.ow + ow0 + j, static_cast<int64_t>(best_i[j]));
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
    full([&](int64_t first, int64_t n, int32_t* out) { ArgMaxFullRow<T, 2, 2>(xp, d.iw, first, d.sw, n, 2, 2, out); });
  } else if (d.kh == 3 && d.kw == 3) {
    full([&](int64_t first, int64_t n, int32_t* out) { ArgMaxFullRow<T, 3, 3>(xp, d.iw, first, d.sw, n, 3, 3, out); });
  } else {
    full([&](int64_t first, int64_t n, int32_t* out) {
      ArgMaxFullRow<T, 0, 0>(xp, d.iw, first, d.sw, n, d.kh, d.kw, out);
    });
  }
}

// Max pooling evaluates a row of windows at a time, one tap across all of them, so the
// compares run in vector lanes. The window row's input rows are first copied (in Acc<T>)
// into a scratch row with the left padding in front, so every tap of every window is an
// affine load; a per-column mask says which scratch columns hold input (padding and a
// ceil_mode overhang hold none). Taps are visited in ArgMax's row-major order with the
// strict comparison, skipping masked taps: ties keep the first maximum, a NaN always
// wins (PyTorch's rule, so it propagates as IEEE arithmetic would), and a window that
// sees no input has index -1.
// One thread's buffers, reused across the planes it pools. A is Acc<T>: f32 also for the
// 16-bit formats, f64 for the reference kernels.
template <typename A>
struct MaxPoolScratch {
  std::vector<A> rows;  // kh rows of `width` values
  std::vector<A> best_v;
  std::vector<int32_t> best_i;
  std::vector<int64_t> row_base;
  std::vector<uint8_t> row_used;
  std::vector<A> pair_v;  // ForEachArgMax2x2Tiles: the larger of each horizontal pair
  std::vector<int32_t> pair_i;
  std::vector<A> even, odd;  // ForEachArgMax3x3Stride2: the plane's even and odd columns,
  std::vector<A> row_v;      // and the first maximum of each input row's three taps
  std::vector<int32_t> row_i;
};

// best_i[j] = plane index of the first maximum of window j of the row (-1 if it sees no
// input). rows: kh scratch rows of `width`; valid[p]: scratch column p holds input;
// row_base[r]: plane index of scratch column 0 of row r (input row * iw - left padding);
// row_used[r]: 0 when the tap row lies in the vertical padding. Compiled for each vector ISA.
template <typename A>
MPC_ISA_CLONES void MaxWindowsAcross(const A* __restrict rows, int64_t width, const int32_t* __restrict valid,
                                     const int64_t* row_base, const uint8_t* row_used, int64_t kh, int64_t kw,
                                     int64_t stride_w, int64_t dil_w, int64_t count, A* __restrict best_v,
                                     int32_t* __restrict best_i) {
  for (int64_t j = 0; j < count; ++j) {
    best_v[j] = -std::numeric_limits<A>::infinity();
    best_i[j] = -1;
  }
  for (int64_t r = 0; r < kh; ++r) {
    if (!row_used[r]) continue;
    const A* row = rows + r * width;
    const int32_t base = static_cast<int32_t>(row_base[r]);
    for (int64_t c = 0; c < kw; ++c) {
      const int64_t off = c * dil_w;
      // Bitwise, not short-circuit, logic and restrict pointers: what lets GCC turn the
      // selects into vector blends (with && and || the loop stayed scalar and branchy).
#pragma omp simd
      for (int64_t j = 0; j < count; ++j) {
        const int64_t p = j * stride_w + off;
        const A v = row[p];
        const A bv = best_v[j];
        const int32_t bi = best_i[j];
        const bool take = (valid[p] != 0) & ((bi < 0) | (v > bv) | (v != v));
        best_v[j] = take ? v : bv;
        best_i[j] = take ? base + static_cast<int32_t>(p) : bi;
      }
    }
  }
}

// Calls f(output index, argmax index or -1) for every window of one plane, a row of
// windows at a time.
template <typename T, typename F>
inline void ForEachArgMaxVector(const T* xp, const PoolGeom& g, MaxPoolScratch<cpu::Acc<T>>& scratch, F f) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = g.w;
  const int64_t width = g.scratch_width;
  std::vector<A>& rows = scratch.rows;
  std::vector<A>& best_v = scratch.best_v;
  rows.resize(static_cast<size_t>(d.kh * width));
  best_v.resize(static_cast<size_t>(d.ow));
  scratch.best_i.resize(static_cast<size_t>(d.ow));
  std::vector<int64_t>& row_base = scratch.row_base;
  std::vector<uint8_t>& row_used = scratch.row_used;
  row_base.resize(static_cast<size_t>(d.kh));
  row_used.resize(static_cast<size_t>(d.kh));
  for (int64_t oh = 0; oh < d.oh; ++oh) {
    const Taps& th = g.th[oh];
    for (int64_t r = 0; r < d.kh; ++r) {
      const int64_t ih = th.start + r * d.dh;
      row_used[r] = r >= th.k0 && r < th.k1;
      if (!row_used[r]) continue;
      row_base[r] = ih * d.iw - d.pl;
      A* dst = rows.data() + r * width;
      const T* src = xp + ih * d.iw;
      for (int64_t k = 0; k < d.iw; ++k) dst[d.pl + k] = A(src[k]);
    }
    MaxWindowsAcross(rows.data(), width, g.valid_columns.data(), row_base.data(), row_used.data(), d.kh, d.kw, d.sw,
                     d.dw, d.ow, best_v.data(), scratch.best_i.data());
    for (int64_t ow = 0; ow < d.ow; ++ow) f(oh * d.ow + ow, static_cast<int64_t>(scratch.best_i[ow]));
  }
}

// The larger of each horizontal pair of a plane whose width is even: (x[2m], x[2m+1]) ->
// value and plane index, for every m at once (so it runs in vector lanes). The second
// tap wins when larger or NaN, as in ArgMax. Compiled for each vector ISA.
template <typename T>
MPC_ISA_CLONES void MaxOfPairs(const T* __restrict x, int64_t pairs, cpu::Acc<T>* __restrict pair_v,
                               int32_t* __restrict pair_i) {
  using A = cpu::Acc<T>;
#pragma omp simd
  for (int64_t m = 0; m < pairs; ++m) {
    const A a = A(x[2 * m]), b = A(x[2 * m + 1]);
    const bool take = (b > a) | (b != b);
    pair_v[m] = take ? b : a;
    pair_i[m] = static_cast<int32_t>(2 * m) + static_cast<int32_t>(take);
  }
}

// 2x2 windows with stride 2 tiling the plane (VGG's and Fashion-CNN's pools): the
// horizontal pairs of every row first, all of the plane in one vector loop, then the
// better of each window's upper and lower pair. Row-major order with the strict
// comparison makes this the same first maximum (and last NaN) as ArgMax: the lower pair
// wins only when larger than the upper one's winner, or NaN. Rows of 14 or 7 windows are
// too short for the vector path, and window by window the compares mispredict.
template <typename T, typename F>
inline void ForEachArgMax2x2Tiles(const T* xp, const PoolGeom& g, MaxPoolScratch<cpu::Acc<T>>& scratch, F f) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = g.w;
  const int64_t pairs = d.ih * d.ow;
  scratch.pair_v.resize(static_cast<size_t>(pairs));
  scratch.pair_i.resize(static_cast<size_t>(pairs));
  MaxOfPairs(xp, pairs, scratch.pair_v.data(), scratch.pair_i.data());
  for (int64_t oh = 0; oh < d.oh; ++oh) {
    const A* upper_v = scratch.pair_v.data() + 2 * oh * d.ow;
    const int32_t* upper_i = scratch.pair_i.data() + 2 * oh * d.ow;
    const A* lower_v = upper_v + d.ow;
    const int32_t* lower_i = upper_i + d.ow;
    for (int64_t ow = 0; ow < d.ow; ++ow) {
      const bool take = (lower_v[ow] > upper_v[ow]) | (lower_v[ow] != lower_v[ow]);
      const uint32_t mask = 0u - static_cast<uint32_t>(take);
      const uint32_t best = (static_cast<uint32_t>(lower_i[ow]) & mask) | (static_cast<uint32_t>(upper_i[ow]) & ~mask);
      f(oh * d.ow + ow, static_cast<int64_t>(static_cast<int32_t>(best)));
    }
  }
}

// Per input row, the first maximum (or last NaN) of the three taps 2j-1, 2j, 2j+1 of
// every window column j: value and plane index. The row's columns arrive split, even[j]
// = column 2j and odd[j + 1] = column 2j + 1 (odd[0] stands for the leading pad), so all
// three taps are contiguous loads (strided ones became gathers). Row-major order with the
// strict comparison, as ArgMax; the middle tap is valid in every window but a ceil_mode
// overhang's, whose left tap is. Compiled for each vector ISA.
template <typename A>
MPC_ISA_CLONES void RowMaximaOfThree(const A* __restrict even, const A* __restrict odd, int64_t ih, int64_t iw,
                                     int64_t ow, const int32_t* __restrict left_valid,
                                     const int32_t* __restrict middle_valid, const int32_t* __restrict right_valid,
                                     A* __restrict row_v, int32_t* __restrict row_i) {
  for (int64_t r = 0; r < ih; ++r) {
    const A* e = even + r * ow;
    const A* o = odd + r * (ow + 1);
    const int32_t base = static_cast<int32_t>(r * iw);
    A* out_v = row_v + r * ow;
    int32_t* out_i = row_i + r * ow;
    // The left tap, then the middle and the right one across the row's windows, one
    // loop each, as MaxWindowsAcross: with the three taps in one loop GCC found control
    // flow and left it scalar. The left tap's index is -1 where it is the pad (masks,
    // not a ternary, for the same reason).
#pragma omp simd
    for (int64_t j = 0; j < ow; ++j) {
      const int32_t keep = -static_cast<int32_t>(left_valid[j] != 0);
      out_v[j] = o[j];
      out_i[j] = ((base + static_cast<int32_t>(2 * j) - 1) & keep) | ~keep;
    }
    for (int64_t c = 0; c < 2; ++c) {
      const A* tap = c == 0 ? e : o + 1;
      const int32_t* valid = c == 0 ? middle_valid : right_valid;
#pragma omp simd
      for (int64_t j = 0; j < ow; ++j) {
        const A v = tap[j];
        const A bv = out_v[j];
        const int32_t bi = out_i[j];
        const bool take = (valid[j] != 0) & ((bi < 0) | (v > bv) | (v != v));
        out_v[j] = take ? v : bv;
        out_i[j] = take ? base + static_cast<int32_t>(2 * j + c) : bi;
      }
    }
  }
}

// best_i[j] = the first maximum (or last NaN) of rows 2o-1, 2o, 2o+1's row maxima in
// column j, for output row o: the earliest row holding the window's maximum, at its
// first column, is the row-major first maximum. Compiled for each vector ISA.
template <typename A>
MPC_ISA_CLONES void ColumnMaximaOfThree(const A* __restrict row_v, const int32_t* __restrict row_i, int64_t ih,
                                        int64_t o, int64_t ow, A* __restrict best_v, int32_t* __restrict best_i) {
  const int64_t r0 = std::max<int64_t>(2 * o - 1, 0), r1 = std::min<int64_t>(2 * o + 2, ih);
  for (int64_t j = 0; j < ow; ++j) {
    best_v[j] = row_v[r0 * ow + j];
    best_i[j] = row_i[r0 * ow + j];
  }
  for (int64_t r = r0 + 1; r < r1; ++r) {
    const A* v_row = row_v + r * ow;
    const int32_t* i_row = row_i + r * ow;
#pragma omp simd
    for (int64_t j = 0; j < ow; ++j) {
      const A v = v_row[j];
      const bool take = (i_row[j] >= 0) & ((best_i[j] < 0) | (v > best_v[j]) | (v != v));
      best_v[j] = take ? v : best_v[j];
      best_i[j] = take ? i_row[j] : best_i[j];
    }
  }
}

// 3x3 windows with stride 2 and one leading pad row and column (ResNet's stem pool, and
// most CNNs' first): separable. Each input row's three-tap maxima are computed once for
// the whole plane (a row feeds two windows' rows), then each output row takes the best of
// three of them; row by row as in ForEachArgMaxVector, the plane's rows were copied and
// scanned with nine strided taps per window and paid a call per output row.
template <typename T, typename F>
inline void ForEachArgMax3x3Stride2(const T* xp, const PoolGeom& g, MaxPoolScratch<cpu::Acc<T>>& scratch, F f) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = g.w;
  const int64_t ow = d.ow;
  scratch.even.resize(static_cast<size_t>(d.ih * ow));
  scratch.odd.resize(static_cast<size_t>(d.ih * (ow + 1)));
  scratch.row_v.resize(static_cast<size_t>(d.ih * ow));
  scratch.row_i.resize(static_cast<size_t>(d.ih * ow));
  scratch.best_v.resize(static_cast<size_t>(ow));
  scratch.best_i.resize(static_cast<size_t>(ow));
  // Columns past the input (a ceil_mode overhang) keep whatever they hold: masked.
  const int64_t evens = std::min(ow, (d.iw + 1) / 2), odds = std::min(ow, d.iw / 2);
  for (int64_t r = 0; r < d.ih; ++r) {
    const T* src = xp + r * d.iw;
    A* e = scratch.even.data() + r * ow;
    A* o = scratch.odd.data() + r * (ow + 1) + 1;
    for (int64_t m = 0; m < evens; ++m) e[m] = A(src[2 * m]);
    for (int64_t m = 0; m < odds; ++m) o[m] = A(src[2 * m + 1]);
  }
  RowMaximaOfThree(scratch.even.data(), scratch.odd.data(), d.ih, d.iw, ow, g.left_valid.data(), g.middle_valid.data(),
                   g.right_valid.data(), scratch.row_v.data(), scratch.row_i.data());
  for (int64_t o = 0; o < d.oh; ++o) {
    ColumnMaximaOfThree(scratch.row_v.data(), scratch.row_i.data(), d.ih, o, d.ow, scratch.best_v.data(),
                        scratch.best_i.data());
    for (int64_t j = 0; j < d.ow; ++j) f(o * d.ow + j, static_cast<int64_t>(scratch.best_i[j]));
  }
}

// 3x3/2 windows with one leading pad row and column that exactly halve a plane of even
// height and width (ResNet's stem pool, 32x32 -> 16x16): no trailing pad or overhang, so
// window j's taps are columns 2j-1, 2j, 2j+1 of the row (the first window's left tap is the
// pad) and output row o's are rows 2o-1, 2o, 2o+1 (the first one's top row is the pad).
// The taps load straight from X (stride-2 vector loads), each input row's three-tap maximum
// once, then each output row takes the best of three of them: ForEachArgMax3x3Stride2's
// composition without its copies of the plane's even and odd columns, which with the
// per-window callbacks were most of the stem pool's time. Later(best, v) is the row-major
// rule of ArgMax for a tap v visited after `best`: strictly larger, or NaN.
template <typename A>
__attribute__((always_inline)) inline bool Later(A best, A v) {
  return (v > best) | (v != v);
}

// Values only (the forward): hv[r * ow + j] = the three-tap maximum of input row r. With
// iw = 2 * ow, window j of row r has its middle tap at plane index 2m (m = r * ow + j), so
// the whole plane is one loop over m (rows of 16 windows each, looped one by one, ran twice
// as slow as the copies this replaces); the first window of each row, whose left tap is the
// pad and not the previous row's last column, is redone after it.
template <typename T>
MPC_ISA_CLONES void HalvingRowMaxima(const T* __restrict x, int64_t ih, int64_t ow, cpu::Acc<T>* __restrict hv) {
  using A = cpu::Acc<T>;
  const int64_t n = ih * ow;
#pragma omp simd
  for (int64_t m = 1; m < n; ++m) {
    const A a = A(x[2 * m - 1]), b = A(x[2 * m]), c = A(x[2 * m + 1]);
    const A ab = Later(a, b) ? b : a;
    hv[m] = Later(ab, c) ? c : ab;
  }
  for (int64_t m = 0; m < n; m += ow) {
    const A b = A(x[2 * m]), c = A(x[2 * m + 1]);
    hv[m] = Later(b, c) ? c : b;
  }
}

// y[o * ow + j] = the best of rows 2o-1, 2o, 2o+1 of hv, rounded to T.
template <typename T>
MPC_ISA_CLONES void HalvingColumnMaxima(const cpu::Acc<T>* __restrict hv, int64_t oh, int64_t ow, T* __restrict y) {
  using A = cpu::Acc<T>;
#pragma omp simd
  for (int64_t j = 0; j < ow; ++j) {
    const A mid = hv[j], bottom = hv[ow + j];
    cpu::StoreRounded(y + j, Later(mid, bottom) ? bottom : mid);
  }
  for (int64_t o = 1; o < oh; ++o) {
    const A* top = hv + (2 * o - 1) * ow;
    T* out = y + o * ow;
#pragma omp simd
    for (int64_t j = 0; j < ow; ++j) {
      const A t = top[j], mid = top[ow + j], bottom = top[2 * ow + j];
      const A tm = Later(t, mid) ? mid : t;
      cpu::StoreRounded(out + j, Later(tm, bottom) ? bottom : tm);
    }
  }
}

// With the winners' plane indices (the gradient): hv / hi per input row as above (the tap
// at x[k] has plane index k), then best_i per window.
template <typename T>
MPC_ISA_CLONES void HalvingRowArgMaxima(const T* __restrict x, int64_t ih, int64_t ow, cpu::Acc<T>* __restrict hv,
                                        int32_t* __restrict hi) {
  using A = cpu::Acc<T>;
  const int64_t n = ih * ow;
#pragma omp simd
  for (int64_t m = 1; m < n; ++m) {
    const A a = A(x[2 * m - 1]), b = A(x[2 * m]), c = A(x[2 * m + 1]);
    const int32_t left = static_cast<int32_t>(2 * m - 1);
    const bool take_b = Later(a, b);
    const A ab = take_b ? b : a;
    const int32_t ab_i = left + static_cast<int32_t>(take_b);
    const bool take_c = Later(ab, c);
    hv[m] = take_c ? c : ab;
    hi[m] = take_c ? left + 2 : ab_i;
  }
  for (int64_t m = 0; m < n; m += ow) {
    const A b = A(x[2 * m]), c = A(x[2 * m + 1]);
    const bool take_c = Later(b, c);
    hv[m] = take_c ? c : b;
    hi[m] = static_cast<int32_t>(2 * m) + static_cast<int32_t>(take_c);
  }
}

template <typename A>
MPC_ISA_CLONES void HalvingColumnArgMaxima(const A* __restrict hv, const int32_t* __restrict hi, int64_t oh, int64_t ow,
                                           int32_t* __restrict best_i) {
#pragma omp simd
  for (int64_t j = 0; j < ow; ++j) {
    const A mid = hv[j], bottom = hv[ow + j];
    const int32_t mid_i = hi[j], bottom_i = hi[ow + j];
    best_i[j] = Later(mid, bottom) ? bottom_i : mid_i;
  }
  for (int64_t o = 1; o < oh; ++o) {
    const A* top_v = hv + (2 * o - 1) * ow;
    const int32_t* top_i = hi + (2 * o - 1) * ow;
    int32_t* out = best_i + o * ow;
#pragma omp simd
    for (int64_t j = 0; j < ow; ++j) {
      const A t = top_v[j], mid = top_v[ow + j], bottom = top_v[2 * ow + j];
      const int32_t t_i = top_i[j], mid_i = top_i[ow + j], bottom_i = top_i[2 * ow + j];
      const bool take_mid = Later(t, mid);
      const A tm = take_mid ? mid : t;
      const int32_t tm_i = take_mid ? mid_i : t_i;
      out[j] = Later(tm, bottom) ? bottom_i : tm_i;
    }
  }
}

template <typename T, typename F>
inline void ForEachArgMaxHalving3x3(const T* xp, const PoolGeom& g, MaxPoolScratch<cpu::Acc<T>>& scratch, F f) {
  const conv::Window2D& d = g.w;
  scratch.row_v.resize(static_cast<size_t>(d.ih * d.ow));
  scratch.row_i.resize(static_cast<size_t>(d.ih * d.ow));
  scratch.best_i.resize(static_cast<size_t>(d.oh * d.ow));
  HalvingRowArgMaxima(xp, d.ih, d.ow, scratch.row_v.data(), scratch.row_i.data());
  HalvingColumnArgMaxima(scratch.row_v.data(), scratch.row_i.data(), d.oh, d.ow, scratch.best_i.data());
  for (int64_t o = 0; o < d.oh * d.ow; ++o) f(o, static_cast<int64_t>(scratch.best_i[o]));
}

// Rows of at least this many windows take the vector path: below, a row does not fill
// one AVX-512 vector of f32 lanes and the per-row copies cost more than they save
// (Fashion-CNN's 14-wide 2x2/2 pools ran 2x slower on it; ResNet's 16-wide 3x3/2 2.6x faster).
constexpr int64_t kVectorMinWindows = 16;

template <typename T, typename F>
inline void ForEachArgMax(const T* xp, const PoolGeom& g, MaxPoolScratch<cpu::Acc<T>>& scratch, F f) {
  if (g.tiles_2x2) return ForEachArgMax2x2Tiles(xp, g, scratch, f);
  if (g.halving_3x3_s2) return ForEachArgMaxHalving3x3(xp, g, scratch, f);
  if (g.separable_3x3_s2) return ForEachArgMax3x3Stride2(xp, g, scratch, f);
  if (g.w.ow >= kVectorMinWindows) return ForEachArgMaxVector(xp, g, scratch, f);
  ForEachArgMaxScalar(xp, g, f);
}

// dst[i] = acc[i] rounded to T. Compiled for each vector ISA: in the baseline build the
// 16-bit roundings stay scalar (cpu_isa.h), and this was most of ResNet-18's MaxPoolGrad.
template <typename T>
MPC_ISA_CLONES void StoreRoundedPlane(const cpu::Acc<T>* __restrict acc, T* __restrict dst, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) cpu::StoreRounded(dst + i, acc[i]);
}

// ---------------------------------------------------------------------------------
// Channels-last max pooling (mpc_channels_last, passes/channels_last.h): X [N, H, W, C].
// Each window's taps are rows of C channels, so one window is evaluated for every channel
// in vector lanes, visiting its taps in row-major order with ArgMax's rule (the first tap,
// then any strictly larger or NaN one): the same value and the same winning tap per
// channel as the channels-first kernels.

using KernelBody = std::function<absl::Status(KernelContext&)>;

// Output row oh of one sample xs ([IH, IW, C]), every window ow and channel c at once:
// best[ow * C + c] = the channel's maximum over the window and, with kTaps (the gradient),
// from[ow * C + c] = the index of the tap that gave it among the window's taps inside the
// input (row-major); a window with no tap inside gets 0 and index -1. Compiled for each
// vector ISA, one call per row.
template <typename T, bool kTaps>
MPC_ISA_CLONES void ChannelsLastRowMaxima(const T* __restrict xs, const PoolGeom& g, int64_t oh, int64_t channels,
                                          cpu::Acc<T>* __restrict best, int32_t* __restrict from) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = g.w;
  const Taps& th = g.th[oh];
  for (int64_t ow = 0; ow < d.ow; ++ow) {
    const Taps& tw = g.tw[ow];
    A* b = best + ow * channels;
    int32_t* f = kTaps ? from + ow * channels : nullptr;
    int32_t index = 0;
    for (int64_t kh = th.k0; kh < th.k1; ++kh) {
      const int64_t ih = th.start + kh * d.dh;
      for (int64_t kw = tw.k0; kw < tw.k1; ++kw, ++index) {
        const T* tap = xs + (ih * d.iw + tw.start + kw * d.dw) * channels;
        const bool first = index == 0;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) {
          const A v = A(tap[c]);
          const bool take = first | (v > b[c]) | (v != v);  // bitwise: || keeps the loop scalar
          b[c] = take ? v : b[c];
          if constexpr (kTaps) f[c] = take ? index : f[c];
        }
      }
    }
    if (index == 0) {
      std::fill(b, b + channels, A(0));
      if constexpr (kTaps) std::fill(f, f + channels, -1);
    }
  }
}

// sums (one sample, [IH, IW, C]) += dY's row oh routed to each window's winning taps.
// Compiled for each vector ISA, one call per row.
template <typename T>
MPC_ISA_CLONES void ChannelsLastRowScatter(const T* __restrict dy_row, const int32_t* __restrict from,
                                           const PoolGeom& g, int64_t oh, int64_t channels,
                                           cpu::Acc<T>* __restrict sums) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = g.w;
  const Taps& th = g.th[oh];
  for (int64_t ow = 0; ow < d.ow; ++ow) {
    const Taps& tw = g.tw[ow];
    const T* gy = dy_row + ow * channels;
    const int32_t* f = from + ow * channels;
    int32_t index = 0;
    for (int64_t kh = th.k0; kh < th.k1; ++kh) {
      const int64_t ih = th.start + kh * d.dh;
      for (int64_t kw = tw.k0; kw < tw.k1; ++kw, ++index) {
        A* acc = sums + (ih * d.iw + tw.start + kw * d.dw) * channels;
#pragma omp simd
        for (int64_t c = 0; c < channels; ++c) acc[c] += f[c] == index ? A(gy[c]) : A(0);
      }
    }
  }
}

template <typename T>
KernelBody ChannelsLastMaxPool(const PoolGeom& g, int64_t batch, int64_t channels) {
  return [g, batch, channels](KernelContext& ctx) {
    using A = cpu::Acc<T>;
    const conv::Window2D& d = g.w;
    const T* x = ctx.inputs[0].as<T>();
    T* y = ctx.outputs[0].as<T>();
    const int64_t row = d.ow * channels;
#pragma omp parallel
    {
      std::vector<A> best(static_cast<size_t>(row));
#pragma omp for schedule(static)
      for (int64_t r = 0; r < batch * d.oh; ++r) {
        const int64_t n = r / d.oh, oh = r % d.oh;
        ChannelsLastRowMaxima<T, false>(x + n * d.ih * d.iw * channels, g, oh, channels, best.data(), nullptr);
        StoreRoundedPlane(best.data(), y + r * row, row);  // a maximum is one of the inputs: exact
      }
    }
    return absl::OkStatus();
  };
}

// dX[the tap that won channel c] += dY[c], window by window; one sample per thread at a
// time, its dX summed in f32/f64 (in dX itself for those) and rounded once.
template <typename T>
KernelBody ChannelsLastMaxPoolGrad(const PoolGeom& g, int64_t batch, int64_t channels) {
  return [g, batch, channels](KernelContext& ctx) {
    using A = cpu::Acc<T>;
    constexpr bool kAccumulateInPlace = std::is_same_v<T, A>;
    const conv::Window2D& d = g.w;
    const T* dy = ctx.inputs[0].as<T>();
    const T* x = ctx.inputs[1].as<T>();
    T* dx = ctx.outputs[0].as<T>();
    const int64_t sample = d.ih * d.iw * channels, row = d.ow * channels;
#pragma omp parallel
    {
      std::vector<A> best(static_cast<size_t>(row)), acc(kAccumulateInPlace ? 0 : static_cast<size_t>(sample));
      std::vector<int32_t> from(static_cast<size_t>(row));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < batch; ++n) {
        A* sums = kAccumulateInPlace ? reinterpret_cast<A*>(dx + n * sample) : acc.data();
        std::fill(sums, sums + sample, A(0));
        for (int64_t oh = 0; oh < d.oh; ++oh) {
          ChannelsLastRowMaxima<T, true>(x + n * sample, g, oh, channels, best.data(), from.data());
          ChannelsLastRowScatter(dy + (n * d.oh + oh) * row, from.data(), g, oh, channels, sums);
        }
        if (!kAccumulateInPlace) StoreRoundedPlane(acc.data(), dx + n * sample, sample);
      }
    }
    return absl::OkStatus();
  };
}

template <typename T>
struct MaxPoolKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const Shape xs = conv::AsChannelsFirst(node, node.inputs[0]->shape);
    auto g = PoolGeomOf(node, xs);
    if (!g.ok()) return g.status();
    if (conv::ChannelsLast(node)) return cpu::MakeKernel(ChannelsLastMaxPool<T>(*g, xs[0], xs[1]));
    return cpu::MakeKernel([g = *g](KernelContext& ctx) {
      const conv::Window2D& d = g.w;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel
      {
        MaxPoolScratch<cpu::Acc<T>> scratch;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.planes; ++p) {
          const T* xp = x + p * d.ih * d.iw;
          T* yp = y + p * d.oh * d.ow;
          if (g.halving_3x3_s2) {
            scratch.row_v.resize(static_cast<size_t>(d.ih * d.ow));
            HalvingRowMaxima(xp, d.ih, d.ow, scratch.row_v.data());
            HalvingColumnMaxima(scratch.row_v.data(), d.oh, d.ow, yp);
            continue;
          }
          ForEachArgMax(xp, g, scratch,
                        [&](int64_t o, int64_t i) { yp[o] = i >= 0 ? xp[i] : static_cast<T>(cpu::Acc<T>(0)); });
        }
      }
      return absl::OkStatus();
    });
  }
};

// MaxPoolGrad(dY, X): dX[argmax] += dY.
template <typename T>
struct MaxPoolGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const Shape xs = conv::AsChannelsFirst(node, node.inputs[1]->shape);
    auto g = PoolGeomOf(node, xs);
    if (!g.ok()) return g.status();
    if (conv::ChannelsLast(node)) return cpu::MakeKernel(ChannelsLastMaxPoolGrad<T>(*g, xs[0], xs[1]));
    return cpu::MakeKernel([g = *g](KernelContext& ctx) {
      using A = cpu::Acc<T>;
      const conv::Window2D& d = g.w;
      const T* dy = ctx.inputs[0].as<T>();
      const T* x = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      // Disjoint full windows: every dX element gets at most one dY, so it is written
      // directly, as the accumulator would round it (0 + dY: a -0 gradient becomes +0).
      const bool disjoint = g.full_windows && d.sh >= d.kh && d.sw >= d.kw;
      constexpr bool kAccumulateInPlace = std::is_same_v<T, A>;
#pragma omp parallel
      {
        // The 16-bit formats: one accumulator plane per thread, cleared per plane (not allocated per plane).
        std::vector<A> acc(disjoint || kAccumulateInPlace ? 0 : static_cast<size_t>(d.ih * d.iw));
        MaxPoolScratch<cpu::Acc<T>> scratch;
#pragma omp for schedule(static)
        for (int64_t p = 0; p < g.planes; ++p) {
          const T* xp = x + p * d.ih * d.iw;
          const T* dyp = dy + p * d.oh * d.ow;
          T* dxp = dx + p * d.ih * d.iw;
          if (disjoint) {
            for (int64_t i = 0; i < d.ih * d.iw; ++i) cpu::StoreRounded(dxp + i, A(0));
            ForEachArgMax(xp, g, scratch, [&](int64_t o, int64_t i) {
              if (i >= 0) dxp[i] = static_cast<T>(A(0) + A(dyp[o]));
            });
            continue;
          }
          // f32 and f64 accumulate in dX itself (rounding to T is the identity there); the
          // 16-bit formats in the f32 plane, rounded once.
          A* sums = kAccumulateInPlace ? reinterpret_cast<A*>(dxp) : acc.data();
          std::fill(sums, sums + d.ih * d.iw, A(0));
          ForEachArgMax(xp, g, scratch, [&](int64_t o, int64_t i) {
            if (i >= 0) sums[i] += A(dyp[o]);
          });
          if (!kAccumulateInPlace) StoreRoundedPlane(acc.data(), dxp, d.ih * d.iw);
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
