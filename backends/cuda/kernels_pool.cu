// CUDA pooling kernels: MaxPool, AveragePool, their gradients MaxPoolGrad and
// AveragePoolGrad, GlobalAveragePool and GlobalMaxPool, in f32, bf16 and f16 (what the CPU
// backend registers, minus f64); plus the device helpers the cuDNN convolutions of
// kernels_conv.cc need (zero-padding / cropping planes, adding a per-channel bias, and the
// NCHW <-> NHWC transposes of the channels-last path).
//
// Semantics are those of backends/cpu/kernels_pool.cc, which is the reference, with the
// window resolved by the same graph helper (conv::ResolveWindow, ONNX opset-17 rules):
//   - a window's taps are visited row by row (kh outer, kw inner), skipping taps outside
//     the input; with ceil_mode ONNX keeps a last window that starts in the end padding:
//     it has no taps, MaxPool and AveragePool give 0 there and it routes no gradient;
//   - MaxPool takes the FIRST maximum in that order (strictly greater replaces); a NaN
//     always replaces (PyTorch's rule), so the last NaN of a window wins and the output
//     is NaN, exactly as the CPU loop;
//   - AveragePool divides by the valid taps, or with count_include_pad by the taps inside
//     the explicitly padded extent [-pad_begin, in + pad_end) (the ceil_mode overhang is
//     not counted); a window with count 0 gives 0;
//   - the gradients are gathers, not scatters: one thread per dX element visits, in raster
//     order, the windows that contain it and sums their contributions in f32, the same
//     additions in the same order as the CPU's per-plane accumulator, so they are
//     deterministic and match the CPU bit for bit. MaxPoolGrad first records each
//     window's argmax (recomputed from X with the forward's tie-breaking) in an int32
//     scratch buffer allocated at kernel creation; dX sums dY over the windows whose
//     argmax is that element;
//   - GlobalAveragePool / GlobalMaxPool reduce each N x C plane (any number of spatial
//     axes) with one thread block in f32; the mean's summation order differs from the
//     CPU's sequential sum (not bit-identical); the max is exact, and NaN when any element
//     is (as on the CPU).
// Everything accumulates in f32 and rounds once on store (cuda_kernel_util.cuh). The
// per-element functors are __host__ __device__ so their index arithmetic can be checked
// against the CPU loops on a machine without a GPU.
#include <climits>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/conv_families.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/tensor_families.h"
#include "base/status_macros.h"
#include "graph/ops_conv_util.h"

