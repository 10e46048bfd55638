// Helpers shared by the tests: seeded random tensors, relative errors, paths.
#pragma once

#include <random>
#include <string>

#include "graph/tensor.h"

namespace mpc::testing {

// Uniform in [lo, hi) from a fixed seed; tests never use all-zero inputs.
Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0);
// ||a - b|| / ||b|| over all elements, computed in double.
double RelativeError(const Tensor& a, const Tensor& b);
// A fresh empty directory under the test temp dir.
std::string MakeTempDir(const std::string& name);
std::string SourcePath(const std::string& relative);
// What the configure found for the tests (cmake/test_prerequisites.cmake): Debian's
// python3 with the reference packages, and a file of the Fashion-MNIST dataset.
std::string Python();
std::string FashionMnistPath(const std::string& file);

}  // namespace mpc::testing
