// Helpers the pattern-fusion passes (fuse-gelu, fuse-rms-norm, fuse-softmax, fuse-layer-norm-edges) share
// to read a chain of elementary ops: its scalar coefficients and the intermediate results
// it may absorb.
#pragma once

#include <optional>

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

}  // namespace mpc::pattern
