// CPU GEMM kernels. f32 runs on oneDNN's matmul primitive, built once per node with
// the node's static shapes; transposed operands are expressed as strides (no copies),
// Gemm's bias is oneDNN's bias argument (or a sum post-op for a full C), alpha an
// output scale, and a fused activation (attribute `mpc_activation`, set by the fusion
// pass) a ReLU post-op. f64 is a plain triple loop: it is the reference.
#include <cstring>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc {
namespace {

using dnnl::memory;
using cpu::MakeKernel;

memory::desc MatrixDesc(int64_t rows, int64_t cols, bool stored_transposed) {
  // Logical rows x cols; stored either row-major or as its transpose.
  return memory::desc({rows, cols}, memory::data_type::f32,
                      stored_transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
}

struct GemmDims {
  int64_t m, n, k;
  bool ta, tb;
};

GemmDims DimsOf(const Node& node) {
  const Shape& a = node.inputs[0]->shape;
  const Shape& y = node.outputs[0]->shape;
  const bool ta = node.attrs.GetInt("transA", 0) != 0, tb = node.attrs.GetInt("transB", 0) != 0;
  return {y[0], y[1], ta ? a[0] : a[1], ta, tb};
}

class DnnlGemmKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    auto k = std::make_unique<DnnlGemmKernel>();
    const GemmDims d = DimsOf(node);
    const float alpha = node.attrs.GetFloat("alpha", 1.0f), beta = node.attrs.GetFloat("beta", 1.0f);
    const Value* c = node.inputs.size() > 2 ? node.inputs[2] : nullptr;
    k->n_ = d.n;
    k->m_ = d.m;
    if (c && beta != 0.0f) {
      // A bias row ([N], [1,N]) with alpha = beta = 1 maps onto oneDNN's bias (with an
      // output scale alpha != 1 oneDNN does not give alpha*AB + bias); anything else is
      // broadcast into the output and added by a sum post-op scaled by beta.
      const Shape& cs = c->shape;
      const bool row = (cs == Shape{d.n} || cs == Shape{1, d.n}) && beta == 1.0f && alpha == 1.0f;
      if (row) k->bias_mode_ = BiasMode::kRow;
      else {
        k->bias_mode_ = BiasMode::kSum;
        k->c_shape_ = cs;
        k->beta_ = beta;
      }
    }
    dnnl::post_ops post;
    if (k->bias_mode_ == BiasMode::kSum) post.append_sum(beta);
    if (node.attrs.GetString("mpc_activation", "") == "Relu") {
      post.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    }
    dnnl::primitive_attr attr;
    attr.set_post_ops(post);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    const memory::desc a_md = MatrixDesc(d.m, d.k, d.ta);
    const memory::desc b_md = MatrixDesc(d.k, d.n, d.tb);
    const memory::desc y_md({d.m, d.n}, memory::data_type::f32, memory::format_tag::ab);
    const memory::desc bias_md({1, d.n}, memory::data_type::f32, memory::format_tag::ab);
    try {
      auto desc = k->bias_mode_ == BiasMode::kRow ? dnnl::matmul::desc(a_md, b_md, bias_md, y_md)
                                                  : dnnl::matmul::desc(a_md, b_md, y_md);
      dnnl::matmul::primitive_desc pd(desc, attr, CpuDnnlEngine());
      k->primitive_ = dnnl::matmul(pd);
      auto& eng = CpuDnnlEngine();
      k->a_ = memory(a_md, eng, DNNL_MEMORY_NONE);
      k->b_ = memory(b_md, eng, DNNL_MEMORY_NONE);
      k->y_ = memory(y_md, eng, DNNL_MEMORY_NONE);
      k->bias_ = memory(bias_md, eng, DNNL_MEMORY_NONE);
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("oneDNN matmul setup failed for M=", d.m, " N=", d.n, " K=", d.k,
                                              ": ", e.what()));
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    float* y = ctx.outputs[0].as<float>();
    if (bias_mode_ == BiasMode::kSum) BroadcastInto(ctx.inputs[2], y);
    a_.set_data_handle(ctx.inputs[0].data);
    b_.set_data_handle(ctx.inputs[1].data);
    y_.set_data_handle(y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, y_}};
    if (bias_mode_ == BiasMode::kRow) {
      bias_.set_data_handle(ctx.inputs[2].data);
      args.emplace(DNNL_ARG_BIAS, bias_);
    }
    primitive_.execute(CpuDnnlStream(), args);
    CpuDnnlStream().wait();
    return absl::OkStatus();
  }

 private:
  enum class BiasMode { kNone, kRow, kSum };

  // Writes C broadcast to [M, N] into y (the sum post-op then adds beta * y).
  void BroadcastInto(const TensorView& c, float* y) const {
    const float* pc = c.as<float>();
    const auto cs = cpu::BroadcastStrides(c.shape, {m_, n_});
    for (int64_t i = 0; i < m_; ++i) {
      for (int64_t j = 0; j < n_; ++j) y[i * n_ + j] = pc[i * cs[0] + j * cs[1]];
    }
  }

  dnnl::matmul primitive_;
  memory a_, b_, y_, bias_;
  BiasMode bias_mode_ = BiasMode::kNone;
  Shape c_shape_;
  float beta_ = 1.0f;
  int64_t m_ = 0, n_ = 0;
};

