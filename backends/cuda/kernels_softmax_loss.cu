// CUDA softmax-family and loss kernels, mirroring backends/cpu/kernels_softmax_loss.cc
// (f32, bf16, f16; everything computed in f32, outputs rounded once):
//   Softmax, LogSoftmax (attr axis, default -1): X viewed as [outer, axis, inner]; each
//       row (o, i) is max-subtracted: y = exp(x - max) / sum, or (x - max) - log(sum).
//   SoftmaxGrad(dY, Y), LogSoftmaxGrad(dY, Y) -> dX along the same axis:
//       softmax: dX = Y * (dY - sum(dY * Y));  log-softmax: dX = dY - exp(Y) * sum(dY).
//   SoftmaxCrossEntropyLoss(scores [N, C], labels [N] int32|int64) -> (loss [], log_prob?):
//       loss = reduce_i(logsumexp(scores_i) - scores_i[label_i]) with reduction mean|sum
//       (attr reduction, default mean); with attr ignore_index, rows whose label equals it
//       add nothing and do not count towards the mean (mean of no rows: 0). log_prob is
//       written for every row. The total is summed in f64, as on the CPU.
//   SoftmaxCrossEntropyGrad(dLoss [], scores, labels) -> dScores:
//       scale * (softmax(scores_i) - onehot(label_i)), ignored rows 0; scale = dLoss /
//       (rows counted) for mean (0 when none), dLoss for sum.
//   MeanSquaredError(pred, target) -> mean((pred - target)^2) over all elements, summed
//       in f64 as on the CPU; MeanSquaredErrorGrad(dLoss, pred, target) ->
//       2 * dLoss / numel * (pred - target).
// Rows go to a warp or a block each when contiguous (only size-1 dimensions after the
// axis), to a thread each when strided (block_reduce.cuh). Losses are deterministic:
// per-row (or per-block) partial results go to scratch allocated at creation, then one
// block sums them in a fixed order. No padded-class masking is needed here: the pad-dims pass
// slices padded logits back to the model's shape (SliceTo) before any softmax or loss.
//
// Difference from the CPU: a label outside [0, C) that is not ignore_index is an error
// on the CPU; a kernel cannot return one without synchronising, so the loss becomes NaN
// (visible to the loss-scale / NaN checks). The gradient kernel, like the CPU's, does not
// check labels (such a row gets scale * softmax).
//
// Dropout/DropoutGrad, registered by the same CPU file, are not part of this family.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "absl/strings/str_cat.h"
#include "backends/cuda/block_reduce.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_kernel_util.cuh"
#include "backends/cuda/softmax_norm_families.h"
#include "base/status_macros.h"

namespace mpc::cuda {
namespace {

// Rows of a tensor viewed as [outer, dim, inner]: row r = (o, i) with o = r / inner,
// i = r % inner; its dim elements lie `inner` apart, starting at Base(r).
struct AxisRows {
  int64_t rows = 1, dim = 1, inner = 1;
  __host__ __device__ int64_t Base(int64_t r) const {
    return inner == 1 ? r * dim : (r / inner) * dim * inner + r % inner;
  }
};

// As the CPU's SplitAt: an axis outside the rank still splits consistently (it cannot
// index out of range), matching what the CPU computes.
AxisRows SplitAt(const Shape& shape, int64_t axis_attr) {
  const int rank = static_cast<int>(shape.size());
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + rank : axis_attr);
  int64_t outer = 1, dim = 1, inner = 1;
  for (int i = 0; i < rank; ++i) {
    if (i < axis)
      outer *= shape[i];
    else if (i == axis)
      dim = shape[i];
    else
      inner *= shape[i];
  }
  AxisRows s;
  s.rows = outer * inner;
  s.dim = dim;
  s.inner = inner;
  return s;
}

// ---- Softmax / LogSoftmax -----------------------------------------------------------------

template <typename T, bool kLog, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    SoftmaxRowsKernel(const T* __restrict__ x, T* __restrict__ y, AxisRows s) {
  G g{};
  for (int64_t r = g.FirstRow(); r < s.rows; r += g.RowStride()) {
    const int64_t base = s.Base(r);
    float mx = -INFINITY;
    for (int64_t d = g.Lane(); d < s.dim; d += g.Size()) mx = fmaxf(mx, ToAcc(x[base + d * s.inner]));
    mx = g.Max(mx);
    float sum = 0.f;
    for (int64_t d = g.Lane(); d < s.dim; d += g.Size()) sum += expf(ToAcc(x[base + d * s.inner]) - mx);
    sum = g.Sum(sum);
    const float log_sum = logf(sum);
    for (int64_t d = g.Lane(); d < s.dim; d += g.Size()) {
      const int64_t k = base + d * s.inner;
      const float z = ToAcc(x[k]) - mx;
      y[k] = FromAcc<T>(kLog ? z - log_sum : expf(z) / sum);
    }
  }
}

template <typename T, bool kLog>
struct SoftmaxKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const AxisRows s = SplitAt(node.inputs[0]->shape, node.attrs.GetInt("axis", -1));
    const RowLaunch plan = PlanRows(s.rows, s.dim, s.inner != 1);
    return MakeCudaKernel(backend, [s, plan](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (s.rows == 0 || s.dim == 0) return absl::OkStatus();
      const T* x = ctx.inputs[0].as<T>();
      T* y = ctx.outputs[0].as<T>();
      DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
        SoftmaxRowsKernel<T, kLog, decltype(group)><<<grid, block, 0, stream>>>(x, y, s);
      });
      return LaunchStatus(kLog ? "LogSoftmax" : "Softmax");
    });
  }
};
template <typename T>
using SoftmaxFwd = SoftmaxKernel<T, false>;
template <typename T>
using LogSoftmaxFwd = SoftmaxKernel<T, true>;

