// CPU GEMM kernels, f32 and f64 (bf16/f16 live in kernels_gemm_lowp.cc). f32 runs on
// oneDNN's matmul primitive, built once per node with the node's static shapes;
// transposed operands are expressed as strides (no copies), Gemm's bias is oneDNN's
// bias argument (or a sum post-op for a full C), alpha an output scale, and a fused
// activation (attribute `mpc_activation`, set by the fusion pass) a ReLU post-op. With
// mpc_tf32 = 1 (the tf32 pass) the f32 kernels run on A and B rounded to TF32 in scratch
// (kernels_gemm.h: RunsInTf32). f64 is plain loops: it is the reference. Also here: the
// oneDNN wrappers and dtype conversions kernels_gemm.h shares with the low-precision
// kernels.
#include "backends/cpu/kernels_gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "graph/float_convert.h"

namespace mpc {
namespace cpu {

using dnnl::memory;

memory::data_type DnnlType(DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return memory::data_type::bf16;
    case DType::kF16:
      return memory::data_type::f16;
    case DType::kF32:
      return memory::data_type::f32;
    default:
      return memory::data_type::undef;  // oneDNN then rejects the descriptor
  }
}

void ConvertToF32(const void* src, DType dtype, float* dst, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for simd if (n > 32768)
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFloat(s[i]);
      break;
    }
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(s[i]);
      break;
    }
    default:
      break;  // callers only pass float dtypes (checked at kernel creation)
  }
}

void ConvertFromF32(const float* src, void* dst, DType dtype, int64_t n) {
  switch (dtype) {
    case DType::kF32:
      if (dst != src) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      break;
    case DType::kBF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for simd if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToBf16(src[i]);
      break;
    }
    case DType::kF16: {
      uint16_t* d = static_cast<uint16_t*>(dst);
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = FloatToHalf(src[i]);
      break;
    }
    default:
      break;
  }
}

bool RunsInTf32(const Node& node) {
  return node.attrs.GetInt("mpc_tf32", 0) != 0 && node.inputs.size() >= 2 && node.inputs[0]->dtype == DType::kF32 &&
         node.inputs[1]->dtype == DType::kF32;
}

void RoundToTf32Buffer(const float* src, float* dst, int64_t n) {
#pragma omp parallel for simd if (n > 32768)
  for (int64_t i = 0; i < n; ++i) dst[i] = RoundToTf32(src[i]);
}

namespace {

// Logical rows x cols in `dtype`; stored either row-major or as its transpose.
memory::desc MatrixDesc(int64_t rows, int64_t cols, bool stored_transposed, DType dtype) {
  return memory::desc({rows, cols}, DnnlType(dtype), stored_transposed ? memory::dims{1, rows} : memory::dims{cols, 1});
}

float LoadAsFloat(const void* p, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(p)[i]);
    case DType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

void StoreFloat(void* p, DType dtype, int64_t i, float v) {
  switch (dtype) {
    case DType::kBF16:
      static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
      break;
    case DType::kF16:
      static_cast<uint16_t*>(p)[i] = FloatToHalf(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
      break;
  }
}

// y[i, j] = c[broadcast(i, j)], the element copied when the dtypes agree.
template <typename Word>
void BroadcastWords(const void* c, void* y, const std::vector<int64_t>& cs, int64_t m, int64_t n) {
  const Word* pc = static_cast<const Word*>(c);
  Word* py = static_cast<Word*>(y);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) py[i * n + j] = pc[i * cs[0] + j * cs[1]];
  }
}

}  // namespace

