// CPU convolution kernels: Conv (forward, optional bias), ConvGradInput (backward data)
// and ConvGradWeight (backward weights), NCHW or channels-last NHWC (mpc_channels_last,
// passes/channels_last.h: oneDNN reads and writes it as it is), 1-D and 2-D (1-D runs as
// 2-D with H = 1), any strides / pads / dilations / groups.
//   f32   oneDNN convolution primitives (direct algorithm), built once per node at kernel
//         creation, with the layouts oneDNN prefers and reorders to/from mpc's plain
//         NCHW / (g)OIHW buffers (or on the plain layouts when that is all it takes).
//         With mpc_tf32 = 1 (the tf32 pass; all three modes) both operands are first
//         rounded to TF32 into scratch allocated at creation (kernels_gemm.h:
//         RunsInTf32); the bias stays f32.
//   bf16  oneDNN natively (bf16 operands, f32 accumulation, rounded once to bf16); where
//         oneDNN cannot build that primitive, staged through f32 like f16.
//   f16   staged: operands widened to f32 (exact) in scratch allocated at creation, the
//         f32 primitive run, the result rounded once to f16 (kernels_gemm_lowp.cc).
//   f64   plain loops (the reference), OpenMP-parallel over N x M (forward), N x C
//         (backward data) or M x C/group (backward weights). The same loops over f32
//         are the fallback when oneDNN rejects a configuration.
// ConvGradInput and ConvGradWeight of a group-1 convolution with tiny output planes (f32,
// bf16) are one matmul each instead (conv_grad_input_gemm.h, conv_grad_weight_gemm.h).
// Pooling lives in kernels_pool.cc and is registered from here.
#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/conv_grad_input_gemm.h"
#include "backends/cpu/conv_grad_weight_gemm.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/kernels_gemm.h"
#include "backends/cpu/shared_reorders.h"
#include "graph/ops_conv_util.h"

