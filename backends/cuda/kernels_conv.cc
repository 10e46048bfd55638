// CUDA convolution kernels on cuDNN: Conv (forward, optional bias), ConvGradInput
// (backward data) and ConvGradWeight (backward filter) of the graph's NCHW tensors, 1-D
// and 2-D (1-D runs as 2-D with H = 1), any strides / pads / dilations / groups (depthwise
// included), in f32, bf16 and f16. Semantics: backends/cpu/kernels_conv.cc and graph/ops_conv.cc; the window
// (strides, dilations, pads, auto_pad) is resolved by the same graph helper
// (conv::ResolveWindow). Conv's bias gradient is a separate ReduceSumTo node, not here.
//
// cuDNN 9's legacy convolution API (cudnn_cnn: tensor / filter / convolution descriptors,
// cudnnConvolutionForward / BackwardData / BackwardFilter; deprecated in cuDNN 9 but
// present) with everything built at kernel creation: the descriptors, the algorithm
// (cudnnGet*Algorithm_v7 heuristics, the fastest-ranked one that succeeds, fits
// kMaxWorkspaceBytes and is deterministic, else the fastest that fits) and its workspace
// size, reserved in the backend's one convolution workspace. The cuDNN handle is the
// backend's, bound to its stream. Run only enqueues work on the stream.
//
// Numerics: compute type f32 for every dtype (bf16 / f16 tensors with f32 accumulation,
// cuDNN's PSEUDO_*_CONFIG), rounded once to the output dtype by cuDNN. f32 runs with
// CUDNN_FMA_MATH (true f32, no TF32) unless the node carries mpc_tf32 = 1 and the device
// has TF32, as the Gemm; bf16 / f16 may use tensor cores. The bias is added after the
// convolution by a small kernel (kernels_pool.cu) in f32: exact for f32, but for bf16 /
// f16 the convolution result is already rounded, so the biased output is rounded twice
// (the CPU rounds once); the difference is at most about one unit in the last place.
//
// Pads: cuDNN takes one pad per axis, applied at both ends. Asymmetric pads (explicit, or
// from auto_pad SAME_* with an even kernel extent) are split: cuDNN applies min(begin, end)
// and the rest is applied explicitly through a scratch buffer: X is
// zero-padded into it (Conv, ConvGradWeight), or cuDNN writes the padded dX there and the
// interior is cropped out (ConvGradInput). That buffer, the channels-last copies below and
// cuDNN's workspace are all pieces of the backend's one convolution scratch buffer.
//
// Layout: cuDNN's tensor-core convolution kernels for bf16 / f16 are channels-last (NHWC
// activations, KRSC filters); given NCHW it runs NCHW kernels or transposes internally.
// So a bf16 / f16 convolution without groups whose channel counts are multiples of 8 (the
// tensor cores' alignment) runs channels-last: its operands are transposed into scratch
// buffers (MatrixTranspose, planned at creation), cuDNN runs on NHWC descriptors and the
// result is transposed back, the graph staying NCHW. f32 stays NCHW (FMA math, no tensor
// cores). The node attribute mpc_conv_layout or the environment variable
// MPC_CUDA_CONV_LAYOUT (nchw | nhwc | auto) overrides the choice, so the two layouts can
// be compared on a device and tested against the CPU.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/conv_families.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/cuda_status.h"
#include "backends/cuda/cudnn_status.h"
#include "base/status_macros.h"
#include "graph/ops_conv_util.h"

