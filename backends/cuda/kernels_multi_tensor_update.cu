// CUDA multi-tensor optimizer updates: MultiSgdUpdate and MultiAdamWUpdate
// (graph/multi_tensor_update.h) update up to kMaxTensorsPerLaunch parameters per kernel
// launch, so a whole optimizer step is one or a few launches instead of one per
// parameter (the apex / torch._foreach idea). Element formulas are optimizer_math.cuh's,
// the same as the single-parameter kernels', so fusing changes no bit.
//
// Work split: every parameter is cut into chunks of kChunkElements and each block takes
// one chunk; block_start[t] is the first block of parameter t. Pointers and sizes travel
// in the kernel's parameter space (one LaunchArgs by value, < 4 KiB), so nothing is copied
// to the device per step and a captured CUDA graph replays the launch as it is (the
// arena's addresses do not change within a program).
//
// AdamW step counters: every block reads its parameter's counter, so the counters may only
// change once every block of the launch has read them. As in kernels_optimizer.cu, the
// last block to finish (a per-launch arrival counter, the threadFenceReduction pattern)
// advances every counter of the launch and resets the arrival counter.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/optimizer_math.cuh"
#include "base/status_macros.h"
#include "graph/multi_tensor_update.h"

namespace mpc::cuda {
namespace {

// 32 parameters x 72-byte slots keep LaunchArgs well inside the 4 KiB of kernel parameters.
constexpr int kMaxTensorsPerLaunch = 32;
// 64 elements per thread of a 256-thread block: enough work per block to hide the
// per-block coefficient computation, and small parameters (biases) still take one block.
constexpr int64_t kChunkElements = 16384;
static_assert(kChunkElements % 4 == 0, "chunks start on float4 boundaries");

// One parameter: s1/s2 are the momentum buffer (SGD) or m and v (AdamW).
struct TensorSlot {
  int64_t n = 0;
  float* p = nullptr;
  const float* g = nullptr;
  float* s1 = nullptr;
  float* s2 = nullptr;
  float* step = nullptr;
  LowpCopyPtr copy;
  bool aligned = false;  // every array 16-byte aligned: float4 loads
};

struct LaunchArgs {
  TensorSlot t[kMaxTensorsPerLaunch];
  int block_start[kMaxTensorsPerLaunch + 1] = {};
  int count = 0;
};

__device__ __forceinline__ int TensorOfBlock(const LaunchArgs& a) {
  int t = 0;
  while (t + 1 < a.count && static_cast<int>(blockIdx.x) >= a.block_start[t + 1]) ++t;
  return t;
}

// Calls f(quad_index) for this block's float4s and g(element_index) for its scalars.
template <typename Quad, typename Scalar>
__device__ __forceinline__ void ForChunk(const TensorSlot& s, int64_t chunk, Quad quad, Scalar scalar) {
  const int64_t begin = chunk * kChunkElements;
  const int64_t end = begin + kChunkElements < s.n ? begin + kChunkElements : s.n;
  int64_t scalar_begin = begin;
  if (s.aligned) {
    for (int64_t q = begin / 4 + threadIdx.x; q < end / 4; q += blockDim.x) quad(q);
    scalar_begin = (end / 4) * 4 > begin ? (end / 4) * 4 : begin;
  }
  for (int64_t i = scalar_begin + threadIdx.x; i < end; i += blockDim.x) scalar(i);
}

// ---- SGD -----------------------------------------------------------------------------

template <bool kMomentum>
__global__ void __launch_bounds__(kThreadsPerBlock)
    MultiSgdKernel(const LaunchArgs a, const float* lr_ptr, const float* skip, SgdHyper h) {
  if (skip != nullptr && *skip != 0.0f) return;  // a skipped step, the same for every block
  const int t = TensorOfBlock(a);
  const TensorSlot& s = a.t[t];
  const float lr = *lr_ptr;
  ForChunk(
      s, blockIdx.x - a.block_start[t],
      [&](int64_t q) {
        float4 pv = reinterpret_cast<const float4*>(s.p)[q];
        const float4 gv = reinterpret_cast<const float4*>(s.g)[q];
        float4 bv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if constexpr (kMomentum) bv = reinterpret_cast<const float4*>(s.s1)[q];
        SgdElement<kMomentum>(pv.x, gv.x, bv.x, lr, h);
        SgdElement<kMomentum>(pv.y, gv.y, bv.y, lr, h);
        SgdElement<kMomentum>(pv.z, gv.z, bv.z, lr, h);
        SgdElement<kMomentum>(pv.w, gv.w, bv.w, lr, h);
        reinterpret_cast<float4*>(s.p)[q] = pv;
        StoreCopy4(s.copy, q, pv);
        if constexpr (kMomentum) reinterpret_cast<float4*>(s.s1)[q] = bv;
      },
      [&](int64_t i) {
        float pv = s.p[i], bv = 0.0f;
        if constexpr (kMomentum) bv = s.s1[i];
        SgdElement<kMomentum>(pv, s.g[i], bv, lr, h);
        s.p[i] = pv;
        StoreCopy(s.copy, i, pv);
        if constexpr (kMomentum) s.s1[i] = bv;
      });
}

// ---- AdamW ---------------------------------------------------------------------------

// blocks_done: this launch's zeroed arrival counter; the last block resets it.
__global__ void __launch_bounds__(kThreadsPerBlock)
    MultiAdamWKernel(const LaunchArgs a, const float* lr_ptr, const float* skip, unsigned* blocks_done, AdamWHyper h) {
  __shared__ AdamWStepCoefs coefs;
  __shared__ int skipped;
  const int t = TensorOfBlock(a);
  const TensorSlot& s = a.t[t];
  if (threadIdx.x == 0) {
    skipped = skip != nullptr && *skip != 0.0f;
    coefs = AdamWCoefsAt(*s.step + 1.0f, *lr_ptr, h);
  }
  __syncthreads();
  if (!skipped) {
    const AdamWStepCoefs c = coefs;
    ForChunk(
        s, blockIdx.x - a.block_start[t],
        [&](int64_t q) {
          float4 pv = reinterpret_cast<const float4*>(s.p)[q];
          const float4 gv = reinterpret_cast<const float4*>(s.g)[q];
          float4 mv = reinterpret_cast<const float4*>(s.s1)[q];
          float4 vv = reinterpret_cast<const float4*>(s.s2)[q];
          AdamWElement(pv.x, gv.x, mv.x, vv.x, h, c);
          AdamWElement(pv.y, gv.y, mv.y, vv.y, h, c);
          AdamWElement(pv.z, gv.z, mv.z, vv.z, h, c);
          AdamWElement(pv.w, gv.w, mv.w, vv.w, h, c);
          reinterpret_cast<float4*>(s.p)[q] = pv;
          StoreCopy4(s.copy, q, pv);
          reinterpret_cast<float4*>(s.s1)[q] = mv;
          reinterpret_cast<float4*>(s.s2)[q] = vv;
        },
        [&](int64_t i) {
          float pv = s.p[i], mv = s.s1[i], vv = s.s2[i];
          AdamWElement(pv, s.g[i], mv, vv, h, c);
          s.p[i] = pv;
          StoreCopy(s.copy, i, pv);
          s.s1[i] = mv;
          s.s2[i] = vv;
        });
  }
  // Every block's thread 0 read its counter above; the fence orders that read before the
  // arrival, and the last block fences again before advancing all counters of the launch.
  if (threadIdx.x == 0) {
    __threadfence();
    const unsigned arrived = atomicAdd(blocks_done, 1u);
    if (arrived == gridDim.x - 1) {
      __threadfence();
      if (!skipped) {
        for (int k = 0; k < a.count; ++k) *a.t[k].step = __fadd_rn(*a.t[k].step, 1.0f);
      }
      atomicExch(blocks_done, 0u);  // ready for the next step's launch (stream-ordered)
    }
  }
}

// One kernel for both optimizers: the launches (parameters split by kMaxTensorsPerLaunch,
// sizes and block offsets fixed at creation) and, for AdamW, one arrival counter each.
class CudaMultiTensorUpdate : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    MPC_ASSIGN_OR_RETURN(MultiUpdateLayout layout, MultiUpdateLayoutOf(node));
    // These kernels read f32 gradients; the CUDA backend does not claim
    // updates_read_16bit_gradients, so fold-gradient-casts leaves its Casts in place.
    for (const UpdateTensorInputs& in : layout.tensors) {
      if (node.inputs[in.grad]->dtype != DType::kF32) {
        return absl::UnimplementedError(absl::StrCat("cuda ", node.op, " node '", node.name, "': gradient '",
                                                     node.inputs[in.grad]->name, "' is ",
                                                     DTypeName(node.inputs[in.grad]->dtype),
                                                     "; the CUDA updates read f32 gradients (keep their Casts)"));
      }
    }
    auto k = std::unique_ptr<CudaMultiTensorUpdate>(new CudaMultiTensorUpdate());
    k->backend_ = cuda;
    k->stream_ = cuda->stream();
    k->sgd_.momentum = node.attrs.GetFloat("momentum", 0.0f);
    k->sgd_.weight_decay = node.attrs.GetFloat("weight_decay", 0.0f);
    k->sgd_.nesterov = node.attrs.GetInt("nesterov", 0) != 0;
    AdamWHyper& h = k->adamw_;
    h.b1 = node.attrs.GetFloat("beta1", 0.9f);
    h.b2 = node.attrs.GetFloat("beta2", 0.999f);
    h.one_minus_b1 = 1.0f - h.b1;
    h.one_minus_b2 = 1.0f - h.b2;
    h.eps = node.attrs.GetFloat("eps", 1e-8f);
    h.weight_decay = node.attrs.GetFloat("weight_decay", 0.0f);
    for (size_t first = 0; first < layout.tensors.size(); first += kMaxTensorsPerLaunch) {
      Launch launch;
      int64_t blocks = 0;
      for (size_t t = first; t < layout.tensors.size() && launch.args.count < kMaxTensorsPerLaunch; ++t) {
        const int64_t n = NumElements(node.inputs[layout.tensors[t].param]->shape);
        launch.args.t[launch.args.count].n = n;
        launch.args.block_start[launch.args.count] = static_cast<int>(blocks);
        // Even an empty parameter gets a block: its AdamW step counter still advances.
        blocks += n == 0 ? 1 : (n + kChunkElements - 1) / kChunkElements;
        launch.inputs.push_back(layout.tensors[t]);
        ++launch.args.count;
      }
      if (blocks > (int64_t{1} << 30)) {
        return absl::InvalidArgumentError(
            absl::StrCat(node.op, " node '", node.name, "': ", blocks,
                         " blocks in one launch; parameters this large are not supported"));
      }
      launch.args.block_start[launch.args.count] = static_cast<int>(blocks);
      launch.blocks = static_cast<unsigned>(blocks);
      k->launches_.push_back(std::move(launch));
    }
    k->layout_ = std::move(layout);
    if (k->layout_.adamw) {
      MPC_ASSIGN_OR_RETURN(void* counters, backend.Allocate(sizeof(unsigned) * k->launches_.size()));
      k->blocks_done_ = static_cast<unsigned*>(counters);
      // Ordered before the first Run on the same stream.
      MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(k->blocks_done_, 0, sizeof(unsigned) * k->launches_.size(), k->stream_));
    }
    return std::unique_ptr<Kernel>(std::move(k));
  }

  ~CudaMultiTensorUpdate() override {
    if (blocks_done_) backend_->Free(blocks_done_);
  }

  absl::Status Run(KernelContext& ctx) override {
    const float* lr = ctx.inputs[layout_.lr].as<float>();
    const float* skip = layout_.found_nonfinite >= 0 ? ctx.inputs[layout_.found_nonfinite].as<float>() : nullptr;
    const bool momentum = sgd_.momentum != 0.0f;
    for (size_t l = 0; l < launches_.size(); ++l) {
      Launch& launch = launches_[l];
      for (int t = 0; t < launch.args.count; ++t) {
        const UpdateTensorInputs& in = launch.inputs[t];
        TensorSlot& s = launch.args.t[t];
        s.p = ctx.inputs[in.param].as<float>();
        s.g = ctx.inputs[in.grad].as<float>();
        const int first_state = layout_.adamw ? in.m : in.momentum_buf;
        s.s1 = first_state >= 0 ? ctx.inputs[first_state].as<float>() : nullptr;
        s.s2 = in.v >= 0 ? ctx.inputs[in.v].as<float>() : nullptr;
        s.step = in.step >= 0 ? ctx.inputs[in.step].as<float>() : nullptr;
        s.copy = LowpCopyAt(ctx, in.lowp_copy);
        s.aligned = Aligned16(s.p) && Aligned16(s.g) && (!s.s1 || Aligned16(s.s1)) && (!s.s2 || Aligned16(s.s2));
      }
      if (layout_.adamw) {
        MultiAdamWKernel<<<launch.blocks, kThreadsPerBlock, 0, stream_>>>(launch.args, lr, skip, blocks_done_ + l,
                                                                          adamw_);
        MPC_RETURN_IF_ERROR(LaunchStatus("MultiAdamWKernel"));
      } else if (momentum) {
        MultiSgdKernel<true><<<launch.blocks, kThreadsPerBlock, 0, stream_>>>(launch.args, lr, skip, sgd_);
        MPC_RETURN_IF_ERROR(LaunchStatus("MultiSgdKernel"));
      } else {
        MultiSgdKernel<false><<<launch.blocks, kThreadsPerBlock, 0, stream_>>>(launch.args, lr, skip, sgd_);
        MPC_RETURN_IF_ERROR(LaunchStatus("MultiSgdKernel"));
      }
    }
    return absl::OkStatus();
  }

 private:
  struct Launch {
    LaunchArgs args;
    std::vector<UpdateTensorInputs> inputs;  // where each slot's pointers come from
    unsigned blocks = 0;
  };

  CudaMultiTensorUpdate() = default;
  CudaBackend* backend_ = nullptr;
  cudaStream_t stream_ = nullptr;
  MultiUpdateLayout layout_;
  SgdHyper sgd_{};
  AdamWHyper adamw_{};
  std::vector<Launch> launches_;
  unsigned* blocks_done_ = nullptr;
};

}  // namespace

void RegisterCudaMultiTensorUpdateKernels(KernelRegistry& r) {
  r.Register("MultiSgdUpdate", "cuda", DType::kF32, CudaMultiTensorUpdate::Create);
  r.Register("MultiAdamWUpdate", "cuda", DType::kF32, CudaMultiTensorUpdate::Create);
}

}  // namespace mpc::cuda
