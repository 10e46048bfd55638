// Neural-network ops: Gemm, MatMul, Softmax, LogSoftmax, Dropout, the attention softmax
// MaskedSoftmax (mpc's own, made by passes/fuse_softmax.h), and the backward ops they need
// (SoftmaxGrad, LogSoftmaxGrad, MaskedSoftmaxGrad, DropoutGrad). Gemm and MatMul gradients
// are themselves Gemm/MatMul nodes, so backward GEMMs go through the same kernels (and
// later the same autocast and padding decisions) as forward ones.
//
// Gemm and MatMul take an optional attribute `mpc_output_dtype` (an ONNX TensorProto
// element type, e.g. 1 = float): the product is written in that dtype instead of the
// inputs' (bf16 operands with an f32 result, accumulated in f32 either way). Only f32
// or the inputs' own dtype is allowed.
#include "base/status_macros.h"
#include "graph/matmul_layout.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using Grads = absl::StatusOr<std::vector<Value*>>;
using Types = absl::StatusOr<std::vector<TensorType>>;

// The output dtype of a Gemm/MatMul: mpc_output_dtype when set, else the inputs'.
absl::StatusOr<DType> ProductDType(const Node& n) {
  const DType in = n.inputs[0]->dtype;
  if (!n.attrs.Has("mpc_output_dtype")) return in;
  const int64_t code = n.attrs.GetInt("mpc_output_dtype", 0);
  auto out = DTypeFromOnnx(static_cast<int32_t>(code));
  if (!out.ok() || (*out != DType::kF32 && *out != in)) {
    return absl::InvalidArgumentError(
        absl::StrCat(n.op, " node '", n.name, "': mpc_output_dtype ", code,
                     (out.ok() ? absl::StrCat(" (", DTypeName(*out), ")") : std::string(" (not an ONNX element type)")),
                     " is not allowed for ", DTypeName(in), " inputs; use 1 (float) or ", DTypeToOnnx(in), " (",
                     DTypeName(in), ")"));
  }
  return *out;
}

Types InferGemm(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* a = n.inputs[0];
  const Value* b = n.inputs[1];
  if (a->shape.size() != 2 || b->shape.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm needs 2-D A and B, got ", ShapeToString(a->shape), " and ", ShapeToString(b->shape)));
  }
  const bool ta = n.attrs.GetInt("transA", 0) != 0, tb = n.attrs.GetInt("transB", 0) != 0;
  const int64_t m = ta ? a->shape[1] : a->shape[0], ka = ta ? a->shape[0] : a->shape[1];
  const int64_t kb = tb ? b->shape[1] : b->shape[0], nn = tb ? b->shape[0] : b->shape[1];
  if (ka != kb) {
    return absl::InvalidArgumentError(
        absl::StrCat("Gemm contraction mismatch: A ", ShapeToString(a->shape), (ta ? " (transposed)" : ""),
                     " has K=", ka, " but B ", ShapeToString(b->shape), (tb ? " (transposed)" : ""), " has K=", kb));
  }
  if (n.inputs.size() > 2 && n.inputs[2]) {
    auto c = BroadcastShapes(n.inputs[2]->shape, {m, nn});
    if (!c.ok() || *c != Shape{m, nn}) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gemm bias C ", ShapeToString(n.inputs[2]->shape), " does not broadcast to [", m, ",", nn, "]"));
    }
  }
  MPC_ASSIGN_OR_RETURN(DType out, ProductDType(n));
  // C in the operands' dtype, or in the output's (an f32 bias added to the f32 result of
  // 16-bit operands: fuse-epilogues folds autocast's MatMul -> Cast -> f32 bias Add so).
  if (n.inputs.size() > 2 && n.inputs[2] && n.inputs[2]->dtype != a->dtype && n.inputs[2]->dtype != out) {
    return absl::InvalidArgumentError(absl::StrCat("Gemm node '", n.name, "': C '", n.inputs[2]->name, "' is ",
                                                   DTypeName(n.inputs[2]->dtype), "; it must be the operands' dtype (",
                                                   DTypeName(a->dtype), ") or the output's (", DTypeName(out),
                                                   "); insert a Cast"));
  }
  return std::vector<TensorType>{{out, {m, nn}}};
}

