// BatchNormalization's running statistics through the compiler and the executor: a
// Gemm -> BatchNormalization -> Gemm model (written here as an ONNX file, in both forms
// PyTorch exports: training_mode=1 with three outputs, and the one-output eval form)
// trains three steps (and in the form a fresh model's eval export takes, where torch merged
// the running statistics into Identity(bias) / Identity(weight)); the running mean/var must follow
//   running = momentum * running + (1 - momentum) * batch_stat
// (unbiased batch variance, as PyTorch) against a float64 computation, stay persistent,
// non-trainable state, and be what the evaluation program (sharing the buffers) uses.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "engine/executor.h"
#include "engine/program.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

constexpr int64_t kN = 8, kIn = 4, kC = 5, kOut = 3;
constexpr double kMomentum = 0.9, kEps = 1e-5;

std::vector<float> Values(int64_t n, uint64_t seed, double lo, double hi) {
  Tensor t = testing::RandomTensor(DType::kF32, {n}, seed, lo, hi);
  return std::vector<float>(t.data<float>(), t.data<float>() + n);
}

void AddInit(onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& dims,
             const std::vector<float>& v) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float f : v) t->add_float_data(f);
}

void SetType(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

enum class Form {
  kEval,              // one output, running statistics as initializers (a trained model's eval export)
  kTraining,          // training_mode = 1 and three outputs (TrainingMode.TRAINING)
  kEvalDeduplicated,  // a fresh model's eval export: torch merged the running statistics with the
                      // equal-valued bias (zeros) and weight (ones) into Identity nodes
};

// x[N,4] -> Gemm(W1, b1) -> BatchNormalization -> Gemm(W2, b2) -> logits[N,3].
std::string WriteModel(const std::string& dir, Form form) {
  const bool training_form = form == Form::kTraining, dedup = form == Form::kEvalDeduplicated;
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(15);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("bn_mlp");
  SetType(g->add_input(), "x", {kN, kIn});
  SetType(g->add_output(), "logits", {kN, kOut});
  AddInit(g, "W1", {kC, kIn}, Values(kC * kIn, 1, -0.8, 0.8));
  AddInit(g, "b1", {kC}, Values(kC, 2, -0.5, 0.5));
  AddInit(g, "bn.weight", {kC}, dedup ? std::vector<float>(kC, 1.0f) : Values(kC, 3, 0.5, 1.5));
  AddInit(g, "bn.bias", {kC}, dedup ? std::vector<float>(kC, 0.0f) : Values(kC, 4, -0.2, 0.2));
  if (dedup) {
    for (auto [from, to] : {std::pair{"bn.bias", "bn.running_mean"}, std::pair{"bn.weight", "bn.running_var"}}) {
      onnx::NodeProto* n = g->add_node();
      n->set_op_type("Identity");
      n->add_input(from);
      n->add_output(to);
    }
  } else {
    AddInit(g, "bn.running_mean", {kC}, std::vector<float>(kC, 0.0f));
    AddInit(g, "bn.running_var", {kC}, std::vector<float>(kC, 1.0f));
  }
  AddInit(g, "W2", {kOut, kC}, Values(kOut * kC, 5, -0.8, 0.8));
  AddInit(g, "b2", {kOut}, Values(kOut, 6, -0.1, 0.1));
  auto gemm = [&](const std::string& name, const std::string& x, const std::string& w, const std::string& b,
                  const std::string& y) {
    onnx::NodeProto* n = g->add_node();
    n->set_name(name);
    n->set_op_type("Gemm");
    for (const std::string& in : {x, w, b}) n->add_input(in);
    n->add_output(y);
    auto* a = n->add_attribute();
    a->set_name("transB");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
  };
  gemm("fc1", "x", "W1", "b1", "h");
  onnx::NodeProto* bn = g->add_node();
  bn->set_name("bn");
  bn->set_op_type("BatchNormalization");
  for (const char* in : {"h", "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"}) bn->add_input(in);
  bn->add_output("hn");
  auto* mom = bn->add_attribute();
  mom->set_name("momentum");
  mom->set_type(onnx::AttributeProto::FLOAT);
  mom->set_f(static_cast<float>(kMomentum));
  auto* eps = bn->add_attribute();
  eps->set_name("epsilon");
  eps->set_type(onnx::AttributeProto::FLOAT);
  eps->set_f(static_cast<float>(kEps));
  if (training_form) {  // torch.onnx.export(..., training=TrainingMode.TRAINING)
    bn->add_output("bn.running_mean_out");
    bn->add_output("bn.running_var_out");
    auto* tm = bn->add_attribute();
    tm->set_name("training_mode");
    tm->set_type(onnx::AttributeProto::INT);
    tm->set_i(1);
  }
  gemm("fc2", "hn", "W2", "b2", "logits");
  const std::string path = dir + "/bn_" + std::to_string(static_cast<int>(form)) + ".onnx";
  std::ofstream out(path, std::ios::binary);
  m.SerializeToOstream(&out);
  return path;
}

std::vector<double> ReadF64(const Executor& ex, const std::string& name) {
  auto t = ex.ReadPersistent(name);
  EXPECT_TRUE(t.ok()) << t.status();
  std::vector<double> out;
  for (int64_t i = 0; i < t->num_elements(); ++i) out.push_back(t->GetAsDouble(i));
  return out;
}

// h = x W1^T + b1 in f64, [N, C].
std::vector<double> Hidden(const Tensor& x, const std::vector<double>& w1, const std::vector<double>& b1) {
  std::vector<double> h(kN * kC);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t c = 0; c < kC; ++c) {
      double acc = b1[c];
      for (int64_t k = 0; k < kIn; ++k) acc += x.GetAsDouble(i * kIn + k) * w1[c * kIn + k];
      h[i * kC + c] = acc;
    }
  }
  return h;
}

