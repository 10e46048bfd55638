// A host tensor: dtype, shape and an owned, 64-byte aligned buffer. Used for
// initializers, constants, checkpoints, feeds and fetched outputs; device memory is
// the backend's business.
#pragma once

#include <cstring>
#include <memory>
#include <string>

#include "graph/dtype.h"
#include "graph/shape.h"

namespace mpc {

// Copies the common leading corner of a row-major `src` into `dst` (same rank, any
// extents), element size `elem` bytes: the slicing/padding primitive behind
// Tensor::SlicedTo/PaddedTo and the SliceTo/PadTo kernels.
void CopyLeadingCorner(const void* src, const Shape& src_shape, void* dst, const Shape& dst_shape, size_t elem);

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-filled
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;

  template <typename T>
  static Tensor FromVector(Shape shape, const std::vector<T>& values) {
    Tensor t(DTypeOf<T>::value, std::move(shape));
    // An empty vector's data() may be null, which memcpy must not get even for 0 bytes (UB).
    if (t.bytes() > 0) std::memcpy(t.raw(), values.data(), t.bytes());
    return t;
  }
  static Tensor Scalar(float v) { return FromVector<float>({}, {v}); }

  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t num_elements() const { return NumElements(shape_); }
  size_t bytes() const { return static_cast<size_t>(num_elements()) * DTypeSize(dtype_); }
  bool empty() const { return data_ == nullptr; }

  void* raw() { return data_.get(); }
  const void* raw() const { return data_.get(); }
  template <typename T>
  T* data() {
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    return static_cast<const T*>(raw());
  }

  // Element i as double, whatever the dtype (f16/bf16/f8 decoded); for tests and tools.
  double GetAsDouble(int64_t i) const;
  // How many elements are NaN or infinite (0 for integer dtypes); the first one's index
  // goes to *first (-1 when there is none).
  int64_t NonFiniteCount(int64_t* first = nullptr) const;
  // Converts to another dtype (round to nearest even); integer <-> float by value.
  Tensor CastTo(DType dtype) const;
  // Same buffer contents, new shape with equal element count.
  Tensor Reshaped(Shape shape) const;
  // The leading corner of this tensor with a smaller (or equal) shape of the same rank,
  // and the inverse: this tensor in the corner of a larger zero-filled one.
  Tensor SlicedTo(const Shape& shape) const;
  Tensor PaddedTo(const Shape& shape) const;

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::unique_ptr<void, FreeDeleter> data_;
};

}  // namespace mpc
