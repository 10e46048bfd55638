// Normalisation, elementwise math and reduction ops:
//   Erf, Sqrt, Exp, Log, Reciprocal        unary; gradients from the input or output
//                                           (SqrtGrad (mpc): 0.5 dY / Y, 0 where dY = 0)
//   Pow(X, Y)                               broadcasting; Y may be any float or int dtype
//   Gelu (attr approximate none|tanh)       + GeluGrad(dY, X) (mpc); ONNX opset 20, so an
//                                           imported opset 13-17 model spells it with Erf
//   ReduceSum, ReduceMean                   axes as attribute or as input 1; keepdims,
//                                           noop_with_empty_axes; gradient: BroadcastTo
//   LayerNormalization (opset 17)           + LayerNormGrad (mpc); both take mpc's fusions
//                                           of their neighbours (passes/fuse_layer_norm_edges.h):
//                                           LayerNormalization's `mpc_output_dtype` (f32 X,
//                                           Y written bf16/f16, rounded once) and
//                                           LayerNormGrad's optional 6th input, added to dX
//   BatchNormalization (opset 15)           + BatchNormGrad, BatchNormStatsUpdate (mpc)
// Statistics (norms, reductions) are computed in f32 whatever the I/O dtype (f64 for
// f64), per docs/numerics.md; the saved statistics a gradient reuses are stored in f32 (f64
// for f64 inputs).
//
// LayerNormalization always produces (Y, Mean, InvStdDev); Mean/InvStdDev keep X's rank
// with 1 on the normalised axes (ONNX). BatchNormalization always produces five
// outputs: (Y, running_mean_out, running_var_out) as ONNX defines them, then mpc's
// saved statistics (mean, inv_std) for BatchNormGrad: the batch's in training, the
// running ones in evaluation. The mode is the attribute mpc_training (the compiler sets
// it: 1 in training programs, 0 in evaluation), else ONNX's training_mode. In training,
// running_mean_out = momentum * running_mean + (1 - momentum) * batch_mean and
// running_var_out likewise from the batch variance: in mpc's training programs
// (mpc_training = 1) the *unbiased* one, as PyTorch does; for a node that is only in
// ONNX's training_mode = 1 (no mpc_training attribute) the biased one, as the ONNX
// reference does. The normalisation always uses the biased variance. The batch-norm-stats
// pass (passes/batch_norm_stats.h) writes them back into the running-statistics state.
// With mpc_channels_last = 1 (passes/channels_last.h) BatchNormalization and BatchNormGrad
// take the channel axis last ([N, spatial..., C]), as a channels-last Conv writes it.
#include "graph/ops_norm.h"

#include <algorithm>
#include <cmath>

#include "base/status_macros.h"
#include "graph/ops_common.h"
#include "graph/ops_conv_util.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

// The dtype saved statistics are stored in: f64 for f64 data, f32 otherwise.
DType StatsDType(DType x) { return x == DType::kF64 ? DType::kF64 : DType::kF32; }

absl::Status NoGradThrough(const Node& n, const std::vector<Value*>& dys, int first, const char* what) {
  for (size_t i = first; i < dys.size(); ++i) {
    if (dys[i]) {
      return absl::UnimplementedError(absl::StrCat(n.op, " node '", n.name, "': output ", i, " (", what,
                                                   ") reaches the loss, but mpc does not differentiate it; "
                                                   "use only output 0 in the loss"));
    }
  }
  return absl::OkStatus();
}

OpDef UnaryMath(const std::string& name, PaddingRule padding, GradFn grad) {
  OpDef def;
  def.name = name;
  def.padding = padding;
  def.min_inputs = def.max_inputs = 1;
  def.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
    return ops::SameAsInput(n, 0);
  };
  def.grad = std::move(grad);
  return def;
}

// ---------------------------------------------------------------------------------
// Pow

