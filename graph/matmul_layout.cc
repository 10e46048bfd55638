// MatMul operand and result views through mpc_trans_* and mpc_perm_* (see matmul_layout.h).
#include "graph/matmul_layout.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"

namespace mpc {
namespace {

// The node's permutation attribute `name` for a rank-`rank` tensor (identity when unset).
absl::StatusOr<std::vector<int64_t>> PermOf(const Node& n, const std::string& name, int rank) {
  std::vector<int64_t> identity(rank);
  for (int i = 0; i < rank; ++i) identity[i] = i;
  if (!n.attrs.Has(name)) return identity;
  std::vector<int64_t> perm = n.attrs.GetInts(name, {});
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  if (sorted != identity) {
    return absl::InvalidArgumentError(absl::StrCat("MatMul node '", n.name, "': ", name, " [", absl::StrJoin(perm, ","),
                                                   "] is not a permutation of the ", rank, " axes of its tensor"));
  }
  return perm;
}

// The view Transpose(stored, perm), its last two axes swapped when `swap`.
void View(const Shape& stored, const std::vector<int64_t>& perm, bool swap, Shape& dims,
          std::vector<int64_t>& strides) {
  const std::vector<int64_t> contiguous = RowMajorStrides(stored);
  dims.clear();
  strides.clear();
  for (int64_t p : perm) {
    dims.push_back(stored[p]);
    strides.push_back(contiguous[p]);
  }
  if (swap) {
    const size_t r = dims.size();
    std::swap(dims[r - 1], dims[r - 2]);
    std::swap(strides[r - 1], strides[r - 2]);
  }
}

}  // namespace

absl::StatusOr<MatMulLayout> MatMulLayoutOf(const Node& n) {
  const Shape& sa = n.inputs[0]->shape;
  const Shape& sb = n.inputs[1]->shape;
  if (sa.size() < 2 || sb.size() < 2) {
    return absl::UnimplementedError(absl::StrCat("MatMul with a 1-D operand (", ShapeToString(sa), " x ",
                                                 ShapeToString(sb), ") is not supported; reshape to 2-D"));
  }
  MatMulLayout l;
  l.permuted = n.attrs.Has("mpc_perm_a") || n.attrs.Has("mpc_perm_b") || n.attrs.Has("mpc_perm_y");
  const bool ta = n.attrs.GetInt("mpc_trans_a", 0) != 0, tb = n.attrs.GetInt("mpc_trans_b", 0) != 0;
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> pa, PermOf(n, "mpc_perm_a", static_cast<int>(sa.size())));
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> pb, PermOf(n, "mpc_perm_b", static_cast<int>(sb.size())));
  View(sa, pa, ta, l.a, l.a_strides);
  View(sb, pb, tb, l.b, l.b_strides);
  const int64_t m = l.a[l.a.size() - 2], ka = l.a.back(), kb = l.b[l.b.size() - 2], nn = l.b.back();
  if (ka != kb) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MatMul node '", n.name, "': contraction mismatch, ", ShapeToString(l.a), " x ", ShapeToString(l.b),
        " as read (stored ", ShapeToString(sa), " x ", ShapeToString(sb), " through mpc_trans_*/mpc_perm_*)"));
  }
  const Shape a_batch(l.a.begin(), l.a.end() - 2), b_batch(l.b.begin(), l.b.end() - 2);
  if (l.permuted && a_batch != b_batch) {
    return absl::InvalidArgumentError(
        absl::StrCat("MatMul node '", n.name, "': with mpc_perm_* the batch axes must be ",
                     "equal, not broadcast; A reads as ", ShapeToString(l.a), ", B as ", ShapeToString(l.b)));
  }
  MPC_ASSIGN_OR_RETURN(l.y, BroadcastShapes(a_batch, b_batch));
  l.y.push_back(m);
  l.y.push_back(nn);
  MPC_ASSIGN_OR_RETURN(std::vector<int64_t> py, PermOf(n, "mpc_perm_y", static_cast<int>(l.y.size())));
  for (int64_t p : py) l.y_stored.push_back(l.y[p]);
  // Axis py[j] of the product is axis j of the stored result.
  const std::vector<int64_t> stored_strides = RowMajorStrides(l.y_stored);
  l.y_strides.assign(l.y.size(), 0);
  for (size_t j = 0; j < py.size(); ++j) l.y_strides[py[j]] = stored_strides[j];
  return l;
}

}  // namespace mpc
