// CUDA slicing and joining kernels, mirroring backends/cpu/kernels_slice.cc. Each is one or more StridedCopy plans made
// at creation:
//   Slice      out index i along axis d reads input index start[d] + i * step[d]; starts,
//              ends, axes and steps (attributes before opset 10, constant inputs from 10)
//              resolved and clamped by tensor_ops::ResolveSlice, negative steps included
//   SliceGrad  zeros of the `shape` attribute with dY written at starts + i * steps
//   SliceTo    the leading corner of the input (pad-dims pass)
//   PadTo      the input in the leading corner of a zero-filled output (pad-dims pass)
//   Concat     each input is a [outer, extent * inner] block of the output's rows
//   Split      each present output is a [outer, extent * inner] block of the input's rows
//              (split sizes from the input, the attribute or num_outputs: the output
//              shapes already carry them)
// Zero filling is a cudaMemsetAsync: all-zero bits are +0 in every dtype.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/tensor_families.h"
#include "base/status_macros.h"
#include "graph/ops_tensor.h"

namespace mpc::cuda {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

std::string NodeLabel(const Node& node) { return absl::StrCat(node.op, " node '", node.name, "'"); }

absl::Status ZeroFill(void* data, size_t bytes, cudaStream_t stream, const std::string& what) {
  if (bytes == 0) return absl::OkStatus();
  const cudaError_t e = cudaMemsetAsync(data, 0, bytes, stream);
  return CudaStatus(e, absl::StrCat(what, ": cudaMemsetAsync of ", bytes, " bytes").c_str());
}

int64_t Product(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to; ++i) p *= s[i];
  return p;
}

// ---- Slice / SliceGrad ---------------------------------------------------------------

KernelOr CreateSlice(const Node& node, Backend& backend) {
  MPC_ASSIGN_OR_RETURN(tensor_ops::SliceSpec spec, tensor_ops::ResolveSlice(node));
  const std::vector<int64_t> dense = RowMajorStrides(spec.in);
  std::vector<int64_t> src_strides(spec.in.size());
  int64_t base = 0;
  for (size_t d = 0; d < spec.in.size(); ++d) {
    src_strides[d] = spec.step[d] * dense[d];
    base += spec.start[d] * dense[d];
  }
  MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make(spec.out, src_strides, base, DenseStrides(spec.out), 0,
                                                           DTypeSize(node.inputs[0]->dtype), NodeLabel(node)));
  return MakeCudaKernel(backend, [plan = std::move(plan)](KernelContext& ctx, cudaStream_t stream) {
    return plan.Launch(ctx.inputs[0].data, ctx.outputs[0].data, stream);
  });
}

KernelOr CreateSliceGrad(const Node& node, Backend& backend) {
  const Shape shape = node.attrs.GetInts("shape", {});
  const std::vector<int64_t> starts = node.attrs.GetInts("starts", {});
  const std::vector<int64_t> steps = node.attrs.GetInts("steps", {});
  const Shape& dy = node.inputs[0]->shape;
  if (shape.size() != dy.size() || starts.size() != dy.size() || steps.size() != dy.size()) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": dY ", ShapeToString(dy), ", shape ",
                                                   ShapeToString(shape), ", ", starts.size(), " starts and ",
                                                   steps.size(), " steps must all have the same rank"));
  }
  const std::vector<int64_t> dense = RowMajorStrides(shape);
  std::vector<int64_t> dst_strides(shape.size());
  int64_t base = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    dst_strides[d] = steps[d] * dense[d];
    base += starts[d] * dense[d];
  }
  const std::string what = NodeLabel(node);
  MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make(dy, DenseStrides(dy), 0, dst_strides, base,
                                                           DTypeSize(node.inputs[0]->dtype), what));
  const size_t out_bytes = node.outputs[0]->bytes();
  return MakeCudaKernel(backend, [plan = std::move(plan), out_bytes, what](KernelContext& ctx, cudaStream_t stream) {
    MPC_RETURN_IF_ERROR(ZeroFill(ctx.outputs[0].data, out_bytes, stream, what));
    return plan.Launch(ctx.inputs[0].data, ctx.outputs[0].data, stream);  // slices never overlap
  });
}

// ---- SliceTo / PadTo -----------------------------------------------------------------

// Copies the common leading corner of input and output; PadTo zeroes the output first.
KernelOr CreateCorner(const Node& node, Backend& backend, bool zero_rest) {
  const Shape& in = node.inputs[0]->shape;
  const Shape& out = node.outputs[0]->shape;
  if (in.size() != out.size()) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": input ", ShapeToString(in), " and output ",
                                                   ShapeToString(out), " must have the same rank"));
  }
  Shape common(in.size());
  for (size_t d = 0; d < in.size(); ++d) common[d] = std::min(in[d], out[d]);
  const std::string what = NodeLabel(node);
  MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make(common, DenseStrides(in), 0, DenseStrides(out), 0,
                                                           DTypeSize(node.inputs[0]->dtype), what));
  // Padding to the same shape leaves nothing to zero.
  const size_t zero_bytes = zero_rest && in != out ? node.outputs[0]->bytes() : 0;
  return MakeCudaKernel(backend, [plan = std::move(plan), zero_bytes, what](KernelContext& ctx, cudaStream_t stream) {
    MPC_RETURN_IF_ERROR(ZeroFill(ctx.outputs[0].data, zero_bytes, stream, what));
    return plan.Launch(ctx.inputs[0].data, ctx.outputs[0].data, stream);
  });
}

