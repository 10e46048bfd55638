// Import-time evaluation of float math whose every input is a constant: the subgraphs
// exporters write to compute buffers (a rotary table cos(position * inv_freq), a causal mask
// Trilu(ones) * -inf, an attention scale 1/sqrt(d)). PyTorch recomputes them every step from
// buffers it never trains; mpc computes them once, at import, into constants, as f32 (or
// f64) host loops in the input's dtype: IEEE results of + - * / sqrt are the kernels' own;
// sin, cos, exp, log, tanh, erf come from the C library (within an ulp of the kernels').
//
// Folded here: the elementwise ops Neg Abs Sqrt Reciprocal Exp Log Sin Cos Tanh Sigmoid Erf
// Floor Ceil Relu, Add Sub Mul Div Pow Max Min Mod (numpy broadcasting), Trilu, Transpose,
// ScatterND, GatherElements, GatherND, CumSum and MatMul, on f32/f64 (Trilu, Transpose,
// ScatterND, GatherElements and GatherND on any dtype; Mod, CumSum, Neg, Abs, Max and Min
// on integers too).
// Shape arithmetic on integers and data movement stay graph/ops_tensor.h's FoldStatic.
//
// Some ops mpc reads only this way (FoldOnlyOps: Sin, Cos, Trilu, Mod, Abs, Floor, Ceil, Max,
// Min, ScatterND, GatherElements, GatherND, CumSum: Swin's shifted-window masks, BERT's
// position ids, the attention masks transformers builds): mpc has no kernel for them, and a model that computes them from its inputs gets an
// error naming the node.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/attributes.h"
#include "graph/tensor.h"

namespace mpc {

// The folded value, or nullopt when this op, these dtypes or this size are not folded here.
std::optional<Tensor> FoldConstantMath(const std::string& op, const std::vector<const Tensor*>& inputs,
                                       const AttrMap& attrs);

// Ops of the default domain mpc imports only when every input is a constant.
const std::vector<std::string>& FoldOnlyOps();
bool IsFoldOnlyOp(const std::string& op);

}  // namespace mpc
