// Shared pieces of the CPU GEMM kernels (kernels_gemm.cc: f32/f64 and registration;
// kernels_gemm_lowp.cc: bf16/f16). DnnlGemm and DnnlMatMul wrap one oneDNN matmul
// primitive each, built once per node, for any operand/output data types oneDNN
// accepts; the kernels choose those types. Dtype conversion helpers let a low-precision
// kernel stage operands through f32 scratch buffers sized at creation, and the TF32
// helpers let an f32 GEMM or convolution round its operands to TF32 the same way.
#pragma once

#include <algorithm>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "graph/matmul_layout.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace mpc::cpu {

// Everything a Gemm node asks for: Y = alpha * op(A) op(B) + beta * C, optionally ReLU.
struct GemmSpec {
  int64_t m = 0, n = 0, k = 0;
  bool ta = false, tb = false;
  float alpha = 1.0f, beta = 1.0f;
  bool relu = false;             // mpc_activation = "Relu" (set by the fusion pass)
  std::optional<Shape> c_shape;  // set when C is present and beta != 0
  DType operand = DType::kF32;   // A, B and C
  DType out = DType::kF32;       // Y (mpc_output_dtype)
};
GemmSpec GemmSpecOf(const Node& node);

// One oneDNN matmul computing a GemmSpec with A/B (and a row bias) in `operand` and Y
// in `out` (f32 or bf16 each). A C that is a bias row with alpha = beta = 1 becomes
// oneDNN's bias (in `bias_dtype`); any other C is broadcast into Y (converted to Y's
// dtype) and added by a sum post-op scaled by beta; alpha is an output scale. Run
// allocates nothing.
class DnnlGemm {
 public:
  static absl::StatusOr<std::unique_ptr<DnnlGemm>> Create(const GemmSpec& spec, DType operand, DType bias_dtype,
                                                          DType out);
  // c: C's data (nullptr when absent), in c_dtype. A row bias must be in bias_dtype.
  void Run(const void* a, const void* b, const void* c, DType c_dtype, void* y);
  bool row_bias() const { return bias_mode_ == BiasMode::kRow; }

 private:
  enum class BiasMode { kNone, kRow, kSum };
  dnnl::matmul primitive_;
  dnnl::memory a_, b_, y_, bias_;
  BiasMode bias_mode_ = BiasMode::kNone;
  std::vector<int64_t> c_strides_;  // C's element strides over [M, N], 0 where broadcast
  int64_t m_ = 0, n_ = 0;
  DType out_ = DType::kF32;
  bool relu_ = false;  // applied after the primitive: oneDNN's ReLU post-op turns NaN into 0
};

// How a MatMul maps onto oneDNN: B a single matrix (A's batch folds into M; not with a
// transposed batched A), equal batch dims (oneDNN's batched matmul), or anything else (a
// broadcast: the loop). ta/tb: the node's mpc_trans_a/mpc_trans_b (graph/ops_nn.cc), A
// stored [..., K, M] / B stored [..., N, K]; oneDNN reads them through strides.
// kStrided: an mpc_perm_* attribute is set (graph/matmul_layout.h); oneDNN reads and
// writes every view through the layout's strides, batch axes kept apart.
// a_zeros: the node's mpc_a_zeros (passes/triangular_operands.h), A as read zero above
// or below its diagonal; a kBatched or kStrided DnnlMatMul then skips those products.
struct MatMulPlan {
  enum class Mode { kFold, kBatched, kLoop, kStrided } mode = Mode::kLoop;
  enum class Zeros { kNone, kAboveDiagonal, kBelowDiagonal } a_zeros = Zeros::kNone;
  int64_t batch = 1, m = 0, k = 0, n = 0;
  bool ta = false, tb = false;
  MatMulLayout layout;  // kStrided only
};
MatMulPlan PlanMatMul(const Node& node);

// One oneDNN matmul for a kFold/kBatched/kStrided plan with A/B in `operand` and Y in
// `out`. When the plan says f32 A (square as read) is zero above its diagonal (a causal
// attention's probabilities P, and their gradient) or below it (P read transposed), the
// product runs as bands of kTriangleBandRows rows of A and Y, each contracting only over
// the columns where its rows of A can be nonzero: about (1 + 1/bands) / 2 of the work.
// The skipped products are zeros times B's rows, so the result is the full product's up
// to the order of the sums (and a NaN or inf in a skipped row of B no longer reaches the
// rows of Y that would have multiplied it by zero).
class DnnlMatMul {
 public:
  static constexpr int64_t kTriangleBandRows = 64;
  static absl::StatusOr<std::unique_ptr<DnnlMatMul>> Create(const MatMulPlan& plan, DType operand, DType out);
  void Run(const void* a, const void* b, void* y);

 private:
  // One primitive over a band of rows: its views start these many bytes into A, B and Y.
  struct Part {
    dnnl::matmul primitive;
    dnnl::memory a, b, y;
    size_t a_offset = 0, b_offset = 0, y_offset = 0;
  };
  std::vector<Part> parts_;
};

