// The CUDA elementwise families, one file each:
//   kernels_elementwise.cu  Add Sub Mul Div (broadcasting), Neg Relu Sigmoid Tanh and their
//                           output-based gradients
//   kernels_math.cu         Erf Sqrt SqrtGrad Exp Log Reciprocal Pow Gelu GeluGrad
//   kernels_compare.cu      Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor Not Where
//   kernels_cast.cu         Cast
//   kernels_dropout.cu      Dropout DropoutGrad
// and the launch helpers the float-computing ops share (device code: include from .cu only):
//   - LoadF32: an operand element as the f32 value an op computes with;
//   - MapUnary / MapBinary: flat loops over same-shape operands, in 16-byte packs when every
//     buffer is 16-byte aligned (a scalar tail finishes the last n % pack elements), and
//     UnaryFactory / GradFactory, the kernel factories built on them;
//   - broadcast geometry with axes of extent 1 dropped and adjacent axes merged wherever
//     every operand walks them contiguously (or broadcasts along all of them), so
//     [B, S, H] + [H] indexes as [B*S, H] and the per-element div/mod runs over 2 axes.
// Every op loads into f32 (exact for f32/bf16/f16), evaluates there and rounds its output
// once (FromAcc), like the CPU kernels (backends/cpu/cpu_kernel_util.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_kernel_util.cuh"

namespace mpc::cuda {

// ---- operand loads -----------------------------------------------------------------------

// Exact for f32/bf16/f16; f64, int64 and int32 round to nearest, as static_cast<float>
// does on the CPU (Pow's exponent may be any of these).
__device__ inline float LoadF32(float v) { return v; }
__device__ inline float LoadF32(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float LoadF32(__half v) { return __half2float(v); }
__device__ inline float LoadF32(double v) { return __double2float_rn(v); }
__device__ inline float LoadF32(int64_t v) { return __ll2float_rn(v); }
__device__ inline float LoadF32(int32_t v) { return __int2float_rn(v); }

// ---- flat maps over same-shape operands ----------------------------------------------------

constexpr int kPackBytes = 16;

// kN consecutive elements moved as one 16-byte (or, for kN = 1, one element) access.
template <typename T, int kN>
struct alignas(sizeof(T) * kN) Pack {
  T v[kN];
};

inline bool PackAligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kPackBytes == 0; }

// y[i] = round(op(x[i])) for i in [0, n). Packs p < n / kN first, then the scalar tail.
// y may alias x: every element is read and written by the same thread, in that order.
template <int kN, typename T, typename Op>
__global__ void MapUnaryKernel(int64_t n, const T* x, T* y, Op op) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t packs = n / kN;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, kN> in = reinterpret_cast<const Pack<T, kN>*>(x)[p];
    Pack<T, kN> out;
#pragma unroll
    for (int j = 0; j < kN; ++j) out.v[j] = FromAcc<T>(op(LoadF32(in.v[j])));
    reinterpret_cast<Pack<T, kN>*>(y)[p] = out;
  }
  for (int64_t i = packs * kN + first; i < n; i += stride) y[i] = FromAcc<T>(op(LoadF32(x[i])));
}

// y[i] = round(op(a[i], b[i])) for i in [0, n); same packing and aliasing rules.
template <int kN, typename T, typename Op>
__global__ void MapBinaryKernel(int64_t n, const T* a, const T* b, T* y, Op op) {
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t packs = n / kN;
  for (int64_t p = first; p < packs; p += stride) {
    const Pack<T, kN> va = reinterpret_cast<const Pack<T, kN>*>(a)[p];
    const Pack<T, kN> vb = reinterpret_cast<const Pack<T, kN>*>(b)[p];
    Pack<T, kN> out;
#pragma unroll
    for (int j = 0; j < kN; ++j) out.v[j] = FromAcc<T>(op(LoadF32(va.v[j]), LoadF32(vb.v[j])));
    reinterpret_cast<Pack<T, kN>*>(y)[p] = out;
  }
  for (int64_t i = packs * kN + first; i < n; i += stride) y[i] = FromAcc<T>(op(LoadF32(a[i]), LoadF32(b[i])));
}

// op: float(float), a __device__ functor. T: float, __nv_bfloat16 or __half.
template <typename T, typename Op>
absl::Status MapUnary(int64_t n, const T* x, T* y, Op op, cudaStream_t stream, const char* what) {
  if (n <= 0) return absl::OkStatus();
  constexpr int kN = kPackBytes / sizeof(T);
  if (PackAligned(x) && PackAligned(y)) {
    MapUnaryKernel<kN><<<BlocksFor((n + kN - 1) / kN), kThreadsPerBlock, 0, stream>>>(n, x, y, op);
  } else {
    MapUnaryKernel<1><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, x, y, op);
  }
  return LaunchStatus(what);
}

