// CPU Cast between every pair of dtypes, rounding to nearest even (FP8 saturating), as
// Tensor::CastTo does; direct loops for the f32 <-> bf16/f16 casts autocast inserts.
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_kernel_util.h"
#include "backends/cpu/cpu_tensor_util.h"
#include "graph/float_convert.h"

namespace mpc {
namespace {

using namespace cpu;  // NOLINT: the shared kernel helpers (cpu_kernel_util.h, cpu_tensor_util.h)

// double -> float rounding to odd, as Tensor::CastTo does: rounding that float to
// nearest even again for a 16-bit format equals rounding the double directly, so an
// f64 -> bf16/f16 Cast rounds once, bit-identical to Tensor::CastTo.
float ToFloatRoundToOdd(double v) {
  const float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v || (FloatBits(f) & 1u) != 0) return f;
  const float inf = std::numeric_limits<float>::infinity();
  return std::nextafter(f, static_cast<double>(f) < v ? inf : -inf);
}

// Element read/write through double, with round-to-nearest-even for 16-bit floats.
double Load(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return t.as<float>()[i];
    case DType::kF64:
      return t.as<double>()[i];
    case DType::kF16:
      return HalfToFloat(t.as<uint16_t>()[i]);
    case DType::kBF16:
      return Bf16ToFloat(t.as<uint16_t>()[i]);
    case DType::kI64:
      return static_cast<double>(t.as<int64_t>()[i]);
    case DType::kI32:
      return t.as<int32_t>()[i];
    case DType::kU8:
    case DType::kBool:
      return t.as<uint8_t>()[i];
    default:
      return 0;
  }
}

void Store(const TensorView& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::kF32:
      t.as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kF64:
      t.as<double>()[i] = v;
      break;
    case DType::kF16:
      t.as<uint16_t>()[i] = FloatToHalf(ToFloatRoundToOdd(v));
      break;
    case DType::kBF16:
      t.as<uint16_t>()[i] = FloatToBf16(ToFloatRoundToOdd(v));
      break;
    case DType::kI64:
      t.as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kI32:
      t.as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kU8:
      t.as<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DType::kBool:
      t.as<uint8_t>()[i] = v != 0;
      break;
    default:
      break;
  }
}

// The hot casts of a mixed-precision program, compiled for each vector ISA (cpu_isa.h).
MPC_ISA_CLONES void FloatToBf16Range(const float* x, uint16_t* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = FloatToBf16(x[i]);
}

MPC_ISA_CLONES void Bf16ToFloatRange(const uint16_t* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] = Bf16ToFloat(x[i]);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateCast(const Node& node, Backend&) {
  const DType from = node.inputs[0]->dtype, to = node.outputs[0]->dtype;
  if (from == DType::kF8E4M3 || from == DType::kF8E5M2 || to == DType::kF8E4M3 || to == DType::kF8E5M2) {
    return absl::UnimplementedError("Cast to or from FP8 runs through the fp8 pass's quantize ops");
  }
  return MakeKernel([](KernelContext& ctx) {
    const int64_t n = ctx.outputs[0].num_elements();
    const TensorView& in = ctx.inputs[0];
    const TensorView& out = ctx.outputs[0];
    if (in.dtype == DType::kF32 && out.dtype == DType::kF64) {
      for (int64_t i = 0; i < n; ++i) out.as<double>()[i] = in.as<float>()[i];
    } else if (in.dtype == DType::kF32 && (out.dtype == DType::kBF16 || out.dtype == DType::kF16)) {
      // The hot casts of a mixed-precision program: no per-element dtype dispatch.
      const float* x = in.as<float>();
      uint16_t* y = out.as<uint16_t>();
      if (out.dtype == DType::kBF16) {
        ParallelRanges(n, 32768,
                       [&](int64_t begin, int64_t end) { FloatToBf16Range(x + begin, y + begin, end - begin); });
      } else {
#pragma omp parallel for if (n > 32768)
        for (int64_t i = 0; i < n; ++i) y[i] = FloatToHalf(x[i]);
      }
    } else if (out.dtype == DType::kF32 && (in.dtype == DType::kBF16 || in.dtype == DType::kF16)) {
      const uint16_t* x = in.as<uint16_t>();
      float* y = out.as<float>();
      if (in.dtype == DType::kBF16) {
        ParallelRanges(n, 32768,
                       [&](int64_t begin, int64_t end) { Bf16ToFloatRange(x + begin, y + begin, end - begin); });
      } else {
#pragma omp parallel for if (n > 32768)
        for (int64_t i = 0; i < n; ++i) y[i] = HalfToFloat(x[i]);
      }
    } else {
#pragma omp parallel for if (n > 32768)
      for (int64_t i = 0; i < n; ++i) Store(out, i, Load(in, i));
    }
    return absl::OkStatus();
  });
}

}  // namespace

void RegisterCpuCastKernels(KernelRegistry& r) {
  for (DType d : cpu::kAllDTypes) r.Register("Cast", "cpu", d, CreateCast);
}

}  // namespace mpc
