// The FP8 cuBLASLt GEMM (CublasLtGemm with E4M3/E5M2 operands) against an f64 host GEMM
// of the dequantized operands. The graph does not produce FP8 tensors yet (the CPU
// emulates FP8 with Fp8Quantize + an f32 GEMM), so the wrapper is tested directly:
// random A [M,K] and B [N,K] (the TN layout FP8 needs) are quantized on the host with
// graph/float8.h's exact OCP encoders and a per-tensor scale (amax -> a non-power-of-two
// scale, as delayed scaling produces); the device multiplies the FP8 codes, scales by
// both scale_inv values and accumulates in f32. Products of FP8 values are exact in f32,
// so the result differs from the f64 reference only by f32 accumulation (and, with fast
// accumulation, the tensor core's narrower accumulator) plus the output's rounding.
//   Fp8Gemm/*            formats (E4M3 x E4M3, the HYBRID E4M3 x E5M2 and E5M2 x E4M3),
//                        outputs (bf16, f16, f32, E4M3 with a D scale and its amax), bias,
//                        fast accumulation; relative Frobenius error < 1e-2.
//   Fp8GemmRules.*       the errors for what cuBLASLt's FP8 kernels cannot do.
// Skips without a GPU, and with a message on a device older than sm_89 (after checking
// that CublasLtGemm::Create refuses FP8 there with the documented message).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublaslt_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_device.h"
#include "graph/float8.h"
#include "graph/float_convert.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

using ::mpc::testing::DeviceBuffers;
using ::mpc::testing::RandomTensor;

// The shared CUDA backend as a CudaBackend (the FP8 wrapper needs the concrete class).
absl::StatusOr<cuda::CudaBackend*> Gpu() {
  auto gpu = ::mpc::testing::SharedGpu();
  if (!gpu.ok()) return gpu.status();
  auto* cuda = dynamic_cast<cuda::CudaBackend*>(*gpu);
  if (!cuda) return absl::InternalError("the cuda backend is not a CudaBackend");
  return cuda;
}

// A spec FP8 would accept on a new enough device.
cuda::LtGemmSpec ValidFp8Spec(int64_t m, int64_t n, int64_t k) {
  cuda::LtGemmSpec s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.tb = true;
  s.operand = DType::kF8E4M3;
  s.out = DType::kBF16;
  return s;
}

// Skips without a GPU; on a device older than sm_89 first checks the refusal, then skips.
#define MPC_FP8_GPU_OR_SKIP(var)                                                                           \
  auto var##_or = Gpu();                                                                                   \
  if (!var##_or.ok()) GTEST_SKIP() << var##_or.status().message();                                         \
  cuda::CudaBackend& var = **var##_or;                                                                     \
  if (var.compute_capability() < 89) {                                                                     \
    auto refused = cuda::CublasLtGemm::Create(var, ValidFp8Spec(16, 16, 16));                              \
    ASSERT_FALSE(refused.ok());                                                                            \
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();         \
    EXPECT_NE(refused.status().message().find("FP8 GEMMs need sm_89 or newer"), std::string::npos)         \
        << refused.status();                                                                               \
    EXPECT_NE(refused.status().message().find("--precision bf16"), std::string::npos) << refused.status(); \
    GTEST_SKIP() << "FP8 GEMMs need sm_89 or newer; this device is sm_" << var.compute_capability();       \
  }                                                                                                        \
  static_assert(true, "")

uint8_t EncodeF8(DType format, float v) { return format == DType::kF8E4M3 ? FloatToF8E4M3(v) : FloatToF8E5M2(v); }
float DecodeF8(DType format, uint8_t code) {
  return format == DType::kF8E4M3 ? F8E4M3ToFloat(code) : F8E5M2ToFloat(code);
}

// One tensor quantized with a per-tensor scale: codes = fp8(x * scale), and the values
// the GEMM multiplies, code * scale_inv, in f64.
struct Quantized {
  std::vector<uint8_t> codes;
  float scale_inv = 1.0f;
  std::vector<double> values;
};

Quantized Quantize(const Tensor& x, DType format) {
  const float* v = x.data<float>();
  const int64_t n = x.num_elements();
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float fp8_max = format == DType::kF8E4M3 ? kF8E4M3Max : kF8E5M2Max;
  // Delayed scaling's scale = fp8_max / amax, here with some headroom so that the scale
  // is not a power of two and code * scale_inv is no FP8 number.
  const float scale = 0.9f * fp8_max / amax;
  Quantized q;
  q.scale_inv = 1.0f / scale;
  q.codes.resize(static_cast<size_t>(n));
  q.values.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    q.codes[i] = EncodeF8(format, v[i] * scale);
    q.values[i] = static_cast<double>(DecodeF8(format, q.codes[i])) * static_cast<double>(q.scale_inv);
  }
  return q;
}