namespace mpc::cuda {
namespace {

// ---- window geometry -------------------------------------------------------------------

// A pooling node's window in 2-D form (a 1-D pool has H = 1, kernel 1, stride 1, no
// pads), passed to the device by value.
struct PoolWindow {
  int64_t planes = 0;  // N x C
  int64_t ih = 1, iw = 1, kh = 1, kw = 1, oh = 1, ow = 1;
  int64_t sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0, pb = 0, pr = 0;  // top, left, bottom, right
  bool include_pad = false;
};

absl::Status NodeError(const Node& node, const absl::Status& s) {
  return absl::Status(s.code(), absl::StrCat("cuda ", node.op, " kernel for node '", node.name, "': ", s.message()));
}

// x_shape: the forward input's shape [N, C, (H,) W]; kernel from kernel_shape.
absl::StatusOr<PoolWindow> PoolWindowOf(const Node& node, const Shape& x_shape) {
  if (::mpc::conv::ChannelsLast(node)) {
    // The channels-last pass runs only for backends whose capabilities ask for it.
    return NodeError(node, absl::UnimplementedError("the CUDA pooling kernels read channels-first X only "
                                                    "(mpc_channels_last is set); compile for this backend, whose "
                                                    "capabilities leave it off"));
  }
  if (x_shape.size() != 3 && x_shape.size() != 4) {
    return NodeError(node, absl::UnimplementedError(
                               absl::StrCat("input shape ", ShapeToString(x_shape),
                                            " is not [N,C,W] or [N,C,H,W]; only 1-D and 2-D pooling is implemented")));
  }
  const std::vector<int64_t> spatial(x_shape.begin() + 2, x_shape.end());
  const std::vector<int64_t> kernel = node.attrs.GetInts("kernel_shape", {});
  if (kernel.size() != spatial.size()) {
    return NodeError(node, absl::InvalidArgumentError(absl::StrCat("kernel_shape has ", kernel.size(),
                                                                   " values; the input ", ShapeToString(x_shape),
                                                                   " has ", spatial.size(), " spatial axes")));
  }
  auto win = conv::ResolveWindow(node, spatial, kernel, /*pooling=*/true);
  if (!win.ok()) return NodeError(node, win.status());
  const conv::Window2D d = conv::To2D(*win);
  PoolWindow g;
  g.planes = x_shape[0] * x_shape[1];
  g.ih = d.ih, g.iw = d.iw, g.kh = d.kh, g.kw = d.kw, g.oh = d.oh, g.ow = d.ow;
  g.sh = d.sh, g.sw = d.sw, g.dh = d.dh, g.dw = d.dw;
  g.pt = d.pt, g.pl = d.pl, g.pb = d.pb, g.pr = d.pr;
  g.include_pad = node.attrs.GetInt("count_include_pad", 0) != 0;
  return g;
}

// The averaging divisor factor along one axis for a window starting at `start`: its taps
// inside [0, in), or (include_pad) inside the explicitly padded extent
// [-pad_begin, in + pad_end). As CountOf in the CPU kernels.
__host__ __device__ inline int64_t AxisCount(int64_t start, int64_t k, int64_t dil, int64_t in, int64_t pad_begin,
                                             int64_t pad_end, bool include_pad) {
  const int64_t lo = include_pad ? -pad_begin : 0;
  const int64_t hi = include_pad ? in + pad_end : in;
  int64_t n = 0;
  for (int64_t t = 0; t < k; ++t) {
    const int64_t p = start + t * dil;
    n += (p >= lo && p < hi) ? 1 : 0;
  }
  return n;
}

// Index within the plane of the first maximum of window (oh, ow); -1 if it has no taps.
template <typename T>
__host__ __device__ inline int64_t WindowArgMax(const T* xp, const PoolWindow& g, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
  int64_t best = -1;
  float best_v = 0.0f;
  for (int64_t kh = 0; kh < g.kh; ++kh) {
    const int64_t ih = h0 + kh * g.dh;
    if (ih < 0 || ih >= g.ih) continue;
    for (int64_t kw = 0; kw < g.kw; ++kw) {
      const int64_t iw = w0 + kw * g.dw;
      if (iw < 0 || iw >= g.iw) continue;
      const int64_t i = ih * g.iw + iw;
      const float v = ToAcc(xp[i]);
      if (best < 0 || v > best_v || v != v) {  // strict: ties keep the first maximum; NaN wins
        best = i;
        best_v = v;
      }
    }
  }
  return best;
}

// The windows along one axis that may contain input position `pos` (with start =
// o * stride - pad): o in [lo, hi]. Callers still check that pos is one of the window's
// (dilated) taps.
struct WindowRange {
  int64_t lo, hi;
};
__host__ __device__ inline WindowRange WindowsCovering(int64_t pos, int64_t pad, int64_t k, int64_t dil, int64_t stride,
                                                       int64_t out) {
  const int64_t a = pos + pad;  // >= 0: position relative to the padded origin
  const int64_t reach = (k - 1) * dil;
  // start <= pos  <=>  o <= a / stride;  pos <= start + reach  <=>  o >= ceil((a - reach) / stride).
  const int64_t lo = a > reach ? (a - reach + stride - 1) / stride : 0;
  const int64_t hi_unclamped = a / stride;
  return {lo, hi_unclamped < out - 1 ? hi_unclamped : out - 1};
}

// ---- forward ---------------------------------------------------------------------------

template <typename T>
struct MaxPoolFn {
  PoolWindow g;
  const T* x;
  T* y;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t ow = i % g.ow, t = i / g.ow, oh = t % g.oh, p = t / g.oh;
    const T* xp = x + p * g.ih * g.iw;
    const int64_t best = WindowArgMax(xp, g, oh, ow);
    y[i] = best >= 0 ? xp[best] : FromAcc<T>(0.0f);
  }
};

template <typename T>
struct AveragePoolFn {
  PoolWindow g;
  const T* x;
  T* y;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t ow = i % g.ow, t = i / g.ow, oh = t % g.oh, p = t / g.oh;
    const T* xp = x + p * g.ih * g.iw;
    const int64_t h0 = oh * g.sh - g.pt, w0 = ow * g.sw - g.pl;
    float sum = 0.0f;
    for (int64_t kh = 0; kh < g.kh; ++kh) {
      const int64_t ih = h0 + kh * g.dh;
      if (ih < 0 || ih >= g.ih) continue;
      for (int64_t kw = 0; kw < g.kw; ++kw) {
        const int64_t iw = w0 + kw * g.dw;
        if (iw < 0 || iw >= g.iw) continue;
        sum += ToAcc(xp[ih * g.iw + iw]);
      }
    }
    const int64_t count = AxisCount(h0, g.kh, g.dh, g.ih, g.pt, g.pb, g.include_pad) *
                          AxisCount(w0, g.kw, g.dw, g.iw, g.pl, g.pr, g.include_pad);
    y[i] = FromAcc<T>(count > 0 ? sum / static_cast<float>(count) : 0.0f);
  }
};