GemmSpec GemmSpecOf(const Node& node) {
  GemmSpec s;
  const Shape& a = node.inputs[0]->shape;
  const Shape& y = node.outputs[0]->shape;
  s.ta = node.attrs.GetInt("transA", 0) != 0;
  s.tb = node.attrs.GetInt("transB", 0) != 0;
  s.m = y[0];
  s.n = y[1];
  s.k = s.ta ? a[0] : a[1];
  s.alpha = node.attrs.GetFloat("alpha", 1.0f);
  s.beta = node.attrs.GetFloat("beta", 1.0f);
  s.relu = node.attrs.GetString("mpc_activation", "") == "Relu";
  const Value* c = node.inputs.size() > 2 ? node.inputs[2] : nullptr;
  if (c && s.beta != 0.0f) s.c_shape = c->shape;
  s.operand = node.inputs[0]->dtype;
  s.out = node.outputs[0]->dtype;
  return s;
}

absl::StatusOr<std::unique_ptr<DnnlGemm>> DnnlGemm::Create(const GemmSpec& spec, DType operand, DType bias_dtype,
                                                           DType out) {
  auto g = std::make_unique<DnnlGemm>();
  g->m_ = spec.m;
  g->n_ = spec.n;
  g->out_ = out;
  g->relu_ = spec.relu;
  if (spec.c_shape) {
    // A bias row ([N], [1,N]) with alpha = beta = 1 maps onto oneDNN's bias (with an
    // output scale alpha != 1 oneDNN does not give alpha*AB + bias); anything else is
    // broadcast into the output and added by a sum post-op scaled by beta.
    const Shape& cs = *spec.c_shape;
    const bool row = (cs == Shape{spec.n} || cs == Shape{1, spec.n}) && spec.beta == 1.0f && spec.alpha == 1.0f;
    g->bias_mode_ = row ? BiasMode::kRow : BiasMode::kSum;
    g->c_strides_ = BroadcastStrides(cs, {spec.m, spec.n});
  }
  try {  // everything oneDNN may throw from, including descriptors of unsupported types
    dnnl::post_ops post;
    if (g->bias_mode_ == BiasMode::kSum) post.append_sum(spec.beta);
    dnnl::primitive_attr attr;
    attr.set_post_ops(post);
    if (spec.alpha != 1.0f) attr.set_output_scales(0, {spec.alpha});
    const memory::desc a_md = MatrixDesc(spec.m, spec.k, spec.ta, operand);
    const memory::desc b_md = MatrixDesc(spec.k, spec.n, spec.tb, operand);
    const memory::desc y_md({spec.m, spec.n}, DnnlType(out), memory::format_tag::ab);
    const memory::desc bias_md({1, spec.n}, DnnlType(bias_dtype), memory::format_tag::ab);
    auto desc = g->bias_mode_ == BiasMode::kRow ? dnnl::matmul::desc(a_md, b_md, bias_md, y_md)
                                                : dnnl::matmul::desc(a_md, b_md, y_md);
    dnnl::matmul::primitive_desc pd(desc, attr, CpuDnnlEngine());
    g->primitive_ = dnnl::matmul(pd);
    auto& eng = CpuDnnlEngine();
    g->a_ = memory(a_md, eng, DNNL_MEMORY_NONE);
    g->b_ = memory(b_md, eng, DNNL_MEMORY_NONE);
    g->y_ = memory(y_md, eng, DNNL_MEMORY_NONE);
    g->bias_ = memory(bias_md, eng, DNNL_MEMORY_NONE);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul setup failed for M=", spec.m, " N=", spec.n, " K=", spec.k,
                                            " (", DTypeName(operand), " operands, ", DTypeName(out),
                                            " output): ", e.what()));
  }
  return g;
}

