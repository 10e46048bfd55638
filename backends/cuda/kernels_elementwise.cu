// CUDA elementwise arithmetic and activations, f32/bf16/f16 (CPU reference:
// backends/cpu/kernels_elementwise.cc), and RegisterCudaElementwiseKernels, the entry point
// of the whole elementwise family (its files are listed in elementwise_families.h).
//   Add Sub Mul Div                numpy broadcasting; flat and in 16-byte packs when both
//                                  operands have the output's shape
//   Neg Relu Sigmoid Tanh Silu     y = f(x)
//   ReluGrad SigmoidGrad TanhGrad  dx = g(dy, y): inputs (dy, y), y the forward output
//   SiluGrad                       dx = g(dy, x): inputs (dy, x), x the forward input
// Every op loads into f32, evaluates there and rounds once on the store. The arithmetic
// ones (Add..Div, Neg, Relu, ReluGrad, SigmoidGrad, TanhGrad) are IEEE single operations in
// the CPU's order, so their results are bit-identical to the CPU's; Sigmoid and Tanh use
// CUDA's expf/tanhf, which differ from the CPU's libm by a few ulp in f32.
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/elementwise_families.h"

namespace mpc {
namespace cuda {
namespace {

struct AddOp {
  static constexpr const char* kName = "Add";
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  static constexpr const char* kName = "Sub";
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  static constexpr const char* kName = "Mul";
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct DivOp {
  static constexpr const char* kName = "Div";
  __device__ float operator()(float a, float b) const { return a / b; }  // IEEE (nvcc -prec-div=true)
};

// Add/Sub/Mul/Div: both operands of the node's dtype, broadcast against the output.
template <typename Op>
struct BinaryFactory {
  template <typename T>
  struct For {
    static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
      auto g = MakeBinaryGeometry(node);
      if (!g.ok()) return g.status();
      return MakeCudaKernel(backend, [g = *g](KernelContext& ctx, cudaStream_t stream) {
        return LaunchBinary(g, ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(), ctx.outputs[0].as<T>(), Op{}, stream,
                            Op::kName);
      });
    }
  };
};

struct NegOp {
  static constexpr const char* kName = "Neg";
  __device__ float operator()(float x) const { return -x; }
};
struct ReluOp {
  static constexpr const char* kName = "Relu";
  // NaN stays NaN (IEEE, PyTorch, the CPU's cpu::Relu); -0 becomes +0.
  __device__ float operator()(float x) const { return x > 0.0f || x != x ? x : 0.0f; }
};
struct SigmoidOp {
  static constexpr const char* kName = "Sigmoid";
  __device__ float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct TanhOp {
  static constexpr const char* kName = "Tanh";
  __device__ float operator()(float x) const { return tanhf(x); }
};

struct SiluOp {
  static constexpr const char* kName = "Silu";
  __device__ float operator()(float x) const { return x / (1.0f + expf(-x)); }
};

struct ReluGradOp {
  static constexpr const char* kName = "ReluGrad";
  __device__ float operator()(float dy, float y) const { return y > 0.0f ? dy : 0.0f; }
};
struct SigmoidGradOp {
  static constexpr const char* kName = "SigmoidGrad";
  __device__ float operator()(float dy, float y) const { return dy * y * (1.0f - y); }  // (dy*y)*(1-y)
};
struct TanhGradOp {
  static constexpr const char* kName = "TanhGrad";
  // Explicitly rounded: nvcc would contract 1 - y*y into one FMA, the CPU rounds y*y first.
  __device__ float operator()(float dy, float y) const { return dy * __fsub_rn(1.0f, __fmul_rn(y, y)); }
};

// SiluGrad's second input is the forward input x (not the output).
struct SiluGradOp {
  static constexpr const char* kName = "SiluGrad";
  __device__ float operator()(float dy, float x) const {
    const float s = 1.0f / (1.0f + expf(-x));
    return dy * s * (1.0f + x * (1.0f - s));
  }
};

}  // namespace

void RegisterCudaElementwiseKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<BinaryFactory<AddOp>::For>(r, "Add");
  RegisterCudaFloatKernels<BinaryFactory<SubOp>::For>(r, "Sub");
  RegisterCudaFloatKernels<BinaryFactory<MulOp>::For>(r, "Mul");
  RegisterCudaFloatKernels<BinaryFactory<DivOp>::For>(r, "Div");
  RegisterCudaFloatKernels<UnaryFactory<NegOp>::For>(r, "Neg");
  RegisterCudaFloatKernels<UnaryFactory<ReluOp>::For>(r, "Relu");
  RegisterCudaFloatKernels<UnaryFactory<SigmoidOp>::For>(r, "Sigmoid");
  RegisterCudaFloatKernels<UnaryFactory<TanhOp>::For>(r, "Tanh");
  RegisterCudaFloatKernels<UnaryFactory<SiluOp>::For>(r, "Silu");
  RegisterCudaFloatKernels<GradFactory<ReluGradOp>::For>(r, "ReluGrad");
  RegisterCudaFloatKernels<GradFactory<SigmoidGradOp>::For>(r, "SigmoidGrad");
  RegisterCudaFloatKernels<GradFactory<TanhGradOp>::For>(r, "TanhGrad");
  RegisterCudaFloatKernels<GradFactory<SiluGradOp>::For>(r, "SiluGrad");
}

}  // namespace cuda
}  // namespace mpc
