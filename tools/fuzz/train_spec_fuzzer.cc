// libFuzzer target: a training spec's text (mpc.TrainSpec, protobuf text format) through
// ParseTrainSpec, which parses and then validates every field. Any input must give a
// Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "engine/spec.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = mpc::ParseTrainSpec(text, "<fuzz>");
  static const bool verbose = std::getenv("MPC_FUZZ_VERBOSE") != nullptr;  // replay: print each result
  if (verbose) std::fprintf(stderr, "%s\n", spec.ok() ? "OK" : spec.status().ToString().c_str());
  return 0;
}
