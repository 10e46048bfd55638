// CPU SliceTo / PadTo: leading-corner slice and zero padding (pad-dims pass), on raw
// element bytes so one kernel serves every dtype.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"

namespace mpc {
namespace {

// Copies the common leading corner of `in` into `out`; with `zero_rest`, out is first
// cleared (PadTo), so the padding is zeros every step.
void CopyCorner(const TensorView& in, const TensorView& out, bool zero_rest) {
  const size_t elem = DTypeSize(in.dtype);
  if (zero_rest) std::memset(out.data, 0, out.num_elements() * elem);
  const size_t rank = in.shape.size();
  if (rank == 0) {
    std::memcpy(out.data, in.data, elem);
    return;
  }
  Shape common(rank);
  for (size_t i = 0; i < rank; ++i) common[i] = std::min(in.shape[i], out.shape[i]);
  const auto is = RowMajorStrides(in.shape), os = RowMajorStrides(out.shape);
  const int64_t rows = NumElements(Shape(common.begin(), common.end() - 1));
  const size_t row_bytes = static_cast<size_t>(common.back()) * elem;
#pragma omp parallel for if (rows > 256)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, io = 0, oo = 0;
    for (int d = static_cast<int>(rank) - 2; d >= 0; --d) {
      const int64_t idx = rem % common[d];
      rem /= common[d];
      io += idx * is[d];
      oo += idx * os[d];
    }
    std::memcpy(static_cast<char*>(out.data) + oo * elem, static_cast<const char*>(in.data) + io * elem, row_bytes);
  }
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateSlice(const Node&, Backend&) {
  return cpu::MakeKernel([](KernelContext& ctx) {
    CopyCorner(ctx.inputs[0], ctx.outputs[0], false);
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreatePad(const Node&, Backend&) {
  return cpu::MakeKernel([](KernelContext& ctx) {
    CopyCorner(ctx.inputs[0], ctx.outputs[0], true);
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuPadKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI64,
                  DType::kI32, DType::kU8, DType::kBool}) {
    r.Register("SliceTo", "cpu", d, CreateSlice);
    r.Register("PadTo", "cpu", d, CreatePad);
  }
}

}  // namespace mpc
