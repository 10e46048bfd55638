// CUDA elementwise math, f32/bf16/f16 (CPU reference: the "Elementwise" section of
// backends/cpu/kernels_math.cc; op definitions in graph/ops_norm.cc):
//   Erf Sqrt Exp Log Reciprocal  y = f(x), flat
//   SqrtGrad                     inputs (dy, y): dx = dy == 0 ? 0 : 0.5 * dy / y, so zero
//                                padding (dy = 0, y = sqrt(0) = 0) gives 0, not NaN
//   Gelu                         attribute approximate: "tanh" -> tanh approximation,
//                                anything else (default "none") -> exact erf form
//   GeluGrad                     inputs (dy, x), x the forward INPUT: dx = dy * gelu'(x)
//   Pow                          Pow(X, E): numpy broadcasting of both; E of dtype f32,
//                                bf16, f16, f64, int64 or int32, read as f32 (rounded to
//                                nearest, like the CPU's static_cast<float>)
// Every op loads into f32, evaluates there and rounds once. Sqrt, Reciprocal and SqrtGrad
// are correctly rounded IEEE operations (nvcc defaults -prec-sqrt/-prec-div=true) and match
// the CPU bit for bit; the transcendental ones use CUDA's erff/expf/logf/tanhf/powf, a few
// ulp from the CPU's libm in f32 (Gelu's polynomial may also be FMA-contracted by nvcc).
#include "backends/cuda/elementwise_families.h"

namespace mpc::cuda {
namespace {

struct ErfOp {
  static constexpr const char* kName = "Erf";
  __device__ float operator()(float x) const { return erff(x); }
};
struct SqrtOp {
  static constexpr const char* kName = "Sqrt";
  __device__ float operator()(float x) const { return sqrtf(x); }
};
struct ExpOp {
  static constexpr const char* kName = "Exp";
  __device__ float operator()(float x) const { return expf(x); }
};
struct LogOp {
  static constexpr const char* kName = "Log";
  __device__ float operator()(float x) const { return logf(x); }
};
struct ReciprocalOp {
  static constexpr const char* kName = "Reciprocal";
  __device__ float operator()(float x) const { return 1.0f / x; }
};

struct SqrtGradOp {
  static constexpr const char* kName = "SqrtGrad";
  // (0.5 * dy) / y, the CPU's order.
  __device__ float operator()(float dy, float y) const { return dy == 0.0f ? 0.0f : 0.5f * dy / y; }
};

// The CPU's constants, rounded from the same double literals.
constexpr float kSqrt2OverPi = static_cast<float>(0.7978845608028654);
constexpr float kGeluCubic = static_cast<float>(0.044715);
constexpr float kGeluCubic3 = static_cast<float>(3 * 0.044715);
constexpr float kInvSqrt2 = static_cast<float>(0.7071067811865476);
constexpr float kInvSqrt2Pi = static_cast<float>(0.3989422804014327);

// "tanh" selects the approximation; the CPU treats every other value as "none".
bool GeluUsesTanh(const Node& node) { return node.attrs.GetString("approximate", "none") == "tanh"; }

struct GeluOp {
  static constexpr const char* kName = "Gelu";
  bool tanh_approx = false;
  GeluOp() = default;
  explicit GeluOp(const Node& node) : tanh_approx(GeluUsesTanh(node)) {}
  __device__ float operator()(float x) const {
    if (tanh_approx) {
      const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      return 0.5f * x * (1.0f + tanhf(u));
    }
    return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
  }
};

struct GeluGradOp {
  static constexpr const char* kName = "GeluGrad";
  bool tanh_approx = false;
  GeluGradOp() = default;
  explicit GeluGradOp(const Node& node) : tanh_approx(GeluUsesTanh(node)) {}
  __device__ float operator()(float dy, float x) const { return dy * Derivative(x); }
  __device__ float Derivative(float x) const {
    if (tanh_approx) {
      const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
      const float t = tanhf(u);
      return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + kGeluCubic3 * x * x);
    }
    const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
    const float pdf = expf(-0.5f * x * x) * kInvSqrt2Pi;
    return cdf + x * pdf;
  }
};

struct PowOp {
  __device__ float operator()(float base, float e) const { return powf(base, e); }
};

// Pow(X, E): X of the kernel's dtype T (the node's first input picks the kernel), E of
// its own dtype, dispatched here once.
template <typename T>
struct PowFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    auto g = MakeBinaryGeometry(node);
    if (!g.ok()) return g.status();
    switch (node.inputs[1]->dtype) {
      case DType::kF32:
        return WithExponent<float>(*g, backend);
      case DType::kBF16:
        return WithExponent<__nv_bfloat16>(*g, backend);
      case DType::kF16:
        return WithExponent<__half>(*g, backend);
      case DType::kF64:
        return WithExponent<double>(*g, backend);
      case DType::kI64:
        return WithExponent<int64_t>(*g, backend);
      case DType::kI32:
        return WithExponent<int32_t>(*g, backend);
      default:
        return absl::UnimplementedError(absl::StrCat("Pow node '", node.name, "': exponent dtype ",
                                                     DTypeName(node.inputs[1]->dtype),
                                                     " is not supported on cuda; use float, int32 or int64"));
    }
  }

  template <typename E>
  static absl::StatusOr<std::unique_ptr<Kernel>> WithExponent(const BinaryGeometry& g, Backend& backend) {
    return MakeCudaKernel(backend, [g](KernelContext& ctx, cudaStream_t stream) {
      return LaunchBinary(g, ctx.inputs[0].as<T>(), ctx.inputs[1].as<E>(), ctx.outputs[0].as<T>(), PowOp{}, stream,
                          "Pow");
    });
  }
};

}  // namespace

void RegisterCudaMathKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<UnaryFactory<ErfOp>::For>(r, "Erf");
  RegisterCudaFloatKernels<UnaryFactory<SqrtOp>::For>(r, "Sqrt");
  RegisterCudaFloatKernels<GradFactory<SqrtGradOp>::For>(r, "SqrtGrad");
  RegisterCudaFloatKernels<UnaryFactory<ExpOp>::For>(r, "Exp");
  RegisterCudaFloatKernels<UnaryFactory<LogOp>::For>(r, "Log");
  RegisterCudaFloatKernels<UnaryFactory<ReciprocalOp>::For>(r, "Reciprocal");
  RegisterCudaFloatKernels<PowFactory>(r, "Pow");
  RegisterCudaFloatKernels<UnaryFactory<GeluOp>::For>(r, "Gelu");
  RegisterCudaFloatKernels<GradFactory<GeluGradOp>::For>(r, "GeluGrad");
}

}  // namespace mpc::cuda
