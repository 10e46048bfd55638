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
//     Group scales (the just-in-time recipes): attrs a_scaling, b_scaling = "tensor"
//     (default) | "rows" | "tiles" | "blocks", tile (default 128). A grouped operand must be
//     stored [P, K] (a with transA = 0, b with transB = 1) and its scale_inv is the layout
//     graph/float8_groups.h's Fp8GemmScaleShape gives (what Fp8CastDynamic writes);
//     element [p, k] dequantizes with the scale_inv at Fp8GemmScaleIndex(p, k).
//   Fp8CastDynamic(x) -> (codes, scale_inv)   attrs as Fp8QuantizeDynamic's (format,
//                                            granularity, axis, tile, margin, amax_floor,
//                                            power_of_two), and transpose: 0 | 1
//     just-in-time scaling for a lowered GEMM: each group of x (graph/float8_groups.h)
//     scaled by Fp8DynamicScale of its own amax, codes = the FP8 code of f32(x) * scale
//     (of x^T with transpose = 1, 2-D x), scale_inv = 1 / scale per group, written in the
//     layout of Fp8GemmScaleShape for the codes [P, K]. So f32(code) * scale_inv is the
//     very value Fp8QuantizeDynamic yields. Rows and tiles must run along the codes' K
//     (x's axis 1, or axis 0 when transposed); any granularity but tensor needs a 2-D x.
//     No state, no side effects.
// scale_inv values are state the end-of-step Fp8UpdateScales rewrites, so the pass orders
// every Fp8Gemm (and Fp8Cast) before that update with control dependencies.
#include "base/status_macros.h"
#include "graph/float8_groups.h"
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

// Operand i's scale_inv against its scaling attribute: an f32 scalar per tensor, else
// the layout of Fp8GemmScaleShape for the operand stored [rows, k] (k_contiguous).
absl::Status CheckOperandScales(const Node& n, int i, int64_t rows, int64_t k, bool k_contiguous) {
  const char* attr = i == 0 ? "a_scaling" : "b_scaling";
  const char* input = i == 0 ? "a_scale_inv" : "b_scale_inv";
  auto granularity = ParseFp8Granularity(n.attrs.GetString(attr, "tensor"));
  if (!granularity.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Fp8Gemm node '", n.name, "': attribute ", attr, ": ", granularity.status().message()));
  }
  if (*granularity == Fp8Granularity::kTensor) return CheckF32Scalar(n, 2 + i, input);
  if (!k_contiguous) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", n.name, "': ", attr, " ",
                                                   Fp8GranularityName(*granularity), " needs ", i == 0 ? "a" : "b",
                                                   " stored [", i == 0 ? "M" : "N", ",K] (", i == 0 ? "transA=0" : "transB=1",
                                                   "), the layout fp8-lower emits"));
  }
  const int64_t tile = n.attrs.GetInt("tile", 128);
  if (tile < 1) return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", n.name, "': tile ", tile, " must be >= 1"));
  const Value* v = n.inputs[2 + i];
  const Shape want = Fp8GemmScaleShape(*granularity, rows, k, tile);
  if (v->dtype != DType::kF32 || v->shape != want) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8Gemm node '", n.name, "': ", input, " '", v->name, "' is ",
                                                   DTypeName(v->dtype), ShapeToString(v->shape), "; ",
                                                   Fp8GranularityName(*granularity), " scaling of a [", rows, ",", k,
                                                   "] operand takes f32", ShapeToString(want)));
  }
  return absl::OkStatus();
}

Types InferFp8CastDynamic(const Node& n) {
  const Value* x = n.inputs[0];
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("Fp8CastDynamic node '", n.name, "': ", what));
  };
  if (!IsF32Bf16F16(x->dtype)) {
    return fail(absl::StrCat("input '", x->name, "' is ", DTypeName(x->dtype), "; it must be f32, bf16 or f16"));
  }
  const std::string format = n.attrs.GetString("format", "");
  if (format != "e4m3" && format != "e5m2") return fail(absl::StrCat("format '", format, "' must be e4m3 or e5m2"));
  auto granularity = ParseFp8Granularity(n.attrs.GetString("granularity", "tensor"));
  if (!granularity.ok()) return fail(std::string(granularity.status().message()));
  const int64_t tile = n.attrs.GetInt("tile", 128);
  const absl::Status groups = Fp8GroupsOf(x->shape, *granularity, n.attrs.GetInt("axis", -1), tile).status();
  if (!groups.ok()) return fail(std::string(groups.message()));
  const int64_t transpose = n.attrs.GetInt("transpose", 0);
  if (transpose != 0 && transpose != 1) return fail(absl::StrCat("transpose is ", transpose, "; it must be 0 or 1"));
  const bool tensor = *granularity == Fp8Granularity::kTensor;
  if ((transpose || !tensor) && x->shape.size() != 2) {
    return fail(absl::StrCat(transpose ? "transpose=1" : Fp8GranularityName(*granularity),
                             " needs a 2-D input, got ", ShapeToString(x->shape)));
  }
  Shape codes = x->shape;
  if (transpose) std::swap(codes[0], codes[1]);
  if (*granularity == Fp8Granularity::kRows || *granularity == Fp8Granularity::kTiles) {
    int64_t axis = n.attrs.GetInt("axis", -1);
    if (axis < 0) axis += 2;
    if (axis != (transpose ? 0 : 1)) {
      return fail(absl::StrCat(Fp8GranularityName(*granularity), " along axis ", axis, " with transpose=", transpose,
                               ": the groups must run along the codes' rows (the GEMM's K), axis ",
                               transpose ? 0 : 1));
    }
  }
  const int64_t rows = codes.size() == 2 ? codes[0] : 1, k = codes.size() == 2 ? codes[1] : NumElements(codes);
  return std::vector<TensorType>{{format == "e4m3" ? DType::kF8E4M3 : DType::kF8E5M2, codes},
                                 {DType::kF32, Fp8GemmScaleShape(*granularity, rows, k, tile)}};
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
  const bool ta = n.attrs.GetInt("transA", 0) != 0, tb = n.attrs.GetInt("transB", 0) != 0;
  const int64_t m = ta ? a->shape[1] : a->shape[0], ka = ta ? a->shape[0] : a->shape[1];
  const int64_t kb = tb ? b->shape[1] : b->shape[0], nn = tb ? b->shape[0] : b->shape[1];
  if (ka != kb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Fp8Gemm node '", n.name, "': contraction mismatch: a ", ShapeToString(a->shape), (ta ? " (transposed)" : ""),
        " has K=", ka, " but b ", ShapeToString(b->shape), (tb ? " (transposed)" : ""), " has K=", kb));
  }
  MPC_RETURN_IF_ERROR(CheckOperandScales(n, 0, m, ka, !ta));
  MPC_RETURN_IF_ERROR(CheckOperandScales(n, 1, nn, kb, tb));
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

  OpDef dynamic;
  dynamic.name = "Fp8CastDynamic";
  dynamic.domain = "mpc";
  dynamic.min_inputs = dynamic.max_inputs = 1;
  dynamic.min_outputs = dynamic.max_outputs = 2;
  dynamic.infer = InferFp8CastDynamic;
  r.Register(dynamic);

  OpDef gemm;
  gemm.name = "Fp8Gemm";
  gemm.domain = "mpc";
  gemm.min_inputs = 4;
  gemm.max_inputs = 5;
  gemm.infer = InferFp8Gemm;
  r.Register(gemm);
}

}  // namespace mpc