double MaxRelDiff(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

class BatchNormState : public ::testing::TestWithParam<Form> {};

TEST_P(BatchNormState, RunningStatsFollowMomentumAndFeedEvaluation) {
  const std::string dir = testing::MakeTempDir("bn_state_" + std::to_string(static_cast<int>(GetParam())));
  const std::string model = WriteModel(dir, GetParam());
  auto backend = CreateCpuBackend();
  TrainSpec spec;
  spec.set_batch_size(static_cast<int>(kN));
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(0.9f);
  ProgramOptions options;
  options.model_path = model;
  options.batch_size = kN;
  options.training = true;
  auto train = CompileProgram(spec, backend->capabilities(), options);
  ASSERT_TRUE(train.ok()) << train.status();
  options.training = false;
  auto eval = CompileProgram(spec, backend->capabilities(), options);
  ASSERT_TRUE(eval.ok()) << eval.status();

  // The running statistics are persistent, non-trainable state: no gradient, no optimizer state.
  for (const char* name : {"bn.running_mean", "bn.running_var"}) {
    const Value* v = train->graph->FindValue(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_EQ(v->kind, ValueKind::kState) << name;
    for (const auto& [param, grad] : train->results.autodiff.param_grads) EXPECT_NE(param->name, name);
    EXPECT_EQ(train->graph->FindValue(std::string(name) + ".momentum"), nullptr) << name;
    EXPECT_EQ(eval->graph->FindValue(name)->kind, ValueKind::kState) << name;
  }
  int updates = 0;
  for (const auto& n : train->graph->nodes()) updates += n->op == "BatchNormStatsUpdate";
  EXPECT_EQ(updates, 1);
  for (const auto& n : eval->graph->nodes()) EXPECT_NE(n->op, "BatchNormStatsUpdate");
  EXPECT_EQ(train->parameter_count, kC * kIn + kC + 2 * kC + kOut * kC + kOut);

  auto train_exec = Executor::Create(*train->graph, train->results.memory_plan, *backend);
  ASSERT_TRUE(train_exec.ok()) << train_exec.status();
  auto eval_exec = Executor::Create(*eval->graph, eval->results.memory_plan, *backend, train_exec->get());
  ASSERT_TRUE(eval_exec.ok()) << eval_exec.status();
  Executor& tx = **train_exec;
  Executor& ev = **eval_exec;
  int state_values = 0;
  for (const Value* v : tx.PersistentValues()) {
    if (v->name == "bn.running_mean" || v->name == "bn.running_var") {
      EXPECT_EQ(v->kind, ValueKind::kState);  // checkpoints save it under `state`
      ++state_values;
    }
  }
  EXPECT_EQ(state_values, 2);

  std::vector<double> rm(kC, 0.0), rv(kC, 1.0);
  const std::vector<double> scale0 = ReadF64(tx, "bn.weight");
  for (int step = 0; step < 3; ++step) {
    const std::vector<double> w1 = ReadF64(tx, "W1"), b1 = ReadF64(tx, "b1");
    const Tensor x = testing::RandomTensor(DType::kF32, {kN, kIn}, 100 + step, -2, 2);
    Tensor labels(DType::kI64, {kN});
    for (int64_t i = 0; i < kN; ++i) labels.data<int64_t>()[i] = (i + step) % kOut;
    const std::vector<double> h = Hidden(x, w1, b1);
    for (int64_t c = 0; c < kC; ++c) {
      double mean = 0, sq = 0;
      for (int64_t i = 0; i < kN; ++i) mean += h[i * kC + c];
      mean /= kN;
      for (int64_t i = 0; i < kN; ++i) sq += (h[i * kC + c] - mean) * (h[i * kC + c] - mean);
      const double m = static_cast<float>(kMomentum);  // the attribute is f32
      rm[c] = m * rm[c] + (1 - m) * mean;
      rv[c] = m * rv[c] + (1 - m) * sq / (kN - 1);
    }
    ASSERT_TRUE(tx.SetInput("x", x).ok());
    ASSERT_TRUE(tx.SetInput(train->labels_input, labels).ok());
    ASSERT_TRUE(tx.SetInput("lr", Tensor::Scalar(0.1f)).ok());
    absl::Status st = tx.Run(7, step);
    ASSERT_TRUE(st.ok()) << st;
  }
  const std::vector<double> got_rm = ReadF64(tx, "bn.running_mean"), got_rv = ReadF64(tx, "bn.running_var");
  EXPECT_LT(MaxRelDiff(got_rm, rm), 1e-5);
  EXPECT_LT(MaxRelDiff(got_rv, rv), 1e-5);
  for (int64_t c = 0; c < kC; ++c) {
    EXPECT_NEAR(got_rm[c], rm[c], 1e-5) << "running_mean[" << c << "]";
    EXPECT_NEAR(got_rv[c], rv[c], 1e-5) << "running_var[" << c << "]";
    EXPECT_NE(got_rv[c], 1.0) << c;
  }
  EXPECT_GT(MaxRelDiff(ReadF64(tx, "bn.weight"), scale0), 1e-4) << "the BN scale did not train";

  // Evaluation: the running statistics, read through the shared buffers, and not changed.
  const Tensor x = testing::RandomTensor(DType::kF32, {kN, kIn}, 999, -2, 2);
  ASSERT_TRUE(ev.SetInput("x", x).ok());
  absl::Status st = ev.Run(7, 3);
  ASSERT_TRUE(st.ok()) << st;
  auto logits = ev.Fetch(eval->logits_output);
  ASSERT_TRUE(logits.ok()) << logits.status();
  const std::vector<double> w1 = ReadF64(tx, "W1"), b1 = ReadF64(tx, "b1"), w2 = ReadF64(tx, "W2"),
                            b2 = ReadF64(tx, "b2"), scale = ReadF64(tx, "bn.weight"), bias = ReadF64(tx, "bn.bias");
  const std::vector<double> h = Hidden(x, w1, b1);
  std::vector<double> want(kN * kOut), got(kN * kOut);
  for (int64_t i = 0; i < kN; ++i) {
    for (int64_t o = 0; o < kOut; ++o) {
      double acc = b2[o];
      for (int64_t c = 0; c < kC; ++c) {
        const double hn =
            (h[i * kC + c] - got_rm[c]) / std::sqrt(got_rv[c] + static_cast<float>(kEps)) * scale[c] + bias[c];
        acc += hn * w2[o * kC + c];
      }
      want[i * kOut + o] = acc;
      got[i * kOut + o] = logits->GetAsDouble(i * kOut + o);
    }
  }
  EXPECT_LT(MaxRelDiff(got, want), 1e-5);
  EXPECT_EQ(ReadF64(tx, "bn.running_mean"), got_rm);
  EXPECT_EQ(ReadF64(tx, "bn.running_var"), got_rv);
}

INSTANTIATE_TEST_SUITE_P(, BatchNormState, ::testing::Values(Form::kEval, Form::kTraining, Form::kEvalDeduplicated),
                         [](const ::testing::TestParamInfo<Form>& info) {
                           switch (info.param) {
                             case Form::kEval:
                               return std::string("EvalExport");
                             case Form::kTraining:
                               return std::string("TrainingModeExport");
                             default:
                               return std::string("EvalExportDeduplicatedStats");
                           }
                         });

}  // namespace
}  // namespace mpc