Types InferPow(const Node& n) {
  const Value* x = n.inputs[0];
  if (!IsFloating(x->dtype)) {
    return absl::UnimplementedError(absl::StrCat("Pow with a ", DTypeName(x->dtype), " base '", x->name,
                                                 "' is not supported; mpc's Pow takes a float base (insert a Cast)"));
  }
  const Value* y = n.inputs[1];
  if (y->dtype == DType::kBool || y->dtype == DType::kU8 || y->dtype == DType::kF8E4M3 || y->dtype == DType::kF8E5M2) {
    return absl::InvalidArgumentError(absl::StrCat("Pow exponent '", y->name, "' has dtype ", DTypeName(y->dtype),
                                                   "; use a float, int32 or int64 exponent"));
  }
  MPC_ASSIGN_OR_RETURN(Shape shape, BroadcastShapes(x->shape, y->shape));
  return std::vector<TensorType>{{x->dtype, shape}};
}

Grads GradPow(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  Value* x = n.inputs[0];
  Value* e = n.inputs[1];
  Value* y = n.outputs[0];
  Value* dy = dys[0];
  // d/dx x^e = e * x^(e-1);  d/de x^e = x^e * ln(x).
  Value* ex = b.Cast(e, x->dtype);
  Value* em1 = b.Sub(ex, b.ScalarConstant(1.0, x->dtype));
  Value* dx = b.ReduceSumTo(b.Mul(dy, b.Mul(ex, b.Op("Pow", {x, em1}))), x->shape);
  Value* de = nullptr;
  if (IsFloating(e->dtype)) {
    Value* t = b.Mul(dy, b.Mul(y, b.Op("Log", {x})));
    de = b.Cast(b.ReduceSumTo(t, e->shape), e->dtype);
  }
  return std::vector<Value*>{dx, de};
}

// ---------------------------------------------------------------------------------
// Gelu

absl::Status CheckGeluMode(const Node& n) {
  const std::string mode = n.attrs.GetString("approximate", "none");
  if (mode != "none" && mode != "tanh") {
    return absl::InvalidArgumentError(
        absl::StrCat(n.op, " node '", n.name, "': approximate = '", mode, "'; ONNX Gelu takes \"none\" or \"tanh\""));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------
// Reductions

Shape KeptShape(const Shape& in, const std::vector<int>& axes) {
  Shape out = in;
  for (int a : axes) out[a] = 1;
  return out;
}

Types InferReduce(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  MPC_ASSIGN_OR_RETURN(std::vector<int> axes, ops::ReduceAxes(n));
  const Shape& in = n.inputs[0]->shape;
  Shape out;
  const bool keep = n.attrs.GetInt("keepdims", 1) != 0;
  for (int i = 0; i < static_cast<int>(in.size()); ++i) {
    const bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced)
      out.push_back(in[i]);
    else if (keep)
      out.push_back(1);
  }
  return std::vector<TensorType>{{n.inputs[0]->dtype, out}};
}

GradFn GradReduce(bool mean) {
  return [mean](GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) -> Grads {
    auto axes = ops::ReduceAxes(n);
    if (!axes.ok()) return axes.status();
    Value* x = n.inputs[0];
    Value* dy = b.Reshape(dys[0], KeptShape(x->shape, *axes));
    AttrMap attrs;
    attrs.Set("shape", x->shape);
    Value* dx = x->shape == dy->shape ? dy : b.Op("BroadcastTo", {dy}, std::move(attrs));
    if (mean) {
      int64_t count = 1;
      for (int a : *axes) count *= x->shape[a];
      if (count != 1) dx = b.Mul(dx, b.ScalarConstant(1.0 / static_cast<double>(count), x->dtype));
    }
    std::vector<Value*> grads{dx};
    grads.resize(n.inputs.size(), nullptr);
    return grads;
  };
}

OpDef Reduce(const std::string& name, bool mean) {
  OpDef def;
  def.name = name;
  def.min_inputs = 1;
  def.max_inputs = 2;
  def.infer = InferReduce;
  def.grad = GradReduce(mean);
  return def;
}

// ---------------------------------------------------------------------------------
// LayerNormalization

// Scale / B must broadcast to the normalised shape X.shape[axis:].
absl::Status CheckAffine(const Node& n, int i, const Shape& norm_shape) {
  if (i >= static_cast<int>(n.inputs.size()) || !n.inputs[i]) return absl::OkStatus();
  const Value* v = n.inputs[i];
  auto b = BroadcastShapes(v->shape, norm_shape);
  if (v->shape.size() > norm_shape.size() || !b.ok() || *b != norm_shape) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", v->name, "' has shape ", ShapeToString(v->shape), ", which does not broadcast to the normalised shape ",
        ShapeToString(norm_shape), " (X's dimensions from axis on); give it that shape"));
  }
  return absl::OkStatus();
}

