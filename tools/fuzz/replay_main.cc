// Replays inputs through one fuzz target's LLVMFuzzerTestOneInput without libFuzzer, so
// the normal (g++) build and ctest (label "fuzz") run the seed corpus and every saved
// crash input as regression tests. Usage: <target>_replay DIR_OR_FILE...; each directory's
// regular files (not recursive, dot files skipped) run in name order; MPC_FUZZ_VERBOSE=1
// makes the targets print each Status. A missing directory
// is skipped (a target may have no regressions yet); no input at all is an error. A bad
// input shows up as a crash or sanitizer report, as under the fuzzer.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool RunFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "replay: cannot read %s\n", path.c_str());
    return false;
  }
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replay: %s (%zu bytes)\n", path.c_str(), bytes.size());
  // A copy in its own allocation, so ASan (when enabled) catches reads past the end.
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int ran = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_regular_file(arg, ec)) {
      ok = RunFile(arg) && ok;
      ++ran;
      continue;
    }
    if (!std::filesystem::is_directory(arg, ec)) {
      std::fprintf(stderr, "replay: %s does not exist; skipped\n", argv[i]);
      continue;
    }
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(arg, ec)) {
      if (entry.is_regular_file() && entry.path().filename().string().rfind('.', 0) != 0) files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      ok = RunFile(f) && ok;
      ++ran;
    }
  }
  if (ran == 0) {
    std::fprintf(stderr, "replay: no inputs found\n");
    return 1;
  }
  std::fprintf(stderr, "replay: %d inputs ran without a crash\n", ran);
  return ok ? 0 : 1;
}