template <typename T>
struct MaxPoolKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const PoolWindow g, PoolWindowOf(node, node.inputs[0]->shape));
    const int64_t n = g.planes * g.oh * g.ow;
    return MakeCudaKernel(backend, [g, n](KernelContext& ctx, cudaStream_t stream) {
      return LaunchElementwise(n, stream, "MaxPool", MaxPoolFn<T>{g, ctx.inputs[0].as<T>(), ctx.outputs[0].as<T>()});
    });
  }
};

template <typename T>
struct AveragePoolKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const PoolWindow g, PoolWindowOf(node, node.inputs[0]->shape));
    const int64_t n = g.planes * g.oh * g.ow;
    return MakeCudaKernel(backend, [g, n](KernelContext& ctx, cudaStream_t stream) {
      return LaunchElementwise(n, stream, "AveragePool",
                               AveragePoolFn<T>{g, ctx.inputs[0].as<T>(), ctx.outputs[0].as<T>()});
    });
  }
};

// ---- gradients -------------------------------------------------------------------------

// MaxPoolGrad, pass 1: argmax[p][oh][ow] = the plane index of window (oh, ow)'s first
// maximum, or -1.
template <typename T>
struct MaxPoolArgMaxFn {
  PoolWindow g;
  const T* x;
  int32_t* argmax;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t ow = i % g.ow, t = i / g.ow, oh = t % g.oh, p = t / g.oh;
    argmax[i] = static_cast<int32_t>(WindowArgMax(x + p * g.ih * g.iw, g, oh, ow));
  }
};

// MaxPoolGrad, pass 2: dX[p][ih][iw] = sum of dY over the windows whose argmax is
// (ih, iw), in raster order of the windows (the CPU's order of accumulation).
template <typename T>
struct MaxPoolGatherFn {
  PoolWindow g;
  const T* dy;
  const int32_t* argmax;
  T* dx;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t iw = i % g.iw, t = i / g.iw, ih = t % g.ih, p = t / g.ih;
    const int32_t self = static_cast<int32_t>(ih * g.iw + iw);
    const WindowRange rh = WindowsCovering(ih, g.pt, g.kh, g.dh, g.sh, g.oh);
    const WindowRange rw = WindowsCovering(iw, g.pl, g.kw, g.dw, g.sw, g.ow);
    const int64_t base = p * g.oh * g.ow;
    float acc = 0.0f;
    for (int64_t oh = rh.lo; oh <= rh.hi; ++oh) {
      for (int64_t ow = rw.lo; ow <= rw.hi; ++ow) {
        const int64_t o = base + oh * g.ow + ow;
        if (argmax[o] == self) acc += ToAcc(dy[o]);
      }
    }
    dx[i] = FromAcc<T>(acc);
  }
};