namespace mpc::cuda {
namespace {

enum class ConvMode { kForward, kGradInput, kGradWeight };
enum class ConvLayout { kNchw, kNhwc };

// Workspace cap per algorithm. The workspace is one buffer shared by every convolution
// (CudaBackend::ReserveConvWorkspace), so this bounds the whole, not a per-kernel sum;
// algorithms wanting more are passed over for the next-ranked one.
constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

// The geometry of one convolution in 2-D form, as the CPU kernels compute it.
struct ConvGeom {
  int64_t n = 0, c = 0, m = 0, g = 1;
  conv::Window2D w;
};

absl::StatusOr<ConvGeom> ConvGeomOf(const Node& node, ConvMode mode) {
  const Shape& x = mode == ConvMode::kForward     ? node.inputs[0]->shape
                   : mode == ConvMode::kGradInput ? node.outputs[0]->shape
                                                  : node.inputs[1]->shape;
  const Shape& wt = mode == ConvMode::kGradWeight ? node.outputs[0]->shape : node.inputs[1]->shape;
  if ((x.size() != 3 && x.size() != 4) || wt.size() != x.size()) {
    return absl::UnimplementedError(absl::StrCat("X ", ShapeToString(x), " and W ", ShapeToString(wt),
                                                 " are not both [N,C,W] / [M,C/g,kW] or [N,C,H,W] / [M,C/g,kH,kW]; "
                                                 "only 1-D and 2-D convolutions are implemented"));
  }
  MPC_ASSIGN_OR_RETURN(const conv::Window win,
                       conv::ResolveWindow(node, std::vector<int64_t>(x.begin() + 2, x.end()),
                                           std::vector<int64_t>(wt.begin() + 2, wt.end()), /*pooling=*/false));
  ConvGeom q;
  q.n = x[0];
  q.c = x[1];
  q.m = wt[0];
  q.g = node.attrs.GetInt("group", 1);
  q.w = conv::To2D(win);
  if (q.g < 1 || q.c % q.g != 0 || q.m % q.g != 0 || wt[1] * q.g != q.c) {
    return absl::InvalidArgumentError(
        absl::StrCat("X ", ShapeToString(x), " and W ", ShapeToString(wt), " do not fit group=", q.g));
  }
  return q;
}

absl::StatusOr<cudnnDataType_t> CudnnType(DType d) {
  switch (d) {
    case DType::kF32:
      return CUDNN_DATA_FLOAT;
    case DType::kBF16:
      return CUDNN_DATA_BFLOAT16;
    case DType::kF16:
      return CUDNN_DATA_HALF;
    default:
      return absl::UnimplementedError(absl::StrCat("dtype ", DTypeName(d), " is not f32, bf16 or f16"));
  }
}

// See the header comment: the attribute, else the environment, else channels-last for
// bf16 / f16 convolutions the tensor cores take as they are.
absl::StatusOr<ConvLayout> ChooseLayout(const Node& node, DType dtype, const ConvGeom& q) {
  std::string choice = node.attrs.GetString("mpc_conv_layout", "");
  const char* source = "attribute mpc_conv_layout";
  if (choice.empty()) {
    const char* env = std::getenv("MPC_CUDA_CONV_LAYOUT");
    choice = env ? env : "auto";
    source = "MPC_CUDA_CONV_LAYOUT";
  }
  if (choice == "nchw") return ConvLayout::kNchw;
  if (choice == "nhwc") return ConvLayout::kNhwc;
  if (choice != "auto") {
    return absl::InvalidArgumentError(
        absl::StrCat(source, " is '", choice, "'; use nchw, nhwc or auto (channels-last for bf16/f16)"));
  }
  const bool half = dtype == DType::kBF16 || dtype == DType::kF16;
  return half && q.g == 1 && q.c % 8 == 0 && q.m % 8 == 0 ? ConvLayout::kNhwc : ConvLayout::kNchw;
}

const char* ModeName(ConvMode mode) {
  switch (mode) {
    case ConvMode::kForward:
      return "forward";
    case ConvMode::kGradInput:
      return "backward-data";
    case ConvMode::kGradWeight:
      return "backward-filter";
  }
  return "?";
}

bool IsTensorOpMath(cudnnMathType_t t) {
  return t == CUDNN_TENSOR_OP_MATH || t == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The heuristics' ranked results -> the one to run: the first that succeeds, fits the
// workspace cap and (when fma_only) does not use tensor cores, preferring deterministic
// algorithms (results reproducible from run to run, like the CPU's).
template <typename Perf>
absl::StatusOr<Perf> PickAlgo(const std::vector<Perf>& perfs, int returned, bool fma_only, const std::string& what) {
  for (bool need_deterministic : {true, false}) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perfs[i];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > kMaxWorkspaceBytes) continue;
      if (need_deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      if (fma_only && IsTensorOpMath(p.mathType)) continue;
      return p;
    }
  }
  std::string tried;
  for (int i = 0; i < returned; ++i) {
    absl::StrAppend(&tried, i ? ", " : "", "algo ", static_cast<int>(perfs[i].algo), ": ",
                    cudnnGetErrorString(perfs[i].status), ", ", perfs[i].memory, " bytes",
                    IsTensorOpMath(perfs[i].mathType) ? ", tensor ops" : "");
  }
  return absl::UnimplementedError(absl::StrCat(
      "cuDNN offers no usable algorithm for ", what, " within a workspace of ", kMaxWorkspaceBytes >> 20, " MiB",
      fma_only ? " without tensor cores" : "", " (heuristics: ", tried.empty() ? "none" : tried, ")"));
}

class CudnnConvKernel : public Kernel {
 public:
  template <ConvMode kMode>
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    std::unique_ptr<CudnnConvKernel> k(new CudnnConvKernel());
    absl::Status s = k->Init(node, backend, kMode);
    if (!s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("cuda ", node.op, " kernel for node '", node.name, "': ", s.message()));
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  ~CudnnConvKernel() override {
    // Teardown errors are ignored: there is no one left to report them to.
    if (conv_desc_) cudnnDestroyConvolutionDescriptor(conv_desc_);
    if (w_desc_) cudnnDestroyFilterDescriptor(w_desc_);
    if (y_desc_) cudnnDestroyTensorDescriptor(y_desc_);
    if (x_desc_) cudnnDestroyTensorDescriptor(x_desc_);
  }

