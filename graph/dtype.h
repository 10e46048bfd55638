// Element types of the IR and their conversions. f64 exists as the reference type
// for numerics tests (finite differences, float64 references); it is never painted
// by autocast. tf32 is a GEMM mode, not a storage type, so it is not listed here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mpc {

enum class DType : uint8_t {
  kF32,
  kF64,
  kF16,
  kBF16,
  kF8E4M3,
  kF8E5M2,
  kI64,
  kI32,
  kU8,
  kBool,
};

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(const std::string& name);
bool IsFloating(DType dtype);

// ONNX TensorProto.DataType <-> DType.
absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type);
int32_t DTypeToOnnx(DType dtype);

// C++ type -> DType, for templated kernels and tests.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::kF32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::kF64;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::kI64;
};
template <>
struct DTypeOf<int32_t> {
  static constexpr DType value = DType::kI32;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::kU8;
};
template <>
struct DTypeOf<bool> {
  static constexpr DType value = DType::kBool;
};

}  // namespace mpc
