// Golden-spec rewriting and state snapshots for integration tests (see golden_spec_util.h).
#include "tests/integration/golden_spec_util.h"

#include <fstream>

#include "absl/strings/str_replace.h"
#include "tests/test_util.h"

namespace mpc::testing {

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

std::map<std::string, std::vector<float>> SnapshotState(const Engine& engine) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& names : {engine.ParameterNames(), engine.StateNames()}) {
    for (const std::string& n : names) out[n] = *engine.GetParameter(n);
  }
  return out;
}

}  // namespace mpc::testing