  absl::Status Run(KernelContext& ctx) override {
    const float one = 1.0f, zero = 0.0f;  // f32 scaling factors: the compute type is f32
    const conv::Window2D& d = q_.w;
    const int64_t planes = q_.n * q_.c;
    // This run's pieces of the backend's shared scratch (see ScratchLayout).
    char* scratch = static_cast<char*>(backend_->conv_workspace());
    void* workspace = workspace_bytes_ > 0 ? scratch : nullptr;
    padded_ = scratch_.padded >= 0 ? scratch + scratch_.padded : nullptr;
    x_nhwc_ = scratch_.x_nhwc >= 0 ? scratch + scratch_.x_nhwc : nullptr;
    y_nhwc_ = scratch_.y_nhwc >= 0 ? scratch + scratch_.y_nhwc : nullptr;
    w_nhwc_ = scratch_.w_nhwc >= 0 ? scratch + scratch_.w_nhwc : nullptr;
    switch (mode_) {
      case ConvMode::kForward: {
        MPC_ASSIGN_OR_RETURN(const void* x, PaddedX(ctx.inputs[0].data));
        const void* w = ctx.inputs[1].data;
        void* y = ctx.outputs[0].data;
        if (nhwc()) {
          MPC_RETURN_IF_ERROR(x_transpose_.Launch(x, x_nhwc_, stream_));
          MPC_RETURN_IF_ERROR(w_transpose_.Launch(w, w_nhwc_, stream_));
          x = x_nhwc_;
          w = w_nhwc_;
          y = y_nhwc_;
        }
        MPC_RETURN_IF_ERROR(Check(cudnnConvolutionForward(handle_, &one, x_desc_, x, w_desc_, w, conv_desc_, fwd_algo_,
                                                          workspace, workspace_bytes_, &zero, y_desc_, y),
                                  "cudnnConvolutionForward"));
        if (nhwc()) MPC_RETURN_IF_ERROR(y_transpose_.Launch(y_nhwc_, ctx.outputs[0].data, stream_));
        if (has_bias_) {
          MPC_RETURN_IF_ERROR(
              LaunchAddChannelBias(dtype_, ctx.outputs[0].data, ctx.inputs[2].data, q_.n, q_.m, d.oh * d.ow, stream_));
        }
        return absl::OkStatus();
      }
      case ConvMode::kGradInput: {
        void* dx_nchw = padded_ ? padded_ : ctx.outputs[0].data;
        const void* dy = ctx.inputs[0].data;
        const void* w = ctx.inputs[1].data;
        void* dx = dx_nchw;
        if (nhwc()) {
          MPC_RETURN_IF_ERROR(y_transpose_.Launch(dy, y_nhwc_, stream_));
          MPC_RETURN_IF_ERROR(w_transpose_.Launch(w, w_nhwc_, stream_));
          dy = y_nhwc_;
          w = w_nhwc_;
          dx = x_nhwc_;
        }
        MPC_RETURN_IF_ERROR(
            Check(cudnnConvolutionBackwardData(handle_, &one, w_desc_, w, y_desc_, dy, conv_desc_, bwd_data_algo_,
                                               workspace, workspace_bytes_, &zero, x_desc_, dx),
                  "cudnnConvolutionBackwardData"));
        if (nhwc()) MPC_RETURN_IF_ERROR(x_transpose_.Launch(x_nhwc_, dx_nchw, stream_));
        if (padded_) {
          MPC_RETURN_IF_ERROR(LaunchCopyPlanesShifted(dtype_, padded_, ph_, pw_, ctx.outputs[0].data, d.ih, d.iw,
                                                      planes, pad_top_, pad_left_, stream_));
        }
        return absl::OkStatus();
      }
      case ConvMode::kGradWeight: {
        MPC_ASSIGN_OR_RETURN(const void* x, PaddedX(ctx.inputs[1].data));
        const void* dy = ctx.inputs[0].data;
        void* dw = ctx.outputs[0].data;
        if (nhwc()) {
          MPC_RETURN_IF_ERROR(x_transpose_.Launch(x, x_nhwc_, stream_));
          MPC_RETURN_IF_ERROR(y_transpose_.Launch(dy, y_nhwc_, stream_));
          x = x_nhwc_;
          dy = y_nhwc_;
          dw = w_nhwc_;
        }
        MPC_RETURN_IF_ERROR(
            Check(cudnnConvolutionBackwardFilter(handle_, &one, x_desc_, x, y_desc_, dy, conv_desc_, bwd_filter_algo_,
                                                 workspace, workspace_bytes_, &zero, w_desc_, dw),
                  "cudnnConvolutionBackwardFilter"));
        if (nhwc()) MPC_RETURN_IF_ERROR(w_transpose_.Launch(w_nhwc_, ctx.outputs[0].data, stream_));
        return absl::OkStatus();
      }
    }
    return absl::InternalError("unknown convolution mode");
  }

