// f32 activations and softmax on oneDNN primitives (eltwise_forward for logistic and
// tanh; softmax_forward / logsoftmax_forward along one axis), built once per node with
// its static shape. Gelu also in bf16 (oneDNN reads and writes bf16 and computes in f32,
// as the numerics contract asks; 16-bit softmax rows are kernels_softmax_loss.cc's). These replace the loop kernels for
// f32; the f64 loop kernels stay as the reference the op numerics tests compare against. ReLU stays mpc's loop:
// oneDNN's turns NaN into 0. oneDNN's softmax ignores a NaN or +inf when it takes the row's maximum, so a row holding
// one comes out partly finite; IEEE arithmetic (and PyTorch) make the whole row NaN, which a pass over the output
// restores.
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/kernels_gemm.h"
#include "graph/half_types.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc {
namespace {

using dnnl::memory;

// Whether any of n floats, read as their bits, is a NaN: exponent all ones and a nonzero
// mantissa. Branch-free so it runs in vector lanes (compiled for each vector ISA): the
// short-circuit `any || y != y` did not vectorize (when bf16 softmax ran here, char_gpt's
// Softmax took 16.2 ms a bf16 step with it, 7.9 without).
MPC_ISA_CLONES bool AnyNaNBits(const uint32_t* y, int64_t n) {
  uint32_t nan = 0;
#pragma omp simd reduction(| : nan)
  for (int64_t i = 0; i < n; ++i) nan |= static_cast<uint32_t>((y[i] & 0x7fffffffu) > 0x7f800000u);
  return nan != 0;
}

memory::desc FlatDesc(const Shape& shape, DType dtype = DType::kF32) {
  const memory::dims dims = shape.empty() ? memory::dims{1} : memory::dims(shape.begin(), shape.end());
  memory::dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * dims[i + 1];
  return memory::desc(dims, cpu::DnnlType(dtype), strides);
}

// One primitive with a src and a dst argument.
class DnnlUnaryKernel : public Kernel {
 public:
  // softmax_rows: the [outer, dim, inner] geometry of a softmax's rows, whose NaNs the
  // kernel spreads over the row; null for elementwise primitives.
  DnnlUnaryKernel(dnnl::primitive primitive, const memory::desc& md, std::optional<std::array<int64_t, 3>> softmax_rows)
      : primitive_(std::move(primitive)),
        src_(md, CpuDnnlEngine(), DNNL_MEMORY_NONE),
        dst_(md, CpuDnnlEngine(), DNNL_MEMORY_NONE),
        softmax_rows_(softmax_rows) {}

  absl::Status Run(KernelContext& ctx) override {
    src_.set_data_handle(ctx.inputs[0].data);
    dst_.set_data_handle(ctx.outputs[0].data);
    args_[DNNL_ARG_SRC] = src_;
    args_[DNNL_ARG_DST] = dst_;
    primitive_.execute(CpuDnnlStream(), args_);
    CpuDnnlStream().wait();
    if (softmax_rows_) SpreadNaNOverRows(ctx.outputs[0].as<float>(), *softmax_rows_);
    return absl::OkStatus();
  }

 private:
  // The f32 softmax and log-softmax (bf16 softmax runs kernels_softmax_loss.cc's rows).
  static void SpreadNaNOverRows(float* y, const std::array<int64_t, 3>& rows) {
    const auto [outer, dim, inner] = rows;
    const int64_t n = outer * dim * inner;
    const uint32_t* bits = reinterpret_cast<const uint32_t*>(y);
    std::atomic<bool> any{false};
    cpu::ParallelRanges(n, 65536, [&](int64_t begin, int64_t end) {
      if (AnyNaNBits(bits + begin, end - begin)) any.store(true, std::memory_order_relaxed);
    });
    if (!any.load()) return;  // the usual case: one read of the output
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        float* row = y + o * dim * inner + i;
        bool nan = false;
        for (int64_t d = 0; d < dim; ++d) nan = nan || row[d * inner] != row[d * inner];
        if (nan) {
          for (int64_t d = 0; d < dim; ++d) row[d * inner] = std::numeric_limits<float>::quiet_NaN();
        }
      }
    }
  }

  dnnl::primitive primitive_;
  memory src_, dst_;
  std::unordered_map<int, memory> args_;
  std::optional<std::array<int64_t, 3>> softmax_rows_;
};

