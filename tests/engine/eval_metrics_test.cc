// EvalScorer's metrics (loss with label smoothing, accuracy, top-k accuracy with ties,
// per-class precision/recall/F1, macro F1, perplexity, binary cross-entropy) on fresh
// random logits and labels, fed in batches with a padded last batch, against the same
// definitions computed independently in float64 NumPy (tests/golden/eval_metrics_reference.py)
// on the same numbers, to 1e-12. The data has a class that is labelled but never predicted
// and one that occurs in neither, and logits on a coarse grid so top-k and argmax tie.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/evaluation.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using Reference = std::map<std::string, std::vector<double>>;

// Runs the reference script on `input` (its format is in the script's docstring).
Reference RunReference(const std::string& name, const std::string& input) {
  const std::string dir = testing::MakeTempDir(name);
  const std::string in = dir + "/in.txt", out = dir + "/out.txt";
  std::ofstream(in) << input;
  const std::string command =
      absl::StrCat(testing::Python(), " ", testing::SourcePath("tests/golden/eval_metrics_reference.py"), " ", in, " ",
                   out, " > ", dir, "/log.txt 2>&1");
  EXPECT_EQ(std::system(command.c_str()), 0) << command << " failed; see " << dir << "/log.txt";
  Reference ref;
  std::ifstream f(out);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream s(line);
    std::string key;
    s >> key;
    double v;
    while (s >> v) ref[key].push_back(v);
  }
  return ref;
}

void ExpectClose(const std::string& what, double got, double want) {
  EXPECT_NEAR(got, want, 1e-12 * std::max(1.0, std::abs(want))) << what;
}

void ExpectClose(const std::string& what, const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) ExpectClose(absl::StrCat(what, "[", i, "]"), got[i], want[i]);
}

uint64_t FreshSeed() { return std::random_device{}(); }

struct ClassificationCase {
  int64_t examples, positions, batch;
  int top_k;
  double smoothing;
};

// Logits on a 0.5 grid in [-3, 3] (ties), class 2 labelled but never predicted, class 6
// in neither (both have logits far below the rest).
void CheckClassification(const ClassificationCase& c, uint64_t seed) {
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  constexpr int64_t kClasses = 7;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(-6, 6), label_dist(0, 5);
  const int64_t rows = c.examples * c.positions;
  Shape label_shape{c.examples};
  if (c.positions > 1) label_shape.push_back(c.positions);
  Tensor labels(DType::kI64, label_shape);
  std::vector<float> all_logits(rows * kClasses);
  for (int64_t i = 0; i < rows; ++i) {
    labels.data<int64_t>()[i] = i == 0 ? 2 : label_dist(rng);
    for (int64_t j = 0; j < kClasses; ++j) {
      all_logits[i * kClasses + j] = j == 2 || j == 6 ? -10.0f - j : 0.5f * grid(rng);
    }
  }
  EvalScorer::Options o;
  o.positions = c.positions;
  o.top_k = c.top_k;
  o.label_smoothing = c.smoothing;
  o.language_model = c.positions > 1;
  EvalScorer scorer(o);
  for (int64_t start = 0; start < c.examples; start += c.batch) {
    const int64_t valid = std::min(c.batch, c.examples - start);
    Tensor logits(DType::kF32, {c.batch * c.positions, kClasses});
    for (int64_t i = 0; i < c.batch * c.positions * kClasses; ++i) {
      // Rows past `valid` are padding: values that would change every metric if counted.
      const int64_t src = start * c.positions * kClasses + i;
      logits.data<float>()[i] = i < valid * c.positions * kClasses ? all_logits[src] : 100.0f;
    }
    scorer.Add(logits, c.batch, valid, labels, start);
  }
  const EvalMetrics m = scorer.Metrics(c.examples);

  std::string input = absl::StrFormat("softmax %d %d %.17g %d\n", kClasses, c.top_k, c.smoothing, c.positions > 1);
  for (int64_t i = 0; i < rows; ++i) {
    absl::StrAppend(&input, labels.data<int64_t>()[i]);
    for (int64_t j = 0; j < kClasses; ++j) absl::StrAppendFormat(&input, " %.17g", all_logits[i * kClasses + j]);
    input += "\n";
  }
  Reference ref = RunReference("eval_metrics_softmax", input);
  ASSERT_TRUE(ref.count("loss")) << "the reference wrote nothing";
  EXPECT_EQ(m.examples, c.examples);
  ExpectClose("loss", m.loss, ref["loss"][0]);
  ExpectClose("accuracy", m.accuracy, ref["accuracy"][0]);
  ExpectClose("precision", m.class_precision, ref["precision"]);
  ExpectClose("recall", m.class_recall, ref["recall"]);
  ExpectClose("f1", m.class_f1, ref["f1"]);
  ExpectClose("macro_f1", m.macro_f1, ref["macro_f1"][0]);
  // The data's point: class 2 is labelled but never predicted (precision 0 by convention).
  EXPECT_EQ(m.class_precision[2], 0.0);
  EXPECT_EQ(m.class_f1[6], 0.0);
  if (c.top_k > 1) {
    EXPECT_EQ(m.top_k, c.top_k);
    ExpectClose("top_k_accuracy", m.top_k_accuracy, ref["top_k_accuracy"][0]);
  } else {
    EXPECT_LT(m.top_k_accuracy, 0);
  }
  if (c.positions > 1) {
    ExpectClose("perplexity", m.perplexity, ref["perplexity"][0]);
  } else {
    EXPECT_LT(m.perplexity, 0);
    EXPECT_FALSE(ref.count("perplexity"));
  }
}