// Softmax: dx = y * (dy - sum(dy * y));  LogSoftmax: dx = dy - exp(y) * sum(dy).
template <typename T, bool kLog, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    SoftmaxGradRowsKernel(const T* __restrict__ dy, const T* __restrict__ y, T* __restrict__ dx, AxisRows s) {
  G g{};
  for (int64_t r = g.FirstRow(); r < s.rows; r += g.RowStride()) {
    const int64_t base = s.Base(r);
    float dot = 0.f;
    for (int64_t d = g.Lane(); d < s.dim; d += g.Size()) {
      const int64_t k = base + d * s.inner;
      dot += kLog ? ToAcc(dy[k]) : ToAcc(dy[k]) * ToAcc(y[k]);
    }
    dot = g.Sum(dot);
    for (int64_t d = g.Lane(); d < s.dim; d += g.Size()) {
      const int64_t k = base + d * s.inner;
      dx[k] = FromAcc<T>(kLog ? ToAcc(dy[k]) - expf(ToAcc(y[k])) * dot : ToAcc(y[k]) * (ToAcc(dy[k]) - dot));
    }
  }
}

// Inputs (dY, Y), as the CPU kernel and graph/ops_nn.cc's gradient build them.
template <typename T, bool kLog>
struct SoftmaxGradKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const AxisRows s = SplitAt(node.inputs[0]->shape, node.attrs.GetInt("axis", -1));
    const RowLaunch plan = PlanRows(s.rows, s.dim, s.inner != 1);
    return MakeCudaKernel(backend, [s, plan](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (s.rows == 0 || s.dim == 0) return absl::OkStatus();
      const T* dy = ctx.inputs[0].as<T>();
      const T* y = ctx.inputs[1].as<T>();
      T* dx = ctx.outputs[0].as<T>();
      DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
        SoftmaxGradRowsKernel<T, kLog, decltype(group)><<<grid, block, 0, stream>>>(dy, y, dx, s);
      });
      return LaunchStatus(kLog ? "LogSoftmaxGrad" : "SoftmaxGrad");
    });
  }
};
template <typename T>
using SoftmaxBwd = SoftmaxGradKernel<T, false>;
template <typename T>
using LogSoftmaxBwd = SoftmaxGradKernel<T, true>;

// ---- SoftmaxCrossEntropyLoss ----------------------------------------------------------

// The loss attributes as the CPU kernel reads them.
struct SceAttrs {
  bool mean = true;
  bool has_ignore = false;
  int64_t ignore = -1;
};

SceAttrs ReadSceAttrs(const Node& node) {
  SceAttrs a;
  a.mean = node.attrs.GetString("reduction", "mean") == "mean";
  a.has_ignore = node.attrs.Has("ignore_index");
  a.ignore = node.attrs.GetInt("ignore_index", -1);
  return a;
}