// AveragePoolGrad: dX[p][ih][iw] = sum over the windows with (ih, iw) among their taps of
// dY / count, in raster order of the windows (the CPU's order of accumulation).
template <typename T>
struct AveragePoolGatherFn {
  PoolWindow g;
  const T* dy;
  T* dx;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t iw = i % g.iw, t = i / g.iw, ih = t % g.ih, p = t / g.ih;
    const WindowRange rh = WindowsCovering(ih, g.pt, g.kh, g.dh, g.sh, g.oh);
    const WindowRange rw = WindowsCovering(iw, g.pl, g.kw, g.dw, g.sw, g.ow);
    const T* dyp = dy + p * g.oh * g.ow;
    float acc = 0.0f;
    for (int64_t oh = rh.lo; oh <= rh.hi; ++oh) {
      const int64_t h0 = oh * g.sh - g.pt;
      if ((ih - h0) % g.dh != 0) continue;  // falls between this window's dilated taps
      const int64_t ch = AxisCount(h0, g.kh, g.dh, g.ih, g.pt, g.pb, g.include_pad);
      for (int64_t ow = rw.lo; ow <= rw.hi; ++ow) {
        const int64_t w0 = ow * g.sw - g.pl;
        if ((iw - w0) % g.dw != 0) continue;
        const int64_t count = ch * AxisCount(w0, g.kw, g.dw, g.iw, g.pl, g.pr, g.include_pad);
        if (count == 0) continue;
        acc += ToAcc(dyp[oh * g.ow + ow]) / static_cast<float>(count);
      }
    }
    dx[i] = FromAcc<T>(acc);
  }
};

// Device memory owned by a kernel: allocated at creation, freed with the kernel.
class DeviceScratch {
 public:
  DeviceScratch(Backend& backend, void* ptr) : backend_(&backend), ptr_(ptr) {}
  ~DeviceScratch() { backend_->Free(ptr_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  void* get() const { return ptr_; }

 private:
  Backend* backend_;
  void* ptr_;
};

// MaxPoolGrad(dY, X) -> dX.
template <typename T>
struct MaxPoolGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const PoolWindow g, PoolWindowOf(node, node.inputs[1]->shape));
    if (g.ih * g.iw > INT32_MAX) {
      return NodeError(node, absl::UnimplementedError(absl::StrCat("planes of ", g.ih, " x ", g.iw,
                                                                   " elements exceed the int32 argmax indices")));
    }
    const int64_t n_out = g.planes * g.oh * g.ow, n_in = g.planes * g.ih * g.iw;
    std::shared_ptr<DeviceScratch> argmax;
    if (n_out > 0) {
      MPC_ASSIGN_OR_RETURN(void* p, backend.Allocate(static_cast<size_t>(n_out) * sizeof(int32_t)));
      argmax = std::make_shared<DeviceScratch>(backend, p);
    }
    return MakeCudaKernel(backend, [g, n_out, n_in, argmax](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      int32_t* am = argmax ? static_cast<int32_t*>(argmax->get()) : nullptr;
      MPC_RETURN_IF_ERROR(
          LaunchElementwise(n_out, stream, "MaxPoolGrad (argmax)", MaxPoolArgMaxFn<T>{g, ctx.inputs[1].as<T>(), am}));
      return LaunchElementwise(n_in, stream, "MaxPoolGrad (gather)",
                               MaxPoolGatherFn<T>{g, ctx.inputs[0].as<T>(), am, ctx.outputs[0].as<T>()});
    });
  }
};

// AveragePoolGrad(dY) -> dX of shape input_shape (the node's output).
template <typename T>
struct AveragePoolGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(const PoolWindow g, PoolWindowOf(node, node.outputs[0]->shape));
    const int64_t n = g.planes * g.ih * g.iw;
    return MakeCudaKernel(backend, [g, n](KernelContext& ctx, cudaStream_t stream) {
      return LaunchElementwise(n, stream, "AveragePoolGrad",
                               AveragePoolGatherFn<T>{g, ctx.inputs[0].as<T>(), ctx.outputs[0].as<T>()});
    });
  }
};