// Y's dtype: X's, or mpc_output_dtype (an ONNX element type) where fuse-layer-norm-edges
// folded the Cast after an f32 LayerNormalization into it: bf16 or f16 from f32 only.
absl::StatusOr<DType> LayerNormOutputDType(const Node& n) {
  const DType in = n.inputs[0]->dtype;
  if (!n.attrs.Has("mpc_output_dtype")) return in;
  const int64_t code = n.attrs.GetInt("mpc_output_dtype", 0);
  auto out = DTypeFromOnnx(static_cast<int32_t>(code));
  if (in != DType::kF32 || !out.ok() || (*out != DType::kBF16 && *out != DType::kF16 && *out != in)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LayerNormalization node '", n.name, "': mpc_output_dtype ", code, " is not allowed for ",
                     DTypeName(in), " X; it narrows a float32 X's Y to bfloat16 (", DTypeToOnnx(DType::kBF16),
                     ") or float16 (", DTypeToOnnx(DType::kF16), "); remove the attribute or cast X to float32"));
  }
  return *out;
}

Types InferLayerNorm(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 3));
  MPC_ASSIGN_OR_RETURN(int axis, ops::LayerNormAxis(n));
  const Value* x = n.inputs[0];
  const Shape norm(x->shape.begin() + axis, x->shape.end());
  MPC_RETURN_IF_ERROR(CheckAffine(n, 1, norm));
  MPC_RETURN_IF_ERROR(CheckAffine(n, 2, norm));
  const int64_t stash = n.attrs.GetInt("stash_type", 1);
  if (stash != 1 && !(stash == 11 && x->dtype == DType::kF64)) {
    return absl::UnimplementedError(absl::StrCat(
        "stash_type ", stash, " is not supported for ", DTypeName(x->dtype),
        " input; mpc computes LayerNormalization statistics in float (stash_type 1), in double for double input"));
  }
  Shape stats = x->shape;
  for (size_t i = axis; i < stats.size(); ++i) stats[i] = 1;
  const DType sd = StatsDType(x->dtype);
  MPC_ASSIGN_OR_RETURN(const DType yd, LayerNormOutputDType(n));
  return std::vector<TensorType>{{yd, x->shape}, {sd, stats}, {sd, stats}};
}

Grads GradLayerNorm(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  MPC_RETURN_IF_ERROR(NoGradThrough(n, dys, 1, "Mean / InvStdDev"));
  if (n.attrs.Has("mpc_output_dtype")) {
    // The attribute is made after autodiff (fuse-layer-norm-edges); never differentiated.
    return absl::UnimplementedError(absl::StrCat("LayerNormalization node '", n.name,
                                                 "' has mpc_output_dtype, which mpc does not differentiate; cast Y "
                                                 "with a Cast node instead"));
  }
  AttrMap attrs;
  attrs.Set("axis", n.attrs.GetInt("axis", -1));
  Value* x = n.inputs[0];
  Value* scale = n.inputs[1];
  std::vector<Value*> g =
      b.OpN("LayerNormGrad", {b.Cast(dys[0], x->dtype), x, scale, n.outputs[1], n.outputs[2]}, std::move(attrs));
  if (g.size() != 3) return b.status().ok() ? absl::InternalError("LayerNormGrad: no outputs") : b.status();
  std::vector<Value*> grads{g[0], b.ReduceSumTo(g[1], scale->shape)};
  if (n.inputs.size() > 2 && n.inputs[2]) grads.push_back(b.ReduceSumTo(g[2], n.inputs[2]->shape));
  return grads;
}

