// Host tensor storage and element-type conversion.
#include "graph/tensor.h"

#include <cmath>
#include <cstdlib>

#include "graph/float_convert.h"

namespace mpc {

void Tensor::FreeDeleter::operator()(void* p) const { std::free(p); }

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  // Round up to the alignment; allocate at least one line so data() is never null.
  const size_t size = std::max<size_t>(64, (bytes() + 63) / 64 * 64);
  data_.reset(std::aligned_alloc(64, size));
  std::memset(data_.get(), 0, size);
}

Tensor::Tensor(const Tensor& other) : dtype_(other.dtype_), shape_(other.shape_) {
  if (other.empty()) return;  // an unallocated tensor copies as unallocated
  *this = Tensor(other.dtype_, other.shape_);
  std::memcpy(raw(), other.raw(), bytes());
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) *this = Tensor(other);
  return *this;
}

double Tensor::GetAsDouble(int64_t i) const {
  switch (dtype_) {
    case DType::kF32: return data<float>()[i];
    case DType::kF64: return data<double>()[i];
    case DType::kF16: return HalfToFloat(data<uint16_t>()[i]);
    case DType::kBF16: return Bf16ToFloat(data<uint16_t>()[i]);
    case DType::kI64: return static_cast<double>(data<int64_t>()[i]);
    case DType::kI32: return data<int32_t>()[i];
    case DType::kU8: return data<uint8_t>()[i];
    case DType::kBool: return data<uint8_t>()[i] ? 1.0 : 0.0;
    case DType::kF8E4M3:
    case DType::kF8E5M2: return std::nan("");  // FP8 decoding lives with the FP8 numerics.
  }
  return 0;
}

Tensor Tensor::CastTo(DType dtype) const {
  Tensor out(dtype, shape_);
  const int64_t n = num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const double v = GetAsDouble(i);
    switch (dtype) {
      case DType::kF32: out.data<float>()[i] = static_cast<float>(v); break;
      case DType::kF64: out.data<double>()[i] = v; break;
      case DType::kF16: out.data<uint16_t>()[i] = FloatToHalf(static_cast<float>(v)); break;
      case DType::kBF16: out.data<uint16_t>()[i] = FloatToBf16(static_cast<float>(v)); break;
      case DType::kI64: out.data<int64_t>()[i] = static_cast<int64_t>(v); break;
      case DType::kI32: out.data<int32_t>()[i] = static_cast<int32_t>(v); break;
      case DType::kU8: out.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
      case DType::kBool: out.data<uint8_t>()[i] = v != 0.0; break;
      case DType::kF8E4M3:
      case DType::kF8E5M2: break;
    }
  }
  return out;
}

Tensor Tensor::Reshaped(Shape shape) const {
  Tensor out(*this);
  out.shape_ = std::move(shape);
  return out;
}

}  // namespace mpc
