// Optimizer update ops. They write persistent state in place (parameter, momentum,
// moments, step counter) and have no outputs; the optimizer pass orders them after
// every reader of the parameter with control dependencies.
//   SgdUpdate(param, grad, lr[, momentum_buf])          attrs: momentum, nesterov, weight_decay
//   AdamWUpdate(param, grad, lr, m, v, step)              attrs: beta1, beta2, eps, weight_decay
// Semantics are torch.optim.SGD / torch.optim.AdamW's, so runs can be compared step by step.
// With attribute gated=1 the last input is found_nonfinite (loss scaling): when it is
// set, the update leaves parameter, state and step counter exactly as they were.
// With attribute lowp_copy=1 the input just before that flag (or the last input) is the
// parameter's bf16/f16 copy that the forward and backward GEMMs read: the update writes
// it from the new master weight in the same pass, replacing a Cast per step.
//   MultiSgdUpdate / MultiAdamWUpdate: the same updates for N parameters in one node
//   (layout in graph/multi_tensor_update.h), created by the fuse-updates pass.
//   AccumulateGradient(acc, grad, first) -> sum   gradient accumulation (accumulate_steps):
//     sum = (first != 0 ? 0 : acc) + grad, and acc = sum in place; the output is what the
//     optimizer step reads on the micro-batch that applies it.
//   EmaUpdate(ema, param[, skip])                 attr decay, gated: the weight average,
//     ema = decay * ema + (1 - decay) * param, in place; with gated=1 a nonzero skip flag
//     leaves it as it was.
#include <set>

#include "base/status_macros.h"
#include "graph/multi_tensor_update.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Types = absl::StatusOr<std::vector<TensorType>>;

absl::Status CheckStateLike(const Node& n, int i, const Value* param) {
  const Value* v = n.inputs[i];
  if (v->shape != param->shape || v->dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer state '", v->name, "' must be f32 ", ShapeToString(param->shape)));
  }
  return absl::OkStatus();
}

absl::Status CheckScalarF32(const Node& n, int i) {
  const Value* v = n.inputs[i];
  if (v->dtype != DType::kF32 || NumElements(v->shape) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("'", v->name, "' must be an f32 scalar"));
  }
  return absl::OkStatus();
}

// Checks one parameter's inputs: f32 master weight, f32 gradient of its shape, f32 state
// of its shape, the optional bf16/f16 copy.
absl::Status CheckParameterInputs(const Node& n, const UpdateTensorInputs& in) {
  const Value* param = n.inputs[in.param];
  if (param->dtype != DType::kF32) {
    return absl::InvalidArgumentError(absl::StrCat("master weight '", param->name, "' must be f32"));
  }
  const Value* grad = n.inputs[in.grad];
  if (grad->shape != param->shape) {
    return absl::InvalidArgumentError(absl::StrCat("gradient ", ShapeToString(grad->shape),
                                                   " does not match parameter ", ShapeToString(param->shape)));
  }
  // bf16/f16 gradients only in the multi-tensor updates, where fold-gradient-casts puts
  // them on backends whose kernels widen as they read (Capabilities).
  const bool multi = IsMultiTensorUpdate(n);
  if (grad->dtype != DType::kF32 && !(multi && (grad->dtype == DType::kBF16 || grad->dtype == DType::kF16))) {
    return absl::InvalidArgumentError(absl::StrCat("gradient of '", param->name, "' must arrive in f32",
                                                   multi ? ", bf16 or f16" : "", "; it is ", DTypeName(grad->dtype)));
  }
  for (int i : {in.momentum_buf, in.m, in.v}) {
    if (i >= 0) MPC_RETURN_IF_ERROR(CheckStateLike(n, i, param));
  }
  if (in.step >= 0) MPC_RETURN_IF_ERROR(CheckScalarF32(n, in.step));
  if (in.lowp_copy >= 0) {
    const Value* c = n.inputs[in.lowp_copy];
    if ((c->dtype != DType::kBF16 && c->dtype != DType::kF16) || c->shape != param->shape) {
      return absl::InvalidArgumentError(absl::StrCat("the low-precision copy '", c->name, "' must be bf16 or f16 ",
                                                     ShapeToString(param->shape), "; it is ", DTypeName(c->dtype),
                                                     ShapeToString(c->shape)));
    }
  }
  return absl::OkStatus();
}

