// popen-based command runner for CLI tests.
#include "tests/integration/cli_test_util.h"

#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "gtest/gtest.h"

namespace mpc::testing {

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string DirectoryFingerprint(const std::string& dir) {
  std::ostringstream out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    out << entry.path().filename().string() << ":" << bytes.str().size() << ":" << std::hash<std::string>()(bytes.str())
        << "\n";
  }
  return out.str();
}

double FinalEvalAccuracy(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"eval\"") != std::string::npos) last = line;
  }
  const size_t at = last.find("\"accuracy\":");
  return at == std::string::npos ? NAN : std::stod(last.substr(at + 11));
}

double TrainThroughCli(const std::string& spec, const std::string& flags, const std::string& dir,
                       const std::string& name) {
  const std::string metrics = dir + "/" + name + ".jsonl";
  const CommandResult r = RunCommand(std::string(MPC_TRAIN_BIN) + " --spec " + spec + " " + flags + " --metrics " +
                                     metrics + " --checkpoint_dir " + dir + "/ckpt_" + name);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return FinalEvalAccuracy(metrics);
}

std::string ShippedSpecWithEpochs(const std::string& shipped_spec, const std::string& dir, const std::string& name,
                                  int epochs, const std::string& extra) {
  std::ifstream in(shipped_spec);
  EXPECT_TRUE(in.good()) << "cannot read " << shipped_spec;
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string model_dir = std::filesystem::path(shipped_spec).parent_path().string();
  const std::regex model_line(R"re((^|\n)model: "([^"/][^"]*)")re");
  const std::regex epochs_line(R"re((^|\n)epochs: [0-9]+)re");
  EXPECT_TRUE(std::regex_search(text, model_line)) << shipped_spec << " has no relative `model:` line";
  EXPECT_TRUE(std::regex_search(text, epochs_line)) << shipped_spec << " has no `epochs:` line";
  text = std::regex_replace(text, model_line, "$1model: \"" + model_dir + "/$2\"");
  text = std::regex_replace(text, epochs_line, "$1epochs: " + std::to_string(epochs));
  const std::string path = dir + "/" + name + ".spec";
  std::ofstream(path) << text << "\n" << extra << "\n";
  return path;
}

}  // namespace mpc::testing
