// Which elements of a tensor share one FP8 scale under just-in-time scaling (the current,
// rowwise and block recipes of passes/fp8.h): the geometry of the Fp8QuantizeDynamic op,
// shared by the op's shape checks, the CPU kernel and the tests.
//
//   tensor  one scale for the whole tensor (current scaling)
//   rows    one scale per line along `axis` (rowwise: the GEMM's contraction axis, so a
//           scale factors out of every dot product)
//   tiles   one scale per `tile` consecutive elements along `axis` (DeepSeek-V3's 1x128
//           activation and gradient tiles); the last tile of a line may be shorter
//   blocks  one scale per tile x tile square of the last two axes (128x128 weight blocks);
//           `axis` must be one of them. A block is the same block of the transpose, so a
//           weight quantized for the forward GEMM serves the backward one transposed.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/float8_scaling.h"

namespace mpc {

enum class Fp8Granularity { kTensor, kRows, kTiles, kBlocks };

// The block recipe's tile and block edge (DeepSeek-V3's 1x128 and 128x128; cuBLASLt's
// VEC128 and BLK128x128 scale modes take no other).
inline constexpr int64_t kFp8Tile = 128;

absl::StatusOr<Fp8Granularity> ParseFp8Granularity(std::string_view name);
const char* Fp8GranularityName(Fp8Granularity g);

// The tensor viewed as [outer, p, q] (row-major), cut into groups of chunk_p x chunk_q
// elements of each [p, q] slice.
struct Fp8ScaleGroups {
  int64_t outer = 1, p = 1, q = 1;
  int64_t chunk_p = 1, chunk_q = 1;

  int64_t groups_p() const { return (p + chunk_p - 1) / chunk_p; }
  int64_t groups_q() const { return (q + chunk_q - 1) / chunk_q; }
  int64_t count() const { return outer * groups_p() * groups_q(); }
  // The group of element [o, i, j] of the view.
  int64_t Group(int64_t o, int64_t i, int64_t j) const {
    return (o * groups_p() + i / chunk_p) * groups_q() + j / chunk_q;
  }
};

// The groups of a tensor of `shape`; `axis` may be negative (from the end). Errors name
// what is wrong (an axis out of range, blocks on a tensor of rank < 2 or along an axis that
// is not one of the last two, a tile < 1).
absl::StatusOr<Fp8ScaleGroups> Fp8GroupsOf(const std::vector<int64_t>& shape, Fp8Granularity granularity,
                                           int64_t axis, int64_t tile);

// The scales of one FP8 GEMM operand as the GEMM takes them (Fp8CastDynamic writes them,
// Fp8Gemm reads them; cuBLASLt's scale modes on Hopper). The operand is stored [P, K], K
// (the contraction) contiguous, and its groups are the recipe's along K:
//   tensor  [1]                                 one scale (cuBLASLt's scalar mode)
//   rows    [P]                                 one per row (OUTER_VEC_32F)
//   tiles   [ceil(K/tile), P]                   one per row per tile of K, the row index
//                                               contiguous (VEC128_32F)
//   blocks  [ceil(P/tile), roundup(ceil(K/tile), 4)]  one per tile x tile block, the K-block
//                                               index contiguous, its count padded to a
//                                               multiple of 4 (BLK128x128_32F); the padding
//                                               holds 1
std::vector<int64_t> Fp8GemmScaleShape(Fp8Granularity granularity, int64_t rows, int64_t k, int64_t tile);
// Where the scale of element [p, k] of such an operand sits in that layout.
inline int64_t Fp8GemmScaleIndex(Fp8Granularity granularity, int64_t p, int64_t k, int64_t rows, int64_t depth,
                                 int64_t tile) {
  switch (granularity) {
    case Fp8Granularity::kRows:
      return p;
    case Fp8Granularity::kTiles:
      return (k / tile) * rows + p;
    case Fp8Granularity::kBlocks:
      return (p / tile) * (((depth + tile - 1) / tile + 3) / 4 * 4) + k / tile;
    default:
      return 0;
  }
}

struct Node;

// What an Fp8QuantizeDynamic node asks for, from its attributes (format, granularity, axis,
// tile, margin, amax_floor, power_of_two), for the kernels of every backend.
struct Fp8DynamicQuantization {
  bool e4m3 = true;
  Fp8ScaleGroups groups;
  Fp8DynamicRecipe recipe;
};
absl::StatusOr<Fp8DynamicQuantization> Fp8DynamicQuantizationOf(const Node& node);

}  // namespace mpc