// ---- global pooling --------------------------------------------------------------------

constexpr int kWarp = 32;
constexpr int kMaxGlobalPoolThreads = 256;

// One block per plane (grid-strided over planes): y[p] = mean or max of x[p][0..size).
// The max is NaN when any element is (fmaxf alone would drop NaNs), as on the CPU.
__device__ __forceinline__ float NanMax(float a, float b) { return a != a ? a : (b != b ? b : fmaxf(a, b)); }

template <typename T, bool kMax>
__global__ void GlobalPoolKernel(const T* x, T* y, int64_t planes, int64_t size) {
  __shared__ float partial[kMaxGlobalPoolThreads / kWarp];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int warps = (blockDim.x + kWarp - 1) / kWarp;
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T* xp = x + p * size;
    float acc = kMax ? -__int_as_float(0x7f800000) : 0.0f;  // -inf: the identity of fmaxf
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) {
      const float v = ToAcc(xp[i]);
      acc = kMax ? NanMax(acc, v) : acc + v;
    }
    for (int off = kWarp / 2; off > 0; off /= 2) {
      const float other = __shfl_down_sync(0xffffffffu, acc, off);
      acc = kMax ? NanMax(acc, other) : acc + other;
    }
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      float r = partial[0];
      for (int w = 1; w < warps; ++w) r = kMax ? NanMax(r, partial[w]) : r + partial[w];
      if (!kMax) r = r / static_cast<float>(size);
      y[p] = FromAcc<T>(r);
    }
    __syncthreads();  // partial[] is reused by the next plane
  }
}

// GlobalAveragePool / GlobalMaxPool over any number of spatial axes.
template <bool kMax>
struct GlobalPool {
  template <typename T>
  struct For {
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
      const Shape& xs = node.inputs[0]->shape;
      if (xs.size() < 3) {
        return NodeError(
            node, absl::InvalidArgumentError(absl::StrCat("X ", ShapeToString(xs), " is not [N, C, spatial...]")));
      }
      const int64_t planes = xs[0] * xs[1];
      const int64_t size = NumElements(Shape(xs.begin() + 2, xs.end()));
      // Whole warps (the shuffle reduction needs full warps), no more than the plane needs.
      int64_t threads = (size + kWarp - 1) / kWarp * kWarp;
      if (threads < kWarp) threads = kWarp;
      if (threads > kMaxGlobalPoolThreads) threads = kMaxGlobalPoolThreads;
      const unsigned blocks = static_cast<unsigned>(planes < (1 << 20) ? planes : (1 << 20));
      return MakeCudaKernel(
          backend, [planes, size, threads, blocks](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
            if (planes <= 0) return absl::OkStatus();
            T* y = ctx.outputs[0].as<T>();
            if (size <= 0) {  // no elements: 0 per plane, as the CPU
              MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(y, 0, static_cast<size_t>(planes) * sizeof(T), stream));
              return absl::OkStatus();
            }
            GlobalPoolKernel<T, kMax>
                <<<blocks, static_cast<unsigned>(threads), 0, stream>>>(ctx.inputs[0].as<T>(), y, planes, size);
            return LaunchStatus(kMax ? "GlobalMaxPool" : "GlobalAveragePool");
          });
    }
  };
};

// ---- helpers for the cuDNN convolutions (kernels_conv.cc) --------------------------------

// U: the element's storage (uint32_t for f32, uint16_t for bf16/f16); a copy moves bits.
template <typename U>
struct CopyShiftedFn {
  const U* src;
  U* dst;
  int64_t src_h, src_w, dst_h, dst_w, row_shift, col_shift;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t c = i % dst_w, t = i / dst_w, r = t % dst_h, p = t / dst_h;
    const int64_t sr = r + row_shift, sc = c + col_shift;
    dst[i] = (sr >= 0 && sr < src_h && sc >= 0 && sc < src_w) ? src[(p * src_h + sr) * src_w + sc] : U(0);
  }
};

