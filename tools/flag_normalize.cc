// Kebab-case flag names → abseil's snake_case names.
#include "tools/flag_normalize.h"

namespace mpc {

std::vector<std::string> NormalizeFlagNames(int argc, char** argv) {
  std::vector<std::string> storage(argv, argv + argc);
  bool after_terminator = false;
  for (int i = 1; i < argc; ++i) {
    std::string& arg = storage[i];
    if (arg == "--") after_terminator = true;
    if (after_terminator || arg.rfind("--", 0) != 0) continue;
    const size_t end = arg.find('=');
    for (size_t j = 2; j < std::min(end, arg.size()); ++j) {
      if (arg[j] == '-') arg[j] = '_';
    }
    argv[i] = storage[i].data();
  }
  return storage;
}

}  // namespace mpc