// LayerNormGrad(dY, X, Scale, Mean, InvStdDev[, Addend]) -> (dX, dScale, dB[, dXSum[,
// dXNarrow]]); dScale and dB have the normalised shape X.shape[axis:]. With Addend (X's
// dtype and shape), dX is the gradient plus Addend, rounded once: the gradient sum a
// residual connection makes, folded in by fuse-layer-norm-edges, which may also ask for
// dXSum (attribute mpc_dx_column_sum = 1: dX summed over the rows, normalised shape) and
// dXNarrow (attribute mpc_narrow_dx_dtype: dX rounded to bf16/f16, for f32 X; dXSum is
// then there too).
Types InferLayerNormGrad(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 3));
  MPC_ASSIGN_OR_RETURN(int axis, ops::LayerNormAxis(n));
  const Value* x = n.inputs[1];
  if (n.inputs[0]->shape != x->shape) return absl::InvalidArgumentError("dY and X shapes differ");
  if (n.inputs.size() > 5 && n.inputs[5]) {
    const Value* addend = n.inputs[5];
    if (addend->dtype != x->dtype || addend->shape != x->shape) {
      return absl::InvalidArgumentError(absl::StrCat("LayerNormGrad node '", n.name, "': addend '", addend->name,
                                                     "' is ", DTypeName(addend->dtype), ShapeToString(addend->shape),
                                                     "; it must be X's ", DTypeName(x->dtype), ShapeToString(x->shape),
                                                     " (it is added to dX element by element)"));
    }
  }
  const Shape norm(x->shape.begin() + axis, x->shape.end());
  MPC_RETURN_IF_ERROR(CheckAffine(n, 2, norm));
  Shape stats = x->shape;
  for (size_t i = axis; i < stats.size(); ++i) stats[i] = 1;
  for (int i : {3, 4}) {
    if (NumElements(n.inputs[i]->shape) != NumElements(stats) || !IsFloating(n.inputs[i]->dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("statistics '", n.inputs[i]->name, "' must be float ", ShapeToString(stats)));
    }
  }
  std::vector<TensorType> types{{x->dtype, x->shape}, {x->dtype, norm}, {x->dtype, norm}};
  // The epilogue fuse-layer-norm-edges folds in: dX summed over the rows (the bias
  // gradient of the layer that wrote the residual stream) and dX in a 16-bit copy (what
  // the low-precision GEMMs before it read).
  const bool column_sum = n.attrs.GetInt("mpc_dx_column_sum", 0) != 0;
  if (column_sum || n.attrs.Has("mpc_narrow_dx_dtype")) types.push_back({x->dtype, norm});
  if (n.attrs.Has("mpc_narrow_dx_dtype")) {
    const int64_t code = n.attrs.GetInt("mpc_narrow_dx_dtype", 0);
    auto narrow = DTypeFromOnnx(static_cast<int32_t>(code));
    if (x->dtype != DType::kF32 || !narrow.ok() || (*narrow != DType::kBF16 && *narrow != DType::kF16)) {
      return absl::InvalidArgumentError(
          absl::StrCat("LayerNormGrad node '", n.name, "': mpc_narrow_dx_dtype ", code, " is not allowed for ",
                       DTypeName(x->dtype), " X; it copies a float32 dX to bfloat16 (", DTypeToOnnx(DType::kBF16),
                       ") or float16 (", DTypeToOnnx(DType::kF16), "); remove the attribute"));
    }
    types.push_back({*narrow, x->shape});
  }
  return types;
}

// ---------------------------------------------------------------------------------
// BatchNormalization

