// FLOP estimates from shapes (see flops.h).
#include "graph/flops.h"

#include <string>

#include "graph/matmul_layout.h"

namespace mpc {
namespace {

double Elements(const Value* v) { return v ? static_cast<double>(NumElements(v->shape)) : 0.0; }

double OutputElements(const Node& n) {
  double total = 0;
  for (const Value* out : n.outputs) total += Elements(out);
  return total;
}

// A GEMM's contracted length: A is [M, K], or [K, M] when read transposed.
double GemmDepth(const Node& n) {
  const Value* a = n.inputs.empty() ? nullptr : n.inputs[0];
  if (!a || a->shape.size() != 2) return 0;
  return static_cast<double>(n.attrs.GetInt("transA", 0) != 0 ? a->shape[0] : a->shape[1]);
}

}  // namespace

bool IsContraction(const Node& node) {
  const std::string& op = node.op;
  return op == "Gemm" || op == "MatMul" || op == "Fp8Gemm" || op == "Conv" || op == "ConvGradInput" ||
         op == "ConvGradWeight" || op == "FusedAttention" || op == "FusedAttentionGrad";
}

double EstimateFlops(const Node& n) {
  const std::string& op = n.op;
  if (n.outputs.empty()) return 0;
  const double out = Elements(n.outputs[0]);
  if (op == "Gemm" || op == "Fp8Gemm") return 2.0 * out * GemmDepth(n);
  if (op == "MatMul") {
    absl::StatusOr<MatMulLayout> layout = MatMulLayoutOf(n);
    if (!layout.ok() || layout->a.empty()) return OutputElements(n);
    return 2.0 * out * static_cast<double>(layout->a.back());
  }
  if (op == "Conv" || op == "ConvGradInput" || op == "ConvGradWeight") {
    // Every variant does the forward convolution's multiply-adds: output positions x
    // output channels x (input channels per group x kernel), i.e. 2 x |dY| x |W| / M.
    const Value* w = n.inputs.size() > 1 ? n.inputs[1] : nullptr;
    const Value* dy = op == "Conv" ? n.outputs[0] : n.inputs[0];
    if (op == "ConvGradWeight") w = n.outputs[0];
    if (!w || w->shape.empty() || w->shape[0] == 0) return OutputElements(n);
    return 2.0 * Elements(dy) * Elements(w) / static_cast<double>(w->shape[0]);
  }
  if (op == "FusedAttention" || op == "FusedAttentionGrad") {
    // Scores (Sq x Sk x D) and the weighted sum (Sq x Sk x Dv); the backward about twice that.
    const size_t q_at = op == "FusedAttention" ? 0 : 1;
    if (n.inputs.size() < q_at + 2) return OutputElements(n);
    const Value* q = n.inputs[q_at];
    const Value* k = n.inputs[q_at + 1];
    if (q->shape.size() < 2 || k->shape.size() < 2) return OutputElements(n);
    const double forward = 4.0 * Elements(q) * static_cast<double>(k->shape[k->shape.size() - 2]);
    return op == "FusedAttention" ? forward : 2.0 * forward;
  }
  return OutputElements(n);
}

}  // namespace mpc
