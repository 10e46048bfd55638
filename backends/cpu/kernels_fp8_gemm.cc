// CPU kernels of the real FP8 ops the fp8-lower pass emits (graph/ops_fp8_gemm.cc):
//   Fp8Cast  x (f32/bf16/f16) -> FP8 codes of f32(x) * scale, graph/float8.h's rounding
//            (nearest even, saturating), optionally written transposed; records max|x|
//            into amax_history[0] exactly like Fp8Quantize (kernels_fp8.cc).
//   Fp8Gemm  codes (E4M3/E5M2) -> each operand dequantized into f32 scratch as
//            f32(code) * scale_inv (bit for bit what Fp8Quantize yields; with group
//            scales, each element's group's scale_inv, Fp8QuantizeDynamic's value), then the f32
//            oneDNN GEMM (cpu::DnnlGemm) with the bias, accumulated in f32, and the result
//            rounded once to y's dtype. So a lowered program multiplies exactly the values
//            the emulated one does; only oneDNN's summation order for the other operand
//            layout can differ.
// Scratch buffers are sized at kernel creation; Run allocates nothing.
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels_gemm.h"
#include "base/status_macros.h"
#include "graph/float8.h"
#include "graph/float8_groups.h"

namespace mpc {
namespace {

using cpu::MakeKernel;

template <bool kE4M3>
inline uint8_t Encode(float v) {
  return kE4M3 ? FloatToF8E4M3(v) : FloatToF8E5M2(v);
}

// codes of x * scale (x [rows, cols], codes [cols, rows] when transposed); returns max|x|
// and whether x has a NaN. The format is a template argument so the loops vectorise.
template <typename T, bool kE4M3>
void CastLoop(const T* x, float scale, uint8_t* codes, int64_t rows, int64_t cols, bool transpose, float* amax_out,
              bool* nan_out) {
  const int64_t n = rows * cols;
  float amax = 0;
  bool nan = false;
  // The scaled value is formed in f32 and rounded once, as Fp8Quantize does.
  if (!transpose) {
#pragma omp parallel for simd reduction(max : amax) reduction(|| : nan) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(x[i]);
      amax = std::max(amax, std::fabs(v));
      nan = nan || v != v;
      codes[i] = Encode<kE4M3>(v * scale);
    }
  } else {
    // codes[c, r] = code(x[r, c]): one output row (an input column) per iteration,
    // written contiguously.
#pragma omp parallel for reduction(max : amax) reduction(|| : nan) if (n > 32768)
    for (int64_t c = 0; c < cols; ++c) {
      for (int64_t r = 0; r < rows; ++r) {
        const float v = static_cast<float>(x[r * cols + c]);
        amax = std::max(amax, std::fabs(v));
        nan = nan || v != v;
        codes[c * rows + r] = Encode<kE4M3>(v * scale);
      }
    }
  }
  *amax_out = amax;
  *nan_out = nan;
}

template <typename T>
struct Fp8CastKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const bool e4m3 = node.attrs.GetString("format", "e4m3") == "e4m3";
    const bool transpose = node.attrs.GetInt("transpose", 0) != 0;
    const Shape& s = node.inputs[0]->shape;
    // Rows/cols of x as the loops see it; a plain cast is one row.
    const int64_t n = NumElements(s);
    const int64_t rows = transpose ? s[0] : 1, cols = transpose ? s[1] : n;
    return MakeKernel([e4m3, transpose, rows, cols](KernelContext& ctx) {
      const T* x = ctx.inputs[0].as<T>();
      const float scale = ctx.inputs[1].as<float>()[0];
      uint8_t* codes = ctx.outputs[0].as<uint8_t>();
      float amax = 0;
      bool nan = false;
      if (e4m3) {
        CastLoop<T, true>(x, scale, codes, rows, cols, transpose, &amax, &nan);
      } else {
        CastLoop<T, false>(x, scale, codes, rows, cols, transpose, &amax, &nan);
      }
      if (ctx.inputs.size() > 2 && ctx.inputs[2].data) {
        // As Fp8Quantize: several quantizations of a tensor in one step keep the largest
        // amax, and a NaN sticks so that the update sees a non-finite amax.
        float& slot = ctx.inputs[2].as<float>()[0];
        if (nan) amax = NAN;
        if (std::isnan(amax) || amax > slot) slot = amax;
      }
      return absl::OkStatus();
    });
  }
};

// dst[i] = f32(code[i]) * scale_inv, the f32 product (exactly Fp8Quantize's value).
void Dequantize(const uint8_t* codes, DType format, float scale_inv, float* dst, int64_t n) {
  if (format == DType::kF8E4M3) {
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) dst[i] = F8E4M3ToFloat(codes[i]) * scale_inv;
  } else {
#pragma omp parallel for simd if (n > 32768)
    for (int64_t i = 0; i < n; ++i) dst[i] = F8E5M2ToFloat(codes[i]) * scale_inv;
  }
}

// An operand's scale groups (Fp8Gemm's a_scaling / b_scaling); rows x depth is the
// operand stored [P, K].
struct OperandScales {
  Fp8Granularity granularity = Fp8Granularity::kTensor;
  int64_t rows = 0, depth = 0, tile = 128;
};

