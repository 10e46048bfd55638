// CUDA kernels of the real FP8 ops (graph/ops_fp8_gemm.cc), mirroring the CPU's
// backends/cpu/kernels_fp8_gemm.cc:
//   Fp8Cast(x, scale[, amax_history]) -> codes     attrs format e4m3|e5m2, transpose 0|1
//     codes = FloatToF8E4M3Byte / FloatToF8E5M2Byte(f32(x) * scale) (float8_device.cuh,
//     bit-identical to graph/float8.h: nearest even, saturating), one byte per element;
//     transpose = 1 writes the codes of the 2-D x^T ([cols, rows]) through a shared memory
//     tile, so both the reads of x and the writes of the codes are coalesced (Transformer
//     Engine's cast_transpose, one layout per node): 64x64 with 8-element accesses when
//     rows and cols are multiples of 8, else 32x32 element by element. With amax_history, max|x|
//     is folded into history[0] as kernels_fp8.cu's Fp8Quantize does: per block, the
//     maximum of |x|'s float bits (non-negative, so their int order is the numeric order,
//     with +inf above the finite values and NaNs above +inf), canonical NaN if any, then one
//     atomicMax on the slot's bits. Max is order-independent: deterministic.
//   Fp8Gemm(a, b, a_scale_inv, b_scale_inv[, bias]) -> y   attrs transA, transB, to
//     one cuBLASLt FP8 matmul (CublasLtGemm, cublaslt_gemm.h): y = round_to(y's dtype)(
//     (Σ_k a_code * b_code) * a_scale_inv * b_scale_inv + bias), accumulated in f32
//     (fast accumulation where fp8-lower set fast_accum). Group scales (a_scaling /
//     b_scaling rows, tiles, blocks: the just-in-time recipes, laid out by Fp8CastDynamic)
//     go to cuBLASLt's scale modes OUTER_VEC_32F, VEC128_32F, BLK128x128_32F (sm_90,
//     cuBLAS 12.9+; cublaslt_fp8.cc checks the pairs). Only the TN layout (transA = 0, transB = 1), which is what the
//     fp8-lower pass emits and all cuBLASLt FP8 kernels take; M, N, K multiples of 16
//     (CheckFp8GemmSpec says so at creation). The bias goes into the epilogue when its
//     dtype is the one cuBLASLt pairs with y's (bf16 for a bf16 or f32 y, f16 for f16);
//     an f32 or f16 bias with an f32 y is added by a separate f32 kernel after the GEMM
//     (the same single f32 addition the CPU's oneDNN bias makes); anything else is
//     Unimplemented.
// Differences to the CPU to expect: the CPU dequantizes each operand to the f32 product
// f32(code) * scale_inv before multiplying; cuBLASLt multiplies the codes and scales the
// sum. Both are exact products of FP8 values accumulated in f32, so they agree to f32
// rounding of the scale factors and the summation order (FP8 tolerance in the
// conformance test, 1e-2 for a bf16 y).
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/float8_device.cuh"
#include "backends/cuda/fp8_amax.cuh"
#include "base/status_macros.h"
#include "graph/capabilities.h"
#include "graph/float8_groups.h"