Grads GradGemm(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  Value* a = n.inputs[0];
  // With mpc_output_dtype the output (and so dY) may be f32 over bf16/f16 operands:
  // the backward GEMMs take operands of one dtype, the operands' own.
  Value* dy = b.Cast(dys[0], a->dtype);
  Value* w = n.inputs[1];
  const int64_t ta = n.attrs.GetInt("transA", 0) != 0, tb = n.attrs.GetInt("transB", 0) != 0;
  const float alpha = n.attrs.GetFloat("alpha", 1.0f), beta = n.attrs.GetFloat("beta", 1.0f);
  auto gemm = [&](Value* x, Value* y, int64_t tx, int64_t ty) {
    AttrMap attrs;
    attrs.Set("transA", tx);
    attrs.Set("transB", ty);
    if (alpha != 1.0f) attrs.Set("alpha", alpha);
    return b.Op("Gemm", {x, y}, std::move(attrs));
  };
  // Y = op(A) op(B).  dop(A) = dY op(B)^T,  dop(B) = op(A)^T dY; transposed storage
  // flips the product instead of materializing a transpose.
  Value* da = ta ? gemm(w, dy, tb, 1) : gemm(dy, w, 0, tb ? 0 : 1);
  Value* dw = tb ? gemm(dy, a, 1, ta) : gemm(a, dy, ta ? 0 : 1, 0);
  std::vector<Value*> grads{da, dw};
  if (n.inputs.size() > 2 && n.inputs[2]) {
    // Reduced from the incoming dY (f32 when the output is f32), rounded once at the end.
    Value* dc = b.ReduceSumTo(dys[0], n.inputs[2]->shape);
    if (beta != 1.0f) dc = b.Mul(dc, b.ScalarConstant(beta, dys[0]->dtype));
    grads.push_back(b.Cast(dc, n.inputs[2]->dtype));
  }
  return grads;
}

// MatMul's optional attributes mpc_trans_a / mpc_trans_b (set only by the fold-transposes
// pass): the operand is stored with its last two axes swapped, A as [..., K, M] and B as
// [..., N, K], and the kernels read it through strides instead of a transposed copy.
// mpc_perm_a / mpc_perm_b / mpc_perm_y (fold-batch-transposes) generalise this to any
// axis order of the operands and the result (graph/matmul_layout.h).
bool MatMulTransA(const Node& n) { return n.attrs.GetInt("mpc_trans_a", 0) != 0; }
bool MatMulTransB(const Node& n) { return n.attrs.GetInt("mpc_trans_b", 0) != 0; }

Types InferMatMul(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  MPC_ASSIGN_OR_RETURN(MatMulLayout layout, MatMulLayoutOf(n));
  MPC_ASSIGN_OR_RETURN(DType out, ProductDType(n));
  return std::vector<TensorType>{{out, layout.y_stored}};
}

Grads GradMatMul(GraphBuilder& b, const Node& n, const std::vector<Value*>& dys) {
  if (n.attrs.Has("mpc_perm_a") || n.attrs.Has("mpc_perm_b") || n.attrs.Has("mpc_perm_y")) {
    return absl::UnimplementedError(absl::StrCat("MatMul node '", n.name,
                                                 "' reads or writes through mpc_perm_*, which ",
                                                 "fold-batch-transposes sets after autodiff; it has no gradient rule"));
  }
  Value* x = n.inputs[0];
  Value* dy = b.Cast(dys[0], x->dtype);  // see GradGemm
  Value* w = n.inputs[1];
  // A transposed operand (mpc_trans_a/b) is differentiated as the Transpose it stands for.
  const bool ta = MatMulTransA(n), tb = MatMulTransB(n);
  if (ta) x = b.Transpose(x, ops::SwapLastTwo(static_cast<int>(x->shape.size())));
  if (tb) w = b.Transpose(w, ops::SwapLastTwo(static_cast<int>(w->shape.size())));
  Value* wt = b.Transpose(w, ops::SwapLastTwo(static_cast<int>(w->shape.size())));
  Value* xt = b.Transpose(x, ops::SwapLastTwo(static_cast<int>(x->shape.size())));
  Value* dx = b.ReduceSumTo(b.Op("MatMul", {dy, wt}), x->shape);
  Value* dw = b.ReduceSumTo(b.Op("MatMul", {xt, dy}), w->shape);
  if (ta) dx = b.Transpose(dx, ops::SwapLastTwo(static_cast<int>(dx->shape.size())));
  if (tb) dw = b.Transpose(dw, ops::SwapLastTwo(static_cast<int>(dw->shape.size())));
  return std::vector<Value*>{dx, dw};
}

