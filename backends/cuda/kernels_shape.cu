// CUDA kernels for the shape ops (graph/ops_shape.cc, graph/ops_tensor.cc), mirroring
// backends/cpu/kernels_shape.cc:
//   Reshape Flatten Identity Squeeze Unsqueeze   a device-to-device copy of the bytes
//                                                (none when the planner gave the output
//                                                the input's buffer)
//   Transpose                                    StridedCopy with the permuted strides
//                                                (perm attribute; none: reverse the axes)
//   BroadcastTo Expand                           StridedCopy with stride 0 along broadcast
//                                                axes (numpy rules, right-aligned)
//   Shape                                        the int64 extents [start, start + n) of
//                                                the input, uploaded once at creation
//   ConstantOfShape                              fills with the `value` attribute cast to
//                                                the output dtype at creation (as the CPU
//                                                does, through Tensor::CastTo)
//   Range                                        y[i] = start + i * delta, start and delta
//                                                read on the device; f32 math for the
//                                                float dtypes (no fused multiply-add, so
//                                                the result rounds as on the CPU), int64
//                                                for the integer ones
// Data movement is dtype-agnostic (raw words), registered for every dtype the CPU
// registers it for except f64.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/tensor_families.h"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

using KernelOr = absl::StatusOr<std::unique_ptr<Kernel>>;

std::string NodeLabel(const Node& node) { return absl::StrCat(node.op, " node '", node.name, "'"); }

// ---- copies --------------------------------------------------------------------------

KernelOr CreateDeviceCopy(const Node& node, Backend& backend) {
  const size_t bytes = node.outputs[0]->bytes();
  return MakeCudaKernel(backend, [bytes, what = NodeLabel(node)](KernelContext& ctx, cudaStream_t stream) {
    if (bytes == 0 || ctx.outputs[0].data == ctx.inputs[0].data) return absl::OkStatus();
    const cudaError_t e =
        cudaMemcpyAsync(ctx.outputs[0].data, ctx.inputs[0].data, bytes, cudaMemcpyDeviceToDevice, stream);
    return CudaStatus(e, absl::StrCat(what, ": cudaMemcpyAsync of ", bytes, " bytes").c_str());
  });
}

// A kernel that runs one planned StridedCopy from input 0 to output 0.
KernelOr MakeCopyKernel(Backend& backend, StridedCopy plan) {
  return MakeCudaKernel(backend, [plan = std::move(plan)](KernelContext& ctx, cudaStream_t stream) {
    return plan.Launch(ctx.inputs[0].data, ctx.outputs[0].data, stream);
  });
}

KernelOr CreateTranspose(const Node& node, Backend& backend) {
  const Shape& in = node.inputs[0]->shape;
  const Shape& out = node.outputs[0]->shape;
  const int rank = static_cast<int>(in.size());
  std::vector<int64_t> perm = node.attrs.GetInts("perm", {});
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int>(perm.size()) != rank || out.size() != in.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(NodeLabel(node), ": perm has ", perm.size(), " entries for an input of rank ", rank));
  }
  const std::vector<int64_t> in_strides = RowMajorStrides(in);
  std::vector<int64_t> src_strides(rank);  // the input stride of each output axis
  for (int i = 0; i < rank; ++i) {
    if (perm[i] < 0 || perm[i] >= rank) {
      return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": perm entry ", perm[i], " is not an axis"));
    }
    src_strides[i] = in_strides[perm[i]];
  }
  MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make(out, src_strides, 0, DenseStrides(out), 0,
                                                           DTypeSize(node.inputs[0]->dtype), NodeLabel(node)));
  return MakeCopyKernel(backend, std::move(plan));
}

// BroadcastTo and Expand: the output reads the input with stride 0 along broadcast axes.
KernelOr CreateBroadcastCopy(const Node& node, Backend& backend) {
  const Shape& in = node.inputs[0]->shape;
  const Shape& out = node.outputs[0]->shape;
  if (in.size() > out.size()) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": input ", ShapeToString(in),
                                                   " has more axes than the output ", ShapeToString(out)));
  }
  std::vector<int64_t> src_strides(out.size());
  AlignedStrides(in, out, src_strides.data());
  MPC_ASSIGN_OR_RETURN(StridedCopy plan, StridedCopy::Make(out, src_strides, 0, DenseStrides(out), 0,
                                                           DTypeSize(node.inputs[0]->dtype), NodeLabel(node)));
  return MakeCopyKernel(backend, std::move(plan));
}

// ---- Shape, ConstantOfShape, Range ---------------------------------------------------

