// The accumulate-gradients pass (see accumulate_gradients.h).
#include "passes/accumulate_gradients.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"

namespace mpc {

absl::StatusOr<bool> AccumulateGradientsPass::Run(Graph& g) {
  GradAccumulationResult& result = *result_;
  result = GradAccumulationResult{};
  result.steps = steps_;
  if (steps_ < 1) return absl::InvalidArgumentError(absl::StrCat("accumulate_steps ", steps_, " must be >= 1"));
  if (steps_ == 1) return false;
  if (autodiff_->param_grads.empty()) return absl::FailedPreconditionError("no gradients; autodiff must run first");
  Value* seed = autodiff_->loss_seed;
  if (!seed) return absl::FailedPreconditionError("autodiff recorded no loss seed");

  GraphBuilder b(&g, "grad_accum/");
  // Every reader of the seed reads seed / K instead (the Mul keeps reading the seed).
  Value* scaled_seed = b.Op("Mul", {seed, b.ScalarConstant(1.0 / steps_, seed->dtype)});
  MPC_RETURN_IF_ERROR(b.status());
  const std::vector<Node*> readers = seed->consumers;
  for (Node* reader : readers) {
    if (reader == scaled_seed->producer) continue;
    for (int i = 0; i < static_cast<int>(reader->inputs.size()); ++i) {
      if (reader->inputs[i] == seed) g.SetNodeInput(reader, i, scaled_seed);
    }
  }

  result.first = g.AddInput("grad_accum/first", DType::kF32, {});
  result.hold = g.AddInput("grad_accum/hold", DType::kF32, {});
  // FP8 delayed scaling: one scale update per optimizer step (see the header).
  for (const auto& n : g.nodes()) {
    if (n->op != "Fp8UpdateScales" || n->attrs.GetInt("held", 0) != 0) continue;
    g.InsertNodeInput(n.get(), static_cast<int>(n->inputs.size()), result.hold);
    n->attrs.Set("held", int64_t{1});
  }
  for (const auto& [param, grad] : autodiff_->param_grads) {
    Value* acc = g.AddState(param->name + ".grad_accum", Tensor(DType::kF32, param->shape));
    acc->logical_shape = param->logical_shape;  // padded like its parameter, unpadded in checkpoints
    Value* sum = b.Op("AccumulateGradient", {acc, grad, result.first});
    MPC_RETURN_IF_ERROR(b.status());
    result.param_grads.emplace_back(param, sum);
  }
  return true;
}

}  // namespace mpc
