// The scale groups of just-in-time FP8 scaling (see float8_groups.h).
#include "graph/float8_groups.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/float8.h"
#include "graph/graph.h"

namespace mpc {

absl::StatusOr<Fp8Granularity> ParseFp8Granularity(std::string_view name) {
  if (name == "tensor") return Fp8Granularity::kTensor;
  if (name == "rows") return Fp8Granularity::kRows;
  if (name == "tiles") return Fp8Granularity::kTiles;
  if (name == "blocks") return Fp8Granularity::kBlocks;
  return absl::InvalidArgumentError(
      absl::StrCat("FP8 scale granularity '", std::string(name), "': expected tensor, rows, tiles or blocks"));
}

const char* Fp8GranularityName(Fp8Granularity g) {
  switch (g) {
    case Fp8Granularity::kTensor:
      return "tensor";
    case Fp8Granularity::kRows:
      return "rows";
    case Fp8Granularity::kTiles:
      return "tiles";
    case Fp8Granularity::kBlocks:
      return "blocks";
  }
  return "?";
}

absl::StatusOr<Fp8ScaleGroups> Fp8GroupsOf(const std::vector<int64_t>& shape, Fp8Granularity granularity,
                                           int64_t axis, int64_t tile) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t total = 1;
  for (int64_t d : shape) total *= d;
  Fp8ScaleGroups g;
  if (granularity == Fp8Granularity::kTensor) {
    g.p = g.chunk_p = total;
    if (g.chunk_p == 0) g.chunk_p = 1;
    return g;
  }
  if (tile < 1) return absl::InvalidArgumentError(absl::StrCat("FP8 scale tile ", tile, ": must be >= 1"));
  if (axis < -rank || axis >= rank) {
    return absl::InvalidArgumentError(absl::StrCat("FP8 scale axis ", axis, " is out of range for rank ", rank));
  }
  if (axis < 0) axis += rank;
  if (granularity == Fp8Granularity::kBlocks) {
    if (rank < 2 || axis < rank - 2) {
      return absl::InvalidArgumentError(absl::StrCat("FP8 block scaling needs the axis to be one of the last two of a "
                                                     "tensor of rank >= 2; got axis ",
                                                     axis, " of rank ", rank));
    }
    for (int64_t i = 0; i < rank - 2; ++i) g.outer *= shape[i];
    g.p = shape[rank - 2];
    g.q = shape[rank - 1];
    g.chunk_p = g.chunk_q = tile;
    return g;
  }
  for (int64_t i = 0; i < axis; ++i) g.outer *= shape[i];
  g.p = shape[axis];
  for (int64_t i = axis + 1; i < rank; ++i) g.q *= shape[i];
  g.chunk_p = granularity == Fp8Granularity::kRows ? std::max<int64_t>(g.p, 1) : tile;
  g.chunk_q = 1;
  return g;
}

std::vector<int64_t> Fp8GemmScaleShape(Fp8Granularity granularity, int64_t rows, int64_t k, int64_t tile) {
  const int64_t k_groups = (k + tile - 1) / tile;
  switch (granularity) {
    case Fp8Granularity::kRows:
      return {rows};
    case Fp8Granularity::kTiles:
      return {k_groups, rows};
    case Fp8Granularity::kBlocks:
      return {(rows + tile - 1) / tile, (k_groups + 3) / 4 * 4};
    default:
      return {1};
  }
}

absl::StatusOr<Fp8DynamicQuantization> Fp8DynamicQuantizationOf(const Node& node) {
  Fp8DynamicQuantization d;
  d.e4m3 = node.attrs.GetString("format", "e4m3") == "e4m3";
  MPC_ASSIGN_OR_RETURN(Fp8Granularity granularity, ParseFp8Granularity(node.attrs.GetString("granularity", "tensor")));
  MPC_ASSIGN_OR_RETURN(d.groups, Fp8GroupsOf(node.inputs[0]->shape, granularity, node.attrs.GetInt("axis", -1),
                                             node.attrs.GetInt("tile", 128)));
  d.recipe.fp8_max = d.e4m3 ? kF8E4M3Max : kF8E5M2Max;
  d.recipe.margin = static_cast<int>(node.attrs.GetInt("margin", 0));
  d.recipe.amax_floor = node.attrs.GetFloat("amax_floor", 0.0f);
  d.recipe.power_of_two = node.attrs.GetInt("power_of_two", 0) != 0;
  return d;
}

}  // namespace mpc