Types InferBatchNorm(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* x = n.inputs[0];
  if (x->shape.size() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("X '", x->name, "' has shape ", ShapeToString(x->shape),
                                                   "; BatchNormalization needs [N, C, ...]"));
  }
  const int64_t c = conv::AsChannelsFirst(n, x->shape)[1];
  const char* names[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (int i = 1; i < 5; ++i) {
    MPC_ASSIGN_OR_RETURN(const Value* v, ops::RequiredInput(n, i));
    if (v->shape != Shape{c} || !IsFloating(v->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat(names[i], " '", v->name, "' is ", DTypeName(v->dtype),
                                                     ShapeToString(v->shape), "; it must be a float [", c,
                                                     "] (one value per channel of X ", ShapeToString(x->shape), ")"));
    }
  }
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 1, 3));
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 3, 5));
  const float momentum = n.attrs.GetFloat("momentum", 0.9f);
  if (!(momentum >= 0.0f && momentum <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("momentum ", momentum, " must be in [0, 1]"));
  }
  const DType md = n.inputs[3]->dtype, sd = StatsDType(x->dtype);
  return std::vector<TensorType>{{x->dtype, x->shape}, {md, {c}}, {md, {c}}, {sd, {c}}, {sd, {c}}};
}

Grads GradBatchNorm(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  MPC_RETURN_IF_ERROR(NoGradThrough(n, dys, 1, "running or saved statistics"));
  const bool training = ops::BatchNormTraining(n);
  Value* x = n.inputs[0];
  Value* scale = n.inputs[1];
  AttrMap attrs;
  attrs.Set("training_mode", static_cast<int64_t>(training));
  if (conv::ChannelsLast(n)) attrs.Set("mpc_channels_last", int64_t{1});
  std::vector<Value*> g =
      b.OpN("BatchNormGrad", {b.Cast(dys[0], x->dtype), x, scale, n.outputs[3], n.outputs[4]}, std::move(attrs));
  if (g.size() != 3) return b.status().ok() ? absl::InternalError("BatchNormGrad: no outputs") : b.status();
  std::vector<Value*> grads{g[0], g[1], b.Cast(g[2], n.inputs[2]->dtype), nullptr, nullptr};
  if (!training) {
    // Evaluation is an affine map of X with fixed statistics:
    //   dmean = -scale * inv_std * dB;   dvar = -0.5 * scale * inv_std^2 * dscale.
    Value* mean = n.inputs[3];
    const DType dt = mean->dtype;
    Value* inv = b.Cast(n.outputs[4], dt);
    Value* s = b.Cast(scale, dt);
    grads[3] = b.Neg(b.Mul(b.Mul(s, inv), b.Cast(g[2], dt)));
    grads[4] = b.Mul(b.Mul(b.Mul(s, b.Mul(inv, inv)), b.Cast(g[1], dt)), b.ScalarConstant(-0.5, dt));
  }
  return grads;
}

// BatchNormGrad(dY, X, scale, saved_mean, saved_inv_std) -> (dX, dscale, dB); attribute
// training_mode: 1 differentiates through the batch statistics, 0 treats them as fixed.
Types InferBatchNormGrad(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
  const Value* x = n.inputs[1];
  if (n.inputs[0]->shape != x->shape || x->shape.size() < 2) {
    return absl::InvalidArgumentError("dY and X must have the same [N, C, ...] shape");
  }
  const int64_t c = conv::AsChannelsFirst(n, x->shape)[1];
  for (int i = 2; i < 5; ++i) {
    if (n.inputs[i]->shape != Shape{c} || !IsFloating(n.inputs[i]->dtype)) {
      return absl::InvalidArgumentError(absl::StrCat("'", n.inputs[i]->name, "' must be a float [", c, "]"));
    }
  }
  const DType sd = n.inputs[2]->dtype;
  return std::vector<TensorType>{{x->dtype, x->shape}, {sd, {c}}, {sd, {c}}};
}

}  // namespace