absl::Status CheckSceShapes(const Node& node, int scores_input, int labels_input) {
  const Value* scores = node.inputs[scores_input];
  const Value* labels = node.inputs[labels_input];
  if (scores->shape.size() != 2 || labels->shape.size() != 1 || labels->shape[0] != scores->shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.op, " node '", node.name, "': scores ", ShapeToString(scores->shape), " and labels ",
                     ShapeToString(labels->shape), " must be [N, C] and [N]; check the model's loss inputs"));
  }
  if (labels->dtype != DType::kI32 && labels->dtype != DType::kI64) {
    return absl::InvalidArgumentError(absl::StrCat(node.op, " node '", node.name, "': labels '", labels->name, "' are ",
                                                   DTypeName(labels->dtype),
                                                   "; they must be int32 or int64 class indices"));
  }
  return absl::OkStatus();
}

// Per row: logsumexp, log_prob (when wanted), and the row's loss and whether it counts.
template <typename T, typename L, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    SceLossRowsKernel(const T* __restrict__ scores, const L* __restrict__ labels, int64_t n, int64_t c, SceAttrs attrs,
                      T* __restrict__ log_prob, float* __restrict__ row_loss, int* __restrict__ row_counted) {
  G g{};
  for (int64_t r = g.FirstRow(); r < n; r += g.RowStride()) {
    const T* row = scores + r * c;
    float mx = -INFINITY;
    for (int64_t j = g.Lane(); j < c; j += g.Size()) mx = fmaxf(mx, ToAcc(row[j]));
    mx = g.Max(mx);
    float sum = 0.f;
    for (int64_t j = g.Lane(); j < c; j += g.Size()) sum += expf(ToAcc(row[j]) - mx);
    sum = g.Sum(sum);
    const float lse = mx + logf(sum);
    if (log_prob) {
      for (int64_t j = g.Lane(); j < c; j += g.Size()) log_prob[r * c + j] = FromAcc<T>(ToAcc(row[j]) - lse);
    }
    if (g.Lane() == 0) {
      const int64_t label = static_cast<int64_t>(labels[r]);
      float loss = 0.f;
      int counted = 0;
      if (!(attrs.has_ignore && label == attrs.ignore)) {
        counted = 1;
        // Out of range: an error on the CPU; NaN here (see the header comment).
        loss = (label < 0 || label >= c) ? __int_as_float(0x7fc00000) : lse - ToAcc(row[label]);
      }
      row_loss[r] = loss;
      row_counted[r] = counted;
    }
  }
}

constexpr int kTotalThreads = 1024;  // the single block that sums per-row / per-block results

// One block: total of the row losses in f64 and the number of rows counted, then the
// reduction, rounded as the CPU rounds its f64 loss (to f32, then to T).
template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
    SceLossTotalKernel(const float* __restrict__ row_loss, const int* __restrict__ row_counted, int64_t n, bool mean,
                       T* __restrict__ loss) {
  double total = 0.0;
  int64_t counted = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    total += static_cast<double>(row_loss[i]);
    counted += row_counted[i];
  }
  total = BlockReduceSum(total);
  counted = BlockReduceSum(counted);
  if (threadIdx.x == 0) {
    const double v = mean ? (counted ? total / static_cast<double>(counted) : 0.0) : total;
    loss[0] = FromAcc<T>(static_cast<float>(v));
  }
}

template <typename T>
struct SceLossKernel {
  template <typename L>
  static absl::StatusOr<std::unique_ptr<Kernel>> CreateFor(const Node& node, Backend& backend) {
    const SceAttrs attrs = ReadSceAttrs(node);
    const int64_t n = node.inputs[0]->shape[0], c = node.inputs[0]->shape[1];
    const size_t loss_bytes = AlignScratch(sizeof(float) * static_cast<size_t>(n));
    MPC_ASSIGN_OR_RETURN(std::shared_ptr<Scratch> scratch,
                         Scratch::Create(backend, loss_bytes + sizeof(int) * static_cast<size_t>(n),
                                         absl::StrCat("SoftmaxCrossEntropyLoss '", node.name, "'")));
    const RowLaunch plan = PlanRows(n, c, /*strided=*/false);
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      const T* scores = ctx.inputs[0].as<T>();
      const L* labels = ctx.inputs[1].as<L>();
      T* log_prob = static_cast<T*>(OptionalOutput(ctx, 1));
      float* row_loss = scratch->as<float>();
      int* row_counted = scratch->as<int>(loss_bytes);
      if (n > 0) {
        DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
          SceLossRowsKernel<T, L, decltype(group)>
              <<<grid, block, 0, stream>>>(scores, labels, n, c, attrs, log_prob, row_loss, row_counted);
        });
        MPC_RETURN_IF_ERROR(LaunchStatus("SoftmaxCrossEntropyLoss rows"));
      }
      SceLossTotalKernel<T>
          <<<1, kTotalThreads, 0, stream>>>(row_loss, row_counted, n, attrs.mean, ctx.outputs[0].as<T>());
      return LaunchStatus("SoftmaxCrossEntropyLoss total");
    });
  }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_RETURN_IF_ERROR(CheckSceShapes(node, 0, 1));
    return node.inputs[1]->dtype == DType::kI32 ? CreateFor<int32_t>(node, backend) : CreateFor<int64_t>(node, backend);
  }
};

