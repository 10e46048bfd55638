// Evaluation: the evaluation program over the data in batches (Engine::Impl::RunEval),
// scored on the host (EvalScorer, see evaluation.h).
#include "engine/evaluation.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/status_macros.h"
#include "engine/engine_impl.h"

namespace mpc {

void EvalScorer::AddClassification(const Tensor& logits, int64_t width, int64_t row, int64_t label) {
  double mx = -INFINITY;
  int64_t arg = 0;
  for (int64_t j = 0; j < width; ++j) {
    const double v = logits.GetAsDouble(row * width + j);
    if (v > mx) {
      mx = v;
      arg = j;
    }
  }
  // Top-k with ties in the label's favour: the label counts when fewer than k logits are
  // strictly greater than its own.
  const double label_logit = logits.GetAsDouble(row * width + label);
  double sum = 0, logit_sum = 0;
  int64_t greater = 0;
  for (int64_t j = 0; j < width; ++j) {
    const double v = logits.GetAsDouble(row * width + j);
    sum += std::exp(v - mx);
    logit_sum += v;
    greater += v > label_logit;
  }
  const double log_sum_exp = mx + std::log(sum);
  const double ce = log_sum_exp - label_logit;
  // Smoothed: (1-eps)*CE + eps*mean_c(logsumexp - logit_c), PyTorch's label_smoothing.
  const double eps = options_.label_smoothing;
  loss_sum_ += eps == 0 ? ce : (1 - eps) * ce + eps * (log_sum_exp - logit_sum / width);
  plain_ce_sum_ += ce;
  correct_ += arg == label;
  top_k_correct_ += greater < options_.top_k;
  if (static_cast<int64_t>(actual_.size()) < width) {
    true_positives_.resize(width);
    predicted_.resize(width);
    actual_.resize(width);
  }
  ++predicted_[arg];
  ++actual_[label];
  true_positives_[arg] += arg == label;
}

void EvalScorer::Add(const Tensor& given, int64_t batch, int64_t valid, const Tensor& labels, int64_t first) {
  const int64_t positions = options_.positions;
  const int64_t width = given.num_elements() / (batch * positions);
  Tensor moved;
  if (options_.classes_first) {  // [batch, classes, positions] -> [batch, positions, classes]
    moved = Tensor(DType::kF32, {batch, positions, width});
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t c = 0; c < width; ++c) {
        for (int64_t p = 0; p < positions; ++p) {
          moved.data<float>()[(n * positions + p) * width + c] =
              static_cast<float>(given.GetAsDouble((n * width + c) * positions + p));
        }
      }
    }
  }
  const Tensor& logits = options_.classes_first ? moved : given;
  for (int64_t i = 0; i < valid * positions; ++i) {
    if (options_.loss == Loss::kSoftmaxCrossEntropy) {
      AddClassification(logits, width, i, labels.data<int64_t>()[first * positions + i]);
      continue;
    }
    const float* target = labels.data<float>() + (first + i) * width;
    for (int64_t j = 0; j < width; ++j) {
      const double x = logits.GetAsDouble(i * width + j), y = target[j];
      if (options_.loss == Loss::kMeanSquaredError) {
        loss_sum_ += (x - y) * (x - y) / width;
      } else {
        // PyTorch's BCEWithLogitsLoss, the stable form; a hit is the logit on the label's side of 0.
        loss_sum_ += (std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)))) / width;
        correct_ += (x > 0) == (y > 0.5);
        ++elements_;
      }
    }
  }
}

double EvalScorer::accuracy(int64_t examples) const {
  switch (options_.loss) {
    case Loss::kSoftmaxCrossEntropy:
      return static_cast<double>(correct_) / (examples * options_.positions);
    case Loss::kBinaryCrossEntropyWithLogits:
      return elements_ ? static_cast<double>(correct_) / elements_ : 0.0;
    case Loss::kMeanSquaredError:
      break;
  }
  return 0.0;
}

EvalMetrics EvalScorer::Metrics(int64_t examples) const {
  EvalMetrics out;
  out.examples = examples;
  out.loss = mean_loss(examples);
  out.accuracy = accuracy(examples);
  if (options_.loss != Loss::kSoftmaxCrossEntropy) return out;
  const double rows = static_cast<double>(examples * options_.positions);
  if (options_.top_k > 1) {
    out.top_k = options_.top_k;
    out.top_k_accuracy = top_k_correct_ / rows;
  }
  if (options_.language_model) out.perplexity = std::exp(plain_ce_sum_ / rows);
  // scikit-learn's precision_recall_fscore_support with zero_division=0: a class never
  // predicted has precision 0, a class never labelled recall 0, and F1 = 2*TP/(2*TP+FP+FN)
  // (0 when that is 0/0). The arrays cover every class of the logits; the macro F1 is the
  // unweighted mean over the classes that occur in the labels or the predictions, as
  // sklearn's f1_score(average='macro') does by default (a class in neither is left out).
  const size_t classes = actual_.size();
  out.class_precision.assign(classes, 0.0);
  out.class_recall.assign(classes, 0.0);
  out.class_f1.assign(classes, 0.0);
  double f1_sum = 0;
  int64_t present = 0;
  for (size_t c = 0; c < classes; ++c) {
    const double tp = static_cast<double>(true_positives_[c]);
    if (predicted_[c] > 0) out.class_precision[c] = tp / predicted_[c];
    if (actual_[c] > 0) out.class_recall[c] = tp / actual_[c];
    const int64_t denominator = predicted_[c] + actual_[c];  // 2*TP + FP + FN
    if (denominator > 0) {
      out.class_f1[c] = 2 * tp / denominator;
      f1_sum += out.class_f1[c];
      ++present;
    }
  }
  out.macro_f1 = present ? f1_sum / present : 0.0;
  return out;
}

