// CPU slicing and joining: Concat, Split, Slice, SliceGrad, and the pad-dims pass's
// SliceTo / PadTo (a leading-corner slice and zero padding). They move element words, so
// every dtype shares one kernel (SliceGrad, which accumulates, is float only).
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "graph/ops_tensor.h"
#include "graph/tensor.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// ---------------------------------------------------------------------------------
// Concat / Split: rows of [outer, extent * inner] bytes laid side by side. The rows are
// split across the OpenMP threads: one thread's memcpy does not reach the machine's
// bandwidth (char_gpt's Split of the fused QKV projection, 4096 rows of three 768-byte
// chunks, ran at 14 GB/s on one).

// Each part's byte offset within a joined row and its byte count, for `extents` along
// the axis with `inner` elements of `elem` bytes below it.
struct JoinedRow {
  std::vector<size_t> offset, bytes;
  size_t total = 0;
};

JoinedRow JoinedRowOf(const std::vector<int64_t>& extents, int64_t inner, size_t elem) {
  JoinedRow row;
  for (int64_t e : extents) {
    row.offset.push_back(row.total);
    row.bytes.push_back(static_cast<size_t>(e * inner) * elem);
    row.total += row.bytes.back();
  }
  return row;
}

// Rows copied per call above which the copy is split across threads (~64 KiB).
bool ParallelRows(int64_t outer, size_t row_bytes) { return outer > 1 && outer * row_bytes > (size_t{1} << 16); }

KernelOr CreateConcat(const Node& node, Backend&) {
  const Shape& out_shape = node.outputs[0]->shape;
  const int axis = NormAxis(node.attrs.GetInt("axis", 0), out_shape.size());
  const int64_t outer = Prod(out_shape, 0, axis);
  const int64_t inner = Prod(out_shape, axis + 1, out_shape.size());
  std::vector<int64_t> extents;
  for (const Value* v : node.inputs) extents.push_back(v->shape[axis]);
  const JoinedRow row = JoinedRowOf(extents, inner, DTypeSize(node.outputs[0]->dtype));
  return MakeKernel([outer, row](KernelContext& ctx) {
    char* dst = Bytes(ctx.outputs[0]);
#pragma omp parallel for if (ParallelRows(outer, row.total))
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t j = 0; j < row.bytes.size(); ++j) {
        if (row.bytes[j]) {
          std::memcpy(dst + o * row.total + row.offset[j], Bytes(ctx.inputs[j]) + o * row.bytes[j], row.bytes[j]);
        }
      }
    }
    return absl::OkStatus();
  });
}

