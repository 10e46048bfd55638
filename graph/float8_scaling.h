// Per-tensor delayed scaling (Transformer Engine's DelayedScaling recipe): the update
// rule of the Fp8UpdateScales op, which the fp8 pass inserts once per step and every
// backend implements. The op's semantics live here, beside the FP8 formats (float8.h),
// so the pass, the CPU kernel and the tests share one definition.
#pragma once

#include <cstdint>

namespace mpc {

// The recipe fields the scale update needs for one tensor.
struct Fp8ScaleRecipe {
  float fp8_max = 448.0f;  // largest finite value of the tensor's format
  int margin = 0;
  bool most_recent = false;  // MOST_RECENT (history[0]) instead of MAX over the window
  float amax_floor = 0.0f;
};

// One delayed-scaling update: what Fp8UpdateScales does for one tensor (the CPU kernel
// calls it, the CUDA kernel mirrors it, tests use it on hand-made histories).
// `history[0]` holds this step's amax, history[1..len-1] the previous len-1 steps'
// (any order: only MAX and slot 0 are read).
//   amax = MAX: the largest entry (NaN if any is NaN); MOST_RECENT: history[0].
//   amax = max(amax, amax_floor) when finite.
//   if amax is finite and > 0: scale = (fp8_max / amax) / 2^margin, computed in f32 like
//   Transformer Engine (inf, from a tiny amax, becomes FLT_MAX; a result that is not
//   positive keeps the old scale); otherwise the old scale stays. scale_inv = 1 / scale.
// Then the history rolls like TE's roll(-1): slot i takes slot i+1, this step's amax
// moves to the last slot, slot 0 (the oldest entry, now dropped) is zeroed for the next
// step's amax. So MAX always covers exactly the last len steps. A non-finite amax of
// this step is zeroed before it rolls in: it kept the old scale once, and would
// otherwise freeze the scale for len steps. Returns the amax used.
float UpdateFp8Meta(float* history, int64_t len, float* scale, float* scale_inv, const Fp8ScaleRecipe& recipe);

}  // namespace mpc