EvalScorer::Options Engine::Impl::ScorerOptions(const Shape& label_row) const {
  // Class labels: one per example, or one per position (a language model's tokens);
  // loss and accuracy are means over every labelled position.
  const LossSpec::Type type = spec.loss().type();
  const bool classify = type == LossSpec::SOFTMAX_CROSS_ENTROPY;
  EvalScorer::Options so;
  so.loss = classify                               ? EvalScorer::Loss::kSoftmaxCrossEntropy
            : type == LossSpec::MEAN_SQUARED_ERROR ? EvalScorer::Loss::kMeanSquaredError
                                                   : EvalScorer::Loss::kBinaryCrossEntropyWithLogits;
  so.positions = classify ? NumElements(label_row) : 1;
  so.label_smoothing = spec.loss().label_smoothing();
  so.top_k = spec.eval().top_k();
  so.language_model = classify && !label_row.empty();
  const Shape& ls = train_program.logits_shape;
  so.classes_first = classify && !label_row.empty() && ls.size() == label_row.size() + 2 &&
                     Shape(ls.begin() + 2, ls.end()) == label_row;
  return so;
}

absl::StatusOr<EvalMetrics> Engine::Impl::RunEval(bool averaged_weights) {
  // The averaged weights run in their own evaluation program, whose parameters are the
  // training program's `<name>.ema` state (engine_setup.cc).
  Executor* exec = averaged_weights ? ema_eval_exec.get() : eval_exec.get();
  if (!exec) {
    return absl::FailedPreconditionError("no averaged weights to evaluate; add ema { decay: 0.999 evaluate: true }");
  }
  if (!has_eval_data && !has_train_data) {
    return absl::FailedPreconditionError(
        "Evaluate(): the spec has no eval.data or train_data to evaluate on; pass the batches, Evaluate(batches)");
  }
  const Dataset& data = has_eval_data ? eval_data : train_data;
  const int64_t n = data.size(), b = eval_batch_size;
  const int64_t row_elems = NumElements(RowShape(data.features));
  const size_t row_bytes = static_cast<size_t>(row_elems) * DTypeSize(data.features.dtype());
  Tensor features(data.features.dtype(), {b, row_elems});
  // The model's other inputs (npy.inputs), batched row for row with the features.
  std::vector<Tensor> more;
  for (const NamedArray& array : data.more_inputs) {
    more.emplace_back(array.values.dtype(), Shape{b, NumElements(RowShape(array.values))});
  }
  EvalScorer scorer(ScorerOptions(RowShape(data.labels)));
  for (int64_t start = 0; start < n; start += b) {
    const int64_t valid = std::min(b, n - start);
    // A last partial batch is padded with its first row; only `valid` rows count.
    for (int64_t i = 0; i < b; ++i) {
      const int64_t src = start + (i < valid ? i : 0);
      std::memcpy(static_cast<char*>(features.raw()) + i * row_bytes,
                  static_cast<const char*>(data.features.raw()) + src * row_bytes, row_bytes);
      for (size_t k = 0; k < more.size(); ++k) {
        const size_t bytes = more[k].bytes() / static_cast<size_t>(b);
        std::memcpy(static_cast<char*>(more[k].raw()) + i * bytes,
                    static_cast<const char*>(data.more_inputs[k].values.raw()) + src * bytes, bytes);
      }
    }
    MPC_RETURN_IF_ERROR(exec->SetInput(eval_program.features_input, features));
    for (size_t k = 0; k < more.size(); ++k) MPC_RETURN_IF_ERROR(exec->SetInput(data.more_inputs[k].input, more[k]));
    MPC_RETURN_IF_ERROR(exec->Run(spec.seed(), step));
    MPC_ASSIGN_OR_RETURN(Tensor logits, exec->Fetch(eval_program.logits_output));
    scorer.Add(logits, b, valid, data.labels, start);
  }
  EvalMetrics out = scorer.Metrics(n);
  out.averaged_weights = averaged_weights;
  out.step = step;
  out.epoch = last_epoch;
  return out;
}

}  // namespace mpc