KernelOr CreateSplit(const Node& node, Backend&) {
  const Shape& in_shape = node.inputs[0]->shape;
  const int axis = NormAxis(node.attrs.GetInt("axis", 0), in_shape.size());
  const int64_t outer = Prod(in_shape, 0, axis);
  const int64_t inner = Prod(in_shape, axis + 1, in_shape.size());
  std::vector<int64_t> extents;
  for (const Value* v : node.outputs) extents.push_back(v->shape[axis]);
  const JoinedRow row = JoinedRowOf(extents, inner, DTypeSize(node.inputs[0]->dtype));
  return MakeKernel([outer, row](KernelContext& ctx) {
    const char* src = Bytes(ctx.inputs[0]);
#pragma omp parallel for if (ParallelRows(outer, row.total))
    for (int64_t o = 0; o < outer; ++o) {
      for (size_t j = 0; j < row.bytes.size() && j < ctx.outputs.size(); ++j) {
        // Outputs nobody reads may be absent.
        if (row.bytes[j] && ctx.outputs[j].data) {
          std::memcpy(Bytes(ctx.outputs[j]) + o * row.bytes[j], src + o * row.total + row.offset[j], row.bytes[j]);
        }
      }
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// Slice / SliceGrad: out index i along axis d reads input index start[d] + i * step[d].

struct StridedMap {
  Shape out;                     // the slice's shape
  std::vector<int64_t> strides;  // input element stride per slice axis (step * row-major stride)
  int64_t base = 0;              // input offset of the slice's first element
};

StridedMap MapOf(const Shape& in, const Shape& out, const std::vector<int64_t>& start,
                 const std::vector<int64_t>& step) {
  StridedMap m;
  m.out = out;
  const auto dense = RowMajorStrides(in);
  m.strides.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    m.strides[d] = step[d] * dense[d];
    m.base += start[d] * dense[d];
  }
  return m;
}

// For each slice element: fn(slice_offset, input_offset) on words W.
template <typename F>
void ForEachSliceRow(const StridedMap& m, F fn) {
  const int64_t inner = m.out.empty() ? 1 : m.out.back();
  const int64_t s = m.out.empty() ? 0 : m.strides.back();
  ForEachRow<1>(m.out, {m.strides}, [&](int64_t o, const std::array<int64_t, 1>& off) {
    for (int64_t i = 0; i < inner; ++i) fn(o + i, m.base + off[0] + i * s);
  });
}

KernelOr CreateSlice(const Node& node, Backend&) {
  auto spec = tensor_ops::ResolveSlice(node);
  if (!spec.ok()) return spec.status();
  const StridedMap m = MapOf(spec->in, spec->out, spec->start, spec->step);
  return MakeKernel([m](KernelContext& ctx) {
    if (NumElements(m.out) == 0) return absl::OkStatus();
    WithWord(ElemSize(ctx.inputs[0]), [&](auto word) {
      using W = decltype(word);
      const W* src = ctx.inputs[0].as<W>();
      W* dst = ctx.outputs[0].as<W>();
      ForEachSliceRow(m, [&](int64_t o, int64_t i) { dst[o] = src[i]; });
    });
    return absl::OkStatus();
  });
}

KernelOr CreateSliceGrad(const Node& node, Backend&) {
  const StridedMap m = MapOf(node.attrs.GetInts("shape", {}), node.inputs[0]->shape, node.attrs.GetInts("starts", {}),
                             node.attrs.GetInts("steps", {}));
  return MakeKernel([m](KernelContext& ctx) {
    const TensorView& out = ctx.outputs[0];
    const size_t bytes = out.num_elements() * ElemSize(out);
    if (bytes) std::memset(out.data, 0, bytes);  // all-zero bits are +0 in every float format
    if (NumElements(m.out) == 0) return absl::OkStatus();
    WithWord(ElemSize(out), [&](auto word) {
      using W = decltype(word);
      const W* src = ctx.inputs[0].as<W>();
      W* dst = out.as<W>();
      ForEachSliceRow(m, [&](int64_t o, int64_t i) { dst[i] = src[o]; });  // slices never overlap
    });
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------
// SliceTo / PadTo (pad-dims).

// PadTo clears its output first, so the padding is zeros every step.
void CopyCorner(const TensorView& in, const TensorView& out, bool zero_rest) {
  const size_t elem = DTypeSize(in.dtype);
  if (zero_rest) std::memset(out.data, 0, out.num_elements() * elem);
  CopyLeadingCorner(in.data, in.shape, out.data, out.shape, elem);
}

KernelOr CreateSliceTo(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    CopyCorner(ctx.inputs[0], ctx.outputs[0], false);
    return absl::OkStatus();
  });
}

KernelOr CreatePadTo(const Node&, Backend&) {
  return MakeKernel([](KernelContext& ctx) {
    CopyCorner(ctx.inputs[0], ctx.outputs[0], true);
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuSliceKernels(KernelRegistry& r) {
  for (DType d : cpu::kAllDTypes) {
    r.Register("Concat", "cpu", d, CreateConcat);
    r.Register("Split", "cpu", d, CreateSplit);
    r.Register("Slice", "cpu", d, CreateSlice);
    r.Register("SliceTo", "cpu", d, CreateSliceTo);
    r.Register("PadTo", "cpu", d, CreatePadTo);
  }
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16})
    r.Register("SliceGrad", "cpu", d, CreateSliceGrad);
}

}  // namespace mpc
