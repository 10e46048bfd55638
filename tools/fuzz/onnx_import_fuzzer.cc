// libFuzzer target: an ONNX model's bytes (binary or text protobuf) through ImportOnnxBytes,
// the in-memory form of ImportOnnxFile: parse, opset check, ONNX checker, then import into
// a Graph (initializers, inputs, every node's shape inference, outputs). Any input must
// give a Status, never a crash.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "graph/onnx_import.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  mpc::ImportOptions options;
  options.batch_size = 2;
  auto graph = mpc::ImportOnnxBytes(bytes, options, "<fuzz>");
  static const bool verbose = std::getenv("MPC_FUZZ_VERBOSE") != nullptr;  // replay: print each result
  if (verbose) std::fprintf(stderr, "%s\n", graph.ok() ? "OK" : graph.status().ToString().c_str());
  return 0;
}
