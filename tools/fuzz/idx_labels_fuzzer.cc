// libFuzzer target: an IDX labels file's (decompressed) bytes through ParseIdxLabels, the
// parser LoadIdx runs on each labels file: magic, the 8-byte header, count and size
// checks, the i64 conversion. Any input must give a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto labels = mpc::ParseIdxLabels(bytes, "<fuzz>");
  static const bool verbose = std::getenv("MPC_FUZZ_VERBOSE") != nullptr;  // replay: print each result
  if (verbose) std::fprintf(stderr, "%s\n", labels.ok() ? "OK" : labels.status().ToString().c_str());
  return 0;
}
