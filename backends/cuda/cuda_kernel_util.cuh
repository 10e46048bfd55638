// Building blocks shared by the CUDA kernel families (backends/cuda/kernels_*.cu):
//   - device element types for mpc's dtypes (DeviceType<DType>) with exact widening to the
//     f32 accumulator (Acc) and one rounding on store (FromAcc), the numerics contract of
//     docs/numerics.md: every op computes in f32 whatever its I/O dtype and rounds its output once;
//   - Lambda kernels bound to the backend's stream at creation (MakeCudaKernel);
//   - grid-stride launches of device lambdas over n elements (LaunchElementwise) and the
//     launch check that turns a bad configuration into an absl::Status naming the kernel;
//   - broadcast indexing for up to kMaxRank dimensions (BroadcastIndexer), passed to
//     kernels by value;
//   - RegisterCudaFloatKernels: one templated factory registered for f32, bf16 and f16.
// Only this header and the .cu files see device code; the registry entry points are in
// cuda_backend.h and need no CUDA headers.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"

namespace mpc::cuda {

// ---- element types -------------------------------------------------------------------

template <typename T>
struct AccOf {
  using type = float;
};
template <>
struct AccOf<double> {
  using type = double;
};
// f64 kernels (if any) accumulate in f64; everything else in f32.
template <typename T>
using Acc = typename AccOf<T>::type;

template <typename T>
__host__ __device__ inline Acc<T> ToAcc(T v) {
  return static_cast<Acc<T>>(v);
}
template <>
__host__ __device__ inline float ToAcc<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <>
__host__ __device__ inline float ToAcc<__half>(__half v) {
  return __half2float(v);
}

template <typename T>
__host__ __device__ inline T FromAcc(Acc<T> v) {
  return static_cast<T>(v);
}
// Round to nearest even, as graph/float_convert.h does on the CPU backend.
template <>
__host__ __device__ inline __nv_bfloat16 FromAcc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__host__ __device__ inline __half FromAcc<__half>(float v) {
  return __float2half_rn(v);
}

// The device type that holds an mpc dtype's elements.
template <DType D>
struct DeviceTypeOf;
template <>
struct DeviceTypeOf<DType::kF32> {
  using type = float;
};
template <>
struct DeviceTypeOf<DType::kF64> {
  using type = double;
};
template <>
struct DeviceTypeOf<DType::kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct DeviceTypeOf<DType::kF16> {
  using type = __half;
};
template <>
struct DeviceTypeOf<DType::kI64> {
  using type = int64_t;
};
template <>
struct DeviceTypeOf<DType::kI32> {
  using type = int32_t;
};
template <>
struct DeviceTypeOf<DType::kU8> {
  using type = uint8_t;
};
template <>
struct DeviceTypeOf<DType::kBool> {
  using type = uint8_t;
};
template <DType D>
using DeviceType = typename DeviceTypeOf<D>::type;

// ---- kernels bound to the stream -----------------------------------------------------

// A Kernel whose Run calls fn(ctx, stream); the stream is fixed when the node's kernel is
// created, so Run never looks up the backend.
template <typename F>
class CudaLambdaKernel : public Kernel {
 public:
  CudaLambdaKernel(cudaStream_t stream, F fn) : stream_(stream), fn_(std::move(fn)) {}
  absl::Status Run(KernelContext& ctx) override { return fn_(ctx, stream_); }

 private:
  cudaStream_t stream_;
  F fn_;
};

// fn: absl::Status(KernelContext&, cudaStream_t). Fails only if `backend` is not CUDA.
template <typename F>
absl::StatusOr<std::unique_ptr<Kernel>> MakeCudaKernel(Backend& backend, F fn) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  if (!cuda) return absl::InternalError(absl::StrCat("a CUDA kernel was given the '", backend.name(), "' backend"));
  return std::unique_ptr<Kernel>(new CudaLambdaKernel<F>(cuda->stream(), std::move(fn)));
}

// After a <<<...>>> launch: a launch-configuration error as a Status naming the kernel.
// Asynchronous faults surface at the next synchronisation (CudaBackend::Synchronize).
inline absl::Status LaunchStatus(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return absl::OkStatus();
  return CudaStatus(e, absl::StrCat("launching ", what).c_str());
}

constexpr int kThreadsPerBlock = 256;

// float4 (16-byte) loads and stores need the pointer 16-byte aligned.
inline bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Blocks for a grid-stride loop over n elements: enough to fill the device several times,
// never more than the grid limit.
inline unsigned BlocksFor(int64_t n, int threads = kThreadsPerBlock) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

template <typename F>
__global__ void ElementwiseKernel(int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) f(i);
}

// Runs f(i) for i in [0, n) on `stream`; f is a __device__ lambda (nvcc --extended-lambda).
template <typename F>
absl::Status LaunchElementwise(int64_t n, cudaStream_t stream, const char* what, F f) {
  if (n <= 0) return absl::OkStatus();
  ElementwiseKernel<<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(n, f);
  return LaunchStatus(what);
}

// ---- broadcasting --------------------------------------------------------------------

constexpr int kMaxRank = 8;

// Maps a flat output index to the offsets of up to two operands broadcast against the
// output (numpy rules, operands right-aligned; stride 0 along broadcast axes).
struct BroadcastIndexer {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};

  __host__ __device__ void Offsets(int64_t i, int64_t& a, int64_t& b) const {
    a = 0;
    b = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = i % out_dims[d];
      i /= out_dims[d];
      a += idx * a_strides[d];
      b += idx * b_strides[d];
    }
  }
};

// Row-major strides of `in` aligned to `out`'s rank, 0 where `in` broadcasts.
inline void AlignedStrides(const Shape& in, const Shape& out, int64_t* strides) {
  const int rank = static_cast<int>(out.size()), off = rank - static_cast<int>(in.size());
  int64_t s = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const int k = d - off;
    if (k < 0 || in[k] == 1) {
      strides[d] = 0;
    } else {
      strides[d] = s;
    }
    if (k >= 0) s *= in[k];
  }
}

// Error when out's rank exceeds kMaxRank; `op` names the node's op for the message.
inline absl::StatusOr<BroadcastIndexer> MakeBroadcastIndexer(const Shape& a, const Shape& b, const Shape& out,
                                                             const std::string& op) {
  if (out.size() > static_cast<size_t>(kMaxRank)) {
    return absl::UnimplementedError(
        absl::StrCat(op, " on CUDA supports up to ", kMaxRank, " dimensions; got ", ShapeToString(out)));
  }
  BroadcastIndexer ix;
  ix.rank = static_cast<int>(out.size());
  for (int d = 0; d < ix.rank; ++d) ix.out_dims[d] = out[d];
  AlignedStrides(a, out, ix.a_strides);
  AlignedStrides(b, out, ix.b_strides);
  return ix;
}

// ---- registration --------------------------------------------------------------------

// Registers Factory<float>, Factory<__nv_bfloat16> and Factory<__half> for `op` on "cuda".
// (No f64: the CPU backend's f64 kernels are the reference; the GPU runs f32 and below.)
template <template <typename> class Factory>
void RegisterCudaFloatKernels(KernelRegistry& r, const std::string& op) {
  r.Register(op, "cuda", DType::kF32, Factory<float>::Create);
  r.Register(op, "cuda", DType::kBF16, Factory<__nv_bfloat16>::Create);
  r.Register(op, "cuda", DType::kF16, Factory<__half>::Create);
}

}  // namespace mpc::cuda