TEST(EvalMetricsTest, OneClassPerExampleMatchesTheReference) {
  CheckClassification({/*examples=*/45, /*positions=*/1, /*batch=*/8, /*top_k=*/3, /*smoothing=*/0}, FreshSeed());
}

TEST(EvalMetricsTest, LanguageModelWithLabelSmoothingMatchesTheReference) {
  CheckClassification({/*examples=*/10, /*positions=*/4, /*batch=*/4, /*top_k=*/2, /*smoothing=*/0.1}, FreshSeed());
}

TEST(EvalMetricsTest, NoTopKWhenOff) {
  CheckClassification({/*examples=*/9, /*positions=*/1, /*batch=*/9, /*top_k=*/0, /*smoothing=*/0}, FreshSeed());
}

TEST(EvalMetricsTest, BinaryCrossEntropyMatchesTheReference) {
  const uint64_t seed = FreshSeed();
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  constexpr int64_t kExamples = 13, kWidth = 6, kBatch = 4;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> logit(-30, 30), target(0, 1);
  Tensor targets(DType::kF32, {kExamples, kWidth});
  std::vector<float> all_logits(kExamples * kWidth);
  for (int64_t i = 0; i < kExamples * kWidth; ++i) {
    // Some 0/1 targets and some soft ones; a few logits exactly 0 (the decision boundary).
    const float t = target(rng);
    targets.data<float>()[i] = i % 3 == 0 ? t : (t > 0.5f ? 1.0f : 0.0f);
    all_logits[i] = i % 11 == 0 ? 0.0f : logit(rng);
  }
  EvalScorer::Options o;
  o.loss = EvalScorer::Loss::kBinaryCrossEntropyWithLogits;
  EvalScorer scorer(o);
  for (int64_t start = 0; start < kExamples; start += kBatch) {
    const int64_t valid = std::min(kBatch, kExamples - start);
    Tensor logits(DType::kF32, {kBatch, kWidth});
    for (int64_t i = 0; i < kBatch * kWidth; ++i) {
      logits.data<float>()[i] = i < valid * kWidth ? all_logits[start * kWidth + i] : -100.0f;
    }
    scorer.Add(logits, kBatch, valid, targets, start);
  }
  const EvalMetrics m = scorer.Metrics(kExamples);
  std::string input = absl::StrFormat("bce %d\n", kWidth);
  for (int64_t i = 0; i < kExamples; ++i) {
    for (int64_t j = 0; j < kWidth; ++j) absl::StrAppendFormat(&input, "%.17g ", targets.data<float>()[i * kWidth + j]);
    for (int64_t j = 0; j < kWidth; ++j) absl::StrAppendFormat(&input, " %.17g", all_logits[i * kWidth + j]);
    input += "\n";
  }
  Reference ref = RunReference("eval_metrics_bce", input);
  ASSERT_TRUE(ref.count("loss")) << "the reference wrote nothing";
  ExpectClose("loss", m.loss, ref["loss"][0]);
  ExpectClose("accuracy", m.accuracy, ref["accuracy"][0]);
  // Classification metrics do not apply.
  EXPECT_LT(m.macro_f1, 0);
  EXPECT_TRUE(m.class_precision.empty());
  EXPECT_LT(m.perplexity, 0);
}

// Segmentation logits [batch, classes, H, W]: the same metrics as the same values laid out
// classes-last, [batch, H, W, classes].
TEST(EvalMetricsTest, ClassesOnAxisOneScoreAsClassesLast) {
  const int64_t batch = 2, classes = 3, positions = 4;  // H x W = 2 x 2
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  Tensor first(DType::kF32, {batch, classes, 2, 2}), last(DType::kF32, {batch, 2, 2, classes});
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t c = 0; c < classes; ++c) {
      for (int64_t p = 0; p < positions; ++p) {
        const float v = normal(rng);
        first.data<float>()[(n * classes + c) * positions + p] = v;
        last.data<float>()[(n * positions + p) * classes + c] = v;
      }
    }
  }
  Tensor labels(DType::kI64, {batch, 2, 2});
  for (int64_t i = 0; i < labels.num_elements(); ++i) labels.data<int64_t>()[i] = i % classes;
  EvalScorer::Options o;
  o.positions = positions;
  o.language_model = true;
  EvalScorer plain(o);
  plain.Add(last, batch, batch, labels, 0);
  o.classes_first = true;
  EvalScorer moved(o);
  moved.Add(first, batch, batch, labels, 0);
  const EvalMetrics a = plain.Metrics(batch), b = moved.Metrics(batch);
  EXPECT_DOUBLE_EQ(a.loss, b.loss);
  EXPECT_DOUBLE_EQ(a.accuracy, b.accuracy);
  EXPECT_GT(a.loss, 0);
}

}  // namespace
}  // namespace mpc
