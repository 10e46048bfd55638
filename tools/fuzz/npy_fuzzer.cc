// libFuzzer target: a .npy file's bytes through ParseNpy, the in-memory form of ReadNpy
// (magic, version, header dict, dtype, shape, data size). Any input must give a Status,
// never a crash; a parsed tensor's bytes are read back so ASan sees their extent.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  auto tensor = mpc::ParseNpy(bytes, "<fuzz>");
  static const bool verbose = std::getenv("MPC_FUZZ_VERBOSE") != nullptr;  // replay: print each result
  if (verbose) std::fprintf(stderr, "%s\n", tensor.ok() ? "OK" : tensor.status().ToString().c_str());
  if (tensor.ok() && tensor->bytes() > 0) {
    const auto* p = static_cast<const unsigned char*>(tensor->raw());
    volatile unsigned char sink = p[0] ^ p[tensor->bytes() - 1];
    (void)sink;
  }
  return 0;
}
