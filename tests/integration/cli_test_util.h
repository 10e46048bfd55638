// Running the command-line tools from tests: exit code and captured output.
#pragma once

#include <string>

namespace mpc::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CommandResult RunCommand(const std::string& command);
// A content fingerprint of every file in a directory (names, sizes, bytes).
std::string DirectoryFingerprint(const std::string& dir);

// The accuracy of the last "eval" record of a metrics file (NaN when there is none).
double FinalEvalAccuracy(const std::string& metrics_path);

// Runs `mpc-train --spec SPEC FLAGS` with metrics DIR/NAME.jsonl and checkpoints in
// DIR/ckpt_NAME, expects exit code 0 (a test failure with the output otherwise) and
// returns the final eval accuracy.
double TrainThroughCli(const std::string& spec, const std::string& flags, const std::string& dir,
                       const std::string& name);

// A shipped spec (e.g. models/fashion_cnn/fashion_cnn.spec) rewritten into DIR/NAME.spec:
// its model path made absolute, `epochs: EPOCHS` instead of the shipped count, and EXTRA
// appended (spec fields). Returns the new spec's path. The tests that train a shipped model
// to an accuracy run fewer epochs than its spec, to keep CI's time; the shipped count's
// result is what the spec's comment and README's table record.
std::string ShippedSpecWithEpochs(const std::string& shipped_spec, const std::string& dir, const std::string& name,
                                  int epochs, const std::string& extra = "");

}  // namespace mpc::testing
