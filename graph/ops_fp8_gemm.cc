// Real FP8 ops, introduced by the fp8-lower pass (passes/fp8_lower.h) in place of the
// fp8 pass's emulation (Fp8Quantize + f32 GEMM + Cast). Both run after autodiff: they
// have no gradients.
//
//   Fp8Cast(x, scale[, amax_history]) -> codes        attrs format: "e4m3" | "e5m2", transpose: 0 | 1
//     codes = the FP8 code of f32(x) * scale (graph/float8.h's rounding: nearest even,
//     saturating), dtype f8e4m3 / f8e5m2, one byte per element. x is f32, bf16 or f16.
//     transpose = 1 (2-D x only) writes the codes of x^T, shape [x1, x0]: cuBLASLt's FP8
//     GEMMs take both operands K-contiguous, so a backward GEMM needs the transposed codes
//     of a forward operand (Transformer Engine's cast_transpose). With amax_history,
//     max|x| is folded into history[0] exactly as Fp8Quantize does (the larger wins, a
//     NaN sticks): the op has side effects.
//   Fp8Gemm(a, b, a_scale_inv, b_scale_inv[, bias]) -> y   attrs transA, transB (as Gemm),
//                                                           to: y's ONNX element type
//     y[M,N] = round_to(Σ_k A[m,k] B[k,n] + bias[n]), A = op(a) dequantized, B = op(b)
//     dequantized: a code dequantizes to the f32 product f32(code) * scale_inv (the very
//     value Fp8Quantize yields, so the CPU kernel reproduces the emulation's products),
//     the sum is accumulated in f32 and rounded once to y's dtype (f32, bf16 or f16).
//     a and b are f8e4m3 or f8e5m2 (any mix); scale_invs f32 scalars; bias [N] or [1,N],
//     f32, bf16 or f16. A backend with FP8 tensor cores may compute the sum as
//     (Σ code_a * code_b) * (a_scale_inv * b_scale_inv) instead: equal up to f32 rounding.
//     The pass always emits transA = 0, transB = 1 (the TN layout cuBLASLt's FP8 kernels
//     need); other layouts are valid for the CPU.
// scale_inv values are state the end-of-step Fp8UpdateScales rewrites, so the pass orders
// every Fp8Gemm (and Fp8Cast) before that update with control dependencies.
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Types = absl::StatusOr<std::vector<TensorType>>;

bool IsFp8(DType d) { return d == DType::kF8E4M3 || d == DType::kF8E5M2; }
bool IsF32Bf16F16(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

absl::Status CheckF32Scalar(const Node& n, int i, const char* what) {
  const Value* v = n.inputs[i];
  if (v->dtype != DType::kF32 || NumElements(v->shape) != 1) {
    return absl::InvalidArgumentError(absl::StrCat(n.op, " node '", n.name, "': ", what, " '", v->name,
                                                   "' must be an f32 scalar, got ", DTypeName(v->dtype),
                                                   ShapeToString(v->shape)));
  }
  return absl::OkStatus();
}

Types InferFp8Cast(const Node& n) {
  const Value* x = n.inputs[0];
  if (!IsF32Bf16F16(x->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8Cast node '", n.name, "': input '", x->name, "' is ",
                                                   DTypeName(x->dtype), "; it must be f32, bf16 or f16"));
  }
  const std::string format = n.attrs.GetString("format", "");
  if (format != "e4m3" && format != "e5m2") {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8Cast node '", n.name, "': format '", format, "' must be e4m3 or e5m2"));
  }
  MPC_RETURN_IF_ERROR(CheckF32Scalar(n, 1, "scale"));
  if (n.inputs.size() > 2 && n.inputs[2]) {
    const Value* h = n.inputs[2];
    if (h->dtype != DType::kF32 || h->shape.size() != 1 || h->shape[0] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8Cast node '", n.name, "': amax history '", h->name,
                                                     "' must be a non-empty f32 vector, got ", DTypeName(h->dtype),
                                                     ShapeToString(h->shape)));
    }
  }
  const int64_t transpose = n.attrs.GetInt("transpose", 0);
  if (transpose != 0 && transpose != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8Cast node '", n.name, "': transpose is ", transpose, "; it must be 0 or 1"));
  }
  Shape shape = x->shape;
  if (transpose) {
    if (shape.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("Fp8Cast node '", n.name, "': transpose=1 needs a 2-D input, got ", ShapeToString(shape)));
    }
    std::swap(shape[0], shape[1]);
  }
  return std::vector<TensorType>{{format == "e4m3" ? DType::kF8E4M3 : DType::kF8E5M2, shape}};
}

