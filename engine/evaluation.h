// Scoring an evaluation program's logits on the host: the loss the spec trains with and,
// for classification, the accuracy, summed over batches and averaged at the end. The
// evaluation program computes only the logits (passes/pipelines.h), so the loss is
// computed here in double precision, once per labelled row.
#pragma once

#include <cstdint>

#include "graph/tensor.h"

namespace mpc {

class EvalScorer {
 public:
  // `positions`: labelled rows per example (1, or T for one class per position).
  EvalScorer(bool classify, int64_t positions) : classify_(classify), positions_(positions) {}

  // Adds the first `valid` examples of a batch: `logits` holds batch * positions rows;
  // `labels` are the dataset's labels, of which example `first` is the batch's first
  // (i64 class indices when classifying, f32 targets otherwise).
  void Add(const Tensor& logits, int64_t batch, int64_t valid, const Tensor& labels, int64_t first);

  double mean_loss(int64_t examples) const { return loss_sum_ / (examples * positions_); }
  double accuracy(int64_t examples) const {
    return classify_ ? static_cast<double>(correct_) / (examples * positions_) : 0.0;
  }

 private:
  bool classify_;
  int64_t positions_;
  double loss_sum_ = 0;
  int64_t correct_ = 0;
};

}  // namespace mpc