namespace mpc::cuda {
namespace {

// Each block does one atomicMax on the history slot at its end; this many blocks of 256
// threads fill an H100 several times over with grid-stride loops.
constexpr int kCastMaxBlocks = 1024;

// f32(x) * scale as the CPU forms it: in f32, never fused. A NaN passes unscaled: the
// GPU's multiply returns the canonical (positive) NaN where the CPU's keeps the operand's
// sign, which the NaN codes carry (0x7F / 0xFF).
__device__ __forceinline__ float ScaleLikeTheCpu(float v, float scale) { return isnan(v) ? v : __fmul_rn(v, scale); }

template <bool kE4M3>
__device__ __forceinline__ uint8_t EncodeScaled(float v, float scale) {
  const float scaled = ScaleLikeTheCpu(v, scale);  // rounded once, as on the CPU
  return kE4M3 ? FloatToF8E4M3Byte(scaled) : FloatToF8E5M2Byte(scaled);
}

// Four elements scaled and encoded, code k in byte k; their |x| folded into amax_bits.
template <typename T, bool kE4M3>
__device__ __forceinline__ uint32_t EncodeFour(const Vec4<T>& xv, float scale, int& amax_bits) {
  float scaled[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float v = ToAcc<T>(xv.v[k]);
    amax_bits = max(amax_bits, AbsBits(v));
    scaled[k] = ScaleLikeTheCpu(v, scale);
  }
  return FloatPairToF8Bytes<kE4M3>(scaled[0], scaled[1]) | (FloatPairToF8Bytes<kE4M3>(scaled[2], scaled[3]) << 16);
}

// Plain layout over n elements: [0, 8*n8) eight at a time (two Vec4 loads, 16 bytes of
// bf16, and one 8-byte store of the codes, code i in byte i of the little-endian words),
// [8*n8, n) one by one. Eight per thread halves the memory instructions of four, which
// kept this cast well below the memory's bandwidth.
template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kThreadsPerBlock)
    Fp8CastKernel(int64_t n, int64_t n8, const T* x, const float* scale_ptr, uint8_t* codes, float* amax_slot) {
  const float scale = *scale_ptr;
  int amax_bits = 0;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  const int64_t first = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  const Vec4<T>* x4 = reinterpret_cast<const Vec4<T>*>(x);
  for (int64_t i = first; i < n8; i += stride) {
    const uint32_t lo = EncodeFour<T, kE4M3>(x4[2 * i], scale, amax_bits);
    const uint32_t hi = EncodeFour<T, kE4M3>(x4[2 * i + 1], scale, amax_bits);
    reinterpret_cast<uint2*>(codes)[i] = make_uint2(lo, hi);
  }
  for (int64_t i = 8 * n8 + first; i < n; i += stride) {
    const float v = ToAcc<T>(x[i]);
    amax_bits = max(amax_bits, AbsBits(v));
    codes[i] = EncodeScaled<kE4M3>(v, scale);
  }
  if (amax_slot != nullptr) RecordAmax(amax_bits, amax_slot);
}

// Transposed layout: x [rows, cols] -> codes [cols, rows]. Blocks of (32, 8) threads walk
// 32x32 tiles (grid-stride over tiles, the same trip count for every thread of a block):
// each thread loads 4 elements of a tile row-wise (coalesced along x's rows), the codes
// go through shared memory, and each thread stores 4 codes of the transposed tile
// (coalesced along the codes' rows).
constexpr int kTile = 32;
constexpr int kTileRowsPerPass = 8;  // blockDim.y
constexpr int kTransposeThreads = kTile * kTileRowsPerPass;

template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kTransposeThreads)
    Fp8CastTransposeKernel(int64_t rows, int64_t cols, int64_t tiles_c, int64_t tiles, const T* x,
                           const float* scale_ptr, uint8_t* codes, float* amax_slot) {
  // 33 columns: the transposed reads tile[tx][j] hit 32 different banks.
  __shared__ uint32_t tile[kTile][kTile + 1];
  const float scale = *scale_ptr;
  const int tx = threadIdx.x, ty = threadIdx.y;
  int amax_bits = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kTile, c0 = (t % tiles_c) * kTile;
    for (int j = ty; j < kTile; j += kTileRowsPerPass) {
      const int64_t r = r0 + j, c = c0 + tx;
      if (r < rows && c < cols) {
        const float v = ToAcc<T>(x[r * cols + c]);
        amax_bits = max(amax_bits, AbsBits(v));
        tile[j][tx] = EncodeScaled<kE4M3>(v, scale);
      }
    }
    __syncthreads();
    // Codes row (c0 + j) holds x's column c0 + j; its element (r0 + tx) is x[r0 + tx, c0 + j].
    for (int j = ty; j < kTile; j += kTileRowsPerPass) {
      const int64_t out_row = c0 + j, out_col = r0 + tx;
      if (out_row < cols && out_col < rows) codes[out_row * rows + out_col] = static_cast<uint8_t>(tile[tx][j]);
    }
    __syncthreads();  // the next tile overwrites `tile`
  }
  if (amax_slot != nullptr) RecordAmax(amax_bits, amax_slot);
}

