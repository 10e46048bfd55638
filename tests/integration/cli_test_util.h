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

}  // namespace mpc::testing
