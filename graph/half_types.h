// Storage types for the 16-bit float formats, so templated CPU kernels written for
// float/double instantiate for bf16 and f16 too. A Bf16/Half holds only the bits:
// reading one converts to float (exact), constructing one from a float rounds to
// nearest even (graph/float_convert.h). Arithmetic on them therefore happens in f32
// and only the store into a Bf16/Half rounds — the "compute in f32, round the output"
// semantics the numerics contract (docs/numerics.md) gives every low-precision op.
//
// Deliberately no arithmetic operators: `a + b` resolves to float + float through the
// implicit conversion, and a kernel that wants an f32 accumulator must say so (a
// `T acc` would round at every step; see Acc<T> in backends/cpu/cpu_kernel_util.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "graph/dtype.h"
#include "graph/float_convert.h"

namespace mpc {

struct Bf16 {
  uint16_t bits = 0;
  Bf16() = default;
  Bf16(float f) : bits(FloatToBf16(f)) {}               // NOLINT: implicit on purpose (stores round)
  operator float() const { return Bf16ToFloat(bits); }  // NOLINT: exact widening
  static Bf16 FromBits(uint16_t b) {
    Bf16 h;
    h.bits = b;
    return h;
  }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(FloatToHalf(f)) {}               // NOLINT: implicit on purpose (stores round)
  operator float() const { return HalfToFloat(bits); }  // NOLINT: exact widening
  static Half FromBits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }
};

// Kernels reinterpret tensor buffers as arrays of these.
static_assert(sizeof(Bf16) == 2 && std::is_trivially_copyable_v<Bf16>);
static_assert(sizeof(Half) == 2 && std::is_trivially_copyable_v<Half>);

template <>
struct DTypeOf<Bf16> {
  static constexpr DType value = DType::kBF16;
};
template <>
struct DTypeOf<Half> {
  static constexpr DType value = DType::kF16;
};

}  // namespace mpc
