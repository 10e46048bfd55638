// libFuzzer target: an IDX images file's (decompressed) bytes through ParseIdxImages, the
// parser LoadIdx runs on each images file: magic, the 16-byte header, dimension and size
// checks, the f32 conversion. Any input must give a Status, never a crash. (LoadIdx's zlib
// reading goes through files; the gzip seeds of tests/fuzz_corpus/ run it in ctest only.)
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto images = mpc::ParseIdxImages(bytes, "<fuzz>");
  static const bool verbose = std::getenv("MPC_FUZZ_VERBOSE") != nullptr;  // replay: print each result
  if (verbose) std::fprintf(stderr, "%s\n", images.ok() ? "OK" : images.status().ToString().c_str());
  return 0;
}