namespace mpc {

namespace {

using dnnl::memory;

enum class ConvMode { kForward, kGradInput, kGradWeight };

// The graph values a convolution kernel reads as its operands a and b (null: not shared).
using Operands = std::array<const Value*, 2>;

// The geometry of one convolution, in 2-D form.
struct ConvGeom {
  int64_t n = 0, c = 0, m = 0, g = 1;
  conv::Window2D w;
  bool channels_last = false;  // X and Y stored [N, H, W, C] (weights OIHW either way)
  int64_t x_size() const { return n * c * w.ih * w.iw; }
  int64_t w_size() const { return m * (c / g) * w.kh * w.kw; }
  int64_t y_size() const { return n * m * w.oh * w.ow; }
  // Element offsets of X[n, c, h, w] and Y[n, m, h, w] in the stored layout.
  int64_t x_at(int64_t in, int64_t ic, int64_t h, int64_t x) const {
    return channels_last ? ((in * w.ih + h) * w.iw + x) * c + ic : ((in * c + ic) * w.ih + h) * w.iw + x;
  }
  int64_t y_at(int64_t in, int64_t oc, int64_t h, int64_t x) const {
    return channels_last ? ((in * w.oh + h) * w.ow + x) * m + oc : ((in * m + oc) * w.oh + h) * w.ow + x;
  }
};

absl::StatusOr<ConvGeom> ConvGeomOf(const Node& node, ConvMode mode) {
  const Shape x = conv::AsChannelsFirst(node, mode == ConvMode::kForward     ? node.inputs[0]->shape
                                              : mode == ConvMode::kGradInput ? node.outputs[0]->shape
                                                                             : node.inputs[1]->shape);
  const Shape& wt = mode == ConvMode::kGradWeight ? node.outputs[0]->shape : node.inputs[1]->shape;
  auto win = conv::ResolveWindow(node, std::vector<int64_t>(x.begin() + 2, x.end()),
                                 std::vector<int64_t>(wt.begin() + 2, wt.end()), /*pooling=*/false);
  if (!win.ok()) return win.status();
  ConvGeom q;
  q.n = x[0];
  q.c = x[1];
  q.m = wt[0];
  q.g = node.attrs.GetInt("group", 1);
  q.w = conv::To2D(*win);
  q.channels_last = conv::ChannelsLast(node);
  return q;
}

// ---------------------------------------------------------------------------------
// Plain loops, accumulating in Acc<T>.

template <typename T>
void LoopForward(const ConvGeom& q, const T* x, const T* w, const T* bias, T* y) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = q.w;
  const int64_t cg = q.c / q.g, mg = q.m / q.g;
#pragma omp parallel for schedule(static)
  for (int64_t nm = 0; nm < q.n * q.m; ++nm) {
    const int64_t n = nm / q.m, oc = nm % q.m, c0 = (oc / mg) * cg;
    for (int64_t oh = 0; oh < d.oh; ++oh) {
      for (int64_t ow = 0; ow < d.ow; ++ow) {
        A acc = 0;
        for (int64_t ic = 0; ic < cg; ++ic) {
          const T* wp = w + (oc * cg + ic) * d.kh * d.kw;
          for (int64_t kh = 0; kh < d.kh; ++kh) {
            const int64_t ih = oh * d.sh - d.pt + kh * d.dh;
            if (ih < 0 || ih >= d.ih) continue;
            for (int64_t kw = 0; kw < d.kw; ++kw) {
              const int64_t iw = ow * d.sw - d.pl + kw * d.dw;
              if (iw < 0 || iw >= d.iw) continue;
              acc += A(x[q.x_at(n, c0 + ic, ih, iw)]) * A(wp[kh * d.kw + kw]);
            }
          }
        }
        if (bias) acc += A(bias[oc]);
        y[q.y_at(n, oc, oh, ow)] = static_cast<T>(acc);
      }
    }
  }
}

template <typename T>
void LoopGradInput(const ConvGeom& q, const T* dy, const T* w, T* dx) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = q.w;
  const int64_t cg = q.c / q.g, mg = q.m / q.g;
#pragma omp parallel for schedule(static)
  for (int64_t nc = 0; nc < q.n * q.c; ++nc) {
    const int64_t n = nc / q.c, c = nc % q.c, grp = c / cg, ic = c % cg;
    std::vector<A> acc(static_cast<size_t>(d.ih * d.iw), A(0));
    for (int64_t oc = grp * mg; oc < (grp + 1) * mg; ++oc) {
      const T* wp = w + (oc * cg + ic) * d.kh * d.kw;
      for (int64_t oh = 0; oh < d.oh; ++oh) {
        for (int64_t ow = 0; ow < d.ow; ++ow) {
          const A g = A(dy[q.y_at(n, oc, oh, ow)]);
          for (int64_t kh = 0; kh < d.kh; ++kh) {
            const int64_t ih = oh * d.sh - d.pt + kh * d.dh;
            if (ih < 0 || ih >= d.ih) continue;
            for (int64_t kw = 0; kw < d.kw; ++kw) {
              const int64_t iw = ow * d.sw - d.pl + kw * d.dw;
              if (iw < 0 || iw >= d.iw) continue;
              acc[ih * d.iw + iw] += g * A(wp[kh * d.kw + kw]);
            }
          }
        }
      }
    }
    for (int64_t i = 0; i < d.ih * d.iw; ++i) dx[q.x_at(n, c, i / d.iw, i % d.iw)] = static_cast<T>(acc[i]);
  }
}

template <typename T>
void LoopGradWeight(const ConvGeom& q, const T* dy, const T* x, T* dw) {
  using A = cpu::Acc<T>;
  const conv::Window2D& d = q.w;
  const int64_t cg = q.c / q.g, mg = q.m / q.g;
#pragma omp parallel for schedule(static)
  for (int64_t oi = 0; oi < q.m * cg; ++oi) {
    const int64_t oc = oi / cg, ic = oi % cg, c = (oc / mg) * cg + ic;
    for (int64_t kh = 0; kh < d.kh; ++kh) {
      for (int64_t kw = 0; kw < d.kw; ++kw) {
        A acc = 0;
        for (int64_t n = 0; n < q.n; ++n) {
          for (int64_t oh = 0; oh < d.oh; ++oh) {
            const int64_t ih = oh * d.sh - d.pt + kh * d.dh;
            if (ih < 0 || ih >= d.ih) continue;
            for (int64_t ow = 0; ow < d.ow; ++ow) {
              const int64_t iw = ow * d.sw - d.pl + kw * d.dw;
              if (iw < 0 || iw >= d.iw) continue;
              acc += A(dy[q.y_at(n, oc, oh, ow)]) * A(x[q.x_at(n, c, ih, iw)]);
            }
          }
        }
        dw[oi * d.kh * d.kw + kh * d.kw + kw] = static_cast<T>(acc);
      }
    }
  }
}

