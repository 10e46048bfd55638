// What the public HostTensor (engine/mpc.h) is inside mpc: its dtype as a graph DType, and
// its shape as error messages write it. Shared by Step(batch) (engine_batches.cc) and the
// Predictor (predictor.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/mpc.h"
#include "graph/dtype.h"

namespace mpc {

inline DType ToDType(HostDType t) {
  switch (t) {
    case HostDType::kFloat32:
      return DType::kF32;
    case HostDType::kBFloat16:
      return DType::kBF16;
    case HostDType::kInt32:
      return DType::kI32;
    case HostDType::kInt64:
      return DType::kI64;
  }
  return DType::kF32;
}

// "[1, 28, 28]"
inline std::string HostShapeText(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

}  // namespace mpc
