// CPU Gather and GatherGrad (graph/ops_tensor.cc). Gather moves element words, so it is
// registered for every dtype (index tensors move through exported graphs as often as
// activations); an index out of range is an error naming the node and the index.
// GatherGrad scatter-adds in Acc<T> (f32 for the 16-bit formats), in a fixed order, and
// rounds once.
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// ---------------------------------------------------------------------------------
// Gather / GatherGrad: data viewed as [outer, dim, inner], indices flat [count].

struct GatherGeometry {
  int axis = 0;
  int64_t outer = 1, dim = 1, inner = 1, count = 0;
};

GatherGeometry GeometryOf(const Shape& data, const Shape& indices, int64_t axis_attr) {
  GatherGeometry g;
  g.axis = NormAxis(axis_attr, data.size());
  g.outer = Prod(data, 0, g.axis);
  g.dim = data[g.axis];
  g.inner = Prod(data, g.axis + 1, data.size());
  g.count = NumElements(indices);
  return g;
}

// Indices resolved to [0, dim), or an error naming the node and the bad index.
absl::Status ResolveIndices(const TensorView& idx, const GatherGeometry& g, const std::string& node,
                            std::vector<int64_t>& out) {
  out.resize(g.count);
  for (int64_t k = 0; k < g.count; ++k) {
    int64_t v = idx.dtype == DType::kI32 ? idx.as<int32_t>()[k] : idx.as<int64_t>()[k];
    if (v < -g.dim || v >= g.dim) {
      return absl::OutOfRangeError(absl::StrCat("node '", node, "': index ", v, " (element ", k,
                                                " of the indices) is out of range for axis ", g.axis, " of size ",
                                                g.dim, "; valid indices are ", -g.dim, " to ", g.dim - 1));
    }
    out[k] = v < 0 ? v + g.dim : v;
  }
  return absl::OkStatus();
}

KernelOr CreateGather(const Node& node, Backend&) {
  const GatherGeometry g = GeometryOf(node.inputs[0]->shape, node.inputs[1]->shape, node.attrs.GetInt("axis", 0));
  return MakeKernel([g, name = node.name](KernelContext& ctx) {
    std::vector<int64_t> idx;
    if (absl::Status st = ResolveIndices(ctx.inputs[1], g, name, idx); !st.ok()) return st;
    const size_t elem = ElemSize(ctx.inputs[0]);
    const size_t row = static_cast<size_t>(g.inner) * elem;
    if (row == 0) return absl::OkStatus();
    const char* src = Bytes(ctx.inputs[0]);
    char* dst = Bytes(ctx.outputs[0]);
    const int64_t total = g.outer * g.count;
#pragma omp parallel for if (total * g.inner > 65536)
    for (int64_t t = 0; t < total; ++t) {
      const int64_t o = t / g.count, k = t % g.count;
      std::memcpy(dst + t * row, src + (o * g.dim + idx[k]) * row, row);
    }
    return absl::OkStatus();
  });
}

template <typename T>
struct GatherGradKernel {
  static KernelOr Create(const Node& node, Backend&) {
    const Shape shape = node.attrs.GetInts("shape", {});
    const GatherGeometry g = GeometryOf(shape, node.inputs[1]->shape, node.attrs.GetInt("axis", 0));
    return MakeKernel([g, name = node.name](KernelContext& ctx) {
      std::vector<int64_t> idx;
      if (absl::Status st = ResolveIndices(ctx.inputs[1], g, name, idx); !st.ok()) return st;
      using A = cpu::Acc<T>;
      const T* dy = ctx.inputs[0].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      const int64_t slab = g.dim * g.inner;
      // Each outer slab is independent; within one, indices are added in order, so
      // repeated indices sum deterministically. f32/f64 accumulate in the output itself;
      // the 16-bit formats in an f32 slab, rounded once.
      if constexpr (std::is_same_v<A, T>) {
        const size_t bytes = static_cast<size_t>(g.outer * slab) * sizeof(T);
        if (bytes) std::memset(dx, 0, bytes);
#pragma omp parallel for if (g.outer > 1 && g.outer * slab > 65536)
        for (int64_t o = 0; o < g.outer; ++o) {
          for (int64_t k = 0; k < g.count; ++k) {
            const T* src = dy + (o * g.count + k) * g.inner;
            T* a = dx + o * slab + idx[k] * g.inner;
            for (int64_t i = 0; i < g.inner; ++i) a[i] += src[i];
          }
        }
        return absl::OkStatus();
      }
#pragma omp parallel for if (g.outer > 1 && g.outer * slab > 65536)
      for (int64_t o = 0; o < g.outer; ++o) {
        std::vector<A> acc(slab, A(0));
        for (int64_t k = 0; k < g.count; ++k) {
          const T* src = dy + (o * g.count + k) * g.inner;
          A* a = acc.data() + idx[k] * g.inner;
          for (int64_t i = 0; i < g.inner; ++i) a[i] += A(src[i]);
        }
        T* out = dx + o * slab;
        for (int64_t i = 0; i < slab; ++i) out[i] = static_cast<T>(acc[i]);
      }
      return absl::OkStatus();
    });
  }
};

}  // namespace

void RegisterCpuGatherKernels(KernelRegistry& r) {
  for (DType d : cpu::kAllDTypes) r.Register("Gather", "cpu", d, CreateGather);
  cpu::RegisterFloatKernels<GatherGradKernel>(r, "GatherGrad");
}

}  // namespace mpc