// Runs one convolution of a mode: (a, b, bias) -> out, where (a, b) is (X, W) forward,
// (dY, W) for the input gradient and (dY, X) for the weight gradient.
using ConvFn = std::function<void(const void* a, const void* b, const void* bias, void* out)>;

template <typename T>
ConvFn LoopConv(const ConvGeom& q, ConvMode mode) {
  switch (mode) {
    case ConvMode::kForward:
      return [q](const void* a, const void* b, const void* bias, void* out) {
        LoopForward<T>(q, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<const T*>(bias),
                       static_cast<T*>(out));
      };
    case ConvMode::kGradInput:
      return [q](const void* a, const void* b, const void*, void* out) {
        LoopGradInput<T>(q, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
      };
    case ConvMode::kGradWeight:
    default:
      return [q](const void* a, const void* b, const void*, void* out) {
        LoopGradWeight<T>(q, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out));
      };
  }
}

// ---------------------------------------------------------------------------------
// oneDNN.

// One oneDNN convolution primitive of a mode. oneDNN first gets to choose its own
// (blocked) layouts, which run its fastest kernels; operands and results are then
// reordered between mpc's plain NCHW / (g)OIHW buffers and internal buffers that are
// allocated with the primitive, once per node, or shared with an earlier kernel of the
// program that reorders the same value into the same layout each step (shared_reorders.h).
// Where no implementation takes `any` layouts the primitive is built on the plain layouts
// directly.
class DnnlConv {
 public:
  // operands: the values the kernel reads as a and b, when they reach the primitive as they
  // are (not rounded to TF32 or widened first): their reorders are shared with the other
  // kernels of the program that reorder them into the same layout (shared_reorders.h).
  static absl::StatusOr<std::shared_ptr<DnnlConv>> Create(const ConvGeom& q, ConvMode mode, DType dtype, bool has_bias,
                                                          Operands operands = {nullptr, nullptr}) {
    std::string first_error;
    for (bool any : {true, false}) {
      auto c = std::make_shared<DnnlConv>();
      try {
        c->Build(q, mode, dtype, has_bias && mode == ConvMode::kForward, any, operands);
        // Offered only once built: a later kernel must not read a buffer nothing fills.
        for (int i = 0; i < 2; ++i) {
          if (c->args_[i].reorder) cpu::OfferSharedReorder(operands[i], c->args_[i].internal);
        }
        return c;
      } catch (const dnnl::error& e) {
        if (first_error.empty()) first_error = e.what();
      }
    }
    return absl::InternalError(absl::StrCat("oneDNN convolution setup failed (", DTypeName(dtype), "): ", first_error));
  }

  void Run(const void* a, const void* b, const void* bias, void* out) {
    auto& stream = CpuDnnlStream();
    const void* handles[3] = {a, b, out};
    std::unordered_map<int, memory> args;
    for (int i = 0; i < 3; ++i) {
      Arg& arg = args_[i];
      arg.user.set_data_handle(const_cast<void*>(handles[i]));
      if (arg.reorder && i < 2) arg.reorder->execute(stream, arg.user, arg.internal);
      args.emplace(arg.id, arg.reorder || arg.shared ? arg.internal : arg.user);
    }
    if (has_bias_) {
      bias_.set_data_handle(const_cast<void*>(bias));
      args.emplace(DNNL_ARG_BIAS, bias_);
    }
    primitive_.execute(stream, args);
    if (args_[2].reorder) args_[2].reorder->execute(stream, args_[2].internal, args_[2].user);
    stream.wait();
  }

