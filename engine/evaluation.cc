// Evaluation: the evaluation program over the data in batches (Engine::Impl::RunEval),
// scored on the host (EvalScorer, see evaluation.h).
#include "engine/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "engine/engine_impl.h"

namespace mpc {

void EvalScorer::Add(const Tensor& logits, int64_t batch, int64_t valid, const Tensor& labels, int64_t first) {
  const int64_t width = logits.num_elements() / (batch * positions_);
  for (int64_t i = 0; i < valid * positions_; ++i) {
    if (classify_) {
      const int64_t label = labels.data<int64_t>()[first * positions_ + i];
      double mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t j = 0; j < width; ++j) {
        const double v = logits.GetAsDouble(i * width + j);
        if (v > mx) {
          mx = v;
          arg = j;
        }
      }
      double sum = 0;
      for (int64_t j = 0; j < width; ++j) sum += std::exp(logits.GetAsDouble(i * width + j) - mx);
      loss_sum_ += mx + std::log(sum) - logits.GetAsDouble(i * width + label);
      correct_ += arg == label;
    } else {
      const float* target = labels.data<float>() + (first + i) * width;
      for (int64_t j = 0; j < width; ++j) {
        const double d = logits.GetAsDouble(i * width + j) - target[j];
        loss_sum_ += d * d / width;
      }
    }
  }
}

absl::StatusOr<EvalMetrics> Engine::Impl::RunEval() {
  const Dataset& data = has_eval_data ? eval_data : train_data;
  const int64_t n = data.size(), b = eval_batch_size;
  const bool classify = spec.loss().type() == LossSpec::SOFTMAX_CROSS_ENTROPY;
  const int64_t row_elems = NumElements(RowShape(data.features));
  const size_t row_bytes = static_cast<size_t>(row_elems) * DTypeSize(data.features.dtype());
  Tensor features(data.features.dtype(), {b, row_elems});
  // Class labels: one per example, or one per position (a language model's tokens);
  // loss and accuracy are means over every labelled position.
  EvalScorer scorer(classify, classify ? NumElements(RowShape(data.labels)) : 1);
  for (int64_t start = 0; start < n; start += b) {
    const int64_t valid = std::min(b, n - start);
    // A last partial batch is padded with its first row; only `valid` rows count.
    for (int64_t i = 0; i < b; ++i) {
      const int64_t src = start + (i < valid ? i : 0);
      std::memcpy(static_cast<char*>(features.raw()) + i * row_bytes,
                  static_cast<const char*>(data.features.raw()) + src * row_bytes, row_bytes);
    }
    MPC_RETURN_IF_ERROR(eval_exec->SetInput(eval_program.features_input, features));
    MPC_RETURN_IF_ERROR(eval_exec->Run(spec.seed(), step));
    MPC_ASSIGN_OR_RETURN(Tensor logits, eval_exec->Fetch(eval_program.logits_output));
    scorer.Add(logits, b, valid, data.labels, start);
  }
  EvalMetrics out;
  out.step = step;
  out.epoch = last_epoch;
  out.examples = n;
  out.loss = scorer.mean_loss(n);
  out.accuracy = scorer.accuracy(n);
  return out;
}

}  // namespace mpc
