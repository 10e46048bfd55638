// Elementwise ops: broadcasting arithmetic (Add, Sub, Mul, Div), Neg and the
// activations (Relu, Sigmoid, Tanh), with their gradients. Activation gradients are
// written in terms of the op's *output* (ReluGrad, SigmoidGrad, TanhGrad), so the
// forward input need not stay alive for the backward pass. Silu (mpc: x * sigmoid(x),
// which passes/fuse_silu.h makes of the exporters' Sigmoid and Mul) is the exception: its
// gradient SiluGrad(dY, X) reads the input, as PyTorch's silu_backward does.
#include "base/status_macros.h"
#include "graph/ops_common.h"

namespace mpc {
namespace {

using ops::BroadcastBinary;
using ops::SameAsInput;

using Grads = absl::StatusOr<std::vector<Value*>>;

OpDef Binary(const std::string& name, PaddingRule padding, GradFn grad) {
  OpDef def;
  def.name = name;
  def.padding = padding;
  def.min_inputs = def.max_inputs = 2;
  def.infer = BroadcastBinary;
  def.grad = std::move(grad);
  return def;
}

OpDef Unary(const std::string& name, PaddingRule padding, GradFn grad, const std::string& domain = "") {
  OpDef def;
  def.name = name;
  def.padding = padding;
  def.domain = domain;
  def.min_inputs = def.max_inputs = 1;
  def.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_RETURN_IF_ERROR(ops::CheckFloating(n, 0));
    return SameAsInput(n, 0);
  };
  def.grad = std::move(grad);
  return def;
}

// Backward-only ops of the form f(dY, Y) -> dX, same shape as dY.
OpDef ActivationGrad(const std::string& name) {
  OpDef def;
  def.name = name;
  def.domain = "mpc";
  def.min_inputs = def.max_inputs = 2;
  def.infer = [](const Node& n) -> absl::StatusOr<std::vector<TensorType>> {
    MPC_RETURN_IF_ERROR(ops::CheckSameDType(n, 0, 2));
    if (n.inputs[0]->shape != n.inputs[1]->shape) {
      return absl::InvalidArgumentError("gradient and output shapes differ");
    }
    return SameAsInput(n, 0);
  };
  return def;
}

}  // namespace

void RegisterElementwiseOps(OpRegistry& r) {
  r.Register(Binary(
      "Add", PaddingRule::kZeroPreservingBinary,
      [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
        return std::vector<Value*>{b.ReduceSumTo(dy[0], n.inputs[0]->shape), b.ReduceSumTo(dy[0], n.inputs[1]->shape)};
      }));
  r.Register(Binary("Sub", PaddingRule::kZeroPreservingBinary,
                    [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
                      return std::vector<Value*>{b.ReduceSumTo(dy[0], n.inputs[0]->shape),
                                                 b.ReduceSumTo(b.Neg(dy[0]), n.inputs[1]->shape)};
                    }));
  r.Register(Binary(
      "Mul", PaddingRule::kZeroPreservingBinary,
      [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
        Value* x = n.inputs[0];
        Value* y = n.inputs[1];
        return std::vector<Value*>{b.ReduceSumTo(b.Mul(dy[0], y), x->shape), b.ReduceSumTo(b.Mul(dy[0], x), y->shape)};
      }));
  r.Register(
      Binary("Div", PaddingRule::kOpaque, [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
        // d(a/b)/da = 1/b; d(a/b)/db = -(a/b)/b, written with the output to reuse it.
        Value* den = n.inputs[1];
        Value* quotient = n.outputs[0];
        return std::vector<Value*>{b.ReduceSumTo(b.Div(dy[0], den), n.inputs[0]->shape),
                                   b.ReduceSumTo(b.Neg(b.Div(b.Mul(dy[0], quotient), den)), den->shape)};
      }));
  r.Register(Unary("Neg", PaddingRule::kZeroPreservingUnary,
                   [](GraphBuilder& b, const Node&, const std::vector<Value*>& dy) -> Grads {
                     return std::vector<Value*>{b.Neg(dy[0])};
                   }));
  r.Register(Unary("Relu", PaddingRule::kZeroPreservingUnary,
                   [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
                     return std::vector<Value*>{b.Op("ReluGrad", {dy[0], n.outputs[0]})};
                   }));
  r.Register(Unary("Sigmoid", PaddingRule::kOpaque,
                   [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
                     return std::vector<Value*>{b.Op("SigmoidGrad", {dy[0], n.outputs[0]})};
                   }));
  r.Register(Unary("Tanh", PaddingRule::kZeroPreservingUnary,
                   [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
                     return std::vector<Value*>{b.Op("TanhGrad", {dy[0], n.outputs[0]})};
                   }));
  r.Register(Unary(
      "Silu", PaddingRule::kZeroPreservingUnary,
      [](GraphBuilder& b, const Node& n, const std::vector<Value*>& dy) -> Grads {
        return std::vector<Value*>{b.Op("SiluGrad", {dy[0], n.inputs[0]})};
      },
      "mpc"));
  r.Register(ActivationGrad("ReluGrad"));     // dY * (Y > 0)
  r.Register(ActivationGrad("SigmoidGrad"));  // dY * Y * (1 - Y)
  r.Register(ActivationGrad("TanhGrad"));     // dY * (1 - Y^2)
  r.Register(ActivationGrad("SiluGrad"));     // dY * s * (1 + X * (1 - s)), s = sigmoid(X): reads X
}

}  // namespace mpc