namespace ops {

absl::StatusOr<std::vector<int>> ReduceAxes(const Node& n) {
  const int rank = static_cast<int>(n.inputs[0]->shape.size());
  std::vector<int64_t> raw;
  bool given = false;
  if (n.inputs.size() > 1 && n.inputs[1]) {
    if (n.inputs[1]->dtype != DType::kI64 && n.inputs[1]->dtype != DType::kI32) {
      return absl::InvalidArgumentError(absl::StrCat("axes input '", n.inputs[1]->name, "' must be int64"));
    }
    if (NumElements(n.inputs[1]->shape) != 0) {
      MPC_ASSIGN_OR_RETURN(raw, ConstantInts(n, 1));
    }
    given = true;
  } else if (n.attrs.Has("axes")) {
    raw = n.attrs.GetInts("axes", {});
    given = true;
  }
  std::vector<int> axes;
  if (!given || raw.empty()) {
    if (n.attrs.GetInt("noop_with_empty_axes", 0) != 0) return axes;
    for (int i = 0; i < rank; ++i) axes.push_back(i);
    return axes;
  }
  for (int64_t a : raw) {
    auto ax = NormalizeAxis(a, rank);
    if (!ax.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("axis ", a, " is out of range for input rank ", rank));
    }
    if (std::find(axes.begin(), axes.end(), *ax) != axes.end()) {
      return absl::InvalidArgumentError(absl::StrCat("axis ", a, " is given twice"));
    }
    axes.push_back(*ax);
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

bool BatchNormTraining(const Node& n) {
  if (n.attrs.Has("mpc_training")) return n.attrs.GetInt("mpc_training", 0) != 0;
  return n.attrs.GetInt("training_mode", 0) != 0;
}

absl::StatusOr<int> LayerNormAxis(const Node& n) {
  const bool grad = n.op == "LayerNormGrad" || n.op == "RmsNormGrad";  // X is input 1 of a gradient
  const int rank = static_cast<int>(n.inputs[grad ? 1 : 0]->shape.size());
  const int64_t axis = n.attrs.GetInt("axis", -1);
  auto ax = NormalizeAxis(axis, rank);
  if (!ax.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("axis ", axis, " is out of range for X of rank ", rank));
  }
  return *ax;
}

}  // namespace ops