// Reference Gemm in f64 (also correct for f32, used nowhere on the fast path).
template <typename T>
struct RefGemm {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const GemmDims d = DimsOf(node);
    const T alpha = node.attrs.GetFloat("alpha", 1.0f), beta = node.attrs.GetFloat("beta", 1.0f);
    const bool relu = node.attrs.GetString("mpc_activation", "") == "Relu";
    return MakeKernel([d, alpha, beta, relu](KernelContext& ctx) {
      const T* a = ctx.inputs[0].as<T>();
      const T* b = ctx.inputs[1].as<T>();
      const bool has_c = ctx.inputs.size() > 2 && ctx.inputs[2].data;
      std::vector<int64_t> cs = has_c ? cpu::BroadcastStrides(ctx.inputs[2].shape, {d.m, d.n})
                                      : std::vector<int64_t>{0, 0};
      T* y = ctx.outputs[0].as<T>();
#pragma omp parallel for if (d.m * d.n * d.k > 100000)
      for (int64_t i = 0; i < d.m; ++i) {
        for (int64_t j = 0; j < d.n; ++j) {
          T acc = 0;
          for (int64_t p = 0; p < d.k; ++p) {
            acc += a[d.ta ? p * d.m + i : i * d.k + p] * b[d.tb ? j * d.k + p : p * d.n + j];
          }
          T v = alpha * acc;
          if (has_c) v += beta * ctx.inputs[2].as<T>()[i * cs[0] + j * cs[1]];
          y[i * d.n + j] = relu && v < T(0) ? T(0) : v;
        }
      }
      return absl::OkStatus();
    });
  }
};

// MatMul with numpy batch broadcasting: each batch index maps to a (possibly
// broadcast) A and B matrix; each product is a 2-D GEMM.
template <typename T>
void MatMulLoop(const TensorView& a, const TensorView& b, const TensorView& y) {
  const int r = static_cast<int>(y.shape.size());
  const int64_t m = y.shape[r - 2], n = y.shape[r - 1], k = a.shape.back();
  const Shape batch(y.shape.begin(), y.shape.end() - 2);
  const Shape a_batch(a.shape.begin(), a.shape.end() - 2), b_batch(b.shape.begin(), b.shape.end() - 2);
  const auto as = cpu::BroadcastStrides(a_batch, batch), bs = cpu::BroadcastStrides(b_batch, batch);
  const int64_t count = NumElements(batch);
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  T* py = y.as<T>();
#pragma omp parallel for collapse(2) if (count * m * n * k > 100000)
  for (int64_t bi = 0; bi < count; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      int64_t rem = bi, ao = 0, bo = 0;
      for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
        const int64_t idx = rem % batch[d];
        rem /= batch[d];
        ao += idx * as[d];
        bo += idx * bs[d];
      }
      const T* am = pa + ao * m * k;
      const T* bm = pb + bo * k * n;
      T* ym = py + bi * m * n;
      for (int64_t j = 0; j < n; ++j) ym[i * n + j] = 0;
      for (int64_t p = 0; p < k; ++p) {
        const T av = am[i * k + p];
        for (int64_t j = 0; j < n; ++j) ym[i * n + j] += av * bm[p * n + j];
      }
    }
  }
}