 private:
  // An operand (a, b) or the result: mpc's buffer, and oneDNN's when the layouts differ.
  struct Arg {
    int id = 0;
    memory user, internal;
    std::optional<dnnl::reorder> reorder;
    bool shared = false;  // internal is an earlier kernel's reorder of the same value, made this step
  };

  void Build(const ConvGeom& q, ConvMode mode, DType dtype, bool has_bias, bool any, Operands operands) {
    has_bias_ = has_bias;
    const conv::Window2D& d = q.w;
    auto& eng = CpuDnnlEngine();
    const memory::data_type dt = cpu::DnnlType(dtype);
    const memory::format_tag act = q.channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
    const memory::desc src_md({q.n, q.c, d.ih, d.iw}, dt, act);
    const memory::desc wei_md =
        q.g > 1 ? memory::desc({q.g, q.m / q.g, q.c / q.g, d.kh, d.kw}, dt, memory::format_tag::goihw)
                : memory::desc({q.m, q.c, d.kh, d.kw}, dt, memory::format_tag::oihw);
    const memory::desc dst_md({q.n, q.m, d.oh, d.ow}, dt, act);
    const memory::desc bias_md({q.m}, dt, memory::format_tag::x);
    auto pick = [any](const memory::desc& md) {
      return any ? memory::desc(md.dims(), md.data_type(), memory::format_tag::any) : md;
    };
    // Channels-last activations are a layout oneDNN's fast kernels take as they are: only
    // the weights are left to its choice (asking for `any` activations would get blocked
    // ones, and reorders to them, again).
    const memory::desc src_any = q.channels_last ? src_md : pick(src_md), wei_any = pick(wei_md),
                       dst_any = q.channels_last ? dst_md : pick(dst_md);
    const memory::dims strides{d.sh, d.sw}, dilates{d.dh - 1, d.dw - 1};
    const memory::dims pad_l{d.pt, d.pl}, pad_r{d.pb, d.pr};
    const auto algo = dnnl::algorithm::convolution_direct;
    const auto prop = dnnl::prop_kind::forward_training;
    auto fwd_desc = has_bias ? dnnl::convolution_forward::desc(prop, algo, src_any, wei_any, bias_md, dst_any, strides,
                                                               dilates, pad_l, pad_r)
                             : dnnl::convolution_forward::desc(prop, algo, src_any, wei_any, dst_any, strides, dilates,
                                                               pad_l, pad_r);
    dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, eng);
    // (plain desc, primitive's desc, argument id) for a, b and the result.
    std::array<std::tuple<memory::desc, memory::desc, int>, 3> io;
    switch (mode) {
      case ConvMode::kForward:
        primitive_ = dnnl::convolution_forward(fwd_pd);
        io = {{{src_md, fwd_pd.src_desc(), DNNL_ARG_SRC},
               {wei_md, fwd_pd.weights_desc(), DNNL_ARG_WEIGHTS},
               {dst_md, fwd_pd.dst_desc(), DNNL_ARG_DST}}};
        break;
      case ConvMode::kGradInput: {
        dnnl::convolution_backward_data::desc bd(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r);
        dnnl::convolution_backward_data::primitive_desc pd(bd, eng, fwd_pd);
        primitive_ = dnnl::convolution_backward_data(pd);
        io = {{{dst_md, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
               {wei_md, pd.weights_desc(), DNNL_ARG_WEIGHTS},
               {src_md, pd.diff_src_desc(), DNNL_ARG_DIFF_SRC}}};
        break;
      }
      case ConvMode::kGradWeight: {
        dnnl::convolution_backward_weights::desc wd(algo, src_any, wei_any, dst_any, strides, dilates, pad_l, pad_r);
        dnnl::convolution_backward_weights::primitive_desc pd(wd, eng, fwd_pd);
        primitive_ = dnnl::convolution_backward_weights(pd);
        io = {{{dst_md, pd.diff_dst_desc(), DNNL_ARG_DIFF_DST},
               {src_md, pd.src_desc(), DNNL_ARG_SRC},
               {wei_md, pd.diff_weights_desc(), DNNL_ARG_DIFF_WEIGHTS}}};
        break;
      }
    }
    for (int i = 0; i < 3; ++i) {
      const auto& [plain, chosen, id] = io[i];
      Arg& arg = args_[i];
      arg.id = id;
      arg.user = memory(plain, eng, DNNL_MEMORY_NONE);
      if (chosen == plain) continue;
      if (i < 2) {
        if (std::optional<memory> earlier = cpu::FindSharedReorder(operands[i], chosen)) {
          arg.internal = *earlier;
          arg.shared = true;
          continue;
        }
      }
      arg.internal = memory(chosen, eng);  // allocated here, once
      arg.reorder = i < 2 ? dnnl::reorder(arg.user, arg.internal) : dnnl::reorder(arg.internal, arg.user);
    }
    bias_ = memory(bias_md, eng, DNNL_MEMORY_NONE);
  }

