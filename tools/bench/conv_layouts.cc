// Times oneDNN's convolution passes (forward, backward data, backward weights) on
// ResNet-18's layers (64x64 images, batch 32, as tools/bench's resnet18 row) with the
// activations in the two layouts mpc's CPU kernel can be handed (backends/cpu/kernels_conv.cc):
//   NCHW           oneDNN chooses every layout (blocked) and the activations are
//                  reordered from and to the plain NCHW buffers each call;
//   channels-last  the activations are NHWC buffers oneDNN reads and writes as they are
//                  (mpc_channels_last, passes/channels_last.h).
// Both reorder the plain OIHW weights into the layout oneDNN picks, as the kernel does each
// step. Prints a markdown table with the median of each and their ratio; the CPU backend's
// Capabilities::channels_last_min_plane comes from these rows.
//
//   OMP_NUM_THREADS=2 build/conv_layouts [--reps N]   (N: timed runs per layout, default 20)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "tools/bench/resnet18_conv_layers.h"

namespace {

using dnnl::memory;

using Layer = mpc::bench::ConvLayer;
constexpr int64_t kBatch = mpc::bench::kResNet18Batch;

enum class Pass { kForward, kGradInput, kGradWeight };
const char* PassName(Pass p) {
  return p == Pass::kForward ? "forward" : p == Pass::kGradInput ? "backward data" : "backward weights";
}

// A plain buffer and the primitive's copy of it when the layouts differ, with the reorder
// between them. The buffer holds 0x3c bytes: about 0.0115 in f32 and in bf16 alike (timing
// needs finite, nonzero values, not random ones).
struct Operand {
  memory user, internal;
  std::optional<dnnl::reorder> reorder;
  bool into = true;
  Operand(const memory::desc& plain, const memory::desc& chosen, bool into_primitive) : into(into_primitive) {
    auto& eng = mpc::CpuDnnlEngine();
    user = memory(plain, eng);
    std::memset(user.get_data_handle(), 0x3c, plain.get_size());
    if (chosen == plain) {
      internal = user;
      return;
    }
    internal = memory(chosen, eng);
    reorder = into ? dnnl::reorder(user, internal) : dnnl::reorder(internal, user);
  }
  void Before(dnnl::stream& s) {
    if (reorder && into) reorder->execute(s, user, internal);
  }
  void After(dnnl::stream& s) {
    if (reorder && !into) reorder->execute(s, internal, user);
  }
};

// Median time of one pass with its reorders; channels_last: NHWC activations as they are.
double TimePass(const Layer& l, memory::data_type dt, Pass pass, bool channels_last, int reps) {
  auto& eng = mpc::CpuDnnlEngine();
  auto& s = mpc::CpuDnnlStream();
  const int64_t o = l.out();
  const memory::format_tag act = channels_last ? memory::format_tag::nhwc : memory::format_tag::nchw;
  const memory::desc x_md({kBatch, l.c, l.in, l.in}, dt, act), y_md({kBatch, l.m, o, o}, dt, act);
  const memory::desc w_md({l.m, l.c, l.k, l.k}, dt, memory::format_tag::oihw);
  auto any = [](const memory::desc& md) { return memory::desc(md.dims(), md.data_type(), memory::format_tag::any); };
  const memory::desc x_use = channels_last ? x_md : any(x_md), y_use = channels_last ? y_md : any(y_md);
  const memory::dims strides{l.stride, l.stride}, dil{0, 0}, pad{l.pad, l.pad};
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc fwd(
      {dnnl::prop_kind::forward_training, algo, x_use, any(w_md), y_use, strides, dil, pad, pad}, eng);
  dnnl::primitive prim;
  std::optional<Operand> a, b, out;
  int ids[3] = {0, 0, 0};
  switch (pass) {
    case Pass::kForward:
      prim = dnnl::convolution_forward(fwd);
      a.emplace(x_md, fwd.src_desc(), true);
      b.emplace(w_md, fwd.weights_desc(), true);
      out.emplace(y_md, fwd.dst_desc(), false);
      ids[0] = DNNL_ARG_SRC, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DST;
      break;
    case Pass::kGradInput: {
      dnnl::convolution_backward_data::primitive_desc pd({algo, x_use, any(w_md), y_use, strides, dil, pad, pad}, eng,
                                                         fwd);
      prim = dnnl::convolution_backward_data(pd);
      a.emplace(y_md, pd.diff_dst_desc(), true);
      b.emplace(w_md, pd.weights_desc(), true);
      out.emplace(x_md, pd.diff_src_desc(), false);
      ids[0] = DNNL_ARG_DIFF_DST, ids[1] = DNNL_ARG_WEIGHTS, ids[2] = DNNL_ARG_DIFF_SRC;
      break;
    }
    case Pass::kGradWeight: {
      dnnl::convolution_backward_weights::primitive_desc pd({algo, x_use, any(w_md), y_use, strides, dil, pad, pad},
                                                            eng, fwd);
      prim = dnnl::convolution_backward_weights(pd);
      a.emplace(y_md, pd.diff_dst_desc(), true);
      b.emplace(x_md, pd.src_desc(), true);
      out.emplace(w_md, pd.diff_weights_desc(), false);
      ids[0] = DNNL_ARG_DIFF_DST, ids[1] = DNNL_ARG_SRC, ids[2] = DNNL_ARG_DIFF_WEIGHTS;
      break;
    }
  }
  return mpc::bench::MedianMs(reps, [&] {
    a->Before(s);
    b->Before(s);
    prim.execute(s, {{ids[0], a->internal}, {ids[1], b->internal}, {ids[2], out->internal}});
    out->After(s);
    s.wait();
  });
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = mpc::bench::RepsFlag(argc, argv, 20);
  std::printf(
      "| pass | layer | channels | output plane | dtype | NCHW + reorders ms | channels-last ms | ratio |\n"
      "|---|---|---|---|---|---|---|---|\n");
  for (memory::data_type dt : {memory::data_type::f32, memory::data_type::bf16}) {
    for (Pass pass : {Pass::kForward, Pass::kGradInput, Pass::kGradWeight}) {
      for (const Layer& l : mpc::bench::kResNet18ConvLayers) {
        if (l.c < 16 && pass == Pass::kGradInput) continue;  // the stem: no input gradient
        const int64_t o = l.out();
        const double nchw = TimePass(l, dt, pass, false, reps), last = TimePass(l, dt, pass, true, reps);
        std::printf("| %s | %s | %ld→%ld | %ldx%ld | %s | %.3f | %.3f | %.2f |\n", PassName(pass), l.name,
                    static_cast<long>(l.c), static_cast<long>(l.m), static_cast<long>(o), static_cast<long>(o),
                    dt == memory::data_type::f32 ? "f32" : "bf16", nchw, last, last / nchw);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
