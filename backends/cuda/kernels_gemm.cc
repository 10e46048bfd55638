// The Gemm and MatMul kernels (f32, bf16, f16) on CublasLtGemm (cublaslt_gemm.h).
//
// Gemm (ONNX, with mpc's attributes; backends/cpu/kernels_gemm.cc is the reference):
//   Y = act(alpha * op(A) op(B) + beta * C), act = ReLU when mpc_activation = "Relu" (the
//   fuse-epilogues pass emits only that), Y in the operands' dtype or f32
//   (mpc_output_dtype), f32 accumulation, TF32 for f32 operands with mpc_tf32 = 1 on a
//   device that has it. C (absent, or ignored when beta = 0) takes one of three routes:
//   - a row [N] / [1,N] in Y's dtype with beta = 1: cuBLASLt's bias epilogue (free);
//   - a bf16/f16 row with beta = 1 for an f32 Y (autocast's output layer after
//     fold-output-casts): widened into an f32 row of the kernel's own each step (one
//     1x1-by-1xN product, exact), then the bias epilogue;
//   - a full [M,N] in Y's dtype: cuBLASLt's C matrix with beta;
//   - anything else the CPU accepts (scalar, [1], [1,1], a column [M,1], a row with
//     beta != 1, a full C whose dtype differs from an f32 Y): C is first broadcast into Y,
//     converted to Y's dtype, by a second cuBLASLt product made for it at creation (a
//     batch of M 1x1-by-1xN products against a device vector of ones: exact, since each
//     output element is 1 * c), then the GEMM adds beta * Y in place. This mirrors the
//     CPU's sum post-op and keeps this file free of device code.
//
// MatMul: ONNX MatMul as mpc defines it
// (graph/ops_nn.cc; backends/cpu/kernels_gemm.cc is the reference): A [..., M, K] x
// B [..., K, N] -> Y [batch..., M, N], both operands of rank >= 2 (the op rejects 1-D
// ones), the batch dims broadcast numpy-style, Y in the operands' dtype or f32
// (mpc_output_dtype), f32 accumulation (TF32 for f32 with mpc_tf32 = 1, as Gemm).
//
// The batch becomes as few cuBLASLt calls as possible, planned at creation:
//   - the output's batch dims split into an inner suffix over which each operand is
//     either present in full (a stride of one matrix) or broadcast (stride 0), and an
//     outer prefix;
//   - the inner part is one strided-batched product; when A is present and B broadcast
//     over it (the [B,T,K] x [K,N] of a Linear layer) the inner batch folds into M
//     instead: a single [inner*M, K] x [K, N] product (not for a transposed A);
//   - mpc_trans_a / mpc_trans_b (operands stored [..., K, M] / [..., N, K], set by the
//     fold-transposes pass) are cuBLASLt's transposes, as Gemm's transA / transB;
//   - each outer index is one more call with precomputed element offsets (e.g. A [2,1,..]
//     x B [1,3,..]: 2 calls of a 3-batch). Beyond kMaxCalls calls the node is refused.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_status.h"
#include "base/status_macros.h"
#include "graph/capabilities.h"
#include "graph/float_convert.h"