// op: float(float, float), a __device__ functor.
template <typename T, typename Op>
absl::Status MapBinary(int64_t n, const T* a, const T* b, T* y, Op op, cudaStream_t stream, const char* what) {
  if (n <= 0) return absl::OkStatus();
  constexpr int kN = kPackBytes / sizeof(T);
  if (PackAligned(a) && PackAligned(b) && PackAligned(y)) {
    MapBinaryKernel<kN><<<BlocksFor((n + kN - 1) / kN), kThreadsPerBlock, 0, stream>>>(n, a, b, y, op);
  } else {
    MapBinaryKernel<1><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, a, b, y, op);
  }
  return LaunchStatus(what);
}

// Creation-time check for the flat ops (unary maps, *Grad ops): every operand has as
// many elements as the output, or the flat loop would read past an operand's end.
inline absl::Status CheckSameElementCount(const Node& node) {
  const int64_t n = NumElements(node.outputs[0]->shape);
  for (size_t k = 0; k < node.inputs.size(); ++k) {
    const Value* v = node.inputs[k];
    if (v && NumElements(v->shape) != n) {
      return absl::InvalidArgumentError(absl::StrCat(
          node.op, " node '", node.name, "': input ", k, " has shape ", ShapeToString(v->shape), " but the output has ",
          ShapeToString(node.outputs[0]->shape), "; this elementwise op does not broadcast"));
    }
  }
  return absl::OkStatus();
}

// ---- factories for the flat float ops ------------------------------------------------------

// The functor of a node: Op(node) when it reads attributes (Gelu's approximation), else Op{}.
template <typename Op>
Op OpFor(const Node& node) {
  if constexpr (std::is_constructible_v<Op, const Node&>) {
    return Op(node);
  } else {
    return Op{};
  }
}

// y = Op(x), flat. Op: a functor with __device__ float operator()(float) and a
// static constexpr const char* kName (the kernel's name in launch errors).
template <typename Op>
struct UnaryFactory {
  template <typename T>
  struct For {
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
      if (absl::Status st = CheckSameElementCount(node); !st.ok()) return st;
      const int64_t n = NumElements(node.outputs[0]->shape);
      const Op op = OpFor<Op>(node);
      return MakeCudaKernel(backend, [n, op](KernelContext& ctx, cudaStream_t stream) {
        return MapUnary(n, ctx.inputs[0].as<T>(), ctx.outputs[0].as<T>(), op, stream, Op::kName);
      });
    }
  };
};

// dx = Op(dy, v), flat over inputs (dy, v) where v is the forward output (or input, for
// GeluGrad) the gradient is computed from. Op: __device__ float operator()(float dy, float v).
template <typename Op>
struct GradFactory {
  template <typename T>
  struct For {
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
      if (absl::Status st = CheckSameElementCount(node); !st.ok()) return st;
      const int64_t n = NumElements(node.outputs[0]->shape);
      const Op op = OpFor<Op>(node);
      return MakeCudaKernel(backend, [n, op](KernelContext& ctx, cudaStream_t stream) {
        return MapBinary(n, ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(), ctx.outputs[0].as<T>(), op, stream,
                         Op::kName);
      });
    }
  };
};

// ---- broadcasting ---------------------------------------------------------------------------

// The output's axes after coalescing, outermost first, with each operand's element stride
// along them (0 where it broadcasts). An output without elements gets rank 0 too: no
// kernel runs for it.
struct CoalescedBroadcast {
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> strides;  // [operand][axis]
  int rank() const { return static_cast<int>(dims.size()); }
};