Types InferSoftmaxLike(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  MPC_ASSIGN_OR_RETURN(int axis,
                       NormalizeAxis(n.attrs.GetInt("axis", -1), static_cast<int>(n.inputs[0]->shape.size())));
  (void)axis;
  return ops::SameAsInput(n, 0);
}

OpDef SoftmaxLike(const std::string& name, const std::string& grad_op) {
  OpDef def;
  def.name = name;
  def.min_inputs = def.max_inputs = 1;
  def.infer = InferSoftmaxLike;
  def.grad = [grad_op](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
    AttrMap attrs;
    attrs.Set("axis", n.attrs.GetInt("axis", -1));
    return std::vector<Value*>{b.Op(grad_op, {dy[0], n.outputs[0]}, std::move(attrs))};
  };
  return def;
}

OpDef SoftmaxLikeGrad(const std::string& name) {
  OpDef def;
  def.name = name;
  def.domain = "mpc";
  def.min_inputs = def.max_inputs = 2;
  def.infer = [](const Node& n) -> Types {
    MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
    return ops::SameAsInput(n, 0);
  };
  return def;
}

// MaskedSoftmax(x, keep?): y = softmax(where(keep, scale * x, -inf)) over the last axis,
// `scale` a float attribute (default 1), `keep` an optional bool tensor that broadcasts to
// x (ONNX's unidirectional rule: the causal mask [1, 1, T, T] against scores [B, H, T, T]).
// It is attention's scale, mask and softmax in one pass; a row with nothing kept is NaN,
// as the unfused chain's would be.
Types InferMaskedSoftmax(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  const Value* x = n.inputs[0];
  if (x->shape.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("MaskedSoftmax node '", n.name, "': x must have at least one axis (its last is the softmax's)"));
  }
  if (n.inputs.size() > 1 && n.inputs[1]) {
    const Value* keep = n.inputs[1];
    if (keep->dtype != DType::kBool) {
      return absl::InvalidArgumentError(absl::StrCat("MaskedSoftmax node '", n.name, "': the mask '", keep->name,
                                                     "' is ", DTypeName(keep->dtype), "; it must be bool"));
    }
    auto both = BroadcastShapes(keep->shape, x->shape);
    if (!both.ok() || *both != x->shape) {
      return absl::InvalidArgumentError(absl::StrCat("MaskedSoftmax node '", n.name, "': the mask's shape ",
                                                     ShapeToString(keep->shape), " does not broadcast to x's ",
                                                     ShapeToString(x->shape)));
    }
  }
  return ops::SameAsInput(n, 0);
}

// dx = scale * y * (dy - sum(dy * y)): masked positions have y = 0, so their gradient is 0
// without reading the mask.
Grads GradMaskedSoftmax(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  AttrMap attrs;
  attrs.Set("scale", n.attrs.GetFloat("scale", 1.0f));
  Value* dx = b.Op("MaskedSoftmaxGrad", {dy[0], n.outputs[0]}, std::move(attrs));
  if (n.inputs.size() > 1) return std::vector<Value*>{dx, nullptr};
  return std::vector<Value*>{dx};
}