// Element i of a host copy of a device tensor in `dtype`.
double Decode(const std::vector<unsigned char>& bytes, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kF32: {
      float f;
      std::memcpy(&f, bytes.data() + i * 4, 4);
      return f;
    }
    case DType::kBF16:
    case DType::kF16: {
      uint16_t h;
      std::memcpy(&h, bytes.data() + i * 2, 2);
      return dtype == DType::kBF16 ? Bf16ToFloat(h) : HalfToFloat(h);
    }
    default:
      return DecodeF8(dtype, bytes[i]);
  }
}

struct Fp8Case {
  std::string name;
  DType a = DType::kF8E4M3, b = DType::kF8E4M3, out = DType::kBF16;
  bool bias = false;
  bool fast_accum = false;
};

std::vector<Fp8Case> Fp8Cases() {
  auto make = [](const std::string& name, DType a, DType b, DType out) {
    Fp8Case c;
    c.name = name;
    c.a = a;
    c.b = b;
    c.out = out;
    return c;
  };
  const DType e4 = DType::kF8E4M3, e5 = DType::kF8E5M2;
  std::vector<Fp8Case> cases = {
      make("E4M3xE4M3_Bf16", e4, e4, DType::kBF16),
      make("E4M3xE5M2_Bf16", e4, e5, DType::kBF16),  // HYBRID: a gradient as B
      make("E5M2xE4M3_Bf16", e5, e4, DType::kBF16),  // HYBRID: dX = dY W
      make("E4M3xE4M3_F16", e4, e4, DType::kF16),
      make("E4M3xE4M3_F32", e4, e4, DType::kF32),
      make("E5M2xE4M3_F32", e5, e4, DType::kF32),
      make("E4M3xE4M3_E4M3", e4, e4, e4),  // FP8 output with D scale and amax
      make("E5M2xE4M3_E5M2", e5, e4, e5),
  };
  Fp8Case bias_bf16 = make("E4M3xE4M3_Bf16_Bias", e4, e4, DType::kBF16);
  bias_bf16.bias = true;
  cases.push_back(bias_bf16);
  Fp8Case bias_f32 = make("E4M3xE4M3_F32_Bf16Bias", e4, e4, DType::kF32);
  bias_f32.bias = true;
  cases.push_back(bias_f32);
  Fp8Case fast = make("E4M3xE4M3_Bf16_FastAccum", e4, e4, DType::kBF16);
  fast.fast_accum = true;
  cases.push_back(fast);
  return cases;
}

std::string Fp8CaseName(const ::testing::TestParamInfo<Fp8Case>& info) { return info.param.name; }

class Fp8Gemm : public ::testing::TestWithParam<Fp8Case> {};