KernelFactory Eltwise(dnnl::algorithm algorithm) {
  return [algorithm](const Node& node, Backend&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    const memory::desc md = FlatDesc(node.inputs[0]->shape);
    try {
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, md, 0.0f, 0.0f);
      dnnl::eltwise_forward::primitive_desc pd(desc, CpuDnnlEngine());
      return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::eltwise_forward(pd), md, std::nullopt));
    } catch (const dnnl::error& e) {
      return absl::InternalError(absl::StrCat("oneDNN eltwise setup failed: ", e.what()));
    }
  };
}

dnnl::algorithm GeluAlgorithm(const Node& node) {
  return node.attrs.GetString("approximate", "none") == "tanh" ? dnnl::algorithm::eltwise_gelu_tanh
                                                               : dnnl::algorithm::eltwise_gelu_erf;
}

// Gelu(X) in f32 or bf16: oneDNN's vectorised erf/tanh instead of a scalar loop, f32 inside.
// Where oneDNN has no such primitive (bf16 eltwise needs AVX-512: an AVX2-only CPU such as
// many AMD EPYCs has none), the loop kernel registered before this one (kernels_math.cc)
// runs instead: the same contract (f32 inside, rounded once).
KernelFactory GeluOrLoop(KernelFactory loop) {
  return [loop](const Node& node, Backend& backend) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    const memory::desc md = FlatDesc(node.inputs[0]->shape, node.inputs[0]->dtype);
    try {
      dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_training, GeluAlgorithm(node), md, 0.0f, 0.0f);
      dnnl::eltwise_forward::primitive_desc pd(desc, CpuDnnlEngine());
      return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::eltwise_forward(pd), md, std::nullopt));
    } catch (const dnnl::error& e) {
      if (e.status == dnnl_unimplemented && loop) return loop(node, backend);
      return absl::InternalError(absl::StrCat("oneDNN Gelu setup for node '", node.name, "' failed: ", e.what()));
    }
  };
}

template <bool kLog>
absl::StatusOr<std::unique_ptr<Kernel>> CreateSoftmax(const Node& node, Backend&) {
  const Shape& shape = node.inputs[0]->shape;
  const int rank = static_cast<int>(shape.size());
  int64_t axis = node.attrs.GetInt("axis", -1);
  if (axis < 0) axis += rank;
  const memory::desc md = FlatDesc(shape, node.inputs[0]->dtype);
  std::array<int64_t, 3> rows{1, 1, 1};  // [outer, dim, inner] around the axis
  for (int i = 0; i < rank; ++i) rows[i < axis ? 0 : (i == axis ? 1 : 2)] *= shape[i];
  try {
    if (kLog) {
      dnnl::logsoftmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, static_cast<int>(axis));
      dnnl::logsoftmax_forward::primitive_desc pd(desc, CpuDnnlEngine());
      return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::logsoftmax_forward(pd), md, rows));
    }
    dnnl::softmax_forward::desc desc(dnnl::prop_kind::forward_inference, md, static_cast<int>(axis));
    dnnl::softmax_forward::primitive_desc pd(desc, CpuDnnlEngine());
    return std::unique_ptr<Kernel>(std::make_unique<DnnlUnaryKernel>(dnnl::softmax_forward(pd), md, rows));
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN softmax setup failed: ", e.what()));
  }
}

}  // namespace

void RegisterCpuDnnlEltwiseKernels(KernelRegistry& r) {
  r.Register("Sigmoid", "cpu", DType::kF32, Eltwise(dnnl::algorithm::eltwise_logistic));
  r.Register("Tanh", "cpu", DType::kF32, Eltwise(dnnl::algorithm::eltwise_tanh));
  r.Register("Softmax", "cpu", DType::kF32, CreateSoftmax<false>);
  // GeluGrad is not here: gelu_math.h's loops (kernels_math.cc) beat oneDNN's backward.
  for (DType d : {DType::kF32, DType::kBF16}) {
    auto loop = r.Find("Gelu", "cpu", d);
    r.Register("Gelu", "cpu", d, GeluOrLoop(loop.ok() ? **loop : KernelFactory()));
  }
  r.Register("LogSoftmax", "cpu", DType::kF32, CreateSoftmax<true>);
}

}  // namespace mpc
