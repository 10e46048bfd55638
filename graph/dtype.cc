// DType names, sizes and the mapping to ONNX's TensorProto element types.
#include "graph/dtype.h"

#include "absl/strings/str_cat.h"

namespace mpc {
namespace {
// Values of onnx::TensorProto_DataType, spelled out so this file needs no proto header.
constexpr int32_t kOnnxFloat = 1, kOnnxUint8 = 2, kOnnxInt32 = 6, kOnnxInt64 = 7, kOnnxBool = 9, kOnnxFloat16 = 10,
                  kOnnxDouble = 11, kOnnxBFloat16 = 16, kOnnxF8E4M3FN = 17, kOnnxF8E5M2 = 19;
}  // namespace

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI64:
      return 8;
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kU8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF64:
      return "f64";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kF8E4M3:
      return "f8e4m3";
    case DType::kF8E5M2:
      return "f8e5m2";
    case DType::kI64:
      return "i64";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

absl::StatusOr<DType> DTypeFromName(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kF8E5M2, DType::kI64,
                  DType::kI32, DType::kU8, DType::kBool}) {
    if (DTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "'; expected one of f32 f64 f16 bf16 f8e4m3 f8e5m2 i64 i32 u8 bool"));
}

bool IsFloating(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF64:
    case DType::kF16:
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
      return true;
    default:
      return false;
  }
}

absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type) {
  switch (onnx_type) {
    case kOnnxFloat:
      return DType::kF32;
    case kOnnxDouble:
      return DType::kF64;
    case kOnnxFloat16:
      return DType::kF16;
    case kOnnxBFloat16:
      return DType::kBF16;
    case kOnnxF8E4M3FN:
      return DType::kF8E4M3;
    case kOnnxF8E5M2:
      return DType::kF8E5M2;
    case kOnnxInt64:
      return DType::kI64;
    case kOnnxInt32:
      return DType::kI32;
    case kOnnxUint8:
      return DType::kU8;
    case kOnnxBool:
      return DType::kBool;
  }
  return absl::UnimplementedError(
      absl::StrCat("ONNX element type ", onnx_type,
                   " is not supported; mpc supports float, double, float16, bfloat16, int64, int32, uint8, bool"));
}

int32_t DTypeToOnnx(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return kOnnxFloat;
    case DType::kF64:
      return kOnnxDouble;
    case DType::kF16:
      return kOnnxFloat16;
    case DType::kBF16:
      return kOnnxBFloat16;
    case DType::kF8E4M3:
      return kOnnxF8E4M3FN;
    case DType::kF8E5M2:
      return kOnnxF8E5M2;
    case DType::kI64:
      return kOnnxInt64;
    case DType::kI32:
      return kOnnxInt32;
    case DType::kU8:
      return kOnnxUint8;
    case DType::kBool:
      return kOnnxBool;
  }
  return 0;
}

}  // namespace mpc