template <typename T>
struct RefMatMul {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node&, Backend&) {
    return MakeKernel([](KernelContext& ctx) {
      MatMulLoop<T>(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0]);
      return absl::OkStatus();
    });
  }
};

// f32 MatMul: when B is a single matrix, A's batch folds into M and one oneDNN matmul
// does it; equal batch dims use oneDNN's batched matmul; other broadcasts fall back
// to the loop.
class DnnlMatMulKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const Shape& a = node.inputs[0]->shape;
    const Shape& b = node.inputs[1]->shape;
    const Shape& y = node.outputs[0]->shape;
    const int64_t k = a.back(), n = b.back();
    memory::desc a_md, b_md, y_md;
    if (b.size() == 2) {
      const int64_t m = NumElements(a) / k;
      a_md = memory::desc({m, k}, memory::data_type::f32, memory::format_tag::ab);
      b_md = memory::desc({k, n}, memory::data_type::f32, memory::format_tag::ab);
      y_md = memory::desc({m, n}, memory::data_type::f32, memory::format_tag::ab);
    } else if (Shape(a.begin(), a.end() - 2) == Shape(b.begin(), b.end() - 2)) {
      const int64_t batch = NumElements(Shape(a.begin(), a.end() - 2));
      const int64_t m = a[a.size() - 2];
      a_md = memory::desc({batch, m, k}, memory::data_type::f32, memory::format_tag::abc);
      b_md = memory::desc({batch, k, n}, memory::data_type::f32, memory::format_tag::abc);
      y_md = memory::desc({batch, m, n}, memory::data_type::f32, memory::format_tag::abc);
    } else {
      return RefMatMul<float>::Create(node, backend);
    }
    (void)y;
    auto kernel = std::make_unique<DnnlMatMulKernel>();
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), CpuDnnlEngine());
      kernel->primitive_ = dnnl::matmul(pd);
      kernel->a_ = memory(a_md, CpuDnnlEngine(), DNNL_MEMORY_NONE);
      kernel->b_ = memory(b_md, CpuDnnlEngine(), DNNL_MEMORY_NONE);
      kernel->y_ = memory(y_md, CpuDnnlEngine(), DNNL_MEMORY_NONE);
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("oneDNN matmul setup failed: ", e.what()));
    }
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) override {
    a_.set_data_handle(ctx.inputs[0].data);
    b_.set_data_handle(ctx.inputs[1].data);
    y_.set_data_handle(ctx.outputs[0].data);
    primitive_.execute(CpuDnnlStream(), {{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, y_}});
    CpuDnnlStream().wait();
    return absl::OkStatus();
  }

 private:
  dnnl::matmul primitive_;
  memory a_, b_, y_;
};

}  // namespace

void RegisterCpuMatmulKernels(KernelRegistry& r) {
  r.Register("Gemm", "cpu", DType::kF32, DnnlGemmKernel::Create);
  r.Register("Gemm", "cpu", DType::kF64, RefGemm<double>::Create);
  r.Register("MatMul", "cpu", DType::kF32, DnnlMatMulKernel::Create);
  r.Register("MatMul", "cpu", DType::kF64, RefMatMul<double>::Create);
}

}  // namespace mpc