// SgdUpdate / AdamWUpdate: one parameter (layout in graph/multi_tensor_update.h).
Types InferUpdate(const Node& n) {
  MPC_ASSIGN_OR_RETURN(const UpdateTensorInputs in, SingleUpdateInputsOf(n));
  MPC_RETURN_IF_ERROR(CheckParameterInputs(n, in));
  MPC_RETURN_IF_ERROR(CheckScalarF32(n, 2));
  if (n.attrs.GetInt("gated", 0) != 0) MPC_RETURN_IF_ERROR(CheckScalarF32(n, static_cast<int>(n.inputs.size()) - 1));
  return std::vector<TensorType>{};
}

Types InferMultiUpdate(const Node& n) {
  MPC_ASSIGN_OR_RETURN(const MultiUpdateLayout layout, MultiUpdateLayoutOf(n));
  MPC_RETURN_IF_ERROR(CheckScalarF32(n, layout.lr));
  if (layout.found_nonfinite >= 0) MPC_RETURN_IF_ERROR(CheckScalarF32(n, layout.found_nonfinite));
  // Each parameter and each piece of state is updated once: the kernels read every step
  // counter before advancing any, which only equals updating one after the other when no
  // two parameters share state.
  std::set<const Value*> written;
  for (const UpdateTensorInputs& in : layout.tensors) {
    MPC_RETURN_IF_ERROR(CheckParameterInputs(n, in));
    for (int i : {in.param, in.momentum_buf, in.m, in.v, in.step, in.lowp_copy}) {
      if (i >= 0 && !written.insert(n.inputs[i]).second) {
        return absl::InvalidArgumentError(absl::StrCat(n.op, " node '", n.name, "' updates '", n.inputs[i]->name,
                                                       "' twice; give each parameter its own state"));
      }
    }
  }
  return std::vector<TensorType>{};
}

}  // namespace

void RegisterTrainingOps(OpRegistry& r) {
  OpDef sgd;
  sgd.name = "SgdUpdate";
  sgd.domain = "mpc";
  sgd.min_inputs = 3;
  sgd.max_inputs = 6;  // + lowp copy (lowp_copy=1) + found_nonfinite (gated=1)
  sgd.min_outputs = sgd.max_outputs = 0;
  sgd.has_side_effects = true;
  sgd.infer = InferUpdate;
  r.Register(sgd);

  OpDef adamw;
  adamw.name = "AdamWUpdate";
  adamw.domain = "mpc";
  adamw.min_inputs = 6;
  adamw.max_inputs = 8;  // + lowp copy (lowp_copy=1) + found_nonfinite (gated=1)
  adamw.min_outputs = adamw.max_outputs = 0;
  adamw.has_side_effects = true;
  adamw.infer = InferUpdate;
  r.Register(adamw);

  OpDef accumulate;
  accumulate.name = "AccumulateGradient";
  accumulate.domain = "mpc";
  accumulate.min_inputs = accumulate.max_inputs = 3;
  accumulate.min_outputs = accumulate.max_outputs = 1;
  accumulate.has_side_effects = true;       // writes the accumulator
  accumulate.output_is_state_input = true;  // the sum is the accumulator's bytes: no second copy
  accumulate.infer = [](const Node& n) -> Types {
    const Value* acc = n.inputs[0];
    const Value* grad = n.inputs[1];
    if (acc->dtype != DType::kF32 || grad->dtype != DType::kF32 || acc->shape != grad->shape) {
      return absl::InvalidArgumentError(absl::StrCat("accumulator '", acc->name, "' and gradient '", grad->name,
                                                     "' must both be f32 of one shape; they are ",
                                                     DTypeName(acc->dtype), ShapeToString(acc->shape), " and ",
                                                     DTypeName(grad->dtype), ShapeToString(grad->shape)));
    }
    MPC_RETURN_IF_ERROR(CheckScalarF32(n, 2));
    return std::vector<TensorType>{{DType::kF32, acc->shape}};
  };
  r.Register(accumulate);

  OpDef ema;
  ema.name = "EmaUpdate";
  ema.domain = "mpc";
  ema.min_inputs = 2;
  ema.max_inputs = 3;  // + skip (gated=1)
  ema.min_outputs = ema.max_outputs = 0;
  ema.has_side_effects = true;
  ema.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(CheckStateLike(n, 0, n.inputs[1]));
    if (n.inputs[1]->dtype != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat("weight '", n.inputs[1]->name, "' must be f32"));
    }
    const bool gated = n.attrs.GetInt("gated", 0) != 0;
    if (gated != (n.inputs.size() == 3)) {
      return absl::InvalidArgumentError("EmaUpdate takes a skip flag exactly when gated=1");
    }
    if (gated) MPC_RETURN_IF_ERROR(CheckScalarF32(n, 2));
    return std::vector<TensorType>{};
  };
  r.Register(ema);

  for (const char* name : {"MultiSgdUpdate", "MultiAdamWUpdate"}) {
    OpDef multi;
    multi.name = name;
    multi.domain = "mpc";
    multi.min_inputs = 3;
    multi.max_inputs = 1 << 20;
    multi.min_outputs = multi.max_outputs = 0;
    multi.has_side_effects = true;
    multi.infer = InferMultiUpdate;
    r.Register(multi);
  }
}

}  // namespace mpc

