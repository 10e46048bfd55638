// CUDA comparison, logic and selection ops (CPU reference: backends/cpu/kernels_compare.cc;
// op definitions in graph/ops_tensor.cc). Bool tensors are one byte per element, 0 or 1.
//   Equal Less Greater LessOrEqual GreaterOrEqual  bool output, numpy broadcasting. Operands
//       f32, bf16, f16 (compared as the exact f32 values), int64, int32, uint8, and bool
//       for Equal (raw bytes compared). A NaN operand makes every comparison false.
//   And Or Xor   bool operands (any nonzero byte is true), broadcasting, bool output
//   Not          bool, flat: y = x ? 0 : 1
//   Where        out = cond ? x : y, numpy broadcasting over all three; moves element-sized
//                words, so one kernel serves every dtype (registered under each, as on
//                the CPU, though the node is looked up by its bool condition)
// Broadcast axes are coalesced (elementwise_families.h) before the kernels see them.
#include "backends/cuda/elementwise_families.h"

namespace mpc::cuda {
namespace {

// ---- comparison and logic -----------------------------------------------------------------

// The value a comparison sees: 16-bit floats widen to f32 exactly; others as stored.
template <typename V>
__device__ inline V CompareValue(V v) {
  return v;
}
__device__ inline float CompareValue(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ inline float CompareValue(__half v) { return __half2float(v); }

struct EqualOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return a == b;
  }
};
struct LessOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return a < b;
  }
};
struct GreaterOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return a > b;
  }
};
struct LessOrEqualOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return a <= b;
  }
};
struct GreaterOrEqualOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return a >= b;
  }
};
struct AndOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return (a != 0) && (b != 0);
  }
};
struct OrOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return (a != 0) || (b != 0);
  }
};
struct XorOp {
  template <typename V>
  __device__ bool operator()(V a, V b) const {
    return (a != 0) != (b != 0);
  }
};

template <typename T, typename Op>
__global__ void CompareKernel(int64_t n, bool flat, BroadcastIndexer ix, const T* a, const T* b, uint8_t* y, Op op) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ia = i, ib = i;
    if (!flat) ix.Offsets(i, ia, ib);
    y[i] = op(CompareValue(a[ia]), CompareValue(b[ib])) ? 1 : 0;
  }
}

// T: the operands' device element type (uint8_t for bool).
template <typename Op, typename T>
absl::StatusOr<std::unique_ptr<Kernel>> CreateCompare(const Node& node, Backend& backend) {
  auto g = MakeBinaryGeometry(node);
  if (!g.ok()) return g.status();
  return MakeCudaKernel(backend, [g = *g, op = node.op](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    if (g.n <= 0) return absl::OkStatus();
    CompareKernel<<<BlocksFor(g.n), kThreadsPerBlock, 0, stream>>>(
        g.n, g.flat, g.ix, ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(), ctx.outputs[0].as<uint8_t>(), Op{});
    return LaunchStatus(op.c_str());
  });
}

template <typename Op>
void RegisterCompare(KernelRegistry& r, const std::string& op, bool with_bool) {
  r.Register(op, "cuda", DType::kF32, CreateCompare<Op, float>);
  r.Register(op, "cuda", DType::kBF16, CreateCompare<Op, __nv_bfloat16>);
  r.Register(op, "cuda", DType::kF16, CreateCompare<Op, __half>);
  r.Register(op, "cuda", DType::kI64, CreateCompare<Op, int64_t>);
  r.Register(op, "cuda", DType::kI32, CreateCompare<Op, int32_t>);
  r.Register(op, "cuda", DType::kU8, CreateCompare<Op, uint8_t>);
  if (with_bool) r.Register(op, "cuda", DType::kBool, CreateCompare<Op, uint8_t>);
}

__global__ void NotKernel(int64_t n, const uint8_t* x, uint8_t* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = x[i] ? 0 : 1;
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateNot(const Node& node, Backend& backend) {
  if (absl::Status st = CheckSameElementCount(node); !st.ok()) return st;
  const int64_t n = NumElements(node.outputs[0]->shape);
  return MakeCudaKernel(backend, [n](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    if (n <= 0) return absl::OkStatus();
    NotKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, ctx.inputs[0].as<uint8_t>(),
                                                             ctx.outputs[0].as<uint8_t>());
    return LaunchStatus("Not");
  });
}