TEST_P(Fp8Gemm, MatchesHostGemmOfDequantizedOperands) {
  const Fp8Case& c = GetParam();
  constexpr int64_t kM = 256, kN = 512, kK = 1024;
  // Quantization first, so it is exercised without a GPU.
  const Quantized a = Quantize(RandomTensor(DType::kF32, {kM, kK}, 61), c.a);
  const Quantized b = Quantize(RandomTensor(DType::kF32, {kN, kK}, 62, -2.0, 2.0), c.b);
  // The bias in the dtype cuBLASLt takes with this output.
  const DType bias_dtype = c.out == DType::kF16 ? DType::kF16 : DType::kBF16;
  const Tensor bias = RandomTensor(DType::kF32, {kN}, 63).CastTo(bias_dtype);
  MPC_FP8_GPU_OR_SKIP(gpu);
  // The f64 reference (after the skip: it is the expensive part on the host).
  std::vector<double> ref(static_cast<size_t>(kM * kN));
  double amax = 0.0;
  for (int64_t i = 0; i < kM; ++i) {
    for (int64_t j = 0; j < kN; ++j) {
      double acc = 0.0;
      for (int64_t p = 0; p < kK; ++p) acc += a.values[i * kK + p] * b.values[j * kK + p];  // B stored [N,K]
      if (c.bias) acc += bias.GetAsDouble(j);
      ref[i * kN + j] = acc;
      amax = std::max(amax, std::fabs(acc));
    }
  }
  const bool fp8_out = c.out == DType::kF8E4M3 || c.out == DType::kF8E5M2;
  // An FP8 output is scaled into range: Y = fp8(d_scale * result).
  const float d_scale =
      fp8_out ? static_cast<float>(0.5 * (c.out == DType::kF8E4M3 ? kF8E4M3Max : kF8E5M2Max) / amax) : 1.0f;
  cuda::LtGemmSpec s = ValidFp8Spec(kM, kN, kK);
  s.operand = c.a;
  s.b_operand = c.b;
  s.out = c.out;
  s.bias = c.bias;
  if (c.bias) s.bias_dtype = bias_dtype;
  s.fast_accum = c.fast_accum;
  s.amax_d = fp8_out;
  auto gemm = cuda::CublasLtGemm::Create(gpu, s);
  ASSERT_TRUE(gemm.ok()) << gemm.status();

  DeviceBuffers dev(gpu);
  // Each scale in an allocation of its own, as the executor's state tensors are (Run
  // refuses scale pointers that are not 16-byte aligned: ScalePointersMustBeAligned).
  auto upload_scale = [&dev](float v) { return static_cast<const float*>(dev.Upload(&v, sizeof(v))); };
  cuda::LtGemmArgs args;
  args.a = dev.Upload(a.codes.data(), a.codes.size());
  args.b = dev.Upload(b.codes.data(), b.codes.size());
  const size_t y_bytes = static_cast<size_t>(kM * kN) * DTypeSize(c.out);
  args.y = dev.Upload(nullptr, y_bytes);
  args.a_scale_inv = upload_scale(a.scale_inv);
  args.b_scale_inv = upload_scale(b.scale_inv);
  ASSERT_TRUE(args.a && args.b && args.y && args.a_scale_inv && args.b_scale_inv);
  if (c.bias) {
    args.bias = dev.Upload(bias.raw(), bias.bytes());
    ASSERT_NE(args.bias, nullptr);
  }
  if (fp8_out) {
    args.d_scale = upload_scale(d_scale);
    args.amax_d = static_cast<float*>(dev.Upload(nullptr, sizeof(float)));
    ASSERT_NE(args.amax_d, nullptr);
  }
  const absl::Status st = (*gemm)->Run(args);
  ASSERT_TRUE(st.ok()) << st;
  const std::vector<unsigned char> y = dev.Download(args.y, y_bytes);

  double diff = 0.0, norm = 0.0;
  for (int64_t i = 0; i < kM * kN; ++i) {
    double got = Decode(y, c.out, i), want = ref[i];
    if (fp8_out) {
      // Against the reference rounded the way the output is: only elements whose f32
      // accumulation lands on the other side of a rounding boundary can differ.
      want = DecodeF8(c.out, EncodeF8(c.out, static_cast<float>(want * d_scale)));
    }
    ASSERT_TRUE(std::isfinite(got)) << "element " << i;
    diff += (got - want) * (got - want);
    norm += want * want;
  }
  const double err = std::sqrt(diff / norm);
  EXPECT_LT(err, 1e-2) << "FP8 GEMM vs f64 GEMM of the dequantized operands";
  RecordProperty("relative_error", absl::StrCat(err));
  std::printf("  %s: relative error %.3g\n", c.name.c_str(), err);
  if (fp8_out) {
    float amax_dev = 0.0f;
    const std::vector<unsigned char> amax_bytes = dev.Download(args.amax_d, sizeof(float));
    std::memcpy(&amax_dev, amax_bytes.data(), sizeof(float));
    // The amax of the unscaled result (what delayed scaling needs for the next scale).
    EXPECT_NEAR(amax_dev, amax, 1e-3 * amax) << "amax of D";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Fp8Gemm, ::testing::ValuesIn(Fp8Cases()), Fp8CaseName);

void ExpectRefused(cuda::CudaBackend& gpu, const cuda::LtGemmSpec& s, absl::StatusCode code, const std::string& text) {
  auto gemm = cuda::CublasLtGemm::Create(gpu, s);
  ASSERT_FALSE(gemm.ok()) << "created " << (*gemm)->description();
  EXPECT_EQ(gemm.status().code(), code) << gemm.status();
  EXPECT_NE(gemm.status().message().find(text), std::string::npos) << gemm.status();
}

// Where cuBLASLt's FP8 GEMM takes its scale and amax pointers from: each at byte offset
// `offset` into an allocation of its own. Offsets below kFp8ScalarAlignment are refused by
// Run with the pointer's name; from it on the GEMM runs and gives the aligned run's bits.
TEST(Fp8GemmRules, ScalePointersMustBeAligned) {
  MPC_FP8_GPU_OR_SKIP(gpu);
  constexpr int64_t kN = 64;
  cuda::LtGemmSpec s = ValidFp8Spec(kN, kN, kN);
  s.out = DType::kF8E4M3;  // uses every pointer: both scale_invs, the D scale and amax
  s.amax_d = true;
  auto gemm = cuda::CublasLtGemm::Create(gpu, s);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const Quantized a = Quantize(RandomTensor(DType::kF32, {kN, kN}, 71), DType::kF8E4M3);
  const Quantized b = Quantize(RandomTensor(DType::kF32, {kN, kN}, 72), DType::kF8E4M3);
  DeviceBuffers dev(gpu);
  const void* a_dev = dev.Upload(a.codes.data(), a.codes.size());
  const void* b_dev = dev.Upload(b.codes.data(), b.codes.size());
  ASSERT_TRUE(a_dev && b_dev);
  const float d_scale = 0.25f;
  std::vector<unsigned char> reference;
  for (size_t offset : {size_t{0}, size_t{4}, size_t{8}, size_t{16}, size_t{32}, size_t{64}}) {
    SCOPED_TRACE(absl::StrCat("scalars at byte offset ", offset));
    // Each scalar at `offset` into a 128-byte block of its own (the rest poisoned).
    auto scalar_at = [&](float v) {
      std::vector<float> block(32, -7.0f);
      std::memcpy(reinterpret_cast<char*>(block.data()) + offset, &v, sizeof(v));
      return reinterpret_cast<char*>(dev.Upload(block.data(), block.size() * sizeof(float))) + offset;
    };
    cuda::LtGemmArgs args;
    args.a = a_dev;
    args.b = b_dev;
    args.y = dev.Upload(nullptr, kN * kN);
    args.a_scale_inv = reinterpret_cast<const float*>(scalar_at(a.scale_inv));
    args.b_scale_inv = reinterpret_cast<const float*>(scalar_at(b.scale_inv));
    args.d_scale = reinterpret_cast<const float*>(scalar_at(d_scale));
    args.amax_d = reinterpret_cast<float*>(scalar_at(0.0f));
    const absl::Status st = (*gemm)->Run(args);
    if (offset % cuda::kFp8ScalarAlignment != 0) {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(st.message().find("a_scale_inv at 0x"), std::string::npos) << st;
      EXPECT_NE(st.message().find("aligned"), std::string::npos) << st;
      continue;
    }
    ASSERT_TRUE(st.ok()) << st;
    const std::vector<unsigned char> y = dev.Download(args.y, kN * kN);
    if (reference.empty()) {
      reference = y;
    } else {
      EXPECT_EQ(y, reference) << "the same GEMM with its scalars elsewhere gave other bits";
    }
  }
}

TEST(Fp8GemmRules, LayoutFormatsShapesAndOutputs) {
  MPC_FP8_GPU_OR_SKIP(gpu);
  cuda::LtGemmSpec s = ValidFp8Spec(64, 64, 64);
  ASSERT_TRUE(cuda::CublasLtGemm::Create(gpu, s).ok());
  {
    cuda::LtGemmSpec bad = s;
    bad.tb = false;  // B stored [K,N]: not TN
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "TN layout");
    bad = s;
    bad.ta = true;
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "TN layout");
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.operand = DType::kF8E5M2;
    bad.b_operand = DType::kF8E5M2;
    ExpectRefused(gpu, bad, absl::StatusCode::kUnimplemented, "E5M2 x E5M2");
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.k = 72;
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "multiples of 16");
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.b_operand = DType::kBF16;
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "non-FP8 operand");
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.amax_d = true;  // bf16 output
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "amax");
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.out = DType::kF32;
    bad.bias = true;
    bad.bias_dtype = DType::kF32;
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "bf16 bias");
  }
  {
    cuda::LtGemmSpec bad = s;
    bad.out = DType::kF8E5M2;  // needs an E5M2 operand
    ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "E5M2 output");
  }
  {
    // FP8 scale pointers are required at Run.
    auto gemm = cuda::CublasLtGemm::Create(gpu, s);
    ASSERT_TRUE(gemm.ok()) << gemm.status();
    DeviceBuffers dev(gpu);
    void* buf = dev.Upload(nullptr, 64 * 64 * 2);
    ASSERT_NE(buf, nullptr);
    const absl::Status st = (*gemm)->Run(buf, buf, nullptr, buf);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find("scale_inv"), std::string::npos) << st;
  }
}