namespace mpc::cuda {
namespace {

constexpr int64_t kMaxCalls = 256;

// How one operand varies over a range of batch dims.
enum class BatchMode { kAny, kFull, kBroadcast };  // kAny: only size-1 output dims so far

// Element offsets of one cuBLASLt call's operands from the tensors' starts.
struct CallOffsets {
  int64_t a = 0, b = 0, y = 0;
};

struct MatMulPlan {
  int64_t m = 0, n = 0, k = 0;
  int64_t inner = 1;  // batch count of each call (before folding)
  BatchMode a_mode = BatchMode::kAny, b_mode = BatchMode::kAny;
  std::vector<CallOffsets> calls;
};

// The plan for A x B -> Y (shapes as the op inferred them); ta/tb: A stored [..., K, M],
// B stored [..., N, K] (mpc_trans_a/b). A matrix has M*K (K*N) elements either way, so
// the batch strides and offsets below do not depend on them.
absl::StatusOr<MatMulPlan> PlanMatMul(const Shape& a, const Shape& b, const Shape& y, bool ta, bool tb) {
  MatMulPlan p;
  const int ra = static_cast<int>(a.size()), rb = static_cast<int>(b.size()), ry = static_cast<int>(y.size());
  p.m = ta ? a[ra - 1] : a[ra - 2];
  p.k = ta ? a[ra - 2] : a[ra - 1];
  p.n = tb ? b[rb - 2] : b[rb - 1];
  const int r = ry - 2;  // output batch rank
  // Batch dims aligned to the output's (leading 1s for a lower-rank operand).
  std::vector<int64_t> ab(r, 1), bb(r, 1), yb(y.begin(), y.end() - 2);
  for (int d = 0; d < ra - 2; ++d) ab[r - (ra - 2) + d] = a[d];
  for (int d = 0; d < rb - 2; ++d) bb[r - (rb - 2) + d] = b[d];
  // Grow the inner suffix while each operand keeps one mode over it.
  int split = r;
  for (int d = r - 1; d >= 0; --d) {
    if (yb[d] == 1) {
      split = d;
      continue;
    }
    const BatchMode am = ab[d] == 1 ? BatchMode::kBroadcast : BatchMode::kFull;
    const BatchMode bm = bb[d] == 1 ? BatchMode::kBroadcast : BatchMode::kFull;
    if ((p.a_mode != BatchMode::kAny && p.a_mode != am) || (p.b_mode != BatchMode::kAny && p.b_mode != bm)) break;
    p.a_mode = am;
    p.b_mode = bm;
    split = d;
  }
  for (int d = split; d < r; ++d) p.inner *= yb[d];
  // Outer calls: row-major over dims [0, split), offsets from the operands' own strides.
  std::vector<int64_t> a_stride(r, 0), b_stride(r, 0);
  int64_t sa = p.m * p.k, sb = p.k * p.n;
  for (int d = r - 1; d >= 0; --d) {
    a_stride[d] = ab[d] == 1 ? 0 : sa;
    b_stride[d] = bb[d] == 1 ? 0 : sb;
    sa *= ab[d];
    sb *= bb[d];
  }
  int64_t outer = 1;
  for (int d = 0; d < split; ++d) outer *= yb[d];
  if (outer > kMaxCalls) {
    return absl::UnimplementedError(absl::StrCat("MatMul ", ShapeToString(a), " x ", ShapeToString(b),
                                                 " broadcasts its batch in a way that needs ", outer,
                                                 " separate cuBLASLt calls; more than ", kMaxCalls,
                                                 " is not yet on CUDA (make the broadcast batch dims "
                                                 "innermost, or expand the operand)"));
  }
  const int64_t y_matrix = p.m * p.n;
  for (int64_t o = 0; o < outer; ++o) {
    CallOffsets c;
    c.y = o * p.inner * y_matrix;
    int64_t rem = o;
    for (int d = split - 1; d >= 0; --d) {
      const int64_t idx = rem % yb[d];
      rem /= yb[d];
      c.a += idx * a_stride[d];
      c.b += idx * b_stride[d];
    }
    p.calls.push_back(c);
  }
  return p;
}

// The largest power of two (up to `base`) dividing `bytes`; `base` for 0.
uint32_t AlignmentOf(int64_t bytes, uint32_t base) {
  uint32_t a = base;
  while (a > 1 && bytes % a != 0) a /= 2;
  return a;
}

class CudaMatMulKernel : public Kernel {
 public:
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    const Shape& a = node.inputs[0]->shape;
    const Shape& b = node.inputs[1]->shape;
    const Shape& y = node.outputs[0]->shape;
    if (a.size() < 2 || b.size() < 2 || y.size() < 2) {
      return absl::UnimplementedError(
          absl::StrCat("MatMul with a 1-D operand (", ShapeToString(a), " x ", ShapeToString(b), ") is not supported"));
    }
    if (node.attrs.Has("mpc_perm_a") || node.attrs.Has("mpc_perm_b") || node.attrs.Has("mpc_perm_y")) {
      // cuBLASLt's strided batches have one stride per operand; a permuted batch needs
      // two. fold-batch-transposes only runs where Capabilities::matmul_permuted_operands.
      return absl::UnimplementedError(absl::StrCat("MatMul node '", node.name,
                                                   "': mpc_perm_* (permuted operands or result) is not on CUDA; ",
                                                   "compile for this backend so the transposes stay separate ops"));
    }
    const DType operand = node.inputs[0]->dtype, out = node.outputs[0]->dtype;
    if (node.inputs[1]->dtype != operand) {
      return absl::InvalidArgumentError(absl::StrCat("MatMul operands differ in dtype: ", DTypeName(operand), " and ",
                                                     DTypeName(node.inputs[1]->dtype)));
    }
    if (out != operand && out != DType::kF32) {
      return absl::UnimplementedError(absl::StrCat("MatMul with ", DTypeName(operand), " operands and ", DTypeName(out),
                                                   " output is not yet on CUDA"));
    }
    std::unique_ptr<CudaMatMulKernel> kernel(new CudaMatMulKernel());
    kernel->stream_ = cuda->stream();
    kernel->y_bytes_ = static_cast<size_t>(NumElements(y)) * DTypeSize(out);
    if (kernel->y_bytes_ == 0) return std::unique_ptr<Kernel>(std::move(kernel));  // nothing to compute
    // mpc_trans_a / mpc_trans_b (graph/ops_nn.cc, set by fold-transposes): an operand
    // stored with its last two axes swapped, which cuBLASLt reads as a transposed operand.
    const bool ta = node.attrs.GetInt("mpc_trans_a", 0) != 0, tb = node.attrs.GetInt("mpc_trans_b", 0) != 0;
    if ((ta ? a[a.size() - 2] : a.back()) == 0) {
      kernel->zero_fill_ = true;  // an empty contraction: Y = 0
      return std::unique_ptr<Kernel>(std::move(kernel));
    }
    MPC_ASSIGN_OR_RETURN(MatMulPlan plan, PlanMatMul(a, b, y, ta, tb));