// dst[p, k] = f32(code[p, k]) * scale_inv[Fp8GemmScaleIndex(p, k)]: Fp8QuantizeDynamic's
// value for the group scales Fp8CastDynamic wrote.
void DequantizeGrouped(const uint8_t* codes, DType format, const float* scale_inv, const OperandScales& s,
                       float* dst) {
  const bool e4m3 = format == DType::kF8E4M3;
#pragma omp parallel for if (s.rows * s.depth > 32768)
  for (int64_t p = 0; p < s.rows; ++p) {
    for (int64_t k = 0; k < s.depth; ++k) {
      const int64_t i = p * s.depth + k;
      const float v = e4m3 ? F8E4M3ToFloat(codes[i]) : F8E5M2ToFloat(codes[i]);
      dst[i] = v * scale_inv[Fp8GemmScaleIndex(s.granularity, p, k, s.rows, s.depth, s.tile)];
    }
  }
}

void DequantizeOperand(const TensorView& codes, DType format, const TensorView& scale_inv, const OperandScales& s,
                       float* dst, int64_t n) {
  if (s.granularity == Fp8Granularity::kTensor) {
    Dequantize(codes.as<uint8_t>(), format, scale_inv.as<float>()[0], dst, n);
  } else {
    DequantizeGrouped(codes.as<uint8_t>(), format, scale_inv.as<float>(), s, dst);
  }
}

class Fp8GemmKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend&) {
    const Shape& a = node.inputs[0]->shape;
    const Shape& y = node.outputs[0]->shape;
    cpu::GemmSpec spec;
    spec.ta = node.attrs.GetInt("transA", 0) != 0;
    spec.tb = node.attrs.GetInt("transB", 0) != 0;
    spec.m = y[0];
    spec.n = y[1];
    spec.k = spec.ta ? a[0] : a[1];
    const Value* bias = node.inputs.size() > 4 ? node.inputs[4] : nullptr;
    if (bias) spec.c_shape = bias->shape;  // [N] or [1,N]: oneDNN's row bias (alpha = beta = 1)
    spec.operand = DType::kF32;
    spec.out = DType::kF32;
    auto gemm = cpu::DnnlGemm::Create(spec, DType::kF32, DType::kF32, DType::kF32);
    if (!gemm.ok()) {
      return absl::Status(gemm.status().code(),
                          absl::StrCat("Fp8Gemm node '", node.name, "': ", gemm.status().message()));
    }
    auto k = std::make_unique<Fp8GemmKernel>();
    k->spec_ = spec;
    k->gemm_ = std::move(*gemm);
    k->a_format_ = node.inputs[0]->dtype;
    k->b_format_ = node.inputs[1]->dtype;
    k->out_ = node.outputs[0]->dtype;
    // Grouped scales (the just-in-time recipes) come with the [P, K] layouts (infer checks).
    const int64_t tile = node.attrs.GetInt("tile", 128);
    MPC_ASSIGN_OR_RETURN(k->a_scales_.granularity, ParseFp8Granularity(node.attrs.GetString("a_scaling", "tensor")));
    MPC_ASSIGN_OR_RETURN(k->b_scales_.granularity, ParseFp8Granularity(node.attrs.GetString("b_scaling", "tensor")));
    k->a_scales_.rows = spec.m;
    k->b_scales_.rows = spec.n;
    k->a_scales_.depth = k->b_scales_.depth = spec.k;
    k->a_scales_.tile = k->b_scales_.tile = tile;
    k->a_.resize(static_cast<size_t>(spec.m * spec.k));
    k->b_.resize(static_cast<size_t>(spec.k * spec.n));
    if (bias) {
      k->bias_dtype_ = bias->dtype;
      k->bias_.resize(static_cast<size_t>(spec.n));
    }
    if (k->out_ != DType::kF32) k->y_.resize(static_cast<size_t>(spec.m * spec.n));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    DequantizeOperand(ctx.inputs[0], a_format_, ctx.inputs[2], a_scales_, a_.data(), spec_.m * spec_.k);
    DequantizeOperand(ctx.inputs[1], b_format_, ctx.inputs[3], b_scales_, b_.data(), spec_.k * spec_.n);
    const float* bias = nullptr;
    if (!bias_.empty()) {
      cpu::ConvertToF32(ctx.inputs[4].data, bias_dtype_, bias_.data(), spec_.n);
      bias = bias_.data();
    }
    void* y = ctx.outputs[0].data;
    float* yf = out_ == DType::kF32 ? static_cast<float*>(y) : y_.data();
    gemm_->Run(a_.data(), b_.data(), bias, DType::kF32, yf);
    if (out_ != DType::kF32) cpu::ConvertFromF32(yf, y, out_, spec_.m * spec_.n);
    return absl::OkStatus();
  }

 private:
  cpu::GemmSpec spec_;
  std::unique_ptr<cpu::DnnlGemm> gemm_;
  DType a_format_ = DType::kF8E4M3, b_format_ = DType::kF8E4M3;
  OperandScales a_scales_, b_scales_;
  DType out_ = DType::kF32;
  DType bias_dtype_ = DType::kF32;
  std::vector<float> a_, b_, bias_, y_;  // f32 scratch
};

}  // namespace

void RegisterCpuFp8GemmKernels(KernelRegistry& r) {
  r.Register("Fp8Cast", "cpu", DType::kF32, Fp8CastKernel<float>::Create);
  r.Register("Fp8Cast", "cpu", DType::kBF16, Fp8CastKernel<Bf16>::Create);
  r.Register("Fp8Cast", "cpu", DType::kF16, Fp8CastKernel<Half>::Create);
  // Looked up by a's dtype: E4M3, or E5M2 where a is the HYBRID format's gradient
  // (dX = dY·W, dW = dY^T·X).
  r.Register("Fp8Gemm", "cpu", DType::kF8E4M3, Fp8GemmKernel::Create);
  r.Register("Fp8Gemm", "cpu", DType::kF8E5M2, Fp8GemmKernel::Create);
}

}  // namespace mpc
