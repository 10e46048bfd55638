// CPU reductions: ReduceSum and ReduceMean (graph/ops_norm.cc; [outer, reduced, inner]
// when the reduced axes are adjacent, a general loop otherwise) and ReduceSumTo, the sum
// over a broadcast's axes that gradients use. f32, f64, bf16 and f16; sums in Acc<T>
// (f32 for the 16-bit formats), in a fixed order, rounded once.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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
// Reductions

template <typename T, bool kMean>
struct ReduceKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto axes_or = ops::ReduceAxes(node);
    if (!axes_or.ok()) return axes_or.status();
    const std::vector<int> axes = *axes_or;
    const Shape in = node.inputs[0]->shape;
    const int rank = static_cast<int>(in.size());
    int64_t count = 1;
    for (int a : axes) count *= in[a];
    const bool adjacent = axes.empty() || axes.back() - axes.front() + 1 == static_cast<int>(axes.size());
    int64_t outer = 1, red = 1, inner = 1;
    if (adjacent) {
      const int lo = axes.empty() ? rank : axes.front(), hi = axes.empty() ? rank : axes.back() + 1;
      for (int i = 0; i < rank; ++i) (i < lo ? outer : i < hi ? red : inner) *= in[i];
    }
    // General case: the output offset of each input index (0 stride on reduced axes).
    Shape kept = in;
    for (int a : axes) kept[a] = 1;
    const std::vector<int64_t> out_strides = cpu::BroadcastStrides(kept, in);
    return MakeKernel([=](KernelContext& ctx) {
      using A = Acc<T>;
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      const A scale = kMean && count > 0 ? A(1) / static_cast<A>(count) : A(1);
      if (adjacent) {
#pragma omp parallel for collapse(2) if (outer * inner > 64 && outer * red * inner > 32768)
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t i = 0; i < inner; ++i) {
            const T* p = x + o * red * inner + i;
            A sum = 0;
            for (int64_t r = 0; r < red; ++r) sum += A(p[r * inner]);
            y[o * inner + i] = static_cast<T>(kMean ? sum * scale : sum);
          }
        }
        return absl::OkStatus();
      }
      const int64_t n_out = ctx.outputs[0].num_elements();
      std::vector<A> acc(n_out, A(0));
      const int64_t n = ctx.inputs[0].num_elements();
      for (int64_t k = 0; k < n; ++k) {
        int64_t rem = k, off = 0;
        for (int d = rank - 1; d >= 0; --d) {
          off += (rem % in[d]) * out_strides[d];
          rem /= in[d];
        }
        acc[off] += A(x[k]);
      }
      for (int64_t k = 0; k < n_out; ++k) y[k] = static_cast<T>(kMean ? acc[k] * scale : acc[k]);
      return absl::OkStatus();
    });
  }
};
template <typename T>
using ReduceSumKernel = ReduceKernel<T, false>;
template <typename T>
using ReduceMeanKernel = ReduceKernel<T, true>;

// ---------------------------------------------------------------------------------
// ReduceSumTo

// out[target index] += in[i] over all i: the sum over broadcast axes. Rows of the input
// are visited in order, so the result is deterministic.
// ReduceSumTo's output as [O, M, I] blocks of its input: the reduced axes form a leading
// block (O) and a trailing block (I) around the kept ones (M), so y[m] = sum over o, i of
// x[(o*M + m)*I + i]. That covers bias gradients ([rows, C] -> [C]) and convolution bias
// gradients ([N, C, H, W] -> [C, 1, 1]). Returns false for other patterns.
bool AsOuterMiddleInner(const Shape& in, const Shape& out, int64_t* o, int64_t* m, int64_t* i) {
  const size_t rank = in.size(), lead = rank - out.size();
  int first_kept = -1, last_kept = -1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t od = d < lead ? 1 : out[d - lead];
    if (in[d] != 1 && od == in[d]) {
      if (first_kept < 0) first_kept = static_cast<int>(d);
      last_kept = static_cast<int>(d);
    }
  }
  *o = *m = *i = 1;
  for (size_t d = 0; d < rank; ++d) {
    const int64_t od = d < lead ? 1 : out[d - lead];
    const bool reduced = in[d] != 1 && od == 1;
    const int di = static_cast<int>(d);
    if (first_kept >= 0 && di > first_kept && di < last_kept && reduced) return false;
    if (first_kept < 0 || di < first_kept) {
      *o *= in[d];
    } else if (di <= last_kept) {
      *m *= in[d];
    } else {
      *i *= in[d];
    }
  }
  return true;
}

// acc[c] += x[r * stride + c] for rows r < rows and columns c < cols: each column's sum
// runs over the rows in order (so the result does not depend on the vector width), the
// columns side by side in vector lanes. Compiled for each vector ISA (cpu_isa.h).
template <typename T>
MPC_ISA_CLONES void AccumulateColumns(const T* x, int64_t stride, int64_t rows, int64_t cols, Acc<T>* acc) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = x + r * stride;
#pragma omp simd
    for (int64_t c = 0; c < cols; ++c) acc[c] += Acc<T>(row[c]);
  }
}

// acc[c] += row[c] for c < cols. Compiled for each vector ISA (cpu_isa.h).
template <typename A>
MPC_ISA_CLONES void AddRow(const A* row, int64_t cols, A* acc) {
#pragma omp simd
  for (int64_t c = 0; c < cols; ++c) acc[c] += row[c];
}

// Rows a chunk of ReduceSumToKernel's row-streaming path sums before its partial sums
// are combined: fixed (not the thread count) so results are reproducible everywhere.
constexpr int64_t kChunkRows = 256;

