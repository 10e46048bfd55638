// See onnx_folded_parameters.h.
#include "graph/onnx_folded_parameters.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/shape.h"

namespace mpc {
namespace {

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.num_elements() == b.num_elements() &&
         (a.bytes() == 0 || std::memcmp(a.raw(), b.raw(), a.bytes()) == 0);
}

// Whether `t` ([r, c]) is `p` ([c, r]) transposed.
bool IsTransposeOf(const Tensor& t, const Tensor& p) {
  if (t.shape().size() != 2 || p.shape().size() != 2 || t.dtype() != p.dtype()) return false;
  const int64_t rows = t.shape()[0], cols = t.shape()[1];
  if (p.shape()[0] != cols || p.shape()[1] != rows) return false;
  const size_t elem = DTypeSize(t.dtype());
  const char* tb = static_cast<const char*>(t.raw());
  const char* pb = static_cast<const char*>(p.raw());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) {
      if (std::memcmp(tb + (i * cols + j) * elem, pb + (j * rows + i) * elem, elem) != 0) return false;
    }
  }
  return true;
}

// Whether every slice of `t` along `axis` equals the first.
bool RepeatsAlong(const Tensor& t, int axis) {
  const Shape& s = t.shape();
  if (s[axis] < 2) return false;
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const size_t row = static_cast<size_t>(inner) * DTypeSize(t.dtype());
  const char* b = static_cast<const char*>(t.raw());
  for (int64_t o = 0; o < outer; ++o) {
    const char* first = b + o * s[axis] * row;
    for (int64_t k = 1; k < s[axis]; ++k) {
      if (std::memcmp(first, first + k * row, row) != 0) return false;
    }
  }
  return true;
}

// `t` with every axis in `collapse` reduced to its first slice (size 1).
Tensor FirstSlices(const Tensor& t, const std::vector<bool>& collapse) {
  Shape base = t.shape();
  for (size_t d = 0; d < base.size(); ++d) {
    if (collapse[d]) base[d] = 1;
  }
  return t.SlicedTo(base);
}

}  // namespace

FoldedDerivation DeriveFoldedParameter(const Tensor& folded,
                                       const std::vector<std::pair<std::string, const Tensor*>>& parameters) {
  FoldedDerivation out;
  for (const auto& [name, value] : parameters) {
    if (SameBytes(folded, *value)) {
      out.kind = FoldedDerivation::Kind::kReshape;
      out.source = name;
      out.reason = absl::StrCat("folded by the exporter from parameter '", name, "' (its values, reshaped): read as ",
                                "Reshape of it, so they train as one");
      return out;
    }
    if (IsTransposeOf(folded, *value)) {
      out.kind = FoldedDerivation::Kind::kTranspose;
      out.source = name;
      out.reason = absl::StrCat("folded by the exporter from parameter '", name,
                                "' (its values, transposed): read as Transpose of it, so a tied weight stays tied");
      return out;
    }
  }
  // A tensor of one repeated value (a norm's fresh ones or zeros) repeats along every axis
  // and says nothing about a broadcast: it stays a parameter of its own.
  if (folded.num_elements() > 1) {
    bool constant = true;
    const size_t elem = DTypeSize(folded.dtype());
    for (int64_t i = 1; constant && i < folded.num_elements(); ++i) {
      constant = std::memcmp(static_cast<const char*>(folded.raw()) + i * elem, folded.raw(), elem) == 0;
    }
    if (constant) return out;
  }
  const int rank = static_cast<int>(folded.shape().size());
  std::vector<bool> collapse(rank, false);
  bool any = false;
  for (int d = 0; d < rank; ++d) any |= collapse[d] = RepeatsAlong(folded, d);
  if (any) {
    out.kind = FoldedDerivation::Kind::kExpand;
    out.base = FirstSlices(folded, collapse);
    out.reason = absl::StrCat("folded by the exporter as a parameter broadcast to ", ShapeToString(folded.shape()),
                              ": trained as one ", ShapeToString(out.base.shape()),
                              " parameter read through Expand, which sums its gradients as PyTorch does");
  }
  return out;
}

}  // namespace mpc