Types InferFp8Gemm(const Node& n) {
  const Value* a = n.inputs[0];
  const Value* b = n.inputs[1];
  if (!IsFp8(a->dtype) || !IsFp8(b->dtype)) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", n.name, "': operands must be FP8 codes (f8e4m3, ",
                                                   "f8e5m2), got ", DTypeName(a->dtype), " x ", DTypeName(b->dtype)));
  }
  if (a->shape.size() != 2 || b->shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", n.name, "' needs 2-D operands, got ",
                                                   ShapeToString(a->shape), " and ", ShapeToString(b->shape)));
  }
  MPC_RETURN_IF_ERROR(CheckF32Scalar(n, 2, "a_scale_inv"));
  MPC_RETURN_IF_ERROR(CheckF32Scalar(n, 3, "b_scale_inv"));
  const bool ta = n.attrs.GetInt("transA", 0) != 0, tb = n.attrs.GetInt("transB", 0) != 0;
  const int64_t m = ta ? a->shape[1] : a->shape[0], ka = ta ? a->shape[0] : a->shape[1];
  const int64_t kb = tb ? b->shape[1] : b->shape[0], nn = tb ? b->shape[0] : b->shape[1];
  if (ka != kb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Fp8Gemm node '", n.name, "': contraction mismatch: a ", ShapeToString(a->shape), (ta ? " (transposed)" : ""),
        " has K=", ka, " but b ", ShapeToString(b->shape), (tb ? " (transposed)" : ""), " has K=", kb));
  }
  if (n.inputs.size() > 4 && n.inputs[4]) {
    const Value* bias = n.inputs[4];
    if (!IsF32Bf16F16(bias->dtype) || (bias->shape != Shape{nn} && bias->shape != Shape{1, nn})) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Fp8Gemm node '", n.name, "': bias '", bias->name, "' is ", DTypeName(bias->dtype),
          ShapeToString(bias->shape), "; it must be f32, bf16 or f16 of shape [", nn, "] or [1,", nn, "]"));
    }
  }
  const int64_t to = n.attrs.GetInt("to", DTypeToOnnx(DType::kF32));
  auto out = DTypeFromOnnx(static_cast<int32_t>(to));
  if (!out.ok() || !IsF32Bf16F16(*out)) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", n.name, "': attribute to=", to,
                                                   " must be the ONNX element type of f32 (1), f16 (10) or bf16 (16)"));
  }
  return std::vector<TensorType>{{*out, {m, nn}}};
}

}  // namespace

void RegisterFp8GemmOps(OpRegistry& r) {
  OpDef cast;
  cast.name = "Fp8Cast";
  cast.domain = "mpc";
  cast.min_inputs = 2;
  cast.max_inputs = 3;
  // Recording the amax writes persistent state (like Fp8Quantize); never removed or merged.
  cast.has_side_effects = true;
  cast.infer = InferFp8Cast;
  r.Register(cast);

  OpDef gemm;
  gemm.name = "Fp8Gemm";
  gemm.domain = "mpc";
  gemm.min_inputs = 4;
  gemm.max_inputs = 5;
  gemm.infer = InferFp8Gemm;
  r.Register(gemm);
}

}  // namespace mpc