// The sum of `runs` contiguous runs of `len` values, run r at x + r * stride (a conv
// bias gradient: one channel's N planes), each run a simd reduction. Compiled for each
// vector ISA (cpu_isa.h).
template <typename T>
MPC_ISA_CLONES Acc<T> SumRuns(const T* x, int64_t runs, int64_t stride, int64_t len) {
  Acc<T> acc = 0;
  for (int64_t r = 0; r < runs; ++r) {
    const T* run = x + r * stride;
    Acc<T> part = 0;
#pragma omp simd reduction(+ : part)
    for (int64_t k = 0; k < len; ++k) part += Acc<T>(run[k]);
    acc += part;
  }
  return acc;
}

template <typename T>
struct ReduceSumToKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    // The row-chunked path's per-chunk sums, allocated here once (the shapes are static),
    // not in every step.
    std::vector<cpu::Acc<T>> partial;
    int64_t o = 0, m = 0, i = 0;
    if (AsOuterMiddleInner(node.inputs[0]->shape, node.outputs[0]->shape, &o, &m, &i) && i == 1 &&
        o >= 2 * kChunkRows) {
      partial.resize(static_cast<size_t>((o + kChunkRows - 1) / kChunkRows * m));
    }
    return MakeKernel([partial = std::move(partial)](KernelContext& ctx) mutable {
      const TensorView& in = ctx.inputs[0];
      const TensorView& out = ctx.outputs[0];
      using Acc = cpu::Acc<T>;
      T* y = out.as<T>();
      const T* x = in.as<T>();
      int64_t blocks_o, blocks_m, blocks_i;
      if (AsOuterMiddleInner(in.shape, out.shape, &blocks_o, &blocks_m, &blocks_i)) {
        const int64_t O = blocks_o, M = blocks_m, I = blocks_i;
        // Each output's sum runs in a fixed order whatever the thread count, so results
        // are reproducible run to run.
        if (I == 1 && O >= 2 * kChunkRows) {
          // [O, M] -> [M] over many rows (a bias gradient, [batch * tokens, width]): the
          // rows stream in order, in chunks of kChunkRows, each chunk's column sums in its
          // own accumulator row; the chunks' sums are then added in chunk order. The
          // chunking is fixed, so the result does not depend on the thread count. Threads
          // taking blocks of columns (below) walk every row once per block, a 128-byte
          // piece of each row at a time: char_gpt's 14 bias gradients a step ([4096, 1152]
          // and [4096, 1536]) took 22-29 ms that way in bf16, 6 ms this way (19-29 -> 10-13
          // ms in f32).
          const int64_t chunks = (O + kChunkRows - 1) / kChunkRows;
          partial.assign(static_cast<size_t>(chunks * M), Acc(0));  // within the capacity sized at creation
#pragma omp parallel for if (O * M > 32768)
          for (int64_t c = 0; c < chunks; ++c) {
            const int64_t first = c * kChunkRows, rows = std::min(kChunkRows, O - first);
            AccumulateColumns(x + first * M, M, rows, M, partial.data() + c * M);
          }
          for (int64_t c = 1; c < chunks; ++c) AddRow(partial.data() + c * M, M, partial.data());
          for (int64_t m = 0; m < M; ++m) cpu::StoreRounded(y + m, partial[m]);
        } else if (I == 1) {
          // [O, M] -> [M]: rows read contiguously; threads take blocks of columns (64
          // wide, so that a bias of a few hundred columns still spreads over threads).
          constexpr int64_t kBlock = 64;
#pragma omp parallel for if (O * M > 32768)
          for (int64_t mb = 0; mb < M; mb += kBlock) {
            const int64_t me = std::min(M, mb + kBlock);
            Acc acc[kBlock] = {};
            AccumulateColumns(x + mb, M, O, me - mb, acc);
            for (int64_t c = mb; c < me; ++c) cpu::StoreRounded(y + c, acc[c - mb]);
          }
        } else {
#pragma omp parallel for if (O * M * I > 32768)
          for (int64_t c = 0; c < M; ++c) cpu::StoreRounded(y + c, SumRuns(x + c * I, O, M * I, I));
        }
        return absl::OkStatus();
      }
      // Any other pattern: walk the input rows, accumulating into the broadcast offsets.
      const auto os = cpu::BroadcastStrides(out.shape, in.shape);
      const int64_t n_out = out.num_elements();
      const int rank = static_cast<int>(in.shape.size());
      const int64_t inner = rank ? in.shape.back() : 1;
      const int64_t rows = inner ? in.num_elements() / inner : 0;
      const int64_t inner_stride = rank ? os.back() : 0;
      std::vector<Acc> acc(n_out, Acc(0));
      for (int64_t r = 0; r < rows; ++r) {
        int64_t rem = r, off = 0;
        for (int d = rank - 2; d >= 0; --d) {
          off += (rem % in.shape[d]) * os[d];
          rem /= in.shape[d];
        }
        for (int64_t i = 0; i < inner; ++i) acc[off + i * inner_stride] += Acc(x[r * inner + i]);
      }
      for (int64_t i = 0; i < n_out; ++i) y[i] = static_cast<T>(acc[i]);
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuReduceKernels(KernelRegistry& r) {
  cpu::RegisterFloatKernels<ReduceSumKernel>(r, "ReduceSum");
  cpu::RegisterFloatKernels<ReduceMeanKernel>(r, "ReduceMean");
  cpu::RegisterFloatKernels<ReduceSumToKernel>(r, "ReduceSumTo");
}

}  // namespace mpc