  dnnl::primitive primitive_;
  std::array<Arg, 3> args_;
  memory bias_;
  bool has_bias_ = false;
};

ConvFn AsFn(std::shared_ptr<DnnlConv> c) {
  return [c](const void* a, const void* b, const void* bias, void* out) { c->Run(a, b, bias, out); };
}

// f32 convolution: oneDNN, or the f32 loops where oneDNN has no implementation.
ConvFn F32Conv(const ConvGeom& q, ConvMode mode, bool has_bias, Operands operands = {nullptr, nullptr}) {
  auto c = DnnlConv::Create(q, mode, DType::kF32, has_bias, operands);
  return c.ok() ? AsFn(*c) : LoopConv<float>(q, mode);
}

class ConvKernel : public Kernel {
 public:
  template <ConvMode kMode>
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto geom = ConvGeomOf(node, kMode);
    if (!geom.ok()) {
      return absl::Status(geom.status().code(), absl::StrCat("cpu ", node.op, " kernel for node '", node.name,
                                                             "': ", geom.status().message()));
    }
    const ConvGeom& q = *geom;
    auto k = std::make_unique<ConvKernel>();
    k->dtype_ = node.inputs[0]->dtype;
    k->has_bias_ = kMode == ConvMode::kForward && node.inputs.size() > 2 && node.inputs[2] != nullptr;
    const cpu::GemmConvGeom gq{q.n, q.c, q.m, q.w};
    // The matmul paths read and write channels-first planes.
    const bool gemm_layout = q.g == 1 && !q.channels_last;
    if (kMode == ConvMode::kGradInput && gemm_layout && !cpu::RunsInTf32(node) &&
        cpu::ConvGradInputGemm::Prefers(gq, k->dtype_)) {
      auto gemm = cpu::ConvGradInputGemm::Create(gq, k->dtype_);
      if (gemm.ok()) {
        std::shared_ptr<cpu::ConvGradInputGemm> g = std::move(*gemm);
        k->fn_ = [g](const void* dy, const void* w, const void*, void* dx) { g->Run(dy, w, dx); };
        return std::unique_ptr<Kernel>(std::move(k));
      }
    }
    if (kMode == ConvMode::kGradWeight && gemm_layout && !cpu::RunsInTf32(node)) {
      if (cpu::ConvGradWeightGemm::Prefers(gq, k->dtype_)) {
        auto gemm = cpu::ConvGradWeightGemm::Create(gq, k->dtype_);
        if (gemm.ok()) {
          std::shared_ptr<cpu::ConvGradWeightGemm> g = std::move(*gemm);
          k->fn_ = [g](const void* dy, const void* x, const void*, void* dw) { g->Run(dy, x, dw); };
          return std::unique_ptr<Kernel>(std::move(k));
        }
      }
    }
    switch (k->dtype_) {
      case DType::kF64:
        k->fn_ = LoopConv<double>(q, kMode);
        return std::unique_ptr<Kernel>(std::move(k));
      case DType::kF32:
        k->fn_ = cpu::RunsInTf32(node) ? F32Conv(q, kMode, k->has_bias_)
                                       : F32Conv(q, kMode, k->has_bias_, {node.inputs[0], node.inputs[1]});
        if (cpu::RunsInTf32(node)) {
          k->tf32_ = true;
          k->a_.resize(static_cast<size_t>(NumElements(node.inputs[0]->shape)));
          k->b_.resize(static_cast<size_t>(NumElements(node.inputs[1]->shape)));
        }
        return std::unique_ptr<Kernel>(std::move(k));
      case DType::kBF16: {
        auto native = DnnlConv::Create(q, kMode, DType::kBF16, k->has_bias_, {node.inputs[0], node.inputs[1]});
        if (native.ok()) {
          k->fn_ = AsFn(*native);
          return std::unique_ptr<Kernel>(std::move(k));
        }
        break;
      }
      case DType::kF16:
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat("cpu ", node.op, " kernel for node '", node.name, "': dtype ",
                                                       DTypeName(k->dtype_), " is not a float type"));
    }
    // Staged through f32.
    k->fn_ = F32Conv(q, kMode, k->has_bias_);
    k->staged_ = true;
    switch (kMode) {
      case ConvMode::kForward:
        k->sizes_ = {q.x_size(), q.w_size(), q.m, q.y_size()};
        break;
      case ConvMode::kGradInput:
        k->sizes_ = {q.y_size(), q.w_size(), 0, q.x_size()};
        break;
      case ConvMode::kGradWeight:
        k->sizes_ = {q.y_size(), q.x_size(), 0, q.w_size()};
        break;
    }
    k->a_.resize(static_cast<size_t>(k->sizes_[0]));
    k->b_.resize(static_cast<size_t>(k->sizes_[1]));
    if (k->has_bias_) k->bias_.resize(static_cast<size_t>(k->sizes_[2]));
    k->out_.resize(static_cast<size_t>(k->sizes_[3]));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    const void* a = ctx.inputs[0].data;
    const void* b = ctx.inputs[1].data;
    const void* bias = has_bias_ ? ctx.inputs[2].data : nullptr;
    void* out = ctx.outputs[0].data;
    if (tf32_) {
      cpu::RoundToTf32Buffer(static_cast<const float*>(a), a_.data(), static_cast<int64_t>(a_.size()));
      cpu::RoundToTf32Buffer(static_cast<const float*>(b), b_.data(), static_cast<int64_t>(b_.size()));
      fn_(a_.data(), b_.data(), bias, out);
      return absl::OkStatus();
    }
    if (!staged_) {
      fn_(a, b, bias, out);
      return absl::OkStatus();
    }
    cpu::ConvertToF32(a, dtype_, a_.data(), sizes_[0]);
    cpu::ConvertToF32(b, dtype_, b_.data(), sizes_[1]);
    if (has_bias_) cpu::ConvertToF32(bias, dtype_, bias_.data(), sizes_[2]);
    fn_(a_.data(), b_.data(), has_bias_ ? bias_.data() : nullptr, out_.data());
    cpu::ConvertFromF32(out_.data(), out, dtype_, sizes_[3]);
    return absl::OkStatus();
  }

 private:
  DType dtype_ = DType::kF32;
  ConvFn fn_;
  bool has_bias_ = false;
  bool staged_ = false;
  bool tf32_ = false;                      // f32 with mpc_tf32: a_, b_ hold the operands rounded to TF32
  std::vector<int64_t> sizes_;             // a, b, bias, out element counts (staged)
  std::vector<float> a_, b_, bias_, out_;  // staged (or TF32) scratch, allocated once
};

}  // namespace

void RegisterCpuConvKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16, DType::kF16}) {
    r.Register("Conv", "cpu", d, ConvKernel::Create<ConvMode::kForward>);
    r.Register("ConvGradInput", "cpu", d, ConvKernel::Create<ConvMode::kGradInput>);
    r.Register("ConvGradWeight", "cpu", d, ConvKernel::Create<ConvMode::kGradWeight>);
  }
}

}  // namespace mpc
