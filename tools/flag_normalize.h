// Lets the command-line tools accept both --dump-after and --dump_after: abseil flag
// names cannot contain '-', while users (and our docs) write kebab-case flags.
#pragma once

#include <string>
#include <vector>

namespace mpc {

// Rewrites "--some-flag[=v]" to "--some_flag[=v]" in place; values are untouched.
// Returns storage that backs the rewritten argv pointers.
std::vector<std::string> NormalizeFlagNames(int argc, char** argv);

}  // namespace mpc
