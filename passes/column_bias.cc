// A GEMM product's bias add (see column_bias.h).
#include "passes/column_bias.h"

namespace mpc {
namespace {

// The bias of `add` when it adds a per-column vector ([N], or [1, ..., 1, N]) of `product`'s
// dtype to `product` [..., N] and nothing else; null otherwise.
Value* ColumnBias(const Node& add, const Value* product) {
  if (add.op != "Add" || add.inputs.size() != 2) return nullptr;
  Value* bias = add.inputs[0] == product ? add.inputs[1] : add.inputs[1] == product ? add.inputs[0] : nullptr;
  if (!bias || bias == product || bias->dtype != product->dtype || bias->shape.empty()) return nullptr;
  const int64_t n = product->shape.back();
  if (bias->shape.back() != n || NumElements(bias->shape) != n || bias->shape.size() > product->shape.size()) {
    return nullptr;
  }
  return add.outputs[0]->shape == product->shape ? bias : nullptr;
}

// The reader of `v` when it is the only one and `v` is no program output; null otherwise.
Node* SoleReader(const Graph& g, const Value* v) {
  return v->consumers.size() == 1 && !g.IsOutput(v) ? v->consumers[0] : nullptr;
}

}  // namespace

std::optional<ColumnBiasAdd> FindColumnBiasAdd(const Graph& g, const Value* product) {
  if (product->shape.empty()) return std::nullopt;
  Node* add = SoleReader(g, product);
  if (!add) return std::nullopt;
  const Value* summand = product;  // what the Add reads: the product, or its f32 widening
  if (add->op == "Cast" && DTypeSize(product->dtype) == 2 && add->outputs[0]->dtype == DType::kF32) {
    summand = add->outputs[0];
    add = SoleReader(g, summand);
    if (!add) return std::nullopt;
  }
  Value* bias = ColumnBias(*add, summand);
  if (!bias) return std::nullopt;
  return ColumnBiasAdd{add, bias, summand != product};
}

}  // namespace mpc
