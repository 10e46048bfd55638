// The fuse-updates pass (one MultiSgdUpdate / MultiAdamWUpdate instead of an update per
// parameter) must not change a single bit of training: the golden MLP trained through the
// real pipeline on the CPU, with the pass and with it disabled, in f32, bf16 (updates
// write the bf16 weight copies) and fp16 with dynamic loss scaling (updates gated on the
// overflow flag, the first steps skipped), SGD with Nesterov momentum and AdamW. Per-step
// losses and every parameter and optimizer state tensor after the run must be identical.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/dataset.h"
#include "engine/executor.h"
#include "engine/program.h"
#include "engine/spec.h"
#include "gtest/gtest.h"
#include "tests/integration/golden_spec_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

struct TrainResult {
  std::map<std::string, int> update_ops;  // op -> node count, updates only
  int updated_parameters = 0;             // parameters the Multi* nodes update
  int parameters = 0;                     // trainable parameters of the model
  std::vector<float> losses;
  std::map<std::string, Tensor> persistent;  // every parameter and state after training
};

TrainResult Train(const TrainSpec& spec, const std::string& model_path, const Dataset& data, bool fuse, int steps) {
  TrainResult r;
  std::unique_ptr<Backend> cpu = CreateCpuBackend();
  ProgramOptions options;
  options.model_path = model_path;
  options.batch_size = spec.batch_size();
  options.training = true;
  if (!fuse) options.pipeline.disabled.insert("fuse-updates");
  auto program = CompileProgram(spec, cpu->capabilities(), options);
  EXPECT_TRUE(program.ok()) << program.status();
  if (!program.ok()) return r;
  r.parameters = static_cast<int>(program->graph->ValuesOfKind(ValueKind::kParameter).size());
  for (const auto& n : program->graph->nodes()) {
    if (n->op.find("Update") == std::string::npos || n->op == "UpdateLossScale") continue;
    ++r.update_ops[n->op];
    if (n->op.rfind("Multi", 0) == 0) r.updated_parameters += n->attrs.GetInts("lowp_copies", {}).size();
  }
  auto ex = Executor::Create(*program->graph, program->results.memory_plan, *cpu);
  EXPECT_TRUE(ex.ok()) << ex.status();
  if (!ex.ok()) return r;
  const int64_t batch = spec.batch_size(), n = data.size(), row = data.features.num_elements() / n;
  for (int step = 0; step < steps; ++step) {
    Tensor x(DType::kF32, {batch, row}), y(DType::kI64, {batch});
    for (int64_t i = 0; i < batch; ++i) {
      const int64_t src = (step * batch + i) % n;
      std::memcpy(x.data<float>() + i * row, data.features.data<float>() + src * row, row * sizeof(float));
      y.data<int64_t>()[i] = data.labels.data<int64_t>()[src];
    }
    EXPECT_TRUE((*ex)->SetInput(program->features_input, x).ok());
    EXPECT_TRUE((*ex)->SetInput(program->labels_input, y).ok());
    EXPECT_TRUE((*ex)->SetInput("lr", Tensor::Scalar(0.01f)).ok());
    EXPECT_TRUE((*ex)->Run(spec.seed(), step).ok());
    r.losses.push_back(static_cast<float>((*ex)->Fetch(program->loss_output)->GetAsDouble(0)));
  }
  auto persistent = testing::ReadPersistentTensors(*program->graph, **ex);
  EXPECT_TRUE(persistent.ok()) << persistent.status();
  if (persistent.ok()) r.persistent = *std::move(persistent);
  return r;
}

struct Config {
  const char* name;
  const char* golden_run;  // tests/golden/mlp/<run>.spec
  const char* extra;       // appended spec text
  const char* multi_op;
  bool copies;  // every update writes its parameter's bf16/f16 copy
};

class FuseUpdatesTrainingTest : public ::testing::TestWithParam<Config> {};

TEST_P(FuseUpdatesTrainingTest, FusedUpdatesTrainBitForBitLikeSingleUpdates) {
  const Config& c = GetParam();
  const std::string dir = testing::MakeTempDir("fuse_updates");
  auto spec = LoadTrainSpec(testing::WriteGoldenSpec(c.golden_run, c.extra, dir, "run.spec"));
  ASSERT_TRUE(spec.ok()) << spec.status();
  const std::string golden = testing::SourcePath("tests/golden/mlp");
  auto data = LoadNpy(golden + "/features.npy", golden + "/labels.npy");
  ASSERT_TRUE(data.ok()) << data.status();
  const int steps = 12;
  const TrainResult fused = Train(*spec, golden + "/model.onnx", *data, true, steps);
  const TrainResult single = Train(*spec, golden + "/model.onnx", *data, false, steps);

  // One update per parameter (weights and biases of the golden MLP's Gemms), or one
  // multi-tensor update for all of them.
  const std::string single_op = std::string(c.multi_op).substr(5);  // "MultiSgdUpdate" -> "SgdUpdate"
  ASSERT_GE(single.parameters, 4);
  EXPECT_EQ(single.update_ops, (std::map<std::string, int>{{single_op, single.parameters}}));
  EXPECT_EQ(fused.update_ops, (std::map<std::string, int>{{c.multi_op, 1}}));
  EXPECT_EQ(fused.updated_parameters, single.parameters);
  int copies = 0;
  for (const auto& [name, t] : fused.persistent) copies += name.size() > 5 && name.substr(name.size() - 5) == ".lowp";
  EXPECT_EQ(copies, c.copies ? single.parameters : 0);

  ASSERT_EQ(fused.losses.size(), static_cast<size_t>(steps));
  for (int i = 0; i < steps; ++i) {
    EXPECT_EQ(std::memcmp(&fused.losses[i], &single.losses[i], sizeof(float)), 0)
        << "step " << i + 1 << ": fused " << fused.losses[i] << ", single " << single.losses[i];
  }
  EXPECT_NE(fused.losses.front(), fused.losses.back()) << "training must move the loss";
  EXPECT_FALSE(single.persistent.empty());
  EXPECT_EQ(testing::FirstDifference(single.persistent, fused.persistent), "") << "after " << steps << " steps";
  if (std::string(c.extra).find("init_scale") != std::string::npos) {
    // Some steps were skipped (the scale backed off from 1e9) and some applied (the loss moved).
    EXPECT_LT(fused.persistent.at("loss_scale").GetAsDouble(0), 1e9);
  }
  std::printf("%s: %zu persistent tensors identical after %d steps; loss %.6f -> %.6f\n", c.name,
              single.persistent.size(), steps, single.losses.front(), single.losses.back());
}

// fp16 starts from a loss scale that overflows, so the gated updates skip the first steps.
INSTANTIATE_TEST_SUITE_P(, FuseUpdatesTrainingTest,
                         ::testing::Values(Config{"F32Sgd", "sgd", "", "MultiSgdUpdate", false},
                                           Config{"F32AdamW", "adamw", "", "MultiAdamWUpdate", false},
                                           Config{"Bf16Sgd", "bf16_sgd", "", "MultiSgdUpdate", true},
                                           Config{"Bf16AdamW", "bf16_adamw", "", "MultiAdamWUpdate", true},
                                           Config{
                                               "Fp16AdamWGated", "adamw",
                                               "precision { compute: FP16 }\n"
                                               "loss_scaling { mode: DYNAMIC init_scale: 1e9 growth_interval: 100 }\n",
                                               "MultiAdamWUpdate", true}),
                         [](const ::testing::TestParamInfo<Config>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace mpc
