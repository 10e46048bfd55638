// The loss and evaluation-metric fields of the spec: validation errors for bad
// loss.label_smoothing and eval.top_k (in the spec alone, and top_k against the model's
// classes when the engine is created), and their way into attach-loss's options.
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/compile_options.h"
#include "engine/mpc.h"
#include "engine/spec.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr char kBase[] = R"(
  model: "m.onnx"
  train_data { synthetic { feature_shape: 4 } }
  batch_size: 8
  steps: 1
)";

// The parse error for kBase + `extra`, or "" when it parses.
std::string Error(const std::string& extra) {
  auto spec = ParseTrainSpec(std::string(kBase) + extra, "test.spec");
  return spec.ok() ? "" : std::string(spec.status().message());
}

TEST(LossSpecTest, LabelSmoothingMustBeInZeroToOne) {
  EXPECT_EQ(Error("loss { label_smoothing: 0 }"), "");
  EXPECT_EQ(Error("loss { label_smoothing: 0.1 }"), "");
  EXPECT_EQ(Error("loss { label_smoothing: 0.999 }"), "");
  for (const char* bad : {"-0.1", "1", "1.5", "nan", "inf"}) {
    const std::string e = Error(absl::StrCat("loss { label_smoothing: ", bad, " }"));
    EXPECT_NE(e.find("test.spec: spec field loss.label_smoothing:"), std::string::npos) << bad << ": " << e;
    EXPECT_NE(e.find("must be in [0, 1)"), std::string::npos) << bad << ": " << e;
  }
}

TEST(LossSpecTest, LabelSmoothingNeedsSoftmaxCrossEntropy) {
  for (const char* type : {"MEAN_SQUARED_ERROR", "BINARY_CROSS_ENTROPY_WITH_LOGITS"}) {
    const std::string e = Error(absl::StrCat("loss { type: ", type, " label_smoothing: 0.1 }"));
    EXPECT_NE(e.find("loss.label_smoothing: applies only to loss.type SOFTMAX_CROSS_ENTROPY"), std::string::npos)
        << type << ": " << e;
  }
}

TEST(LossSpecTest, TopKMustBeNonNegativeAndNeedsSoftmaxCrossEntropy) {
  EXPECT_EQ(Error("eval { top_k: 0 }"), "");
  EXPECT_EQ(Error("eval { top_k: 5 }"), "");
  std::string e = Error("eval { top_k: -1 }");
  EXPECT_NE(e.find("spec field eval.top_k: -1 must be >= 0"), std::string::npos) << e;
  e = Error("loss { type: BINARY_CROSS_ENTROPY_WITH_LOGITS } eval { top_k: 3 }");
  EXPECT_NE(e.find("eval.top_k: top-k accuracy needs loss.type SOFTMAX_CROSS_ENTROPY"), std::string::npos) << e;
}

TEST(LossSpecTest, TopKAboveTheModelsClassesFailsAtCreate) {
  // The golden loss model has 6 classes.
  const std::string golden = testing::SourcePath("tests/golden/losses/");
  const std::string dir = testing::MakeTempDir("loss_spec_top_k");
  auto spec_with_top_k = [&](int k) {
    const std::string path = absl::StrCat(dir, "/top", k, ".spec");
    std::ofstream(path) << "model: \"" << golden << "model.onnx\"\nfeatures_input: \"x\"\n"
                        << "loss { output: \"logits\" }\n"
                        << "train_data { npy { features: \"" << golden << "features.npy\" labels: \"" << golden
                        << "labels.npy\" } }\nbatch_size: 8\nsteps: 1\neval { top_k: " << k << " }\n";
    return path;
  };
  EngineOptions options;
  options.device = "cpu";
  options.spec_path = spec_with_top_k(7);
  auto bad = Engine::Create(options);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("spec field eval.top_k: 7 is more than the model's 6 classes"),
            std::string::npos)
      << bad.status();
  options.spec_path = spec_with_top_k(6);
  auto good = Engine::Create(options);
  ASSERT_TRUE(good.ok()) << good.status();
  auto eval = (*good)->Evaluate();
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->top_k, 6);
  EXPECT_EQ(eval->top_k_accuracy, 1.0);  // every label is among all 6 classes
  EXPECT_EQ(eval->class_f1.size(), 6u);
  EXPECT_GE(eval->macro_f1, 0.0);
  EXPECT_LT(eval->perplexity, 0);  // one class per example: no perplexity
}

TEST(LossSpecTest, LossFieldsReachAttachLoss) {
  auto spec = ParseTrainSpec(std::string(kBase) + "loss { type: BINARY_CROSS_ENTROPY_WITH_LOGITS }", "t");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(CompileOptionsFromSpec(*spec).loss.kind, AttachLossOptions::Kind::kBinaryCrossEntropyWithLogits);
  spec = ParseTrainSpec(std::string(kBase) + "loss { label_smoothing: 0.25 }", "t");
  ASSERT_TRUE(spec.ok()) << spec.status();
  const CompileOptions o = CompileOptionsFromSpec(*spec);
  EXPECT_EQ(o.loss.kind, AttachLossOptions::Kind::kSoftmaxCrossEntropy);
  EXPECT_EQ(o.loss.label_smoothing, 0.25f);
}

}  // namespace
}  // namespace mpc