    LtGemmSpec s;
    s.k = plan.k;
    s.n = plan.n;
    s.ta = ta;
    s.tb = tb;
    s.operand = operand;
    s.out = out;
    s.tf32 = node.attrs.GetInt("mpc_tf32", 0) != 0 && cuda->capabilities().tf32;
    if (plan.a_mode == BatchMode::kFull && plan.b_mode != BatchMode::kFull && !ta) {
      // B shared by the inner batch: fold it into A's rows (row-major A only: the rows of
      // consecutive [K, M] matrices are not one [inner*M, K] matrix's).
      s.m = plan.inner * plan.m;
    } else {
      s.m = plan.m;
      s.batch = plan.inner;
      s.a_batch_stride = plan.a_mode == BatchMode::kFull ? plan.m * plan.k : 0;
      s.b_batch_stride = plan.b_mode == BatchMode::kFull ? plan.k * plan.n : 0;
    }
    // Buffers are arena offsets or cudaMalloc allocations (kArenaAlignment-aligned); the
    // outer calls start at element offsets that may be less aligned.
    const size_t in_size = DTypeSize(operand), out_size = DTypeSize(out);
    uint32_t alignment = static_cast<uint32_t>(kArenaAlignment);
    for (const CallOffsets& c : plan.calls) {
      alignment = AlignmentOf(c.a * static_cast<int64_t>(in_size), alignment);
      alignment = AlignmentOf(c.b * static_cast<int64_t>(in_size), alignment);
      alignment = AlignmentOf(c.y * static_cast<int64_t>(out_size), alignment);
    }
    s.alignment = alignment;
    MPC_ASSIGN_OR_RETURN(kernel->gemm_, CublasLtGemm::Create(*cuda, s));
    kernel->calls_ = std::move(plan.calls);
    kernel->in_size_ = in_size;
    kernel->out_size_ = out_size;
    return std::unique_ptr<Kernel>(std::move(kernel));
  }

  absl::Status Run(KernelContext& ctx) override {
    if (zero_fill_) {
      MPC_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(ctx.outputs[0].data, 0, y_bytes_, stream_));
      return absl::OkStatus();
    }
    const char* a = static_cast<const char*>(ctx.inputs[0].data);
    const char* b = static_cast<const char*>(ctx.inputs[1].data);
    char* y = static_cast<char*>(ctx.outputs[0].data);
    for (const CallOffsets& c : calls_) {
      LtGemmArgs args;
      args.a = a + c.a * static_cast<int64_t>(in_size_);
      args.b = b + c.b * static_cast<int64_t>(in_size_);
      args.y = y + c.y * static_cast<int64_t>(out_size_);
      MPC_RETURN_IF_ERROR(gemm_->Run(args));
    }
    return absl::OkStatus();
  }

 private:
  cudaStream_t stream_ = nullptr;
  size_t y_bytes_ = 0;
  bool zero_fill_ = false;
  std::unique_ptr<CublasLtGemm> gemm_;
  std::vector<CallOffsets> calls_;
  size_t in_size_ = 0, out_size_ = 0;
};

// ---- Gemm --------------------------------------------------------------------------------

// ---- the Gemm node kernel --------------------------------------------------------------

