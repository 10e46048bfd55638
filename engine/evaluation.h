// Scoring an evaluation program's logits on the host: the loss the spec trains with and,
// for classification, the accuracy and the classification metrics (top-k accuracy, per-class
// precision/recall/F1, macro F1, a language model's perplexity), summed over batches and
// finished at the end. The evaluation program computes only the logits
// (passes/pipelines.h), so everything is computed here in double precision, once per
// labelled row.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/mpc.h"
#include "graph/tensor.h"

namespace mpc {

class EvalScorer {
 public:
  enum class Loss { kSoftmaxCrossEntropy, kMeanSquaredError, kBinaryCrossEntropyWithLogits };
  struct Options {
    Loss loss = Loss::kSoftmaxCrossEntropy;
    // Labelled rows per example (1, or T for one class per position).
    int64_t positions = 1;
    // Softmax cross-entropy: the loss is the smoothed one the spec trains with (the
    // perplexity is not: it is exp of the plain cross-entropy).
    double label_smoothing = 0;
    int top_k = 0;                // top-k accuracy when > 1
    bool language_model = false;  // one class per position: report the perplexity
    // The logits put their classes on axis 1 ([batch, classes, H, W], a segmentation head)
    // instead of last: Add moves them last before scoring.
    bool classes_first = false;
  };

  explicit EvalScorer(Options options) : options_(options) {}
  // The loss and, when classifying, the accuracy only (the metrics of one-class-per-row data).
  EvalScorer(bool classify, int64_t positions)
      : EvalScorer(Options{classify ? Loss::kSoftmaxCrossEntropy : Loss::kMeanSquaredError, positions}) {}

  // Adds the first `valid` examples of a batch: `logits` holds batch * positions rows;
  // `labels` are the dataset's labels, of which example `first` is the batch's first
  // (i64 class indices when classifying, f32 targets otherwise).
  void Add(const Tensor& logits, int64_t batch, int64_t valid, const Tensor& labels, int64_t first);

  double mean_loss(int64_t examples) const { return loss_sum_ / (examples * options_.positions); }
  double accuracy(int64_t examples) const;
  // Every metric that applies, over the `examples` added (step and epoch left 0).
  EvalMetrics Metrics(int64_t examples) const;

 private:
  void AddClassification(const Tensor& logits, int64_t width, int64_t row, int64_t label);

  Options options_;
  double loss_sum_ = 0;
  double plain_ce_sum_ = 0;  // the unsmoothed cross-entropy, for the perplexity
  int64_t correct_ = 0;      // argmax hits; binary cross-entropy: elements on the right side of 0
  int64_t elements_ = 0;     // binary cross-entropy: elements scored
  int64_t top_k_correct_ = 0;
  // Per class (grown to the logits' width): true positives, predictions, labels.
  std::vector<int64_t> true_positives_, predicted_, actual_;
};

}  // namespace mpc