// The transposed layout when rows and cols are multiples of 8 (every FP8 GEMM operand:
// the GEMMs need multiples of 16) and the pointers allow 8-element accesses: 64x64 tiles,
// each of the 256 threads loading 8 consecutive elements of a row (16 bytes of bf16) and
// storing 8 consecutive codes of a transposed row (8 bytes), where the kernel above moves
// 2 and 1 bytes per access. The codes go through shared memory as packed words, rows
// padded to 17 words. The same codes and amax as the kernel above (each element is
// encoded alone; the amax is a max).
constexpr int kWideTile = 64;
constexpr int kWideVec = 8;                               // elements per thread per access
constexpr int kWideThreads = 256;
constexpr int kWideRowsPerPass = kWideThreads / (kWideTile / kWideVec);  // 32
constexpr int kWideWords = kWideTile / 4 + 1;             // a tile row: 16 words of codes + 1

template <typename T, bool kE4M3>
__global__ void __launch_bounds__(kWideThreads)
    Fp8CastTransposeWideKernel(int64_t rows, int64_t cols, int64_t tiles_c, int64_t tiles, const T* x,
                               const float* scale_ptr, uint8_t* codes, float* amax_slot) {
  __shared__ uint32_t tile[kWideTile][kWideWords];
  const float scale = *scale_ptr;
  const int chunk = threadIdx.x % (kWideTile / kWideVec);  // which 8 of a row's 64
  const int row_in_pass = threadIdx.x / (kWideTile / kWideVec);
  int amax_bits = 0;
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t r0 = (t / tiles_c) * kWideTile, c0 = (t % tiles_c) * kWideTile;
#pragma unroll
    for (int pass = 0; pass < kWideTile / kWideRowsPerPass; ++pass) {
      const int j = pass * kWideRowsPerPass + row_in_pass;
      const int64_t r = r0 + j, c = c0 + chunk * kWideVec;
      if (r < rows && c < cols) {  // cols is a multiple of 8: all 8 are inside
        const Vec4<T>* src = reinterpret_cast<const Vec4<T>*>(x + r * cols + c);
        tile[j][2 * chunk] = EncodeFour<T, kE4M3>(src[0], scale, amax_bits);
        tile[j][2 * chunk + 1] = EncodeFour<T, kE4M3>(src[1], scale, amax_bits);
      }
    }
    __syncthreads();
    // Codes row c0 + i holds x's column c0 + i; this thread writes its elements for x's
    // rows r0 + 8*chunk .. r0 + 8*chunk + 7: byte i of those tile rows.
#pragma unroll
    for (int pass = 0; pass < kWideTile / kWideRowsPerPass; ++pass) {
      const int i = pass * kWideRowsPerPass + row_in_pass;
      const int64_t out_row = c0 + i, out_col = r0 + chunk * kWideVec;
      if (out_row < cols && out_col < rows) {  // rows is a multiple of 8 too
        const int word = i / 4, shift = 8 * (i % 4);
        uint32_t lo = 0, hi = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          lo |= ((tile[chunk * kWideVec + k][word] >> shift) & 0xffu) << (8 * k);
          hi |= ((tile[chunk * kWideVec + 4 + k][word] >> shift) & 0xffu) << (8 * k);
        }
        *reinterpret_cast<uint2*>(codes + out_row * rows + out_col) = make_uint2(lo, hi);
      }
    }
    __syncthreads();  // the next tile overwrites `tile`
  }
  if (amax_slot != nullptr) RecordAmax(amax_bits, amax_slot);
}