void DnnlGemm::Run(const void* a, const void* b, const void* c, DType c_dtype, void* y) {
  if (bias_mode_ == BiasMode::kSum) {
    // Writes C broadcast to [M, N] into y; the sum post-op then adds beta * y.
    const std::vector<int64_t>& cs = c_strides_;
    if (c_dtype == out_ && DTypeSize(out_) == 4)
      BroadcastWords<uint32_t>(c, y, cs, m_, n_);
    else if (c_dtype == out_ && DTypeSize(out_) == 2)
      BroadcastWords<uint16_t>(c, y, cs, m_, n_);
    else {
      for (int64_t i = 0; i < m_; ++i) {
        for (int64_t j = 0; j < n_; ++j)
          StoreFloat(y, out_, i * n_ + j, LoadAsFloat(c, c_dtype, i * cs[0] + j * cs[1]));
      }
    }
  }
  a_.set_data_handle(const_cast<void*>(a));
  b_.set_data_handle(const_cast<void*>(b));
  y_.set_data_handle(y);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, a_}, {DNNL_ARG_WEIGHTS, b_}, {DNNL_ARG_DST, y_}};
  if (bias_mode_ == BiasMode::kRow) {
    bias_.set_data_handle(const_cast<void*>(c));
    args.emplace(DNNL_ARG_BIAS, bias_);
  }
  primitive_.execute(CpuDnnlStream(), args);
  CpuDnnlStream().wait();
  if (relu_) cpu::ReluInPlace(y, out_, m_ * n_);
}

MatMulPlan PlanMatMul(const Node& node) {
  const Shape& a = node.inputs[0]->shape;
  const Shape& b = node.inputs[1]->shape;
  MatMulPlan p;
  const std::string zeros = node.attrs.GetString("mpc_a_zeros", "");
  p.a_zeros = zeros == "above_diagonal"   ? MatMulPlan::Zeros::kAboveDiagonal
              : zeros == "below_diagonal" ? MatMulPlan::Zeros::kBelowDiagonal
                                          : MatMulPlan::Zeros::kNone;
  if (absl::StatusOr<MatMulLayout> layout = MatMulLayoutOf(node); layout.ok() && layout->permuted) {
    p.mode = MatMulPlan::Mode::kStrided;
    p.layout = *std::move(layout);
    return p;
  }
  p.ta = node.attrs.GetInt("mpc_trans_a", 0) != 0;
  p.tb = node.attrs.GetInt("mpc_trans_b", 0) != 0;
  p.k = p.ta ? a[a.size() - 2] : a.back();
  p.n = p.tb ? b[b.size() - 2] : b.back();
  if (b.size() == 2 && (!p.ta || a.size() == 2)) {
    p.mode = MatMulPlan::Mode::kFold;
    p.m = NumElements(a) / p.k;
  } else if (Shape(a.begin(), a.end() - 2) == Shape(b.begin(), b.end() - 2)) {
    p.mode = MatMulPlan::Mode::kBatched;
    p.batch = NumElements(Shape(a.begin(), a.end() - 2));
    p.m = p.ta ? a.back() : a[a.size() - 2];
  } else {
    p.mode = MatMulPlan::Mode::kLoop;
  }
  return p;
}

