// ZeRO-1's layout of a tensor over the ranks of a job (graph/ops_collective.cc, passes/
// data_parallel.h): the flattened elements in W slices of s = ceil(n/W); rank r owns
// [r*s, min(n, (r+1)*s)), stored zero-padded to s. Slices of equal length let one
// collective move a whole bucket, and element counts that W does not divide still work
// (the last ranks' slices are short or empty).
#pragma once

#include <algorithm>
#include <cstdint>

namespace mpc {

inline int64_t ShardLength(int64_t elements, int64_t world_size) { return (elements + world_size - 1) / world_size; }

// The elements of `rank`'s slice that exist: [begin, begin + count).
struct ShardRange {
  int64_t begin = 0;
  int64_t count = 0;
};
inline ShardRange ShardRangeOf(int64_t elements, int64_t world_size, int64_t rank) {
  const int64_t length = ShardLength(elements, world_size);
  const int64_t begin = std::min(elements, rank * length);
  return {begin, std::min(elements, begin + length) - begin};
}

}  // namespace mpc
