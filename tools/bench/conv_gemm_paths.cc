// Times the two CPU paths of a convolution's backward passes (data and weights) on
// ResNet-18's layers (64x64 images, batch 32, as tools/bench's resnet18 row): oneDNN's
// direct primitive with the reorders mpc's convolution kernel runs around it (plain
// NCHW/OIHW in and out, oneDNN's preferred blocked layouts inside), and one matmul
// (cpu::ConvGradInputGemm, cpu::ConvGradWeightGemm). Prints a markdown table with the median of each, their ratio,
// which path the CPU kernel picks (the classes' Prefers) and the largest difference
// between the two results relative to the largest |result|.
//
//   OMP_NUM_THREADS=2 build/conv_gemm_paths [--reps N]   (N: timed runs per path, default 20)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/conv_grad_input_gemm.h"
#include "backends/cpu/conv_grad_weight_gemm.h"
#include "backends/cpu/cpu_backend.h"
#include "graph/float_convert.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "tools/bench/resnet18_conv_layers.h"

namespace {

using dnnl::memory;
using mpc::DType;

using Layer = mpc::bench::ConvLayer;
using mpc::bench::MedianMs;
constexpr int64_t kBatch = mpc::bench::kResNet18Batch;

enum class Pass { kGradInput, kGradWeight };
const char* PassName(Pass p) { return p == Pass::kGradInput ? "backward data" : "backward weights"; }

// oneDNN's primitive of a pass on `any` layouts, with reorders from and to the plain
// buffers where the chosen layout differs, every primitive built once (what
// backends/cpu/kernels_conv.cc runs): (a, b) -> out is (dY, W) -> dX for the input
// gradient and (dY, X) -> dW for the weight gradient.
struct DirectConv {
  // A plain buffer and oneDNN's copy of it, with the reorder between them (if needed).
  struct Operand {
    memory user, internal;
    std::optional<dnnl::reorder> reorder;
    Operand(const memory::desc& plain, const memory::desc& chosen, void* data, bool into_primitive) {
      auto& eng = mpc::CpuDnnlEngine();
      user = memory(plain, eng, data);
      if (chosen == plain) {
        internal = user;
        return;
      }
      internal = memory(chosen, eng);
      reorder = into_primitive ? dnnl::reorder(user, internal) : dnnl::reorder(internal, user);
    }
  };

  dnnl::primitive primitive;
  std::optional<Operand> a, b, out;
  int a_id = 0, b_id = 0, out_id = 0;

  DirectConv(const mpc::cpu::GemmConvGeom& q, memory::data_type dt, Pass pass, void* ap, void* bp, void* outp) {
    auto& eng = mpc::CpuDnnlEngine();
    const mpc::conv::Window2D& d = q.w;
    const memory::desc x_md({q.n, q.c, d.ih, d.iw}, dt, memory::format_tag::nchw);
    const memory::desc w_md({q.m, q.c, d.kh, d.kw}, dt, memory::format_tag::oihw);
    const memory::desc y_md({q.n, q.m, d.oh, d.ow}, dt, memory::format_tag::nchw);
    auto any = [](const memory::desc& md) { return memory::desc(md.dims(), md.data_type(), memory::format_tag::any); };
    const memory::dims strides{d.sh, d.sw}, dilates{0, 0}, pad_l{d.pt, d.pl}, pad_r{d.pb, d.pr};
    const auto algo = dnnl::algorithm::convolution_direct;
    dnnl::convolution_forward::primitive_desc fwd(
        {dnnl::prop_kind::forward_training, algo, any(x_md), any(w_md), any(y_md), strides, dilates, pad_l, pad_r},
        eng);
    switch (pass) {
      case Pass::kGradInput: {
        dnnl::convolution_backward_data::primitive_desc pd(
            {algo, any(x_md), any(w_md), any(y_md), strides, dilates, pad_l, pad_r}, eng, fwd);
        primitive = dnnl::convolution_backward_data(pd);
        a.emplace(y_md, pd.diff_dst_desc(), ap, true);
        b.emplace(w_md, pd.weights_desc(), bp, true);
        out.emplace(x_md, pd.diff_src_desc(), outp, false);
        a_id = DNNL_ARG_DIFF_DST, b_id = DNNL_ARG_WEIGHTS, out_id = DNNL_ARG_DIFF_SRC;
        break;
      }
      case Pass::kGradWeight: {
        dnnl::convolution_backward_weights::primitive_desc pd(
            {algo, any(x_md), any(w_md), any(y_md), strides, dilates, pad_l, pad_r}, eng, fwd);
        primitive = dnnl::convolution_backward_weights(pd);
        a.emplace(y_md, pd.diff_dst_desc(), ap, true);
        b.emplace(x_md, pd.src_desc(), bp, true);
        out.emplace(w_md, pd.diff_weights_desc(), outp, false);
        a_id = DNNL_ARG_DIFF_DST, b_id = DNNL_ARG_SRC, out_id = DNNL_ARG_DIFF_WEIGHTS;
        break;
      }
    }
  }

