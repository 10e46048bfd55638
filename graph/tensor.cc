// Host tensor storage and element-type conversion.
#include "graph/tensor.h"

#include <cmath>
#include <cstdlib>
#include <limits>

#include "graph/float8.h"
#include "graph/float_convert.h"

namespace mpc {
namespace {

// double -> float rounding to odd: an inexact result becomes the neighbouring float whose
// last bit is 1. Rounding that float to nearest even again for a format with at most 22
// significand bits (f16, bf16, f8) equals rounding the double directly, so casting an f64
// or integer tensor to those formats rounds once instead of twice (double rounding
// would turn a value just past a halfway point into the tie and round it the wrong way).
float DoubleToFloatRoundToOdd(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v || (FloatBits(f) & 1u) != 0) return f;
  // f is even and inexact: the odd neighbour is the float on the other side of v. From
  // an overflowed ±inf this steps back to ±FLT_MAX, which still rounds to the right value.
  const float inf = std::numeric_limits<float>::infinity();
  return std::nextafter(f, static_cast<double>(f) < v ? inf : -inf);
}

}  // namespace

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
    case DType::kF32:
      return data<float>()[i];
    case DType::kF64:
      return data<double>()[i];
    case DType::kF16:
      return HalfToFloat(data<uint16_t>()[i]);
    case DType::kBF16:
      return Bf16ToFloat(data<uint16_t>()[i]);
    case DType::kI64:
      return static_cast<double>(data<int64_t>()[i]);
    case DType::kI32:
      return data<int32_t>()[i];
    case DType::kU8:
      return data<uint8_t>()[i];
    case DType::kBool:
      return data<uint8_t>()[i] ? 1.0 : 0.0;
    case DType::kF8E4M3:
      return F8E4M3ToFloat(data<uint8_t>()[i]);
    case DType::kF8E5M2:
      return F8E5M2ToFloat(data<uint8_t>()[i]);
  }
  return 0;
}

int64_t Tensor::NonFiniteCount(int64_t* first) const {
  int64_t count = 0, first_index = -1;
  auto scan = [&](auto value_at) {
    const int64_t n = num_elements();
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(value_at(i))) {
        if (first_index < 0) first_index = i;
        ++count;
      }
    }
  };
  if (dtype_ == DType::kF32) {
    const float* x = data<float>();
    scan([x](int64_t i) { return x[i]; });
  } else if (IsFloating(dtype_)) {
    scan([this](int64_t i) { return GetAsDouble(i); });
  }
  if (first) *first = first_index;
  return count;
}

Tensor Tensor::CastTo(DType dtype) const {
  Tensor out(dtype, shape_);
  const int64_t n = num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const double v = GetAsDouble(i);
    switch (dtype) {
      case DType::kF32:
        out.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kF64:
        out.data<double>()[i] = v;
        break;
      case DType::kF16:
        out.data<uint16_t>()[i] = FloatToHalf(DoubleToFloatRoundToOdd(v));
        break;
      case DType::kBF16:
        out.data<uint16_t>()[i] = FloatToBf16(DoubleToFloatRoundToOdd(v));
        break;
      case DType::kF8E4M3:
        out.data<uint8_t>()[i] = FloatToF8E4M3(DoubleToFloatRoundToOdd(v));
        break;
      case DType::kF8E5M2:
        out.data<uint8_t>()[i] = FloatToF8E5M2(DoubleToFloatRoundToOdd(v));
        break;
      case DType::kI64:
        out.data<int64_t>()[i] = static_cast<int64_t>(v);
        break;
      case DType::kI32:
        out.data<int32_t>()[i] = static_cast<int32_t>(v);
        break;
      case DType::kU8:
        out.data<uint8_t>()[i] = static_cast<uint8_t>(v);
        break;
      case DType::kBool:
        out.data<uint8_t>()[i] = v != 0.0;
        break;
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

namespace mpc {

void CopyLeadingCorner(const void* src, const Shape& src_shape, void* dst, const Shape& dst_shape, size_t elem) {
  const size_t rank = src_shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  Shape common(rank);
  for (size_t i = 0; i < rank; ++i) common[i] = std::min(src_shape[i], dst_shape[i]);
  const auto s_strides = RowMajorStrides(src_shape), d_strides = RowMajorStrides(dst_shape);
  const int64_t rows = NumElements(Shape(common.begin(), common.end() - 1));
  const size_t row_bytes = static_cast<size_t>(common.back()) * elem;
#pragma omp parallel for if (rows > 256)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, so = 0, d_off = 0;
    for (int d = static_cast<int>(rank) - 2; d >= 0; --d) {
      const int64_t idx = rem % common[d];
      rem /= common[d];
      so += idx * s_strides[d];
      d_off += idx * d_strides[d];
    }
    std::memcpy(static_cast<char*>(dst) + d_off * elem, static_cast<const char*>(src) + so * elem, row_bytes);
  }
}

Tensor Tensor::SlicedTo(const Shape& shape) const {
  Tensor out(dtype_, shape);
  CopyLeadingCorner(raw(), shape_, out.raw(), shape, DTypeSize(dtype_));
  return out;
}

Tensor Tensor::PaddedTo(const Shape& shape) const {
  Tensor out(dtype_, shape);  // zero-filled
  CopyLeadingCorner(raw(), shape_, out.raw(), shape, DTypeSize(dtype_));
  return out;
}

}  // namespace mpc
