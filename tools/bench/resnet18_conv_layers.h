// What the convolution benchmarks (conv_gemm_paths.cc, conv_layouts.cc) share: ResNet-18's
// distinct convolution shapes at 64x64 images and batch 32 (tools/bench's resnet18 row),
// a median-of-runs timer and their --reps flag.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace mpc::bench {

struct ConvLayer {
  const char* name;
  int64_t c, m, in, k, stride, pad;  // channels in and out, input extent, kernel, stride, pad
  int64_t out() const { return (in + 2 * pad - k) / stride + 1; }
};

inline constexpr ConvLayer kResNet18ConvLayers[] = {
    {"conv1 7x7/2", 3, 64, 64, 7, 2, 3},           {"layer1 3x3", 64, 64, 16, 3, 1, 1},
    {"layer2.0 3x3/2", 64, 128, 16, 3, 2, 1},      {"layer2.0 down 1x1/2", 64, 128, 16, 1, 2, 0},
    {"layer2 3x3", 128, 128, 8, 3, 1, 1},          {"layer3.0 3x3/2", 128, 256, 8, 3, 2, 1},
    {"layer3.0 down 1x1/2", 128, 256, 8, 1, 2, 0}, {"layer3 3x3", 256, 256, 4, 3, 1, 1},
    {"layer4.0 3x3/2", 256, 512, 4, 3, 2, 1},      {"layer4.0 down 1x1/2", 256, 512, 4, 1, 2, 0},
    {"layer4 3x3", 512, 512, 2, 3, 1, 1},
};
inline constexpr int64_t kResNet18Batch = 32;

// The median of `reps` timed calls of run(), after three untimed ones, in milliseconds.
template <typename F>
double MedianMs(int reps, F run) {
  auto now = [] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
  };
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const double start = now();
    run();
    t.push_back(now() - start);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The value of `--reps N` on the command line, else `fallback`.
inline int RepsFlag(int argc, char** argv, int fallback) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--reps") == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

}  // namespace mpc::bench