// Errors: an operand that does not broadcast to `out` (numpy rules: right-aligned, each
// extent 1 or equal), or more than kMaxRank axes left after coalescing.
inline absl::StatusOr<CoalescedBroadcast> CoalesceBroadcast(const std::vector<Shape>& operands, const Shape& out,
                                                            const Node& node) {
  const int rank = static_cast<int>(out.size());
  const size_t k_count = operands.size();
  std::vector<std::vector<int64_t>> full(k_count, std::vector<int64_t>(rank, 0));
  for (size_t k = 0; k < k_count; ++k) {
    const Shape& in = operands[k];
    const int off = rank - static_cast<int>(in.size());
    bool ok = off >= 0;
    for (int d = 0; ok && d < static_cast<int>(in.size()); ++d) ok = in[d] == 1 || in[d] == out[d + off];
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(node.op, " node '", node.name, "': operand ", k, " of shape ",
                                                     ShapeToString(in), " does not broadcast to the output shape ",
                                                     ShapeToString(out), " (numpy rules)"));
    }
    if (rank > 0) AlignedStrides(in, out, full[k].data());
  }
  CoalescedBroadcast c;
  c.strides.resize(k_count);
  if (NumElements(out) == 0) return c;
  // Innermost first: axis d joins the group below it when, for every operand, stepping
  // d by one moves as far as stepping through the whole group (row-major contiguity;
  // 0 == 0 * extent covers an operand broadcast along both).
  for (int d = rank - 1; d >= 0; --d) {
    if (out[d] == 1) continue;  // index always 0: contributes nothing
    bool merge = !c.dims.empty();
    for (size_t k = 0; merge && k < k_count; ++k) merge = full[k][d] == c.strides[k].back() * c.dims.back();
    if (merge) {
      c.dims.back() *= out[d];
    } else {
      c.dims.push_back(out[d]);
      for (size_t k = 0; k < k_count; ++k) c.strides[k].push_back(full[k][d]);
    }
  }
  std::reverse(c.dims.begin(), c.dims.end());
  for (auto& s : c.strides) std::reverse(s.begin(), s.end());
  if (c.rank() > kMaxRank) {
    return absl::UnimplementedError(absl::StrCat(node.op, " node '", node.name, "' on CUDA supports up to ", kMaxRank,
                                                 " broadcast axes after merging contiguous ones; the output ",
                                                 ShapeToString(out), " needs ", c.rank(),
                                                 " (reshape the operands to fewer axes)"));
  }
  return c;
}

// Inputs 0 and 1 of `node` against output 0: flat when both have the output's shape,
// else through a BroadcastIndexer over the coalesced axes.
struct BinaryGeometry {
  int64_t n = 0;
  bool flat = true;
  BroadcastIndexer ix;
};

inline absl::StatusOr<BinaryGeometry> MakeBinaryGeometry(const Node& node) {
  const Shape& a = node.inputs[0]->shape;
  const Shape& b = node.inputs[1]->shape;
  const Shape& out = node.outputs[0]->shape;
  BinaryGeometry g;
  g.n = NumElements(out);
  g.flat = a == out && b == out;
  if (g.flat) return g;
  auto c = CoalesceBroadcast({a, b}, out, node);
  if (!c.ok()) return c.status();
  g.ix.rank = c->rank();
  for (int d = 0; d < g.ix.rank; ++d) {
    g.ix.out_dims[d] = c->dims[d];
    g.ix.a_strides[d] = c->strides[0][d];
    g.ix.b_strides[d] = c->strides[1][d];
  }
  return g;
}

// y[i] = round(op(a[ia], b[ib])) with (ia, ib) the operands' offsets for output element i.
template <typename T, typename TB, typename Op>
__global__ void BroadcastBinaryKernel(int64_t n, BroadcastIndexer ix, const T* a, const TB* b, T* y, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ia, ib;
    ix.Offsets(i, ia, ib);
    y[i] = FromAcc<T>(op(LoadF32(a[ia]), LoadF32(b[ib])));
  }
}

// Flat over same-shape operands of one type (packed when aligned); broadcast otherwise.
// TB is the second operand's element type (Pow's exponent may differ from the base).
template <typename T, typename TB, typename Op>
absl::Status LaunchBinary(const BinaryGeometry& g, const T* a, const TB* b, T* y, Op op, cudaStream_t stream,
                          const char* what) {
  if (g.n <= 0) return absl::OkStatus();
  if constexpr (std::is_same_v<T, TB>) {
    if (g.flat) return MapBinary(g.n, a, b, y, op, stream, what);
  }
  // A flat geometry has rank 0 in its indexer only when nothing broadcasts; give it the
  // identity mapping over one axis.
  BroadcastIndexer ix = g.ix;
  if (g.flat) {
    ix.rank = 1;
    ix.out_dims[0] = g.n;
    ix.a_strides[0] = 1;
    ix.b_strides[0] = 1;
  }
  BroadcastBinaryKernel<<<BlocksFor(g.n), kThreadsPerBlock, 0, stream>>>(g.n, ix, a, b, y, op);
  return LaunchStatus(what);
}

}  // namespace mpc::cuda
