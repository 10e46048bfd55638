// CUDA Dropout and DropoutGrad, f32/bf16/f16 (CPU reference: DropoutKernel and
// DropoutGradKernel in backends/cpu/kernels_softmax_loss.cc; op definitions in
// graph/ops_nn.cc).
//   Dropout(x, ratio?, training_mode?) -> (y, mask?)
//       ratio (default 0.5) and training_mode (default 0) are constant inputs, read at
//       creation exactly as the CPU does; the attribute mpc_training, when present,
//       overrides training_mode. Active (training and ratio > 0): element i is kept when
//       UniformAt(seed, node id, step, i) >= ratio, kept values scaled by the f32
//       1 / (1 - ratio) and rounded once, dropped ones 0. Inactive: y = x (bits copied),
//       mask all true. mask (bool) is written when the node has that output.
//   DropoutGrad(dy, mask) -> dx = mask ? dy * scale : 0, scale = f32(1 / (1 - ratio attr)).
// UniformAt is the CPU's counter-based hash, compiled for host and device from the same
// integer code, so CPU and GPU drop exactly the same elements. Seed and step are read in
// the kernel from KernelContext::device_seed_step (rewritten before each step, so a
// captured CUDA graph replays with the current step), or from the host values when a
// caller runs the kernel without one.
#include "backends/cuda/elementwise_families.h"
// nvcc's front end (not gcc) reads graph_builder.h's `status_ = std::move(status)` as
// discarding a [[nodiscard]] absl::Status (warning 2810); the header is fine.
#pragma nv_diag_suppress 2810
#include "graph/ops_common.h"
#pragma nv_diag_default 2810

namespace mpc::cuda {
namespace {

// Identical to UniformAt in backends/cpu/kernels_softmax_loss.cc (SplitMix64 of seed,
// node, step and element): a double in [0, 1) with 53 random bits, exact on both sides.
__host__ __device__ inline double UniformAt(uint64_t seed, uint64_t node_id, int64_t step, int64_t i) {
  uint64_t z = seed ^ (node_id * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(step) * 0xD1B54A32D192ED03ull) ^
               (static_cast<uint64_t>(i) * 0x94D049BB133111EBull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

// Where a step's random stream comes from: the device copy of {seed, step} when the
// executor provides one, else the host values frozen into the launch.
struct RandomStream {
  const int64_t* device_seed_step = nullptr;
  uint64_t seed = 0;
  int64_t step = 0;
  uint64_t node_id = 0;
};

struct DropoutParams {
  int64_t n = 0;
  bool active = false;  // training && ratio > 0
  double ratio = 0;     // compared against UniformAt in double, as on the CPU
  float scale = 1;      // f32(1 / (1 - ratio)): the CPU keeps the scale in Acc<T>
};

template <typename T>
__global__ void DropoutKernel(DropoutParams p, RandomStream rs, const T* x, T* y, uint8_t* mask) {
  uint64_t seed = rs.seed;
  int64_t step = rs.step;
  if (rs.device_seed_step) {
    seed = static_cast<uint64_t>(rs.device_seed_step[0]);
    step = rs.device_seed_step[1];
  }
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < p.n; i += int64_t{gridDim.x} * blockDim.x) {
    const bool keep = !p.active || UniformAt(seed, rs.node_id, step, i) >= p.ratio;
    y[i] = keep ? (p.active ? FromAcc<T>(LoadF32(x[i]) * p.scale) : x[i]) : FromAcc<T>(0.0f);
    if (mask) mask[i] = keep ? 1 : 0;
  }
}

template <typename T>
struct DropoutFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    auto ratio = ops::ConstantScalar(node, 1, 0.5);
    auto mode = ops::ConstantScalar(node, 2, 0.0);
    if (!ratio.ok()) return ratio.status();
    if (!mode.ok()) return mode.status();
    const bool training = node.attrs.GetInt("mpc_training", *mode != 0.0 ? 1 : 0) != 0;
    DropoutParams p;
    p.n = NumElements(node.inputs[0]->shape);
    for (const Value* out : node.outputs) {
      if (out && NumElements(out->shape) != p.n) {
        return absl::InvalidArgumentError(absl::StrCat("Dropout node '", node.name, "': output '", out->name, "' ",
                                                       ShapeToString(out->shape), " does not match the input ",
                                                       ShapeToString(node.inputs[0]->shape)));
      }
    }
    p.ratio = *ratio;
    p.active = training && p.ratio > 0;
    p.scale = static_cast<float>(1.0 / (1.0 - p.ratio));
    const uint64_t node_id = static_cast<uint64_t>(node.id);
    return MakeCudaKernel(backend, [p, node_id](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (p.n <= 0) return absl::OkStatus();
      RandomStream rs;
      rs.device_seed_step = ctx.device_seed_step;
      rs.seed = ctx.seed;
      rs.step = ctx.step;
      rs.node_id = node_id;
      uint8_t* mask = ctx.outputs.size() > 1 ? ctx.outputs[1].as<uint8_t>() : nullptr;
      DropoutKernel<T>
          <<<BlocksFor(p.n), kThreadsPerBlock, 0, stream>>>(p, rs, ctx.inputs[0].as<T>(), ctx.outputs[0].as<T>(), mask);
      return LaunchStatus("Dropout");
    });
  }
};

template <typename T>
__global__ void DropoutGradKernel(int64_t n, float scale, const T* dy, const uint8_t* mask, T* dx) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dx[i] = mask[i] ? FromAcc<T>(LoadF32(dy[i]) * scale) : FromAcc<T>(0.0f);
  }
}

template <typename T>
struct DropoutGradFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    if (absl::Status st = CheckSameElementCount(node); !st.ok()) return st;
    // The ratio attribute is an f32; 1 / (1 - ratio) is taken in double and rounded to
    // f32, as on the CPU. An evaluation-mode forward sets ratio 0 (scale 1).
    const float scale = static_cast<float>(1.0 / (1.0 - node.attrs.GetFloat("ratio", 0.5f)));
    const int64_t n = NumElements(node.outputs[0]->shape);
    return MakeCudaKernel(backend, [n, scale](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (n <= 0) return absl::OkStatus();
      DropoutGradKernel<T><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(
          n, scale, ctx.inputs[0].as<T>(), ctx.inputs[1].as<uint8_t>(), ctx.outputs[0].as<T>());
      return LaunchStatus("DropoutGrad");
    });
  }
};

}  // namespace

void RegisterCudaDropoutKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<DropoutFactory>(r, "Dropout");
  RegisterCudaFloatKernels<DropoutGradFactory>(r, "DropoutGrad");
}

}  // namespace mpc::cuda