absl::StatusOr<std::unique_ptr<DnnlMatMul>> DnnlMatMul::Create(const MatMulPlan& p, DType operand, DType out) {
  if (p.mode == MatMulPlan::Mode::kLoop) {
    return absl::InternalError("DnnlMatMul: a broadcast batch has no single oneDNN matmul; use MatMulLoop");
  }
  auto mm = std::make_unique<DnnlMatMul>();
  auto& eng = CpuDnnlEngine();
  const auto add_part = [&](const memory::desc& a_md, const memory::desc& b_md, const memory::desc& y_md,
                            size_t a_offset, size_t b_offset, size_t y_offset) {
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, y_md), eng);
    mm->parts_.push_back({dnnl::matmul(pd), memory(a_md, eng, DNNL_MEMORY_NONE), memory(b_md, eng, DNNL_MEMORY_NONE),
                          memory(y_md, eng, DNNL_MEMORY_NONE), a_offset, b_offset, y_offset});
  };
  try {
    if (p.mode == MatMulPlan::Mode::kFold) {
      add_part(MatrixDesc(p.m, p.k, p.ta, operand), MatrixDesc(p.k, p.n, p.tb, operand),
               memory::desc({p.m, p.n}, DnnlType(out), memory::format_tag::ab), 0, 0, 0);
      return mm;
    }
    // Batched and strided plans: every view as dims and element strides.
    memory::dims ad, as, bd, bs, yd, ys;
    if (p.mode == MatMulPlan::Mode::kStrided) {
      const MatMulLayout& l = p.layout;
      ad.assign(l.a.begin(), l.a.end());
      as.assign(l.a_strides.begin(), l.a_strides.end());
      bd.assign(l.b.begin(), l.b.end());
      bs.assign(l.b_strides.begin(), l.b_strides.end());
      yd.assign(l.y.begin(), l.y.end());
      ys.assign(l.y_strides.begin(), l.y_strides.end());
    } else {
      // A transposed operand: the same packed matrices, read through swapped strides.
      ad = {p.batch, p.m, p.k};
      as = p.ta ? memory::dims{p.m * p.k, 1, p.m} : memory::dims{p.m * p.k, p.k, 1};
      bd = {p.batch, p.k, p.n};
      bs = p.tb ? memory::dims{p.k * p.n, 1, p.k} : memory::dims{p.k * p.n, p.n, 1};
      yd = {p.batch, p.m, p.n};
      ys = {p.m * p.n, p.n, 1};
    }
    const size_t r = ad.size(), row = r - 2, col = r - 1;
    const int64_t m = ad[row], k = ad[col];
    // f32 operands only: oneDNN 2.6 runs a band (a view whose rows are longer than it
    // reads) with gemm:jit instead of brgemm. For f32 that is still the faster choice
    // (char_gpt's four triangular products a layer: 162 -> 123 ms a step); for bf16,
    // whose gemm:jit is about half brgemm's speed, the bands took as long as the full
    // products (119-126 ms both ways), so bf16 keeps the one primitive.
    const bool triangle = p.a_zeros != MatMulPlan::Zeros::kNone && m == k && operand == DType::kF32;
    const int64_t band = triangle ? kTriangleBandRows : m;
    const size_t a_size = DTypeSize(operand), y_size = DTypeSize(out);
    for (int64_t r0 = 0; r0 < m; r0 += band) {
      const int64_t r1 = std::min(m, r0 + band);
      // The columns of A this band's rows can have nonzeros in.
      const int64_t k0 = triangle && p.a_zeros == MatMulPlan::Zeros::kBelowDiagonal ? r0 : 0;
      const int64_t k1 = triangle && p.a_zeros == MatMulPlan::Zeros::kAboveDiagonal ? r1 : k;
      memory::dims a_band = ad, b_band = bd, y_band = yd;
      a_band[row] = y_band[row] = r1 - r0;
      a_band[col] = b_band[row] = k1 - k0;
      add_part(memory::desc(a_band, DnnlType(operand), as), memory::desc(b_band, DnnlType(operand), bs),
               memory::desc(y_band, DnnlType(out), ys), static_cast<size_t>(r0 * as[row] + k0 * as[col]) * a_size,
               static_cast<size_t>(k0 * bs[row]) * a_size, static_cast<size_t>(r0 * ys[row]) * y_size);
    }
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN matmul setup failed (", DTypeName(operand), " operands, ",
                                            DTypeName(out), " output): ", e.what()));
  }
  return mm;
}

void DnnlMatMul::Run(const void* a, const void* b, void* y) {
  for (Part& part : parts_) {
    part.a.set_data_handle(const_cast<char*>(static_cast<const char*>(a)) + part.a_offset);
    part.b.set_data_handle(const_cast<char*>(static_cast<const char*>(b)) + part.b_offset);
    part.y.set_data_handle(static_cast<char*>(y) + part.y_offset);
    part.primitive.execute(CpuDnnlStream(), {{DNNL_ARG_SRC, part.a}, {DNNL_ARG_WEIGHTS, part.b}, {DNNL_ARG_DST, part.y}});
  }
  CpuDnnlStream().wait();
}

}  // namespace cpu