class CudaGemmKernel : public Kernel {
 public:
  enum class CRoute { kNone, kBiasEpilogue, kWidenedBias, kFullC, kBroadcastC };

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend);

  ~CudaGemmKernel() override {
    if (ones_) backend_->Free(ones_);
    if (widened_bias_) backend_->Free(widened_bias_);
  }

  absl::Status Run(KernelContext& ctx) override {
    if (!gemm_) return absl::OkStatus();  // an empty [M,N]
    LtGemmArgs args;
    args.a = ctx.inputs[0].data;
    args.b = ctx.inputs[1].data;
    args.y = ctx.outputs[0].data;
    const void* c = route_ == CRoute::kNone ? nullptr : ctx.inputs[2].data;
    switch (route_) {
      case CRoute::kNone:
        break;
      case CRoute::kBiasEpilogue:
        args.bias = c;
        break;
      case CRoute::kWidenedBias: {
        LtGemmArgs widen;  // [1x1 one] x [1xN c] -> the f32 row
        widen.a = ones_;
        widen.b = c;
        widen.y = widened_bias_;
        MPC_RETURN_IF_ERROR(broadcast_->Run(widen));
        args.bias = widened_bias_;
        break;
      }
      case CRoute::kFullC:
        args.c = c;
        break;
      case CRoute::kBroadcastC: {
        // Y <- C broadcast and converted; the GEMM then adds into it with beta.
        LtGemmArgs bc;
        bc.a = c_is_left_factor_ ? c : ones_;
        bc.b = c_is_left_factor_ ? ones_ : c;
        bc.y = args.y;
        MPC_RETURN_IF_ERROR(broadcast_->Run(bc));
        args.c = args.y;
        break;
      }
    }
    return gemm_->Run(args);
  }

 private:
  CudaBackend* backend_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  CRoute route_ = CRoute::kNone;
  std::unique_ptr<CublasLtGemm> broadcast_;  // kBroadcastC: Y <- C; kWidenedBias: the f32 row <- C
  bool c_is_left_factor_ = false;            // kBroadcastC: C is the 1x1 factor (C has one column)
  void* ones_ = nullptr;                     // kBroadcastC: N ones in C's dtype; kWidenedBias: one
  void* widened_bias_ = nullptr;             // kWidenedBias: C as N f32 values
};

// A device vector of n ones in `dtype` (f32, bf16 or f16), filled once at creation.
absl::StatusOr<void*> DeviceOnes(CudaBackend& backend, DType dtype, int64_t n) {
  const size_t es = DTypeSize(dtype);
  std::vector<unsigned char> host(static_cast<size_t>(n) * es);
  const float one_f32 = 1.0f;
  const uint16_t one_bf16 = FloatToBf16(1.0f), one_f16 = FloatToHalf(1.0f);
  const void* one = dtype == DType::kF32    ? static_cast<const void*>(&one_f32)
                    : dtype == DType::kBF16 ? static_cast<const void*>(&one_bf16)
                                            : static_cast<const void*>(&one_f16);
  for (int64_t i = 0; i < n; ++i) std::memcpy(host.data() + i * es, one, es);
  MPC_ASSIGN_OR_RETURN(void* ones, backend.Allocate(host.size()));
  if (absl::Status st = backend.CopyToDevice(ones, host.data(), host.size()); !st.ok()) {
    backend.Free(ones);
    return st;
  }
  return ones;
}