// Loss scaling and gradient clipping ops (passes/loss_scaling.h).
//   UnscaleGradients(scale, g1..gN) -> (g1/scale .. gN/scale, found_nonfinite)
//   FindNonFinite(g1..gN) -> found_nonfinite                     the same check, no scale:
//                                                               reads the gradients only
//   ClipByGlobalNorm(g1..gN) -> (g1*c .. gN*c, global_norm)    attr max_norm
//   InjectNonFinite(g) -> g'                                    attrs step, value (test hook)
//   UpdateLossScale(scale, growth_tracker, found_nonfinite[, hold])  in place (a nonzero hold
//                                                               leaves both); attrs growth_factor,
//                                                               backoff_factor, growth_interval,
//                                                               min_scale, max_scale
// found_nonfinite is an f32 scalar, 1 when any gradient element is inf or NaN.
namespace mpc {
namespace {

// allow_16bit: FindNonFinite also reads bf16/f16 gradients (fold-gradient-casts).
absl::StatusOr<std::vector<TensorType>> InferGradientList(const Node& n, int first, bool allow_16bit = false) {
  std::vector<TensorType> out;
  for (size_t i = first; i < n.inputs.size(); ++i) {
    const DType d = n.inputs[i]->dtype;
    if (d != DType::kF32 && !(allow_16bit && (d == DType::kBF16 || d == DType::kF16))) {
      return absl::InvalidArgumentError(absl::StrCat("gradient '", n.inputs[i]->name, "' must be f32",
                                                     allow_16bit ? ", bf16 or f16" : "", "; it is ", DTypeName(d)));
    }
    out.push_back({DType::kF32, n.inputs[i]->shape});
  }
  out.push_back({DType::kF32, {}});
  return out;
}

}  // namespace

void RegisterLossScalingOps(OpRegistry& r) {
  constexpr int kMany = 1 << 20;
  OpDef unscale;
  unscale.name = "UnscaleGradients";
  unscale.domain = "mpc";
  unscale.min_inputs = 2;
  unscale.max_inputs = kMany;
  unscale.min_outputs = 2;
  unscale.max_outputs = kMany;
  unscale.infer = [](const Node& n) { return InferGradientList(n, 1); };
  r.Register(unscale);

  OpDef find;
  find.name = "FindNonFinite";
  find.domain = "mpc";
  find.min_inputs = 1;
  find.max_inputs = kMany;
  find.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_ASSIGN_OR_RETURN(std::vector<TensorType> types, InferGradientList(n, 0, /*allow_16bit=*/true));
    return std::vector<TensorType>{types.back()};
  };
  r.Register(find);

  OpDef clip;
  clip.name = "ClipByGlobalNorm";
  clip.domain = "mpc";
  clip.min_inputs = 1;
  clip.max_inputs = kMany;
  clip.min_outputs = 2;
  clip.max_outputs = kMany;
  clip.infer = [](const Node& n) { return InferGradientList(n, 0); };
  r.Register(clip);

  OpDef inject;
  inject.name = "InjectNonFinite";
  inject.domain = "mpc";
  inject.min_inputs = inject.max_inputs = 1;
  inject.infer = [](const Node& n) { return ops::SameAsInput(n, 0); };
  inject.stochastic = true;  // depends on the step: never merged
  r.Register(inject);

  OpDef update;
  update.name = "UpdateLossScale";
  update.domain = "mpc";
  update.min_inputs = 3;
  update.max_inputs = 4;  // + hold: nonzero on micro-batches that do not apply the step
  update.min_outputs = update.max_outputs = 0;
  update.has_side_effects = true;
  update.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    for (const Value* v : n.inputs) {
      if (v->dtype != DType::kF32 || NumElements(v->shape) != 1) {
        return absl::InvalidArgumentError(absl::StrCat("'", v->name, "' must be an f32 scalar"));
      }
    }
    return std::vector<TensorType>{};
  };
  r.Register(update);
}

}  // namespace mpc