 private:
  CudnnConvKernel() = default;

  bool nhwc() const { return layout_ == ConvLayout::kNhwc; }

  // X as cuDNN reads it: x itself, or (asymmetric pads) x zero-padded into padded_.
  absl::StatusOr<const void*> PaddedX(const void* x) const {
    if (!padded_) return x;
    const conv::Window2D& d = q_.w;
    MPC_RETURN_IF_ERROR(
        LaunchCopyPlanesShifted(dtype_, x, d.ih, d.iw, padded_, ph_, pw_, q_.n * q_.c, -pad_top_, -pad_left_, stream_));
    return static_cast<const void*>(padded_);
  }

  absl::Status Check(cudnnStatus_t s, const char* call) const {
    if (s == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
    return CudnnStatus(s, absl::StrCat(call, " (", what_, ")").c_str());
  }

  absl::Status Init(const Node& node, Backend& backend, ConvMode mode) {
    if (::mpc::conv::ChannelsLast(node)) {
      // The channels-last pass runs only for backends whose capabilities ask for it.
      return absl::UnimplementedError(
          "the cuDNN kernel reads channels-first activations only (mpc_channels_last is set); compile for this "
          "backend, whose capabilities leave it off");
    }
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    backend_ = cuda;
    stream_ = cuda->stream();
    mode_ = mode;
    dtype_ = node.inputs[0]->dtype;
    MPC_ASSIGN_OR_RETURN(const cudnnDataType_t data_type, CudnnType(dtype_));
    MPC_ASSIGN_OR_RETURN(q_, ConvGeomOf(node, mode));
    const conv::Window2D& d = q_.w;
    has_bias_ = mode == ConvMode::kForward && node.inputs.size() > 2 && node.inputs[2] != nullptr;
    MPC_ASSIGN_OR_RETURN(layout_, ChooseLayout(node, dtype_, q_));
    const bool tf32 = dtype_ == DType::kF32 && node.attrs.GetInt("mpc_tf32", 0) != 0 && cuda->capabilities().tf32;
    const bool fma_only = dtype_ == DType::kF32 && !tf32;

    // Pads: cuDNN applies the symmetric part, the scratch buffer the rest.
    const int64_t sym_h = std::min(d.pt, d.pb), sym_w = std::min(d.pl, d.pr);
    pad_top_ = d.pt - sym_h;
    pad_left_ = d.pl - sym_w;
    ph_ = d.ih + pad_top_ + (d.pb - sym_h);
    pw_ = d.iw + pad_left_ + (d.pr - sym_w);
    const bool explicit_pad = ph_ != d.ih || pw_ != d.iw;

    what_ = absl::StrCat(ModeName(mode), " convolution of X [", q_.n, ",", q_.c, ",", d.ih, ",", d.iw, "] with W [",
                         q_.m, ",", q_.c / q_.g, ",", d.kh, ",", d.kw, "] -> Y [", q_.n, ",", q_.m, ",", d.oh, ",",
                         d.ow, "], strides ", d.sh, "x", d.sw, ", dilations ", d.dh, "x", d.dw, ", pads t", d.pt, " l",
                         d.pl, " b", d.pb, " r", d.pr, ", group ", q_.g, ", ", DTypeName(dtype_), tf32 ? ", TF32" : "",
                         nhwc() ? ", run channels-last (NHWC)" : "");
    for (int64_t v : {q_.n, q_.c, q_.m, q_.g, ph_, pw_, d.kh, d.kw, d.oh, d.ow, d.sh, d.sw, d.dh, d.dw, sym_h, sym_w}) {
      if (v > INT_MAX) {
        return absl::UnimplementedError(absl::StrCat(what_, ": an extent exceeds cuDNN's int range"));
      }
    }
    auto i32 = [](int64_t v) { return static_cast<int>(v); };

    MPC_CUDA_RETURN_IF_ERROR(cudaSetDevice(cuda->device()));
    MPC_ASSIGN_OR_RETURN(handle_, cuda->Cudnn());
    MPC_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&x_desc_));
    MPC_CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&y_desc_));
    MPC_CUDNN_RETURN_IF_ERROR(cudnnCreateFilterDescriptor(&w_desc_));
    MPC_CUDNN_RETURN_IF_ERROR(cudnnCreateConvolutionDescriptor(&conv_desc_));
    // Dimensions are always given as N, C, H, W (K, C, R, S); the format sets the strides.
    const cudnnTensorFormat_t format = nhwc() ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    MPC_RETURN_IF_ERROR(
        Check(cudnnSetTensor4dDescriptor(x_desc_, format, data_type, i32(q_.n), i32(q_.c), i32(ph_), i32(pw_)),
              "cudnnSetTensor4dDescriptor(X)"));
    MPC_RETURN_IF_ERROR(
        Check(cudnnSetTensor4dDescriptor(y_desc_, format, data_type, i32(q_.n), i32(q_.m), i32(d.oh), i32(d.ow)),
              "cudnnSetTensor4dDescriptor(Y)"));
    MPC_RETURN_IF_ERROR(
        Check(cudnnSetFilter4dDescriptor(w_desc_, data_type, format, i32(q_.m), i32(q_.c / q_.g), i32(d.kh), i32(d.kw)),
              "cudnnSetFilter4dDescriptor(W)"));
    MPC_RETURN_IF_ERROR(
        Check(cudnnSetConvolution2dDescriptor(conv_desc_, i32(sym_h), i32(sym_w), i32(d.sh), i32(d.sw), i32(d.dh),
                                              i32(d.dw), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              "cudnnSetConvolution2dDescriptor"));
    MPC_RETURN_IF_ERROR(Check(cudnnSetConvolutionGroupCount(conv_desc_, i32(q_.g)), "cudnnSetConvolutionGroupCount"));
    // FMA: true f32. DEFAULT permits TF32 on sm_80+. Tensor cores for bf16 / f16.
    const cudnnMathType_t math = fma_only ? CUDNN_FMA_MATH : tf32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH;
    MPC_RETURN_IF_ERROR(Check(cudnnSetConvolutionMathType(conv_desc_, math), "cudnnSetConvolutionMathType"));

    // cuDNN's idea of the output must be the graph's (same window arithmetic).
    int on = 0, oc = 0, oh = 0, ow = 0;
    MPC_RETURN_IF_ERROR(Check(cudnnGetConvolution2dForwardOutputDim(conv_desc_, x_desc_, w_desc_, &on, &oc, &oh, &ow),
                              "cudnnGetConvolution2dForwardOutputDim"));
    if (on != q_.n || oc != q_.m || oh != d.oh || ow != d.ow) {
      return absl::InternalError(
          absl::StrCat(what_, ": cuDNN computes the output as [", on, ",", oc, ",", oh, ",", ow, "], not the graph's"));
    }

    MPC_RETURN_IF_ERROR(ChooseAlgorithm(fma_only));
    if (nhwc()) MPC_RETURN_IF_ERROR(PlanChannelsLast());
    // The scratch: [cuDNN workspace | padded X / dX | X / dX NHWC | Y / dY NHWC | W / dW KRSC],
    // each piece 256-byte aligned, inside the backend's one convolution workspace.
    const size_t es = DTypeSize(dtype_);
    int64_t used = 0;
    auto take = [&used](size_t bytes) {
      const int64_t at = used;
      used += static_cast<int64_t>((bytes + 255) / 256 * 256);
      return at;
    };
    take(workspace_bytes_);
    if (explicit_pad) scratch_.padded = take(static_cast<size_t>(q_.n * q_.c * ph_ * pw_) * es);
    if (nhwc()) {
      scratch_.x_nhwc = take(static_cast<size_t>(q_.n * q_.c * ph_ * pw_) * es);
      scratch_.y_nhwc = take(static_cast<size_t>(q_.n * q_.m * d.oh * d.ow) * es);
      scratch_.w_nhwc = take(static_cast<size_t>(q_.m * (q_.c / q_.g) * d.kh * d.kw) * es);
    }
    return backend_->ReserveConvWorkspace(static_cast<size_t>(used));
  }

  // The transposes in the direction this mode needs: operands into NHWC / KRSC, the
  // result back to the graph's NCHW / KCRS.
  absl::Status PlanChannelsLast() {
    const conv::Window2D& d = q_.w;
    const size_t es = DTypeSize(dtype_);
    const int64_t x_plane = ph_ * pw_, y_plane = d.oh * d.ow, w_plane = d.kh * d.kw, cg = q_.c / q_.g;
    const bool x_in = mode_ != ConvMode::kGradInput;   // X is read (forward, filter gradient)
    const bool y_in = mode_ != ConvMode::kForward;     // dY is read (both gradients)
    const bool w_in = mode_ != ConvMode::kGradWeight;  // W is read (forward, data gradient)
    MPC_ASSIGN_OR_RETURN(x_transpose_, x_in ? MatrixTranspose::Make(q_.n, q_.c, x_plane, es)
                                            : MatrixTranspose::Make(q_.n, x_plane, q_.c, es));
    MPC_ASSIGN_OR_RETURN(y_transpose_, y_in ? MatrixTranspose::Make(q_.n, q_.m, y_plane, es)
                                            : MatrixTranspose::Make(q_.n, y_plane, q_.m, es));
    MPC_ASSIGN_OR_RETURN(w_transpose_, w_in ? MatrixTranspose::Make(q_.m, cg, w_plane, es)
                                            : MatrixTranspose::Make(q_.m, w_plane, cg, es));
    return absl::OkStatus();
  }

  // Picks the algorithm of mode_ from cuDNN's heuristics, sets the convolution's math
  // type to the one the algorithm was ranked with (unless f32 must stay FMA), and sizes
  // its workspace.
  absl::Status ChooseAlgorithm(bool fma_only) {
    int max_count = 0;
    size_t bytes = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    switch (mode_) {
      case ConvMode::kForward: {
        MPC_RETURN_IF_ERROR(Check(cudnnGetConvolutionForwardAlgorithmMaxCount(handle_, &max_count),
                                  "cudnnGetConvolutionForwardAlgorithmMaxCount"));
        std::vector<cudnnConvolutionFwdAlgoPerf_t> perfs(static_cast<size_t>(std::max(max_count, 1)));
        int returned = 0;
        MPC_RETURN_IF_ERROR(
            Check(cudnnGetConvolutionForwardAlgorithm_v7(handle_, x_desc_, w_desc_, conv_desc_, y_desc_,
                                                         static_cast<int>(perfs.size()), &returned, perfs.data()),
                  "cudnnGetConvolutionForwardAlgorithm_v7"));
        MPC_ASSIGN_OR_RETURN(const cudnnConvolutionFwdAlgoPerf_t p, PickAlgo(perfs, returned, fma_only, what_));
        fwd_algo_ = p.algo;
        math = p.mathType;
        bytes = p.memory;
        break;
      }
      case ConvMode::kGradInput: {
        MPC_RETURN_IF_ERROR(Check(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle_, &max_count),
                                  "cudnnGetConvolutionBackwardDataAlgorithmMaxCount"));
        std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perfs(static_cast<size_t>(std::max(max_count, 1)));
        int returned = 0;
        MPC_RETURN_IF_ERROR(
            Check(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, w_desc_, y_desc_, conv_desc_, x_desc_,
                                                              static_cast<int>(perfs.size()), &returned, perfs.data()),
                  "cudnnGetConvolutionBackwardDataAlgorithm_v7"));
        MPC_ASSIGN_OR_RETURN(const cudnnConvolutionBwdDataAlgoPerf_t p, PickAlgo(perfs, returned, fma_only, what_));
        bwd_data_algo_ = p.algo;
        math = p.mathType;
        bytes = p.memory;
        break;
      }
      case ConvMode::kGradWeight: {
        MPC_RETURN_IF_ERROR(Check(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle_, &max_count),
                                  "cudnnGetConvolutionBackwardFilterAlgorithmMaxCount"));
        std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perfs(static_cast<size_t>(std::max(max_count, 1)));
        int returned = 0;
        MPC_RETURN_IF_ERROR(Check(
            cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, x_desc_, y_desc_, conv_desc_, w_desc_,
                                                          static_cast<int>(perfs.size()), &returned, perfs.data()),
            "cudnnGetConvolutionBackwardFilterAlgorithm_v7"));
        MPC_ASSIGN_OR_RETURN(const cudnnConvolutionBwdFilterAlgoPerf_t p, PickAlgo(perfs, returned, fma_only, what_));
        bwd_filter_algo_ = p.algo;
        math = p.mathType;
        bytes = p.memory;
        break;
      }
    }
    // The heuristics rank an (algorithm, math type) pair; run it with that math type.
    // f32 without TF32 keeps FMA (PickAlgo passed over tensor-op results).
    if (!fma_only) {
      MPC_RETURN_IF_ERROR(Check(cudnnSetConvolutionMathType(conv_desc_, math), "cudnnSetConvolutionMathType"));
    }
    size_t queried = 0;
    switch (mode_) {
      case ConvMode::kForward:
        MPC_RETURN_IF_ERROR(Check(cudnnGetConvolutionForwardWorkspaceSize(handle_, x_desc_, w_desc_, conv_desc_,
                                                                          y_desc_, fwd_algo_, &queried),
                                  "cudnnGetConvolutionForwardWorkspaceSize"));
        break;
      case ConvMode::kGradInput:
        MPC_RETURN_IF_ERROR(Check(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, w_desc_, y_desc_, conv_desc_,
                                                                               x_desc_, bwd_data_algo_, &queried),
                                  "cudnnGetConvolutionBackwardDataWorkspaceSize"));
        break;
      case ConvMode::kGradWeight:
        MPC_RETURN_IF_ERROR(Check(cudnnGetConvolutionBackwardFilterWorkspaceSize(handle_, x_desc_, y_desc_, conv_desc_,
                                                                                 w_desc_, bwd_filter_algo_, &queried),
                                  "cudnnGetConvolutionBackwardFilterWorkspaceSize"));
        break;
    }
    workspace_bytes_ = std::max(bytes, queried);
    return absl::OkStatus();
  }

  CudaBackend* backend_ = nullptr;
  cudaStream_t stream_ = nullptr;
  ConvMode mode_ = ConvMode::kForward;
  DType dtype_ = DType::kF32;
  ConvGeom q_;
  bool has_bias_ = false;
  std::string what_;  // the convolution, for error messages

  cudnnHandle_t handle_ = nullptr;            // the backend's
  cudnnTensorDescriptor_t x_desc_ = nullptr;  // X or dX, as cuDNN sees it (padded extents)
  cudnnTensorDescriptor_t y_desc_ = nullptr;  // Y or dY
  cudnnFilterDescriptor_t w_desc_ = nullptr;  // W or dW
  cudnnConvolutionDescriptor_t conv_desc_ = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo_ = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_ = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_ = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t workspace_bytes_ = 0;  // this algorithm's need, reserved in the backend's workspace

  // Where this kernel's scratch pieces sit in the backend's convolution workspace (byte
  // offsets, -1: not used). Every convolution kernel runs alone on the stream, so all of
  // them share one buffer, sized by the largest (no per-kernel activation-sized copies).
  struct ScratchLayout {
    int64_t padded = -1, x_nhwc = -1, y_nhwc = -1, w_nhwc = -1;
  };
  ScratchLayout scratch_;

  // Asymmetric pads: the part cuDNN does not apply (top, left; bottom and right follow
  // from the padded extents ph_ x pw_). padded_: the padded X / dX in the scratch during
  // Run, null when the pads are symmetric.
  int64_t pad_top_ = 0, pad_left_ = 0, ph_ = 0, pw_ = 0;
  void* padded_ = nullptr;

  // Channels-last: the NHWC / KRSC operands in the scratch during Run, and the
  // transposes to or from them.
  ConvLayout layout_ = ConvLayout::kNchw;
  void* x_nhwc_ = nullptr;
  void* y_nhwc_ = nullptr;
  void* w_nhwc_ = nullptr;
  MatrixTranspose x_transpose_, y_transpose_, w_transpose_;
};

}  // namespace
}  // namespace mpc::cuda

namespace mpc {

namespace cuda {

void RegisterCudaConvKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    r.Register("Conv", "cuda", d, CudnnConvKernel::Create<ConvMode::kForward>);
    r.Register("ConvGradInput", "cuda", d, CudnnConvKernel::Create<ConvMode::kGradInput>);
    r.Register("ConvGradWeight", "cuda", d, CudnnConvKernel::Create<ConvMode::kGradWeight>);
  }
}

}  // namespace cuda
}  // namespace mpc