template <typename T>
struct AddChannelBiasFn {
  T* y;
  const T* bias;
  int64_t channels, spatial;
  __host__ __device__ void operator()(int64_t i) const {
    const int64_t m = (i / spatial) % channels;
    y[i] = FromAcc<T>(ToAcc(y[i]) + ToAcc(bias[m]));
  }
};

}  // namespace

absl::Status LaunchCopyPlanesShifted(DType dtype, const void* src, int64_t src_h, int64_t src_w, void* dst,
                                     int64_t dst_h, int64_t dst_w, int64_t planes, int64_t row_shift, int64_t col_shift,
                                     cudaStream_t stream) {
  const int64_t n = planes * dst_h * dst_w;
  switch (dtype) {
    case DType::kF32:
      return LaunchElementwise(n, stream, "CopyPlanesShifted",
                               CopyShiftedFn<uint32_t>{static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst),
                                                       src_h, src_w, dst_h, dst_w, row_shift, col_shift});
    case DType::kBF16:
    case DType::kF16:
      return LaunchElementwise(n, stream, "CopyPlanesShifted",
                               CopyShiftedFn<uint16_t>{static_cast<const uint16_t*>(src), static_cast<uint16_t*>(dst),
                                                       src_h, src_w, dst_h, dst_w, row_shift, col_shift});
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("CopyPlanesShifted: dtype ", DTypeName(dtype), " is not f32, bf16 or f16"));
  }
}

absl::Status LaunchAddChannelBias(DType dtype, void* y, const void* bias, int64_t batch, int64_t channels,
                                  int64_t spatial, cudaStream_t stream) {
  const int64_t n = batch * channels * spatial;
  switch (dtype) {
    case DType::kF32:
      return LaunchElementwise(
          n, stream, "AddChannelBias",
          AddChannelBiasFn<float>{static_cast<float*>(y), static_cast<const float*>(bias), channels, spatial});
    case DType::kBF16:
      return LaunchElementwise(
          n, stream, "AddChannelBias",
          AddChannelBiasFn<__nv_bfloat16>{static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(bias),
                                          channels, spatial});
    case DType::kF16:
      return LaunchElementwise(
          n, stream, "AddChannelBias",
          AddChannelBiasFn<__half>{static_cast<__half*>(y), static_cast<const __half*>(bias), channels, spatial});
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("AddChannelBias: dtype ", DTypeName(dtype), " is not f32, bf16 or f16"));
  }
}

absl::StatusOr<MatrixTranspose> MatrixTranspose::Make(int64_t outer, int64_t rows, int64_t cols, size_t elem_bytes) {
  // The index space in destination order (StridedCopy takes the tiled path when the last
  // axis is the destination's contiguous one): element (o, c, r) moves from
  // src[(o*rows + r)*cols + c] to dst[(o*cols + c)*rows + r].
  MPC_ASSIGN_OR_RETURN(StridedCopy copy,
                       StridedCopy::Make(Shape{outer, cols, rows}, {rows * cols, 1, cols}, 0, {rows * cols, rows, 1}, 0,
                                         elem_bytes, "NCHW <-> NHWC transpose"));
  MatrixTranspose t;
  t.copy_ = std::make_shared<const StridedCopy>(std::move(copy));
  return t;
}

absl::Status MatrixTranspose::Launch(const void* src, void* dst, cudaStream_t stream) const {
  if (!copy_) return absl::FailedPreconditionError("MatrixTranspose::Launch before Make");
  return copy_->Launch(src, dst, stream);
}

}  // namespace mpc::cuda

namespace mpc {

namespace cuda {

void RegisterCudaPoolKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<MaxPoolKernel>(r, "MaxPool");
  RegisterCudaFloatKernels<MaxPoolGradKernel>(r, "MaxPoolGrad");
  RegisterCudaFloatKernels<AveragePoolKernel>(r, "AveragePool");
  RegisterCudaFloatKernels<AveragePoolGradKernel>(r, "AveragePoolGrad");
  RegisterCudaFloatKernels<GlobalPool<false>::For>(r, "GlobalAveragePool");
  RegisterCudaFloatKernels<GlobalPool<true>::For>(r, "GlobalMaxPool");
}

}  // namespace cuda
}  // namespace mpc