template <typename T>
struct Fp8CastFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const std::string format = node.attrs.GetString("format", "e4m3");
    if (format != "e4m3" && format != "e5m2") {
      return absl::InvalidArgumentError(
          absl::StrCat("Fp8Cast node '", node.name, "': format '", format, "' must be e4m3 or e5m2"));
    }
    const bool e4m3 = format == "e4m3";
    const bool transpose = node.attrs.GetInt("transpose", 0) != 0;
    const Shape& s = node.inputs[0]->shape;
    if (transpose && s.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Fp8Cast node '", node.name, "': transpose=1 needs a 2-D input, got ", ShapeToString(s)));
    }
    const int64_t n = NumElements(s);
    if (!transpose) {
      const int64_t eights = (n + 7) / 8;
      const int64_t want = (eights + kThreadsPerBlock - 1) / kThreadsPerBlock;
      const unsigned blocks = static_cast<unsigned>(want < 1 ? 1 : (want > kCastMaxBlocks ? kCastMaxBlocks : want));
      return MakeCudaKernel(backend, [e4m3, n, blocks](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
        if (n == 0) return absl::OkStatus();
        const T* x = ctx.inputs[0].as<T>();
        const float* scale = ctx.inputs[1].as<float>();
        uint8_t* codes = ctx.outputs[0].as<uint8_t>();
        float* amax_slot = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<float>() : nullptr;
        const bool aligned = reinterpret_cast<uintptr_t>(x) % sizeof(Vec4<T>) == 0 &&
                             reinterpret_cast<uintptr_t>(codes) % sizeof(uint2) == 0;
        const int64_t n8 = aligned ? n / 8 : 0;
        if (e4m3) {
          Fp8CastKernel<T, true><<<blocks, kThreadsPerBlock, 0, stream>>>(n, n8, x, scale, codes, amax_slot);
        } else {
          Fp8CastKernel<T, false><<<blocks, kThreadsPerBlock, 0, stream>>>(n, n8, x, scale, codes, amax_slot);
        }
        return LaunchStatus("Fp8CastKernel");
      });
    }
    const int64_t rows = s[0], cols = s[1];
    const int64_t tiles_c = (cols + kTile - 1) / kTile, tiles = ((rows + kTile - 1) / kTile) * tiles_c;
    const unsigned blocks = static_cast<unsigned>(tiles < 1 ? 1 : (tiles > kCastMaxBlocks ? kCastMaxBlocks : tiles));
    const bool wide_shape = rows % kWideVec == 0 && cols % kWideVec == 0;
    const int64_t wide_tiles_c = (cols + kWideTile - 1) / kWideTile;
    const int64_t wide_tiles = ((rows + kWideTile - 1) / kWideTile) * wide_tiles_c;
    const unsigned wide_blocks =
        static_cast<unsigned>(wide_tiles < 1 ? 1 : (wide_tiles > kCastMaxBlocks ? kCastMaxBlocks : wide_tiles));
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (tiles == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      const float* scale = ctx.inputs[1].as<float>();
      uint8_t* codes = ctx.outputs[0].as<uint8_t>();
      float* amax_slot = ctx.inputs.size() > 2 && ctx.inputs[2].data ? ctx.inputs[2].as<float>() : nullptr;
      const bool wide = wide_shape && reinterpret_cast<uintptr_t>(x) % sizeof(Vec4<T>) == 0 &&
                        reinterpret_cast<uintptr_t>(codes) % sizeof(uint2) == 0;
      if (wide) {
        if (e4m3) {
          Fp8CastTransposeWideKernel<T, true><<<wide_blocks, kWideThreads, 0, stream>>>(
              rows, cols, wide_tiles_c, wide_tiles, x, scale, codes, amax_slot);
        } else {
          Fp8CastTransposeWideKernel<T, false><<<wide_blocks, kWideThreads, 0, stream>>>(
              rows, cols, wide_tiles_c, wide_tiles, x, scale, codes, amax_slot);
        }
        return LaunchStatus("Fp8CastTransposeWideKernel");
      }
      const dim3 threads(kTile, kTileRowsPerPass);
      if (e4m3) {
        Fp8CastTransposeKernel<T, true>
            <<<blocks, threads, 0, stream>>>(rows, cols, tiles_c, tiles, x, scale, codes, amax_slot);
      } else {
        Fp8CastTransposeKernel<T, false>
            <<<blocks, threads, 0, stream>>>(rows, cols, tiles_c, tiles, x, scale, codes, amax_slot);
      }
      return LaunchStatus("Fp8CastTransposeKernel");
    });
  }
};