// The number of rows whose label is not ignore_index (one block).
template <typename L>
__global__ void __launch_bounds__(kMaxBlockThreads)
    CountKeptRowsKernel(const L* __restrict__ labels, int64_t n, int64_t ignore, int64_t* __restrict__ kept) {
  int64_t count = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) count += static_cast<int64_t>(labels[i]) != ignore;
  count = BlockReduceSum(count);
  if (threadIdx.x == 0) kept[0] = count;
}

// dScores = scale * (softmax - onehot); `kept` is the counted rows for a mean with
// ignore_index, null when every row counts.
template <typename T, typename L, typename G>
__global__ void __launch_bounds__(kMaxBlockThreads)
    SceGradRowsKernel(const T* __restrict__ dloss, const T* __restrict__ scores, const L* __restrict__ labels,
                      int64_t n, int64_t c, SceAttrs attrs, const int64_t* __restrict__ kept, T* __restrict__ dscores) {
  G g{};
  const float dl = ToAcc(dloss[0]);
  const int64_t counted = kept ? kept[0] : n;
  const float scale = attrs.mean ? (counted ? dl / static_cast<float>(counted) : 0.f) : dl;
  for (int64_t r = g.FirstRow(); r < n; r += g.RowStride()) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    const T* row = scores + r * c;
    T* drow = dscores + r * c;
    if (attrs.has_ignore && label == attrs.ignore) {  // the same for the whole group
      for (int64_t j = g.Lane(); j < c; j += g.Size()) drow[j] = FromAcc<T>(0.f);
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = g.Lane(); j < c; j += g.Size()) mx = fmaxf(mx, ToAcc(row[j]));
    mx = g.Max(mx);
    float sum = 0.f;
    for (int64_t j = g.Lane(); j < c; j += g.Size()) sum += expf(ToAcc(row[j]) - mx);
    sum = g.Sum(sum);
    for (int64_t j = g.Lane(); j < c; j += g.Size()) {
      const float p = expf(ToAcc(row[j]) - mx) / sum;
      drow[j] = FromAcc<T>(scale * (p - (j == label ? 1.f : 0.f)));
    }
  }
}

// Inputs (dLoss, scores, labels); attributes as the loss's.
template <typename T>
struct SceGradKernel {
  template <typename L>
  static absl::StatusOr<std::unique_ptr<Kernel>> CreateFor(const Node& node, Backend& backend) {
    const SceAttrs attrs = ReadSceAttrs(node);
    const int64_t n = node.inputs[1]->shape[0], c = node.inputs[1]->shape[1];
    const bool count_kept = attrs.mean && attrs.has_ignore;
    std::shared_ptr<Scratch> scratch;
    if (count_kept) {
      MPC_ASSIGN_OR_RETURN(scratch, Scratch::Create(backend, sizeof(int64_t),
                                                    absl::StrCat("SoftmaxCrossEntropyGrad '", node.name, "'")));
    }
    const RowLaunch plan = PlanRows(n, c, /*strided=*/false);
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (n == 0 || c == 0) return absl::OkStatus();
      const T* dloss = ctx.inputs[0].as<T>();
      const T* scores = ctx.inputs[1].as<T>();
      const L* labels = ctx.inputs[2].as<L>();
      int64_t* kept = nullptr;
      if (count_kept) {
        kept = scratch->as<int64_t>();
        CountKeptRowsKernel<L><<<1, kTotalThreads, 0, stream>>>(labels, n, attrs.ignore, kept);
        MPC_RETURN_IF_ERROR(LaunchStatus("SoftmaxCrossEntropyGrad row count"));
      }
      T* dscores = ctx.outputs[0].as<T>();
      DispatchRows(plan, [&](auto group, dim3 grid, dim3 block) {
        SceGradRowsKernel<T, L, decltype(group)>
            <<<grid, block, 0, stream>>>(dloss, scores, labels, n, c, attrs, kept, dscores);
      });
      return LaunchStatus("SoftmaxCrossEntropyGrad");
    });
  }

  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    MPC_RETURN_IF_ERROR(CheckSceShapes(node, 1, 2));
    return node.inputs[2]->dtype == DType::kI32 ? CreateFor<int32_t>(node, backend) : CreateFor<int64_t>(node, backend);
  }
};