// ONNX Dropout: (data, ratio?, training_mode?) -> (output, mask). mpc always creates the
// mask output (bool) because the gradient needs it. The attribute `mpc_training`, set by
// the compiler, overrides training_mode: 1 in training programs, 0 in evaluation.
Types InferDropout(const Node& n) {
  MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
  MPC_ASSIGN_OR_RETURN(double ratio, ops::ConstantScalar(n, 1, 0.5));
  if (ratio < 0 || ratio >= 1) {
    return absl::InvalidArgumentError(absl::StrCat("Dropout ratio ", ratio, " must be in [0, 1)"));
  }
  MPC_RETURN_IF_ERROR(ops::ConstantScalar(n, 2, 0).status());
  const Value* x = n.inputs[0];
  return std::vector<TensorType>{{x->dtype, x->shape}, {DType::kBool, x->shape}};
}

Grads GradDropout(GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) {
  auto ratio = ops::ConstantScalar(n, 1, 0.5);
  if (!ratio.ok()) return ratio.status();
  // In evaluation mode the forward pass is the identity (mask all true, no scaling),
  // so the gradient must not scale either: same mode rule as the kernel.
  auto mode = ops::ConstantScalar(n, 2, 0.0);
  if (!mode.ok()) return mode.status();
  const bool training = n.attrs.GetInt("mpc_training", *mode != 0.0 ? 1 : 0) != 0;
  AttrMap attrs;
  attrs.Set("ratio", training ? static_cast<float>(*ratio) : 0.0f);
  return std::vector<Value*>{b.Op("DropoutGrad", {dy[0], n.outputs[1]}, std::move(attrs)), nullptr, nullptr};
}

}  // namespace

void RegisterNnOps(OpRegistry& r) {
  OpDef gemm;
  gemm.name = "Gemm";
  gemm.min_inputs = 2;
  gemm.max_inputs = 3;
  gemm.infer = InferGemm;
  gemm.grad = GradGemm;
  gemm.padding = PaddingRule::kContraction;
  r.Register(gemm);

  OpDef matmul;
  matmul.name = "MatMul";
  matmul.min_inputs = matmul.max_inputs = 2;
  matmul.infer = InferMatMul;
  matmul.grad = GradMatMul;
  // pad-dims pads a MatMul whose B is a 2-D parameter like a Gemm (passes/pad_dims.cc).
  matmul.padding = PaddingRule::kContraction;
  r.Register(matmul);

  r.Register(SoftmaxLike("Softmax", "SoftmaxGrad"));
  r.Register(SoftmaxLike("LogSoftmax", "LogSoftmaxGrad"));
  r.Register(SoftmaxLikeGrad("SoftmaxGrad"));     // Y * (dY - sum(dY * Y))
  r.Register(SoftmaxLikeGrad("LogSoftmaxGrad"));  // dY - exp(Y) * sum(dY)

  OpDef masked_softmax;
  masked_softmax.name = "MaskedSoftmax";
  masked_softmax.domain = "mpc";
  masked_softmax.min_inputs = 1;
  masked_softmax.max_inputs = 2;
  masked_softmax.infer = InferMaskedSoftmax;
  masked_softmax.grad = GradMaskedSoftmax;
  r.Register(masked_softmax);
  OpDef masked_softmax_grad = SoftmaxLikeGrad("MaskedSoftmaxGrad");  // scale * Y * (dY - sum(dY * Y))
  r.Register(masked_softmax_grad);

  OpDef dropout;
  dropout.name = "Dropout";
  dropout.min_inputs = 1;
  dropout.max_inputs = 3;
  dropout.min_outputs = 1;
  dropout.max_outputs = 2;
  dropout.infer = InferDropout;
  dropout.grad = GradDropout;
  dropout.stochastic = true;
  dropout.padding = PaddingRule::kZeroPreservingUnary;  // drops or rescales: 0 stays 0
  r.Register(dropout);

  OpDef dropout_grad;
  dropout_grad.name = "DropoutGrad";  // dY * mask / (1 - ratio)
  dropout_grad.domain = "mpc";
  dropout_grad.min_inputs = dropout_grad.max_inputs = 2;
  dropout_grad.infer = [](const Node& n) { return ops::SameAsInput(n, 0); };
  r.Register(dropout_grad);
}

}  // namespace mpc