// ---- Fp8Gemm -------------------------------------------------------------------------

// y[i, j] += bias[j] in f32, for an f32 y whose bias cuBLASLt's FP8 epilogue does not take.
template <typename B>
__global__ void AddBiasRowsKernel(int64_t count, int64_t n, const B* bias, float* y) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    y[i] = __fadd_rn(y[i], ToAcc<B>(bias[i % n]));
  }
}

class CudaFp8GemmKernel : public Kernel {
 public:
  enum class BiasRoute { kNone, kEpilogue, kSeparateAdd };

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_ASSIGN_OR_RETURN(CudaBackend * cuda, AsCuda(backend));
    const Shape& a = node.inputs[0]->shape;
    const Shape& b = node.inputs[1]->shape;
    const Shape& y = node.outputs[0]->shape;
    if (a.size() != 2 || b.size() != 2 || y.size() != 2) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", node.name, "' needs 2-D operands, got ",
                                                     ShapeToString(a), " x ", ShapeToString(b)));
    }
    LtGemmSpec s;
    s.ta = node.attrs.GetInt("transA", 0) != 0;
    s.tb = node.attrs.GetInt("transB", 0) != 0;
    if (s.ta || !s.tb) {
      return absl::UnimplementedError(absl::StrCat(
          "Fp8Gemm node '", node.name, "' with transA=", s.ta, " transB=", s.tb,
          " is not on CUDA: cuBLASLt's FP8 GEMMs take only the TN layout (transA=0, transB=1), which is what the "
          "fp8-lower pass emits; cast the operand transposed (Fp8Cast transpose=1) instead"));
    }
    s.m = y[0];
    s.n = y[1];
    s.k = a[1];
    s.operand = node.inputs[0]->dtype;
    s.b_operand = node.inputs[1]->dtype;
    s.out = node.outputs[0]->dtype;
    // fp8-lower marks the forward GEMMs (passes/fp8_lower.h); the backward ones promote.
    s.fast_accum = node.attrs.GetInt("fast_accum", 0) != 0;
    // Group scales (the just-in-time recipes), already in the layouts cuBLASLt reads.
    for (int i = 0; i < 2; ++i) {
      const char* attr = i == 0 ? "a_scaling" : "b_scaling";
      MPC_ASSIGN_OR_RETURN(Fp8Granularity g, ParseFp8Granularity(node.attrs.GetString(attr, "tensor")));
      if (g != Fp8Granularity::kTensor && g != Fp8Granularity::kRows && node.attrs.GetInt("tile", kFp8Tile) != kFp8Tile) {
        return absl::UnimplementedError(absl::StrCat("Fp8Gemm node '", node.name, "': ", attr, " ",
                                                     Fp8GranularityName(g), " with tile ", node.attrs.GetInt("tile", 0),
                                                     " is not on CUDA: cuBLASLt's block scaling is ", kFp8Tile, " wide"));
      }
      const LtScaleMode mode = g == Fp8Granularity::kRows     ? LtScaleMode::kOuterVec
                               : g == Fp8Granularity::kTiles  ? LtScaleMode::kVec128
                               : g == Fp8Granularity::kBlocks ? LtScaleMode::kBlk128x128
                                                              : LtScaleMode::kScalar;
      (i == 0 ? s.a_scale_mode : s.b_scale_mode) = mode;
    }
    // Every buffer is an arena offset or a cudaMalloc allocation, aligned to this.
    s.alignment = static_cast<uint32_t>(kArenaAlignment);

    std::unique_ptr<CudaFp8GemmKernel> k(new CudaFp8GemmKernel());
    k->stream_ = cuda->stream();
    k->m_ = s.m;
    k->n_ = s.n;
    if (s.m == 0 || s.n == 0) return std::unique_ptr<Kernel>(std::move(k));
    const Value* bias = node.inputs.size() > 4 ? node.inputs[4] : nullptr;
    if (bias) {
      k->bias_dtype_ = bias->dtype;
      const DType epilogue_bias = s.out == DType::kF16 ? DType::kF16 : DType::kBF16;  // cuBLASLt's FP8 pairing
      if (bias->dtype == epilogue_bias) {
        k->bias_route_ = BiasRoute::kEpilogue;
        s.bias = true;
        s.bias_dtype = bias->dtype;
      } else if (s.out == DType::kF32 && (bias->dtype == DType::kF32 || bias->dtype == DType::kF16)) {
        k->bias_route_ = BiasRoute::kSeparateAdd;
      } else {
        return absl::UnimplementedError(absl::StrCat("Fp8Gemm node '", node.name, "' with a ", DTypeName(bias->dtype),
                                                     " bias and a ", DTypeName(s.out),
                                                     " output is not on CUDA: cuBLASLt's FP8 epilogue takes a ",
                                                     DTypeName(epilogue_bias), " bias for that output"));
      }
    }
    if (s.k == 0) return absl::UnimplementedError("Fp8Gemm with K=0 (an empty contraction) is not on CUDA");
    MPC_ASSIGN_OR_RETURN(k->gemm_, CublasLtGemm::Create(*cuda, s));
    return std::unique_ptr<Kernel>(std::move(k));
  }

  absl::Status Run(KernelContext& ctx) override {
    if (!gemm_) return absl::OkStatus();  // an empty [M,N]
    LtGemmArgs args;
    args.a = ctx.inputs[0].data;
    args.b = ctx.inputs[1].data;
    args.y = ctx.outputs[0].data;
    args.a_scale_inv = ctx.inputs[2].as<float>();
    args.b_scale_inv = ctx.inputs[3].as<float>();
    if (bias_route_ == BiasRoute::kEpilogue) args.bias = ctx.inputs[4].data;
    MPC_RETURN_IF_ERROR(gemm_->Run(args));
    if (bias_route_ != BiasRoute::kSeparateAdd) return absl::OkStatus();
    const int64_t count = m_ * n_;
    float* y = ctx.outputs[0].as<float>();
    if (bias_dtype_ == DType::kF32) {
      AddBiasRowsKernel<float>
          <<<BlocksFor(count), kThreadsPerBlock, 0, stream_>>>(count, n_, ctx.inputs[4].as<float>(), y);
    } else {
      AddBiasRowsKernel<__half>
          <<<BlocksFor(count), kThreadsPerBlock, 0, stream_>>>(count, n_, ctx.inputs[4].as<__half>(), y);
    }
    return LaunchStatus("AddBiasRowsKernel");
  }

 private:
  CudaFp8GemmKernel() = default;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<CublasLtGemm> gemm_;
  BiasRoute bias_route_ = BiasRoute::kNone;
  DType bias_dtype_ = DType::kF32;
  int64_t m_ = 0, n_ = 0;
};

}  // namespace
}  // namespace mpc::cuda

namespace mpc {

namespace cuda {

void RegisterCudaFp8GemmKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<Fp8CastFactory>(r, "Fp8Cast");
  // Looked up by A's dtype: E4M3, or E5M2 where A is the HYBRID format's gradient.
  r.Register("Fp8Gemm", "cuda", DType::kF8E4M3, CudaFp8GemmKernel::Create);
  r.Register("Fp8Gemm", "cuda", DType::kF8E5M2, CudaFp8GemmKernel::Create);
}

}  // namespace cuda
}  // namespace mpc