KernelOr CreateSliceTo(const Node& node, Backend& backend) { return CreateCorner(node, backend, false); }
KernelOr CreatePadTo(const Node& node, Backend& backend) { return CreateCorner(node, backend, true); }

// ---- Concat / Split ------------------------------------------------------------------

// The [outer, extent * inner] blocks along `axis` of `shape` whose extents are `extents`:
// block j starts at element offset at[j] of each row of `total * inner` elements.
struct AxisBlocks {
  int64_t outer = 1, inner = 1, total = 0;
  std::vector<int64_t> extents, at;
};

absl::StatusOr<AxisBlocks> BlocksAlong(const Node& node, const Shape& shape, const std::vector<const Value*>& parts) {
  const int rank = static_cast<int>(shape.size());
  int64_t axis = node.attrs.GetInt("axis", 0);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": axis ", node.attrs.GetInt("axis", 0),
                                                   " is out of range for shape ", ShapeToString(shape)));
  }
  AxisBlocks b;
  b.outer = Product(shape, 0, axis);
  b.inner = Product(shape, axis + 1, shape.size());
  for (const Value* v : parts) {
    const int64_t e = v ? v->shape[axis] : 0;
    b.at.push_back(b.total * b.inner);
    b.extents.push_back(e);
    b.total += e;
  }
  if (b.total != shape[axis]) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": the parts' extents along axis ", axis,
                                                   " sum to ", b.total, ", not ", shape[axis]));
  }
  return b;
}

KernelOr CreateConcat(const Node& node, Backend& backend) {
  const Shape& out = node.outputs[0]->shape;
  std::vector<const Value*> parts(node.inputs.begin(), node.inputs.end());
  for (size_t j = 0; j < parts.size(); ++j) {
    if (!parts[j]) return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": input ", j, " is absent"));
  }
  MPC_ASSIGN_OR_RETURN(AxisBlocks b, BlocksAlong(node, out, parts));
  const size_t elem = DTypeSize(node.outputs[0]->dtype);
  const std::string what = NodeLabel(node);
  std::vector<StridedCopy> plans;
  for (size_t j = 0; j < parts.size(); ++j) {
    const int64_t chunk = b.extents[j] * b.inner;
    MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make({b.outer, chunk}, {chunk, 1}, 0, {b.total * b.inner, 1},
                                                             b.at[j], elem, what));
    plans.push_back(std::move(plan));
  }
  return MakeCudaKernel(backend, [plans = std::move(plans)](KernelContext& ctx, cudaStream_t stream) {
    for (size_t j = 0; j < plans.size(); ++j) {
      MPC_RETURN_IF_ERROR(plans[j].Launch(ctx.inputs[j].data, ctx.outputs[0].data, stream));
    }
    return absl::OkStatus();
  });
}

KernelOr CreateSplit(const Node& node, Backend& backend) {
  const Shape& in = node.inputs[0]->shape;
  std::vector<const Value*> parts(node.outputs.begin(), node.outputs.end());
  MPC_ASSIGN_OR_RETURN(AxisBlocks b, BlocksAlong(node, in, parts));
  const size_t elem = DTypeSize(node.inputs[0]->dtype);
  const std::string what = NodeLabel(node);
  std::vector<StridedCopy> plans;
  for (size_t j = 0; j < parts.size(); ++j) {
    const int64_t chunk = b.extents[j] * b.inner;
    MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make({b.outer, chunk}, {b.total * b.inner, 1}, b.at[j],
                                                             {chunk, 1}, 0, elem, what));
    plans.push_back(std::move(plan));
  }
  return MakeCudaKernel(backend, [plans = std::move(plans)](KernelContext& ctx, cudaStream_t stream) {
    for (size_t j = 0; j < plans.size(); ++j) {
      if (j >= ctx.outputs.size() || !ctx.outputs[j].data) continue;  // an unused output
      MPC_RETURN_IF_ERROR(plans[j].Launch(ctx.inputs[0].data, ctx.outputs[j].data, stream));
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCudaSliceKernels(KernelRegistry& r) {
  for (DType d : kCudaMoveDTypes) {
    r.Register("Slice", "cuda", d, CreateSlice);
    r.Register("SliceTo", "cuda", d, CreateSliceTo);
    r.Register("PadTo", "cuda", d, CreatePadTo);
    r.Register("Concat", "cuda", d, CreateConcat);
    r.Register("Split", "cuda", d, CreateSplit);
  }
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) r.Register("SliceGrad", "cuda", d, CreateSliceGrad);
}

}  // namespace mpc::cuda