// MatMul with numpy batch broadcasting, by loops: each batch index maps to a (possibly
// broadcast) A and B matrix. Products accumulate in Acc<T> (f32 for bf16/f16, f64 for
// f64) and each output element is rounded to Y once. j runs in fixed-size chunks with a
// stack accumulator, so nothing is allocated (the inner loop is contiguous unless tb).
// ta/tb: A stored [..., K, M] / B stored [..., N, K] (MatMulPlan).
template <typename T, typename Y>
void MatMulLoop(const TensorView& a, const TensorView& b, const TensorView& y, bool ta = false, bool tb = false) {
  using A = Acc<T>;
  constexpr int64_t kChunk = 256;
  const int r = static_cast<int>(y.shape.size());
  const int64_t m = y.shape[r - 2], n = y.shape[r - 1], k = ta ? a.shape[a.shape.size() - 2] : a.shape.back();
  // Element strides of A(i, p) and B(p, j) within one matrix.
  const int64_t a_i = ta ? 1 : k, a_p = ta ? m : 1, b_p = tb ? 1 : n, b_j = tb ? k : 1;
  const Shape batch(y.shape.begin(), y.shape.end() - 2);
  const Shape a_batch(a.shape.begin(), a.shape.end() - 2), b_batch(b.shape.begin(), b.shape.end() - 2);
  const auto as = BroadcastStrides(a_batch, batch), bs = BroadcastStrides(b_batch, batch);
  const int64_t count = NumElements(batch);
  const T* pa = a.as<T>();
  const T* pb = b.as<T>();
  Y* py = y.as<Y>();
#pragma omp parallel for collapse(2) if (count * m * n * k > 100000)
  for (int64_t bi = 0; bi < count; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      int64_t rem = bi, ao = 0, bo = 0;
      for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
        const int64_t idx = rem % batch[d];
        rem /= batch[d];
        ao += idx * as[d];
        bo += idx * bs[d];
      }
      const T* am = pa + ao * m * k;
      const T* bm = pb + bo * k * n;
      Y* ym = py + bi * m * n;
      for (int64_t j0 = 0; j0 < n; j0 += kChunk) {
        const int64_t jn = std::min(kChunk, n - j0);
        A acc[kChunk];
        for (int64_t j = 0; j < jn; ++j) acc[j] = A(0);
        for (int64_t p = 0; p < k; ++p) {
          const A av = A(am[i * a_i + p * a_p]);
          const T* brow = bm + p * b_p + j0 * b_j;
          if (b_j == 1) {
            for (int64_t j = 0; j < jn; ++j) acc[j] += av * A(brow[j]);
          } else {
            for (int64_t j = 0; j < jn; ++j) acc[j] += av * A(brow[j * b_j]);
          }
        }
        for (int64_t j = 0; j < jn; ++j) ym[i * n + j0 + j] = static_cast<Y>(acc[j]);
      }
    }
  }
}

// A kStrided plan's product by plain loops (the f64 reference kernels): each view read
// and written through its strides, products accumulated in Acc<T>, each output rounded
// to Y once.
template <typename T, typename Y>
void MatMulStridedLoop(const MatMulLayout& l, const T* a, const T* b, Y* y) {
  using A = Acc<T>;
  const size_t r = l.y.size();
  const int64_t m = l.y[r - 2], n = l.y[r - 1], k = l.a[r - 1];
  const Shape batch(l.y.begin(), l.y.end() - 2);
  const int64_t count = NumElements(batch);
#pragma omp parallel for if (count * m * n * k > 100000)
  for (int64_t bi = 0; bi < count; ++bi) {
    int64_t rem = bi, ao = 0, bo = 0, yo = 0;
    for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      ao += idx * l.a_strides[d];
      bo += idx * l.b_strides[d];
      yo += idx * l.y_strides[d];
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        A acc = 0;
        for (int64_t p = 0; p < k; ++p) {
          acc += A(a[ao + i * l.a_strides[r - 2] + p * l.a_strides[r - 1]]) *
                 A(b[bo + p * l.b_strides[r - 2] + j * l.b_strides[r - 1]]);
        }
        y[yo + i * l.y_strides[r - 2] + j * l.y_strides[r - 1]] = static_cast<Y>(acc);
      }
    }
  }
}

// Element conversions between f32 and a float dtype (f32, bf16, f16; RNE to 16 bits),
// parallel over n elements.
void ConvertToF32(const void* src, DType dtype, float* dst, int64_t n);
void ConvertFromF32(const float* src, void* dst, DType dtype, int64_t n);

dnnl::memory::data_type DnnlType(DType dtype);

// TF32 (docs/numerics.md): a node with mpc_tf32 = 1 (set by the tf32 pass on f32 GEMMs
// and convolutions) whose operands are f32. The kernel rounds both operands to TF32
// (RoundToTf32, graph/float_convert.h) into scratch allocated at creation, never in place
// (an operand may be a parameter), and runs its f32 primitive on them: every product of
// two TF32 values is exact in f32, so with f32 accumulation this is exactly what a TF32
// tensor core computes, up to summation order. Bias and C stay f32, as in the tensor
// cores' f32 epilogue. Other dtypes ignore the attribute: bf16 and f16 values are TF32
// values already, and f64 is the reference.
bool RunsInTf32(const Node& node);
// dst[i] = RoundToTf32(src[i]), parallel over n elements.
void RoundToTf32Buffer(const float* src, float* dst, int64_t n);

}  // namespace mpc::cpu

namespace mpc {
// The bf16/f16 Gemm and MatMul kernels (kernels_gemm_lowp.cc), added by
// RegisterCpuGemmKernels.
void RegisterCpuGemmLowpKernels(KernelRegistry& r);
}  // namespace mpc