// ---- Where ------------------------------------------------------------------------------------

// BroadcastIndexer's rule for three operands (cond, x, y).
struct WhereIndexer {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[3][kMaxRank] = {};

  __device__ void Offsets(int64_t i, int64_t& c, int64_t& x, int64_t& y) const {
    c = x = y = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = i % dims[d];
      i /= dims[d];
      c += idx * strides[0][d];
      x += idx * strides[1][d];
      y += idx * strides[2][d];
    }
  }
};

// W: an unsigned word of the element size; the values are moved, never interpreted.
template <typename W>
__global__ void WhereKernel(int64_t n, WhereIndexer ix, const uint8_t* cond, const W* x, const W* y, W* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t ic, ix_, iy;
    ix.Offsets(i, ic, ix_, iy);
    out[i] = cond[ic] ? x[ix_] : y[iy];
  }
}

template <typename W>
absl::StatusOr<std::unique_ptr<Kernel>> WhereOfWords(int64_t n, const WhereIndexer& ix, Backend& backend) {
  return MakeCudaKernel(backend, [n, ix](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    if (n <= 0) return absl::OkStatus();
    WhereKernel<W><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
        n, ix, ctx.inputs[0].as<uint8_t>(), ctx.inputs[1].as<W>(), ctx.inputs[2].as<W>(), ctx.outputs[0].as<W>());
    return LaunchStatus("Where");
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateWhere(const Node& node, Backend& backend) {
  const Shape& out = node.outputs[0]->shape;
  auto c = CoalesceBroadcast({node.inputs[0]->shape, node.inputs[1]->shape, node.inputs[2]->shape}, out, node);
  if (!c.ok()) return c.status();
  WhereIndexer ix;
  ix.rank = c->rank();
  for (int d = 0; d < ix.rank; ++d) {
    ix.dims[d] = c->dims[d];
    for (int k = 0; k < 3; ++k) ix.strides[k][d] = c->strides[k][d];
  }
  const int64_t n = NumElements(out);
  switch (DTypeSize(node.outputs[0]->dtype)) {
    case 8:
      return WhereOfWords<uint64_t>(n, ix, backend);
    case 4:
      return WhereOfWords<uint32_t>(n, ix, backend);
    case 2:
      return WhereOfWords<uint16_t>(n, ix, backend);
    case 1:
      return WhereOfWords<uint8_t>(n, ix, backend);
    default:
      return absl::UnimplementedError(
          absl::StrCat("Where node '", node.name, "': elements of ", DTypeName(node.outputs[0]->dtype), " (",
                       DTypeSize(node.outputs[0]->dtype), " bytes) are not supported on cuda"));
  }
}

}  // namespace

void RegisterCudaCompareKernels(KernelRegistry& r) {
  RegisterCompare<EqualOp>(r, "Equal", /*with_bool=*/true);
  RegisterCompare<LessOp>(r, "Less", false);
  RegisterCompare<GreaterOp>(r, "Greater", false);
  RegisterCompare<LessOrEqualOp>(r, "LessOrEqual", false);
  RegisterCompare<GreaterOrEqualOp>(r, "GreaterOrEqual", false);
  r.Register("And", "cuda", DType::kBool, CreateCompare<AndOp, uint8_t>);
  r.Register("Or", "cuda", DType::kBool, CreateCompare<OrOp, uint8_t>);
  r.Register("Xor", "cuda", DType::kBool, CreateCompare<XorOp, uint8_t>);
  r.Register("Not", "cuda", DType::kBool, CreateNot);
  // Every dtype the CPU registers Where under, minus f64 (whose values it still moves:
  // the kernel is chosen by the bool condition and sized by the output's dtype).
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI64, DType::kI32,
                  DType::kU8, DType::kBool}) {
    r.Register("Where", "cuda", d, CreateWhere);
  }
}

}  // namespace mpc::cuda
