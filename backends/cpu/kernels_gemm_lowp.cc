// bf16 and f16 Gemm/MatMul on the CPU, with docs/numerics.md's low-precision GEMM semantics:
// operands in the 16-bit format, products accumulated in f32, the result rounded once
// to the output dtype (the inputs' dtype, or f32 with mpc_output_dtype = 1).
//
// bf16 runs natively on oneDNN's matmul (bf16 src/weights, bf16 or f32 bias, f32 accumulation, dst
// bf16 or f32), keeping every f32 feature: transposes as strides, row bias, sum post-op
// for a full C, alpha as an output scale, the ReLU post-op. f16 has no oneDNN matmul on
// this CPU, so it is staged: operands widened to f32 (exact) into scratch buffers
// allocated once at kernel creation, the f32 primitive run into f32 scratch (or straight
// into an f32 output), and the result rounded to f16. bf16 takes the staged path too
// where oneDNN cannot build a native bf16 matmul (a CPU without AVX512). The two paths
// compute the same function up to f32 summation order — and, natively, the flushing of
// f32 subnormals by the bf16 dot-product instructions.
//
// MatMul's broadcast-batch fallback runs MatMulLoop<T, Y> directly on the 16-bit data.
// Transposed operands (mpc_trans_a/b) are strides in every path; the staged one widens
// the stored tensors element for element, so the strides still apply.
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_gemm.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

class LowpGemmKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const cpu::GemmSpec spec = cpu::GemmSpecOf(node);
    auto k = std::make_unique<LowpGemmKernel>();
    k->spec_ = spec;
    if (spec.operand == DType::kBF16) {
      // The bias in its own dtype: bf16, or f32 beside an f32 output (ops_nn.cc's C rule).
      const DType bias = node.inputs.size() > 2 && node.inputs[2] ? node.inputs[2]->dtype : DType::kBF16;
      auto native = cpu::DnnlGemm::Create(spec, DType::kBF16, bias, spec.out);
      if (native.ok()) {
        k->gemm_ = std::move(*native);
        return std::unique_ptr<Kernel>(std::move(k));
      }
    }
    auto staged = cpu::DnnlGemm::Create(spec, DType::kF32, DType::kF32, DType::kF32);
    if (!staged.ok()) return staged.status();
    k->gemm_ = std::move(*staged);
    k->staged_ = true;
    k->a_.resize(static_cast<size_t>(spec.m * spec.k));
    k->b_.resize(static_cast<size_t>(spec.k * spec.n));
    if (k->gemm_->row_bias()) k->bias_.resize(static_cast<size_t>(spec.n));
    if (spec.out != DType::kF32) k->y_.resize(static_cast<size_t>(spec.m * spec.n));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    const void* c = ctx.inputs.size() > 2 ? ctx.inputs[2].data : nullptr;
    DType c_dtype = ctx.inputs.size() > 2 ? ctx.inputs[2].dtype : spec_.operand;
    void* y = ctx.outputs[0].data;
    if (!staged_) {
      gemm_->Run(ctx.inputs[0].data, ctx.inputs[1].data, c, c_dtype, y);
      return absl::OkStatus();
    }
    cpu::ConvertToF32(ctx.inputs[0].data, spec_.operand, a_.data(), spec_.m * spec_.k);
    cpu::ConvertToF32(ctx.inputs[1].data, spec_.operand, b_.data(), spec_.k * spec_.n);
    if (gemm_->row_bias()) {
      cpu::ConvertToF32(c, c_dtype, bias_.data(), spec_.n);
      c = bias_.data();
      c_dtype = DType::kF32;
    }
    // A full C is widened by DnnlGemm itself as it is broadcast into the f32 result.
    float* yf = spec_.out == DType::kF32 ? static_cast<float*>(y) : y_.data();
    gemm_->Run(a_.data(), b_.data(), c, c_dtype, yf);
    if (spec_.out != DType::kF32) cpu::ConvertFromF32(yf, y, spec_.out, spec_.m * spec_.n);
    return absl::OkStatus();
  }

 private:
  cpu::GemmSpec spec_;
  std::unique_ptr<cpu::DnnlGemm> gemm_;
  bool staged_ = false;
  std::vector<float> a_, b_, bias_, y_;  // staged path only
};

class LowpMatMulKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const cpu::MatMulPlan plan = cpu::PlanMatMul(node);
    const DType in = node.inputs[0]->dtype, out = node.outputs[0]->dtype;
    if (plan.mode == cpu::MatMulPlan::Mode::kLoop) return Loop(in, out, plan.ta, plan.tb);
    auto k = std::make_unique<LowpMatMulKernel>();
    k->in_ = in;
    k->out_ = out;
    if (in == DType::kBF16) {
      auto native = cpu::DnnlMatMul::Create(plan, DType::kBF16, out);
      if (native.ok()) {
        k->mm_ = std::move(*native);
        return std::unique_ptr<Kernel>(std::move(k));
      }
    }
    auto staged = cpu::DnnlMatMul::Create(plan, DType::kF32, DType::kF32);
    if (!staged.ok()) return staged.status();
    k->mm_ = std::move(*staged);
    k->staged_ = true;
    k->a_.resize(static_cast<size_t>(NumElements(node.inputs[0]->shape)));
    k->b_.resize(static_cast<size_t>(NumElements(node.inputs[1]->shape)));
    k->y_count_ = NumElements(node.outputs[0]->shape);
    if (out != DType::kF32) k->y_.resize(static_cast<size_t>(k->y_count_));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    void* y = ctx.outputs[0].data;
    if (!staged_) {
      mm_->Run(ctx.inputs[0].data, ctx.inputs[1].data, y);
      return absl::OkStatus();
    }
    cpu::ConvertToF32(ctx.inputs[0].data, in_, a_.data(), static_cast<int64_t>(a_.size()));
    cpu::ConvertToF32(ctx.inputs[1].data, in_, b_.data(), static_cast<int64_t>(b_.size()));
    float* yf = out_ == DType::kF32 ? static_cast<float*>(y) : y_.data();
    mm_->Run(a_.data(), b_.data(), yf);
    if (out_ != DType::kF32) cpu::ConvertFromF32(yf, y, out_, y_count_);
    return absl::OkStatus();
  }

 private:
  template <typename T, typename Y>
  static std::unique_ptr<Kernel> LoopAs(bool ta, bool tb) {
    return MakeKernel([ta, tb](KernelContext& ctx) {
      cpu::MatMulLoop<T, Y>(ctx.inputs[0], ctx.inputs[1], ctx.outputs[0], ta, tb);
      return absl::OkStatus();
    });
  }
  // A broadcast batch: the templated loop accumulates in f32 and rounds once.
  static absl::StatusOr<std::unique_ptr<Kernel>> Loop(DType in, DType out, bool ta, bool tb) {
    if (in == DType::kBF16) return out == DType::kF32 ? LoopAs<Bf16, float>(ta, tb) : LoopAs<Bf16, Bf16>(ta, tb);
    return out == DType::kF32 ? LoopAs<Half, float>(ta, tb) : LoopAs<Half, Half>(ta, tb);
  }

  DType in_ = DType::kBF16, out_ = DType::kBF16;
  std::unique_ptr<cpu::DnnlMatMul> mm_;
  bool staged_ = false;
  int64_t y_count_ = 0;
  std::vector<float> a_, b_, y_;  // staged path only
};

}  // namespace

void RegisterCpuGemmLowpKernels(KernelRegistry& r) {
  for (DType d : {DType::kBF16, DType::kF16}) {
    r.Register("Gemm", "cpu", d, LowpGemmKernel::Create);
    r.Register("MatMul", "cpu", d, LowpMatMulKernel::Create);
  }
}

}  // namespace mpc