// ---- MeanSquaredError -------------------------------------------------------------------

constexpr int kMaxMseBlocks = 1024;

// Per block: sum of (p - t)^2 in f64 over a grid-stride slice.
template <typename T>
__global__ void MsePartialKernel(const T* __restrict__ pred, const T* __restrict__ target, int64_t n,
                                 double* __restrict__ partial) {
  double sum = 0.0;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double d = static_cast<double>(ToAcc(pred[i])) - static_cast<double>(ToAcc(target[i]));
    sum += d * d;
  }
  sum = BlockReduceSum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

template <typename T>
__global__ void __launch_bounds__(kMaxBlockThreads)
    MseTotalKernel(const double* __restrict__ partial, int blocks, int64_t n, T* __restrict__ loss) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) sum += partial[i];
  sum = BlockReduceSum(sum);
  if (threadIdx.x == 0) loss[0] = FromAcc<T>(static_cast<float>(n ? sum / static_cast<double>(n) : 0.0));
}

template <typename T>
struct MseKernel {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const int64_t n = NumElements(node.inputs[0]->shape);
    // Fixed at creation, so the partial sums (and the result's bits) never change.
    const int blocks = static_cast<int>(std::min<int64_t>(BlocksFor(n), kMaxMseBlocks));
    MPC_ASSIGN_OR_RETURN(
        std::shared_ptr<Scratch> scratch,
        Scratch::Create(backend, sizeof(double) * blocks, absl::StrCat("MeanSquaredError '", node.name, "'")));
    return MakeCudaKernel(backend, [=](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      double* partial = scratch->as<double>();
      MsePartialKernel<T>
          <<<blocks, kThreadsPerBlock, 0, stream>>>(ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(), n, partial);
      MPC_RETURN_IF_ERROR(LaunchStatus("MeanSquaredError partial sums"));
      MseTotalKernel<T><<<1, kTotalThreads, 0, stream>>>(partial, blocks, n, ctx.outputs[0].as<T>());
      return LaunchStatus("MeanSquaredError total");
    });
  }
};

template <typename T>
__global__ void MseGradKernel(const T* __restrict__ dloss, const T* __restrict__ pred, const T* __restrict__ target,
                              int64_t n, T* __restrict__ dpred) {
  // As the CPU: (2 * dLoss) / numel in f32.
  const float scale = 2.f * ToAcc(dloss[0]) / static_cast<float>(n);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    dpred[i] = FromAcc<T>(scale * (ToAcc(pred[i]) - ToAcc(target[i])));
  }
}

// Inputs (dLoss, pred, target).
template <typename T>
struct MseGradFactory {
  static absl::StatusOr<std::unique_ptr<Kernel>> Create(const Node& node, Backend& backend) {
    const int64_t n = NumElements(node.inputs[1]->shape);
    return MakeCudaKernel(backend, [n](KernelContext& ctx, cudaStream_t stream) -> absl::Status {
      if (n == 0) return absl::OkStatus();
      MseGradKernel<T><<<BlocksFor(n), kThreadsPerBlock, 0, stream>>>(ctx.inputs[0].as<T>(), ctx.inputs[1].as<T>(),
                                                                      ctx.inputs[2].as<T>(), n, ctx.outputs[0].as<T>());
      return LaunchStatus("MeanSquaredErrorGrad");
    });
  }
};

}  // namespace

void RegisterCudaSoftmaxLossKernels(KernelRegistry& r) {
  RegisterCudaFloatKernels<SoftmaxFwd>(r, "Softmax");
  RegisterCudaFloatKernels<LogSoftmaxFwd>(r, "LogSoftmax");
  RegisterCudaFloatKernels<SoftmaxBwd>(r, "SoftmaxGrad");
  RegisterCudaFloatKernels<LogSoftmaxBwd>(r, "LogSoftmaxGrad");
  RegisterCudaFloatKernels<SceLossKernel>(r, "SoftmaxCrossEntropyLoss");
  RegisterCudaFloatKernels<SceGradKernel>(r, "SoftmaxCrossEntropyGrad");
  RegisterCudaFloatKernels<MseKernel>(r, "MeanSquaredError");
  RegisterCudaFloatKernels<MseGradFactory>(r, "MeanSquaredErrorGrad");
}

}  // namespace mpc::cuda
