// triangular-operands: marks the batched MatMuls whose A operand, as they read it, is a
// stack of square matrices zero on one side of the diagonal, so the backend can skip the
// products with those zeros (mpc_a_zeros = "above_diagonal" or "below_diagonal";
// backends/cpu/kernels_gemm.h runs such a MatMul in bands of rows).
//
// A causal attention's probabilities P = MaskedSoftmax(scores, keep) with a constant mask
// that keeps the diagonal and nothing above it are zero above the diagonal, exactly (the
// kernel writes 0 where the mask is false; the kept diagonal means no row is all masked,
// which would be NaN). Their gradient MaskedSoftmaxGrad(dP, P) = scale * P * (dP - ...)
// is zero wherever P is, and an op the registry marks as keeping 0 at 0 (a Cast) keeps it. Four MatMuls a layer read such a
// matrix as A: P·V and dS·K (as stored: zero above), P^T·dO and dS^T·Q (read transposed:
// zero below). That is a third of char_gpt's attention work that multiplies zeros; the
// score products Q·K^T and dO·V^T are full and stay as they are.
//
// A hint, not a change of what is computed: a backend that ignores the attribute computes
// the same values. Runs on the final MatMuls, after fold-batch-transposes set their views.
#pragma once

#include "passes/compile_results.h"
#include "passes/pass.h"

namespace mpc {

class TriangularOperandsPass : public Pass {
 public:
  explicit TriangularOperandsPass(TriangularOperandsResult* result) : result_(result) {}
  std::string_view name() const override { return "triangular-operands"; }
  absl::StatusOr<bool> Run(Graph& graph) override;

 private:
  TriangularOperandsResult* result_;
};

}  // namespace mpc