KernelOr CreateShape(const Node& node, Backend& backend) {
  const Shape& in = node.inputs[0]->shape;
  const Shape& out = node.outputs[0]->shape;
  const auto rank = static_cast<int64_t>(in.size());
  const int64_t n = out.empty() ? 0 : out[0];
  int64_t start = node.attrs.GetInt("start", 0);
  if (start < 0) start += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  if (n < 0 || start + n > rank) {
    return absl::InvalidArgumentError(absl::StrCat(NodeLabel(node), ": output of ", n, " extents from axis ", start,
                                                   " does not fit the input's rank ", rank));
  }
  const std::vector<int64_t> dims(in.begin() + start, in.begin() + start + n);
  const size_t bytes = dims.size() * sizeof(int64_t);
  // The extents never change: uploaded once here, copied device to device each run.
  MPC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceScratch> values, DeviceScratch::Allocate(backend, bytes));
  if (bytes) MPC_RETURN_IF_ERROR(backend.CopyToDevice(values->data(), dims.data(), bytes));
  return MakeCudaKernel(backend, [values, bytes, what = NodeLabel(node)](KernelContext& ctx, cudaStream_t stream) {
    if (bytes == 0) return absl::OkStatus();
    const cudaError_t e = cudaMemcpyAsync(ctx.outputs[0].data, values->data(), bytes, cudaMemcpyDeviceToDevice, stream);
    return CudaStatus(e, absl::StrCat(what, ": cudaMemcpyAsync of ", bytes, " bytes").c_str());
  });
}

template <typename Word>
__global__ void FillKernel(Word* y, int64_t n, Word value) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = value;
  }
}

template <typename Word>
absl::Status LaunchFill(void* y, int64_t n, const void* value_bytes, cudaStream_t stream) {
  if (n <= 0) return absl::OkStatus();
  Word value;
  std::memcpy(&value, value_bytes, sizeof(Word));
  FillKernel<Word><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(static_cast<Word*>(y), n, value);
  return LaunchStatus("ConstantOfShape fill");
}

KernelOr CreateConstantOfShape(const Node& node, Backend& backend) {
  const DType dtype = node.outputs[0]->dtype;
  // The value exactly as the CPU kernel makes it.
  Tensor one;
  if (IsFloating(dtype)) {
    one = Tensor::FromVector<double>({}, {static_cast<double>(node.attrs.GetFloat("value", 0.0f))}).CastTo(dtype);
  } else {
    one = Tensor::FromVector<int64_t>({}, {node.attrs.GetInt("value", 0)});
    if (dtype != DType::kI64) one = one.CastTo(dtype);  // CastTo goes through double
  }
  const size_t elem = DTypeSize(dtype);
  if (one.empty() || one.dtype() != dtype || elem > 8) {
    return absl::InternalError(absl::StrCat(NodeLabel(node), ": could not make its value in ", DTypeName(dtype)));
  }
  unsigned char value[8] = {};
  std::memcpy(value, one.raw(), elem);
  const int64_t n = NumElements(node.outputs[0]->shape);
  return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
    void* y = ctx.outputs[0].data;
    switch (elem) {
      case 8:
        return LaunchFill<uint64_t>(y, n, value, stream);
      case 4:
        return LaunchFill<uint32_t>(y, n, value, stream);
      case 2:
        return LaunchFill<uint16_t>(y, n, value, stream);
      default:
        return LaunchFill<uint8_t>(y, n, value, stream);
    }
  });
}

template <typename T>
__global__ void RangeKernel(const T* start, const T* delta, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    if constexpr (std::is_integral_v<T>) {
      y[i] = static_cast<T>(static_cast<int64_t>(start[0]) + i * static_cast<int64_t>(delta[0]));
    } else {
      // start + float(i) * delta, rounded after the product and after the sum as the CPU
      // does (an FMA would round once).
      const float v = __fadd_rn(ToAcc(start[0]), __fmul_rn(static_cast<float>(i), ToAcc(delta[0])));
      y[i] = FromAcc<T>(v);
    }
  }
}

template <typename T>
struct RangeFactory {
  static KernelOr Create(const Node& node, Backend& backend) {
    const int64_t n = NumElements(node.outputs[0]->shape);
    return MakeCudaKernel(backend, [n](KernelContext& ctx, cudaStream_t stream) {
      if (n <= 0) return absl::OkStatus();
      RangeKernel<T><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
          ctx.inputs[0].as<const T>(), ctx.inputs[2].as<const T>(), ctx.outputs[0].as<T>(), n);
      return LaunchStatus("Range");
    });
  }
};

template <typename T>
struct BroadcastToFactory {
  static KernelOr Create(const Node& node, Backend& backend) { return CreateBroadcastCopy(node, backend); }
};

}  // namespace

void RegisterCudaShapeKernels(KernelRegistry& r) {
  for (DType d : kCudaMoveDTypes) {
    for (const char* op : {"Reshape", "Flatten", "Identity", "Squeeze", "Unsqueeze"}) {
      r.Register(op, "cuda", d, CreateDeviceCopy);
    }
    r.Register("Transpose", "cuda", d, CreateTranspose);
    r.Register("Expand", "cuda", d, CreateBroadcastCopy);
    r.Register("Shape", "cuda", d, CreateShape);
  }
  RegisterCudaFloatKernels<BroadcastToFactory>(r, "BroadcastTo");  // float only, as on the CPU
  r.Register("ConstantOfShape", "cuda", DType::kI64, CreateConstantOfShape);
  r.Register("ConstantOfShape", "cuda", DType::kI32, CreateConstantOfShape);
  RegisterCudaFloatKernels<RangeFactory>(r, "Range");
  r.Register("Range", "cuda", DType::kI64, RangeFactory<int64_t>::Create);
  r.Register("Range", "cuda", DType::kI32, RangeFactory<int32_t>::Create);
}

}  // namespace mpc::cuda
