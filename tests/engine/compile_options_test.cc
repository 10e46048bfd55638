// The one place a TrainSpec becomes the passes' options (engine/compile_options.h): every
// field that configures a pass arrives in that pass's options, and the command line's
// overrides (engine/spec.h) land in the spec first.
#include "engine/compile_options.h"

#include "engine/spec.h"
#include "gtest/gtest.h"

namespace mpc {
namespace {

TrainSpec Parse(const std::string& text) {
  auto spec = ParseTrainSpec(text, "test.spec");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : TrainSpec();
}

constexpr char kBase[] = R"(
  model: "m.onnx"
  train_data { synthetic { feature_shape: 4 } }
  batch_size: 8
  steps: 1
)";

TEST(CompileOptionsTest, EveryPassGetsItsFieldsFromTheSpec) {
  const TrainSpec spec = Parse(std::string(kBase) + R"(
    labels_input: "y"
    loss { type: MEAN_SQUARED_ERROR }
    precision {
      compute: FP8
      level: TENSOR_CORES_ONLY
      add_deny: "Tanh"
      remove: "Gelu"
      node_override { pattern: "fc.*" dtype: "f32" }
    }
    padding { multiple: 16 }
    fp8 { format: E4M3 margin: 2 amax_history_len: 16 amax_compute_algo: MOST_RECENT amax_floor: 0.5
          exclude: "head" include_first_last: true fallback_to_bf16: true }
    loss_scaling { mode: STATIC static_scale: 128 growth_interval: 7 }
    optimizer { adamw { beta1: 0.8 beta2: 0.95 eps: 1e-6 weight_decay: 0.1 } clip_grad_norm: 1.5 }
    debug { inject_nonfinite { step: 3 parameter: "w" value: "nan" } }
  )");
  const CompileOptions o = CompileOptionsFromSpec(spec);
  EXPECT_EQ(o.loss.kind, AttachLossOptions::Kind::kMeanSquaredError);
  EXPECT_EQ(o.loss.labels, "y");
  EXPECT_EQ(o.loss.batch_size, 8);
  EXPECT_EQ(o.autocast.precision, Precision::kFP8);
  EXPECT_TRUE(o.autocast.tensor_cores_only);
  EXPECT_EQ(o.autocast.add_deny, std::vector<std::string>{"Tanh"});
  EXPECT_EQ(o.autocast.remove, std::vector<std::string>{"Gelu"});
  ASSERT_EQ(o.autocast.node_overrides.size(), 1u);
  EXPECT_EQ(o.autocast.node_overrides[0].pattern, "fc.*");
  EXPECT_EQ(o.autocast.node_overrides[0].dtype, "f32");
  EXPECT_EQ(o.pad_dims.multiple, 16);
  EXPECT_TRUE(o.fp8.enabled);
  EXPECT_TRUE(o.fp8.e4m3_gradients);
  EXPECT_EQ(o.fp8.margin, 2);
  EXPECT_EQ(o.fp8.amax_history_len, 16);
  EXPECT_TRUE(o.fp8.most_recent);
  EXPECT_FLOAT_EQ(o.fp8.amax_floor, 0.5f);
  EXPECT_EQ(o.fp8.exclude, std::vector<std::string>{"head"});
  EXPECT_TRUE(o.fp8.include_first_last);
  EXPECT_TRUE(o.fp8.fallback_to_bf16);
  EXPECT_EQ(o.loss_scaling.mode, LossScalingOptions::Mode::kStatic);
  EXPECT_FLOAT_EQ(o.loss_scaling.static_scale, 128);
  EXPECT_EQ(o.loss_scaling.growth_interval, 7);
  EXPECT_FLOAT_EQ(o.loss_scaling.clip_grad_norm, 1.5f);
  ASSERT_EQ(o.loss_scaling.inject_nonfinite.size(), 1u);
  EXPECT_EQ(o.loss_scaling.inject_nonfinite[0].step, 3);
  EXPECT_EQ(o.loss_scaling.inject_nonfinite[0].parameter, "w");
  EXPECT_EQ(o.loss_scaling.inject_nonfinite[0].value, "nan");
  EXPECT_EQ(o.optimizer.kind, OptimizerOptions::Kind::kAdamW);
  EXPECT_FLOAT_EQ(o.optimizer.beta1, 0.8f);
  EXPECT_FLOAT_EQ(o.optimizer.beta2, 0.95f);
  EXPECT_FLOAT_EQ(o.optimizer.eps, 1e-6f);
  EXPECT_FLOAT_EQ(o.optimizer.weight_decay, 0.1f);
}

TEST(CompileOptionsTest, DefaultsFollowTheSpecsDefaults) {
  const CompileOptions o = CompileOptionsFromSpec(Parse(kBase));
  EXPECT_EQ(o.loss.kind, AttachLossOptions::Kind::kSoftmaxCrossEntropy);
  EXPECT_EQ(o.loss.labels, "labels");
  EXPECT_EQ(o.autocast.precision, Precision::kF32);
  EXPECT_FALSE(o.fp8.enabled);
  EXPECT_EQ(o.fp8.amax_history_len, 1024);
  EXPECT_EQ(o.loss_scaling.mode, LossScalingOptions::Mode::kAuto);  // resolved against autocast's dtype
  EXPECT_FLOAT_EQ(o.loss_scaling.init_scale, 65536);
  EXPECT_EQ(o.optimizer.kind, OptimizerOptions::Kind::kSgd);  // no optimizer given: SGD
}

TEST(CompileOptionsTest, CommandLineOverridesLandInTheSpec) {
  TrainSpec spec = Parse(kBase);
  ASSERT_TRUE(ApplySpecOverrides({"bf16", "static:512", 8}, &spec).ok());
  const CompileOptions o = CompileOptionsFromSpec(spec);
  EXPECT_EQ(o.autocast.precision, Precision::kBF16);
  EXPECT_EQ(o.loss_scaling.mode, LossScalingOptions::Mode::kStatic);
  EXPECT_FLOAT_EQ(o.loss_scaling.static_scale, 512);
  EXPECT_EQ(o.pad_dims.multiple, 8);

  const absl::Status bad = ApplySpecOverrides({"bf17", "", 0}, &spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--precision 'bf17'"), std::string::npos) << bad;
  EXPECT_FALSE(ApplySpecOverrides({"", "static:-1", 0}, &spec).ok());
}

}  // namespace
}  // namespace mpc
