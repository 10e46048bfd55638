// CPU SliceTo / PadTo: leading-corner slice and zero padding (pad-dims pass), on raw
// element bytes so one kernel serves every dtype.
#include <cstring>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/tensor.h"

namespace mpc {
namespace {

// PadTo clears its output first, so the padding is zeros every step.
void CopyCorner(const TensorView& in, const TensorView& out, bool zero_rest) {
  const size_t elem = DTypeSize(in.dtype);
  if (zero_rest) std::memset(out.data, 0, out.num_elements() * elem);
  CopyLeadingCorner(in.data, in.shape, out.data, out.shape, elem);
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
