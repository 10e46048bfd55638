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

// Just-in-time scaling (the current, rowwise and block recipes, passes/fp8.h): the scale of
// one group of values (a tensor, a row, a 1x128 tile or a 128x128 block) from that group's
// own amax, as the Fp8QuantizeDynamic op computes it.
struct Fp8DynamicRecipe {
  float fp8_max = 448.0f;
  int margin = 0;
  float amax_floor = 0.0f;    // amax raised to it first (torchao's clamp to an epsilon)
  bool power_of_two = false;  // scale rounded down to a power of two (exact dequantization)
};
// amax = max(amax, amax_floor); scale = (fp8_max / amax) / 2^margin in f32; an infinite
// result (tiny amax) becomes FLT_MAX; an amax of 0 (all-zero group) or a non-finite one (the
// group holds inf/NaN, which then saturate or propagate: a loss scaler must still see them)
// gives scale 1. With power_of_two the scale is rounded down to 2^floor(log2 scale), so
// amax * scale stays <= fp8_max and the inverse is exact.
float Fp8DynamicScale(float amax, const Fp8DynamicRecipe& recipe);

}  // namespace mpc