  void Run() {
    auto& s = mpc::CpuDnnlStream();
    if (a->reorder) a->reorder->execute(s, a->user, a->internal);
    if (b->reorder) b->reorder->execute(s, b->user, b->internal);
    primitive.execute(s, {{a_id, a->internal}, {b_id, b->internal}, {out_id, out->internal}});
    if (out->reorder) out->reorder->execute(s, out->internal, out->user);
    s.wait();
  }
};

float ToFloat(const std::vector<uint16_t>& v, size_t i) { return mpc::Bf16ToFloat(v[i]); }
float ToFloat(const std::vector<float>& v, size_t i) { return v[i]; }

template <typename T>
void Fill(std::vector<T>& v, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (T& e : v) {
    if constexpr (sizeof(T) == 2) {
      e = mpc::FloatToBf16(u(rng));
    } else {
      e = u(rng);
    }
  }
}

// The matmul path of a pass and whether the CPU kernel takes it.
struct GemmPath {
  std::function<void()> run;
  bool picked = false;
};

template <typename T>
GemmPath GemmOf(const mpc::cpu::GemmConvGeom& q, DType dtype, Pass pass, T* a, T* b, T* out) {
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
    std::exit(1);
  };
  GemmPath path;
  switch (pass) {
    case Pass::kGradInput: {
      auto g = mpc::cpu::ConvGradInputGemm::Create(q, dtype);
      if (!g.ok()) fail(g.status());
      std::shared_ptr<mpc::cpu::ConvGradInputGemm> p = std::move(*g);
      path.run = [=] { p->Run(a, b, out); };
      path.picked = mpc::cpu::ConvGradInputGemm::Prefers(q, dtype);
      break;
    }
    case Pass::kGradWeight: {
      auto g = mpc::cpu::ConvGradWeightGemm::Create(q, dtype);
      if (!g.ok()) fail(g.status());
      std::shared_ptr<mpc::cpu::ConvGradWeightGemm> p = std::move(*g);
      path.run = [=] { p->Run(a, b, out); };
      path.picked = mpc::cpu::ConvGradWeightGemm::Prefers(q, dtype);
      break;
    }
  }
  return path;
}

template <typename T>
void Row(const Layer& l, DType dtype, Pass pass, int reps) {
  mpc::cpu::GemmConvGeom q{kBatch, l.c, l.m, {}};
  mpc::conv::Window2D& d = q.w;
  d.ih = d.iw = l.in;
  d.kh = d.kw = l.k;
  d.sh = d.sw = l.stride;
  d.pt = d.pl = d.pb = d.pr = l.pad;
  d.oh = d.ow = (l.in + 2 * l.pad - l.k) / l.stride + 1;
  const size_t x_size = static_cast<size_t>(q.x_size()), y_size = static_cast<size_t>(q.y_size()),
               w_size = static_cast<size_t>(q.m * q.taps());
  // (a, b, out) sizes per pass, as DirectConv's.
  const size_t a_size = y_size;
  const size_t b_size = pass == Pass::kGradWeight ? x_size : w_size;
  const size_t out_size = pass == Pass::kGradInput ? x_size : w_size;
  std::mt19937 rng(7);
  std::vector<T> a(a_size), b(b_size), out_direct(out_size), out_gemm(out_size);
  Fill(a, rng);
  Fill(b, rng);
  const auto dt = dtype == DType::kF32 ? memory::data_type::f32 : memory::data_type::bf16;
  DirectConv direct(q, dt, pass, a.data(), b.data(), out_direct.data());
  GemmPath gemm = GemmOf(q, dtype, pass, a.data(), b.data(), out_gemm.data());
  const double direct_ms = MedianMs(reps, [&] { direct.Run(); });
  const double gemm_ms = MedianMs(reps, gemm.run);
  double largest = 0, diff = 0;
  for (size_t i = 0; i < out_size; ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(ToFloat(out_direct, i))));
    diff = std::max(diff, std::fabs(static_cast<double>(ToFloat(out_direct, i)) - ToFloat(out_gemm, i)));
  }
  std::printf("| %s | %s | %ld→%ld | %ldx%ld | %s | %.3f | %.3f | %.2f | %s | %.1e |\n", PassName(pass), l.name,
              static_cast<long>(l.c), static_cast<long>(l.m), static_cast<long>(d.oh), static_cast<long>(d.ow),
              mpc::DTypeName(dtype), direct_ms, gemm_ms, gemm_ms / direct_ms, gemm.picked ? "matmul" : "oneDNN direct",
              diff / largest);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = mpc::bench::RepsFlag(argc, argv, 20);
  std::printf(
      "| pass | layer | channels | output plane | dtype | oneDNN direct + reorders ms | im2col + matmul ms | "
      "ratio | kernel picks | max diff / max abs |\n|---|---|---|---|---|---|---|---|---|---|\n");
  for (Pass pass : {Pass::kGradInput, Pass::kGradWeight}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (const Layer& l : mpc::bench::kResNet18ConvLayers) {
        if (l.c < 16 && pass == Pass::kGradInput) continue;  // the stem: no input gradient
        if (dtype == DType::kF32) {
          Row<float>(l, dtype, pass, reps);
        } else {
          Row<uint16_t>(l, dtype, pass, reps);
        }
      }
    }
  }
  return 0;
}