absl::StatusOr<std::unique_ptr<Kernel>> CudaGemmKernel::Create(const Node& node, Backend& backend) {
  MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
  const Shape& a = node.inputs[0]->shape;
  const Shape& b = node.inputs[1]->shape;
  const Shape& y = node.outputs[0]->shape;
  if (a.size() != 2 || b.size() != 2 || y.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm needs 2-D A, B and Y, got ", ShapeToString(a), ", ",
                                                   ShapeToString(b), " -> ", ShapeToString(y)));
  }
  LtGemmSpec s;
  s.ta = node.attrs.GetInt("transA", 0) != 0;
  s.tb = node.attrs.GetInt("transB", 0) != 0;
  s.m = y[0];
  s.n = y[1];
  s.k = s.ta ? a[0] : a[1];
  s.alpha = node.attrs.GetFloat("alpha", 1.0f);
  const float beta = node.attrs.GetFloat("beta", 1.0f);
  const std::string act = node.attrs.GetString("mpc_activation", "");
  if (!act.empty() && act != "Relu") {
    return absl::UnimplementedError(absl::StrCat("Gemm with mpc_activation=", act, " is not yet on CUDA (only Relu)"));
  }
  if (act == "Relu") s.epilogue = LtEpilogue::kRelu;
  s.tf32 = node.attrs.GetInt("mpc_tf32", 0) != 0 && cuda->capabilities().tf32;
  s.operand = node.inputs[0]->dtype;
  s.out = node.outputs[0]->dtype;
  // Every buffer is a cudaMalloc allocation or an arena offset, aligned to this.
  s.alignment = static_cast<uint32_t>(kArenaAlignment);
  if (node.inputs[1]->dtype != s.operand) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm operands differ in dtype: ", DTypeName(s.operand), " and ",
                                                   DTypeName(node.inputs[1]->dtype)));
  }
  if (s.out != s.operand && s.out != DType::kF32) {
    return absl::UnimplementedError(absl::StrCat("Gemm with ", DTypeName(s.operand), " operands and ", DTypeName(s.out),
                                                 " output is not yet on CUDA"));
  }

  std::unique_ptr<CudaGemmKernel> kernel(new CudaGemmKernel());
  kernel->backend_ = cuda;
  if (s.m == 0 || s.n == 0) return std::unique_ptr<Kernel>(std::move(kernel));
  if (s.k == 0) return absl::UnimplementedError("Gemm with K=0 (an empty contraction) is not yet on CUDA");

  const Value* c = node.inputs.size() > 2 ? node.inputs[2] : nullptr;
  if (c && beta != 0.0f) {
    const Shape& cs = c->shape;
    if (cs.size() > 2) {
      return absl::InvalidArgumentError(absl::StrCat("Gemm C ", ShapeToString(cs), " has rank > 2"));
    }
    const bool row = cs == Shape{s.n} || cs == Shape{1, s.n};
    if (row && beta == 1.0f && c->dtype == s.out) {
      kernel->route_ = CRoute::kBiasEpilogue;
      s.bias = true;
      s.bias_dtype = c->dtype;
    } else if (row && beta == 1.0f && s.out == DType::kF32) {
      // Broadcasting this row into all M rows of Y first (the last route) was 0.8 ms of
      // a 10 ms bf16 step of mlp_block_4096 on an H200; widening N values is nothing.
      // The sum is the same single f32 addition of the exact widened bias either way.
      kernel->route_ = CRoute::kWidenedBias;
      s.bias = true;
      s.bias_dtype = DType::kF32;
      LtGemmSpec ws;
      ws.m = 1;
      ws.k = 1;
      ws.n = s.n;
      ws.operand = c->dtype;
      ws.out = DType::kF32;
      ws.alignment = s.alignment;
      MPC_ASSIGN_OR_RETURN(kernel->broadcast_, CublasLtGemm::Create(*cuda, ws));
      MPC_ASSIGN_OR_RETURN(kernel->ones_, DeviceOnes(*cuda, c->dtype, 1));
      MPC_ASSIGN_OR_RETURN(kernel->widened_bias_, cuda->Allocate(static_cast<size_t>(s.n) * sizeof(float)));
    } else if (cs == Shape{s.m, s.n} && c->dtype == s.out) {
      kernel->route_ = CRoute::kFullC;
      s.beta = beta;
    } else {
      kernel->route_ = CRoute::kBroadcastC;
      s.beta = beta;
      // Element (i, j) of the broadcast C is c[i * row_stride + j * col_stride].
      const int64_t c_cols = cs.empty() ? 1 : cs.back();
      const int64_t c_rows = cs.size() == 2 ? cs[0] : 1;
      const int64_t col_stride = c_cols == 1 ? 0 : 1;
      const int64_t row_stride = c_rows == 1 ? 0 : c_cols;
      // Row i of Y is one 1x1-by-1xN product: [1] * C's row i when C has N columns,
      // else C[i] (or the scalar) * ones[1,N].
      LtGemmSpec bs;
      bs.m = 1;
      bs.k = 1;
      bs.n = s.n;
      bs.batch = s.m;
      bs.operand = c->dtype;
      bs.out = s.out;
      bs.alignment = s.alignment;
      kernel->c_is_left_factor_ = col_stride == 0;
      bs.a_batch_stride = kernel->c_is_left_factor_ ? row_stride : 0;
      bs.b_batch_stride = kernel->c_is_left_factor_ ? 0 : row_stride;
      MPC_ASSIGN_OR_RETURN(kernel->broadcast_, CublasLtGemm::Create(*cuda, bs));
      MPC_ASSIGN_OR_RETURN(kernel->ones_, DeviceOnes(*cuda, c->dtype, s.n));
    }
  }
  MPC_ASSIGN_OR_RETURN(kernel->gemm_, CublasLtGemm::Create(*cuda, s));
  return std::unique_ptr<Kernel>(std::move(kernel));
}

}  // namespace

void RegisterCudaGemmKernels(KernelRegistry& r) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    r.Register("Gemm", "cuda", d, CudaGemmKernel::Create);
    r.Register("MatMul", "cuda", d, CudaMatMulKernel::Create);
  }
}

}  // namespace mpc::cuda
