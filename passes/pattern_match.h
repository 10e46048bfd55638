// Helpers the pattern-fusion passes (fuse-gelu, fuse-rms-norm, fuse-softmax,
// fuse-attention, fuse-layer-norm-edges) share to read a chain of elementary ops: its
// scalar coefficients and the intermediate results it may absorb.
#pragma once

#include <cmath>
#include <optional>
#include <utility>

#include "graph/graph.h"

namespace mpc::pattern {

// The value of a floating-point scalar constant, or nullopt for anything else.
inline std::optional<double> ScalarConstant(const Value* v) {
  if (!v || v->kind != ValueKind::kConstant || !IsFloating(v->dtype) || v->data.num_elements() != 1) {
    return std::nullopt;
  }
  return v->data.GetAsDouble(0);
}

// The value of a scalar constant of any numeric dtype (exporters write an exponent as an
// integer or a float), or nullopt for anything else.
inline std::optional<double> NumericScalar(const Value* v) {
  if (!v || v->kind != ValueKind::kConstant || v->data.num_elements() != 1) return std::nullopt;
  return v->data.GetAsDouble(0);
}

// A result a fused op may absorb: computed by a node and read once, by the chain itself.
inline bool Intermediate(const Graph& g, const Value* v) {
  return v && v->producer && v->consumers.size() == 1 && !g.IsOutput(v);
}

inline bool IsMinusInfinity(const Value* v) {
  std::optional<double> c = ScalarConstant(v);
  return c && std::isinf(*c) && *c < 0;
}

// v = Mul(x, c), Mul(c, x) or (allow_div) Div(x, c), absorbable, with c a scalar constant
// and x shaped and typed like v: x and the factor (1/c for Div).
inline std::optional<std::pair<Value*, double>> ScaledBy(const Graph& g, Value* v, bool allow_div) {
  if (!Intermediate(g, v) || (v->producer->op != "Mul" && !(allow_div && v->producer->op == "Div"))) {
    return std::nullopt;
  }
  Node* n = v->producer;
  const bool div = n->op == "Div";
  for (int c = div ? 1 : 0; c < 2; ++c) {
    std::optional<double> k = ScalarConstant(n->inputs[c]);
    Value* other = n->inputs[1 - c];
    if (!k || (div && *k == 0) || other->shape != v->shape || other->dtype != v->dtype) continue;
    return std::make_pair(other, div ? 1.0 / *k : *k);
  }
  return std::nullopt;
}

}  // namespace mpc::pattern