// The group-scaled modes of the just-in-time recipes (cublaslt_fp8.cc's CheckScaleModes):
// the pairs the lowering emits are created (cuBLASLt has an algorithm for them on this
// device), the others refused with what to change. The values themselves are checked by
// the conformance test's grouped Fp8Gemm cases (tests/graph/fp8_op_cases.cc).
TEST(Fp8GemmRules, GroupScaleModes) {
  MPC_FP8_GPU_OR_SKIP(gpu);
  if (gpu.compute_capability() < 90) GTEST_SKIP() << "the FP8 scale modes need sm_90";
  using cuda::LtScaleMode;
  const cuda::LtGemmSpec base = ValidFp8Spec(128, 256, 384);
  for (const auto& [a, b] : std::vector<std::pair<LtScaleMode, LtScaleMode>>{
           {LtScaleMode::kOuterVec, LtScaleMode::kOuterVec},
           {LtScaleMode::kVec128, LtScaleMode::kBlk128x128},
           {LtScaleMode::kBlk128x128, LtScaleMode::kVec128},
           {LtScaleMode::kVec128, LtScaleMode::kVec128}}) {
    cuda::LtGemmSpec s = base;
    s.a_scale_mode = a;
    s.b_scale_mode = b;
    auto gemm = cuda::CublasLtGemm::Create(gpu, s);
    EXPECT_TRUE(gemm.ok()) << cuda::LtScaleModeName(a) << " x " << cuda::LtScaleModeName(b) << ": " << gemm.status();
  }
  cuda::LtGemmSpec bad = base;
  bad.a_scale_mode = bad.b_scale_mode = LtScaleMode::kBlk128x128;
  ExpectRefused(gpu, bad, absl::StatusCode::kUnimplemented, "not blocks x blocks");
  bad = base;
  bad.a_scale_mode = LtScaleMode::kOuterVec;  // with a scalar B
  ExpectRefused(gpu, bad, absl::StatusCode::kUnimplemented, "per-row scales");
  bad = base;
  bad.a_scale_mode = LtScaleMode::kVec128;
  bad.b_scale_mode = LtScaleMode::kBlk128x128;
  bad.fast_accum = true;
  ExpectRefused(gpu, bad, absl::StatusCode::kInvalidArgument, "fast accumulation");
}

}  // namespace
}  // namespace mpc