namespace {

using cpu::MakeKernel;

// C's data and dtype as a Gemm kernel sees them (nullptr when absent).
const void* GemmC(const KernelContext& ctx) { return ctx.inputs.size() > 2 ? ctx.inputs[2].data : nullptr; }
DType GemmCDType(const KernelContext& ctx) { return ctx.inputs.size() > 2 ? ctx.inputs[2].dtype : ctx.inputs[0].dtype; }

// A and B rounded to TF32 (cpu::RunsInTf32), allocated once per kernel.
struct Tf32Operands {
  std::vector<float> a, b;
  Tf32Operands(int64_t a_count, int64_t b_count) : a(static_cast<size_t>(a_count)), b(static_cast<size_t>(b_count)) {}
  void Round(const KernelContext& ctx) {
    cpu::RoundToTf32Buffer(ctx.inputs[0].as<float>(), a.data(), static_cast<int64_t>(a.size()));
    cpu::RoundToTf32Buffer(ctx.inputs[1].as<float>(), b.data(), static_cast<int64_t>(b.size()));
  }
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateF32Gemm(const Node& node, Backend&) {
  const cpu::GemmSpec spec = cpu::GemmSpecOf(node);
  auto gemm = cpu::DnnlGemm::Create(spec, DType::kF32, DType::kF32, DType::kF32);
  if (!gemm.ok()) return gemm.status();
  std::shared_ptr<cpu::DnnlGemm> g(std::move(*gemm));
  if (cpu::RunsInTf32(node)) {
    auto ops = std::make_shared<Tf32Operands>(spec.m * spec.k, spec.k * spec.n);
    return MakeKernel([g, ops](KernelContext& ctx) {
      ops->Round(ctx);
      g->Run(ops->a.data(), ops->b.data(), GemmC(ctx), GemmCDType(ctx), ctx.outputs[0].data);
      return absl::OkStatus();
    });
  }
  return MakeKernel([g](KernelContext& ctx) {
    g->Run(ctx.inputs[0].data, ctx.inputs[1].data, GemmC(ctx), GemmCDType(ctx), ctx.outputs[0].data);
    return absl::OkStatus();
  });
}

// C's element i, in the operands' dtype T or the output's f32 (ops_nn.cc's C rule).
template <typename T>
cpu::Acc<T> CElement(const TensorView& c, int64_t i) {
  using A = cpu::Acc<T>;
  return c.dtype == DType::kF32 ? A(c.as<float>()[i]) : A(c.as<T>()[i]);
}

// Reference Gemm in T's accumulator (f64 for the f64 kernel), output in Y.
template <typename T, typename Y>
absl::StatusOr<std::unique_ptr<Kernel>> RefGemm(const cpu::GemmSpec& d) {
  using A = cpu::Acc<T>;
  return MakeKernel([d](KernelContext& ctx) {
    const T* a = ctx.inputs[0].as<T>();
    const T* b = ctx.inputs[1].as<T>();
    const bool has_c = ctx.inputs.size() > 2 && ctx.inputs[2].data;
    std::vector<int64_t> cs =
        has_c ? cpu::BroadcastStrides(ctx.inputs[2].shape, {d.m, d.n}) : std::vector<int64_t>{0, 0};
    Y* y = ctx.outputs[0].as<Y>();
    const A alpha = d.alpha, beta = d.beta;
#pragma omp parallel for if (d.m * d.n * d.k > 100000)
    for (int64_t i = 0; i < d.m; ++i) {
      for (int64_t j = 0; j < d.n; ++j) {
        A acc = 0;
        for (int64_t p = 0; p < d.k; ++p) {
          acc += A(a[d.ta ? p * d.m + i : i * d.k + p]) * A(b[d.tb ? j * d.k + p : p * d.n + j]);
        }
        A v = alpha * acc;
        if (has_c) v += beta * CElement<T>(ctx.inputs[2], i * cs[0] + j * cs[1]);
        y[i * d.n + j] = static_cast<Y>(d.relu && v < A(0) ? A(0) : v);
      }
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateF64Gemm(const Node& node, Backend&) {
  const cpu::GemmSpec spec = cpu::GemmSpecOf(node);
  return spec.out == DType::kF32 ? RefGemm<double, float>(spec) : RefGemm<double, double>(spec);
}

template <typename T, typename Y>
std::unique_ptr<Kernel> LoopMatMul(const cpu::MatMulPlan& plan) {
  return MakeKernel([ta = plan.ta, tb = plan.tb](KernelContext& ctx) {
    cpu::MatMulLoop<T, Y>(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0], ta, tb);
    return absl::OkStatus();
  });
}

// f32 MatMul: one oneDNN matmul when B is a single matrix (A's batch folds into M) or
// the batch dims are equal; other broadcasts fall back to the loop. Transposed operands
// (mpc_trans_a/b) are strides on either path, and so are permuted operands and results
// (mpc_perm_*: the kStrided plan, equal batch axes only).
// With mpc_tf32 both paths run on the operands rounded to TF32 (cpu::RunsInTf32).
absl::StatusOr<std::unique_ptr<Kernel>> CreateF32MatMul(const Node& node, Backend&) {
  const cpu::MatMulPlan plan = cpu::PlanMatMul(node);
  std::shared_ptr<Tf32Operands> ops;
  if (cpu::RunsInTf32(node)) {
    ops = std::make_shared<Tf32Operands>(NumElements(node.inputs[0]->shape), NumElements(node.inputs[1]->shape));
  }
  if (plan.mode == cpu::MatMulPlan::Mode::kLoop) {
    if (!ops) return LoopMatMul<float, float>(plan);
    return MakeKernel([ops, plan](KernelContext& ctx) {
      ops->Round(ctx);
      TensorView a = ctx.inputs[0], b = ctx.inputs[1];
      a.data = ops->a.data();
      b.data = ops->b.data();
      cpu::MatMulLoop<float, float>(a, b, ctx.outputs[0], plan.ta, plan.tb);
      return absl::OkStatus();
    });
  }
  auto mm = cpu::DnnlMatMul::Create(plan, DType::kF32, DType::kF32);
  if (!mm.ok()) return mm.status();
  std::shared_ptr<cpu::DnnlMatMul> m(std::move(*mm));
  if (ops) {
    return MakeKernel([m, ops](KernelContext& ctx) {
      ops->Round(ctx);
      m->Run(ops->a.data(), ops->b.data(), ctx.outputs[0].data);
      return absl::OkStatus();
    });
  }
  return MakeKernel([m](KernelContext& ctx) {
    m->Run(ctx.inputs[0].data, ctx.inputs[1].data, ctx.outputs[0].data);
    return absl::OkStatus();
  });
}

template <typename Y>
std::unique_ptr<Kernel> StridedLoopMatMul(const cpu::MatMulPlan& plan) {
  return MakeKernel([layout = plan.layout](KernelContext& ctx) {
    cpu::MatMulStridedLoop<double, Y>(layout, ctx.inputs[0].as<double>(), ctx.inputs[1].as<double>(),
                                      ctx.outputs[0].as<Y>());
    return absl::OkStatus();
  });
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateF64MatMul(const Node& node, Backend&) {
  const cpu::MatMulPlan plan = cpu::PlanMatMul(node);
  if (plan.mode == cpu::MatMulPlan::Mode::kStrided) {
    if (node.outputs[0]->dtype == DType::kF32) return StridedLoopMatMul<float>(plan);
    return StridedLoopMatMul<double>(plan);
  }
  if (node.outputs[0]->dtype == DType::kF32) return LoopMatMul<double, float>(plan);
  return LoopMatMul<double, double>(plan);
}

}  // namespace

void RegisterCpuGemmKernels(KernelRegistry& r) {
  r.Register("Gemm", "cpu", DType::kF32, CreateF32Gemm);
  r.Register("Gemm", "cpu", DType::kF64, CreateF64Gemm);
  r.Register("MatMul", "cpu", DType::kF32, CreateF32MatMul);
  r.Register("MatMul", "cpu", DType::kF64, CreateF64MatMul);
  RegisterCpuGemmLowpKernels(r);
}

}  // namespace mpc