void RegisterNormOps(OpRegistry& r) {
  using PR = PaddingRule;
  r.Register(UnaryMath(
      "Erf", PR::kZeroPreservingUnary, [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
        // d erf(x) = 2/sqrt(pi) * exp(-x^2)
        Value* x = n.inputs[0];
        Value* e = b.Op("Exp", {b.Neg(b.Mul(x, x))});
        return std::vector<Value*>{b.Mul(dy[0], b.Mul(e, b.ScalarConstant(2.0 / std::sqrt(M_PI), x->dtype)))};
      }));
  r.Register(UnaryMath("Sqrt", PR::kZeroPreservingUnary,
                       [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
                         return std::vector<Value*>{b.Op("SqrtGrad", {dy[0], n.outputs[0]})};
                       }));
  // SqrtGrad(dY, Y) = 0.5 * dY / Y, and 0 where dY is 0: zero-padded columns (Y = 0)
  // keep a zero gradient instead of 0/0.
  OpDef sqrt_grad;
  sqrt_grad.name = "SqrtGrad";
  sqrt_grad.domain = "mpc";
  sqrt_grad.min_inputs = sqrt_grad.max_inputs = 2;
  sqrt_grad.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
    if (n.inputs[0]->shape != n.inputs[1]->shape) return absl::InvalidArgumentError("dY and Y shapes differ");
    return ops::SameAsInput(n, 0);
  };
  r.Register(sqrt_grad);
  r.Register(UnaryMath("Exp", PR::kOpaque, [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    return std::vector<Value*>{b.Mul(dy[0], n.outputs[0])};
  }));
  r.Register(UnaryMath("Log", PR::kOpaque, [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    return std::vector<Value*>{b.Div(dy[0], n.inputs[0])};
  }));
  r.Register(
      UnaryMath("Reciprocal", PR::kOpaque, [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
        // d(1/x) = -y^2
        Value* y = n.outputs[0];
        return std::vector<Value*>{b.Neg(b.Mul(dy[0], b.Mul(y, y)))};
      }));

  OpDef pow;
  pow.name = "Pow";
  pow.min_inputs = pow.max_inputs = 2;
  pow.infer = InferPow;
  pow.grad = GradPow;
  r.Register(pow);

  OpDef gelu = UnaryMath("Gelu", PR::kZeroPreservingUnary,
                         [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
                           AttrMap attrs;
                           attrs.Set("approximate", n.attrs.GetString("approximate", "none"));
                           return std::vector<Value*>{b.Op("GeluGrad", {dy[0], n.inputs[0]}, std::move(attrs))};
                         });
  gelu.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
    MPC_RETURN_IF_ERROR(CheckGeluMode(n));
    return ops::SameAsInput(n, 0);
  };
  r.Register(gelu);

  OpDef gelu_grad;
  gelu_grad.name = "GeluGrad";  // (dY, X) -> dY * gelu'(X)
  gelu_grad.domain = "mpc";
  gelu_grad.min_inputs = gelu_grad.max_inputs = 2;
  gelu_grad.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
    MPC_RETURN_IF_ERROR(CheckGeluMode(n));
    if (n.inputs[0]->shape != n.inputs[1]->shape) return absl::InvalidArgumentError("dY and X shapes differ");
    return ops::SameAsInput(n, 0);
  };
  r.Register(gelu_grad);

  r.Register(Reduce("ReduceSum", /*mean=*/false));
  r.Register(Reduce("ReduceMean", /*mean=*/true));

  OpDef ln;
  ln.name = "LayerNormalization";
  ln.min_inputs = 2;
  ln.max_inputs = 3;
  ln.min_outputs = 1;
  ln.max_outputs = 3;
  ln.infer = InferLayerNorm;
  ln.grad = GradLayerNorm;
  r.Register(ln);

  OpDef ln_grad;
  ln_grad.name = "LayerNormGrad";
  ln_grad.domain = "mpc";
  ln_grad.min_inputs = 5;
  ln_grad.max_inputs = 6;
  ln_grad.min_outputs = 3;
  ln_grad.max_outputs = 5;
  ln_grad.infer = InferLayerNormGrad;
  r.Register(ln_grad);

  OpDef bn;
  bn.name = "BatchNormalization";
  bn.min_inputs = bn.max_inputs = 5;
  bn.min_outputs = 1;
  bn.max_outputs = 5;
  bn.infer = InferBatchNorm;
  bn.grad = GradBatchNorm;
  bn.padding = PaddingRule::kChannelwise;  // scale, bias and running statistics padded with zeros
  r.Register(bn);

  OpDef bn_grad;
  bn_grad.name = "BatchNormGrad";
  bn_grad.domain = "mpc";
  bn_grad.min_inputs = bn_grad.max_inputs = 5;
  bn_grad.min_outputs = bn_grad.max_outputs = 3;
  bn_grad.infer = InferBatchNormGrad;
  r.Register(bn_grad);

  // BatchNormStatsUpdate(running_mean, running_var, new_mean, new_var): copies the new
  // values into the running statistics in place (passes/batch_norm_stats.h).
  OpDef stats;
  stats.name = "BatchNormStatsUpdate";
  stats.domain = "mpc";
  stats.min_inputs = stats.max_inputs = 4;
  stats.min_outputs = stats.max_outputs = 0;
  stats.has_side_effects = true;
  stats.infer = [](const Node& n) -> Types {
    for (int i : {2, 3}) {
      const Value* state = n.inputs[i - 2];
      const Value* v = n.inputs[i];
      if (v->dtype != state->dtype || v->shape != state->shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", v->name, "' is ", DTypeName(v->dtype), ShapeToString(v->shape), " but the running statistic '",
            state->name, "' it updates is ", DTypeName(state->dtype), ShapeToString(state->shape)));
      }
    }
    return std::vector<TensorType>{};
  };
  r.Register(stats);
}

}  // namespace mpc
