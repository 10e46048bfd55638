// FP8 ops (passes/fp8.h): per-tensor quantization with delayed scaling.
//   Fp8Quantize(x, scale, scale_inv[, amax_history]) -> q          attr format: "e4m3" | "e5m2"
//     q = RoundToFp8(f32(x) * scale) * scale_inv, an f32 tensor of x's shape: the exact
//     values an FP8 GEMM sees (the FP8 codes times their dequantization factor). With
//     amax_history, max|x| of this call is folded into history[0] in place (several
//     quantizations of one tensor in a step keep the largest), so the op has side effects.
//   Fp8UpdateScales(scale_0, scale_inv_0, history_0, last_amax_0, scale_1, ...[, hold])
//     in place, once per step after every quantization: new scales from the histories,
//     then the histories roll. attrs fp8_max (one per tensor), margin, algo, amax_floor;
//     held = 1 (gradient accumulation): the last input is an f32 scalar, and while it is
//     non-zero (a micro-batch that does not end the step) the op does nothing, so the
//     amaxes of the step's micro-batches gather in the history's current slot.
// scale, scale_inv and last_amax are f32 scalars; amax_history is f32 [len].
//   Fp8QuantizeDynamic(x) -> q                 just-in-time scaling (current, rowwise, block)
//     each group of x (graph/float8_groups.h: attrs granularity, axis, tile) is scaled by
//     Fp8DynamicScale of its own amax (graph/float8_scaling.h: attrs margin, amax_floor,
//     power_of_two), rounded to `format`, and multiplied back by 1/scale: f32, x's shape.
//     No state, no side effects.
#include "base/status_macros.h"
#include "graph/float8_groups.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

absl::Status CheckF32(const Value* v, bool scalar) {
  if (v->dtype != DType::kF32 || (scalar && NumElements(v->shape) != 1) || (!scalar && v->shape.size() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 meta '", v->name, "' must be an f32 ",
                                                   scalar ? "scalar" : "vector", ", got ", DTypeName(v->dtype),
                                                   ShapeToString(v->shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckFormat(const Node& n) {
  const std::string f = n.attrs.GetString("format", "");
  if (f != "e4m3" && f != "e5m2") {
    return absl::InvalidArgumentError(
        absl::StrCat(n.op, " node '", n.name, "': format '", f, "' must be e4m3 or e5m2"));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterFp8Ops(OpRegistry& r) {
  OpDef quantize;
  quantize.name = "Fp8Quantize";
  quantize.domain = "mpc";
  quantize.min_inputs = 3;
  quantize.max_inputs = 4;
  // Recording the amax writes persistent state; the scale update is ordered after it.
  quantize.has_side_effects = true;
  quantize.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
    MPC_RETURN_IF_ERROR(CheckFormat(n));
    MPC_RETURN_IF_ERROR(CheckF32(n.inputs[1], true));
    MPC_RETURN_IF_ERROR(CheckF32(n.inputs[2], true));
    if (n.inputs.size() > 3 && n.inputs[3]) MPC_RETURN_IF_ERROR(CheckF32(n.inputs[3], false));
    return std::vector<TensorType>{{DType::kF32, n.inputs[0]->shape}};
  };
  r.Register(quantize);

  OpDef dynamic;
  dynamic.name = "Fp8QuantizeDynamic";
  dynamic.domain = "mpc";
  dynamic.min_inputs = dynamic.max_inputs = 1;
  dynamic.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
    MPC_RETURN_IF_ERROR(CheckFormat(n));
    auto granularity = ParseFp8Granularity(n.attrs.GetString("granularity", "tensor"));
    absl::Status st = granularity.status();
    if (st.ok()) {
      st = Fp8GroupsOf(n.inputs[0]->shape, *granularity, n.attrs.GetInt("axis", -1), n.attrs.GetInt("tile", 128))
               .status();
    }
    if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("Fp8QuantizeDynamic node '", n.name, "': ", st.message()));
    return std::vector<TensorType>{{DType::kF32, n.inputs[0]->shape}};
  };
  r.Register(dynamic);

  OpDef update;
  update.name = "Fp8UpdateScales";
  update.domain = "mpc";
  update.min_inputs = 4;
  update.max_inputs = 1 << 20;
  update.min_outputs = update.max_outputs = 0;
  update.has_side_effects = true;
  update.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    const size_t held = n.attrs.GetInt("held", 0) != 0 ? 1 : 0;
    if (n.inputs.size() < held || (n.inputs.size() - held) % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8UpdateScales node '", n.name,
                                                     "': inputs come in fours (scale, scale_inv, amax_history, "
                                                     "last_amax)",
                                                     held ? ", then the hold flag" : "", "; got ", n.inputs.size()));
    }
    const size_t tensors = (n.inputs.size() - held) / 4;
    if (n.attrs.GetFloats("fp8_max", {}).size() != tensors) {
      return absl::InvalidArgumentError(absl::StrCat("Fp8UpdateScales node '", n.name, "': attribute fp8_max needs ",
                                                     tensors, " values, one per tensor"));
    }
    for (size_t i = 0; i < n.inputs.size(); ++i) MPC_RETURN_IF_ERROR(CheckF32(n.inputs[i], i >= 4 * tensors || i % 4 != 2));
    return std::vector<TensorType>{};
  };
  r.Register(update);
}

}  // namespace mpc
