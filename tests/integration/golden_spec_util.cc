// Golden-spec rewriting, golden weight comparison and state snapshots for integration tests
// (see golden_spec_util.h).
#include "tests/integration/golden_spec_util.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc::testing {

std::string WriteTwelveStepMlpSpec(const std::string& dir, const std::string& extra) {
  const std::string golden = SourcePath("tests/golden/mlp");
  const std::string npy =
      absl::StrCat("npy { features: \"", golden, "/features.npy\" labels: \"", golden, "/labels.npy\" }");
  const std::string spec = dir + "/train.spec";
  std::ofstream(spec) << "model: \"" << golden << "/model.onnx\"\n"
                      << "features_input: \"x\"\n"
                      << "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n"
                      << "train_data { " << npy << " shuffle: false }\n"
                      << "batch_size: 16\nsteps: 12\n"
                      << "optimizer { sgd { lr: 0.1 momentum: 0.9 } clip_grad_norm: 5 }\n"
                      << "eval { data { " << npy << " } every_n_steps: 4 top_k: 3 }\n"
                      << extra << "\n";
  return spec;
}

std::string WriteFashionMlpSpec(const std::string& name, const std::string& fields) {
  const std::string path = MakeTempDir(name) + "/train.spec";
  std::ofstream(path) << absl::StrCat(
      "model: \"", SourcePath("models/fashion_mlp/fashion_mlp.onnx"), "\"\n", "features_input: \"image\"\n",
      "loss { type: SOFTMAX_CROSS_ENTROPY output: \"logits\" }\n", "train_data { idx { images: \"",
      FashionMnistPath("train-images-idx3-ubyte.gz"), "\" labels: \"", FashionMnistPath("train-labels-idx1-ubyte.gz"),
      "\" } scale: 0.0123 shift: -0.3530 limit: 2000 }\n", fields, "\n");
  return path;
}

std::string FashionMlpEvalFields(int every_n_steps, int examples) {
  return absl::StrCat("eval { data { idx { images: \"", FashionMnistPath("t10k-images-idx3-ubyte.gz"), "\" labels: \"",
                      FashionMnistPath("t10k-labels-idx1-ubyte.gz"),
                      "\" } shuffle: false scale: 0.0123 shift: -0.3530 limit: ", examples,
                      " } every_n_steps: ", every_n_steps, " batch_size: 500 }");
}

std::string WriteGoldenSpec(const std::string& run, const std::string& extra, const std::string& dir,
                            const std::string& file_name, const std::string& model) {
  const std::string golden = SourcePath("tests/golden/mlp");
  std::ifstream in(golden + "/" + run + ".spec");
  std::string text((std::istreambuf_iterator<char>(in)), {});
  text = absl::StrReplaceAll(text, {{"\"model.onnx\"", "\"" + (model.empty() ? golden + "/model.onnx" : model) + "\""},
                                    {"\"features.npy\"", "\"" + golden + "/features.npy\""},
                                    {"\"labels.npy\"", "\"" + golden + "/labels.npy\""}});
  const std::string path = dir + "/" + file_name;
  std::ofstream(path) << text << "\n" << extra << "\n";
  return path;
}

void ExpectMatchesGoldenF32(const std::vector<float>& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(static_cast<int64_t>(got.size()), want.num_elements()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    const double w = want.GetAsDouble(i), g = got[i];
    ASSERT_LE(std::abs(g - w), 1e-4 * std::abs(w) + 1e-6) << what << "[" << i << "]";
  }
}

std::map<std::string, std::vector<float>> SnapshotState(const Engine& engine) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& names : {engine.ParameterNames(), engine.StateNames()}) {
    for (const std::string& n : names) out[n] = *engine.GetParameter(n);
  }
  return out;
}

}  // namespace mpc::testing
