// tf32: with `--precision tf32`, every f32 GEMM and convolution of the program runs in
// TF32 (attribute mpc_tf32 = 1): its operands rounded to TF32 (f32's exponent, 10 explicit
// mantissa bits, round to nearest even), its products accumulated in f32.
//
// Why a pass and not a kernel default: the f32 contract (docs/numerics.md) is true f32
// math, so a backend must never use TF32 on its own (cuDNN and cuBLAS would by default on
// Ampere and later). TF32 is a choice the compiler makes per node, visible in the program,
// the report and `--dump-after`, and every backend honours the same attribute: cuBLASLt
// (CUBLAS_COMPUTE_32F_FAST_TF32) and cuDNN (TF32 math allowed) where the device has TF32
// tensor cores, the CPU by rounding both operands exactly as the tensor cores do, so a
// TF32 run is reproducible on any machine.
//
// Marked: Gemm, MatMul, Conv and the convolution gradients ConvGradInput/ConvGradWeight
// whose two operands are f32 (a bf16/f16 node is not TF32: its operands are TF32 values
// already), forward and backward; FP8 GEMMs (mpc_fp8) are left alone (they never occur
// with tf32). It runs after autodiff and after every pass that writes
// GEMMs (fuse-epilogues, fold-transposes, fold-output-casts), so the backward GEMMs and
// the rewritten ones carry the attribute too; with any other precision it does nothing.
#pragma once

#include <string_view>

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class Tf32Pass : public Pass {
 public:
  // `enabled`: the program's precision is tf32 (AutocastOptions::precision == kTF32).
  Tf32Pass(bool enabled, Tf32Result* result) : enabled_(enabled), result_(result) {}
  std::string_view name() const override { return "tf32"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

  // The ops the pass marks when their operands are f32.
  static bool IsTf32Op(std::string_view op);

 private:
  bool enabled_;
  Tf32Result* result_;
};

}  // namespace mpc
