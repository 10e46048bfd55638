// Runtime vector-ISA dispatch for the CPU kernels' hot loops. The library is built for the
// x86-64 baseline (SSE2) so that one binary runs on every x86-64 machine; a function marked
// MPC_ISA_CLONES is compiled three times (baseline, AVX2 = x86-64-v3, AVX-512 = x86-64-v4)
// and glibc's ifunc resolver picks the widest the running CPU has, once, at load time.
// The widening and rounding of bf16/f16 loops vectorises only on the wider ISAs (SSE2 has
// no 32-to-16-bit narrowing), so this is where the 16-bit elementwise kernels gain most.
//
// Marked functions must not contain OpenMP parallel regions (GCC outlines their bodies
// into functions the clones do not cover): parallelise outside with ParallelRanges and
// call the marked function on each range. The module builds with -ffp-contract=off, so
// the AVX2/AVX-512 clones do not fuse a*b+c into an FMA and give the baseline's results
// for elementwise arithmetic (reductions differ only in their vector-lane order).
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MPC_ISA_CLONES __attribute__((target_clones("default", "arch=x86-64-v3", "arch=x86-64-v4")))
#else
#define MPC_ISA_CLONES
#endif

namespace mpc::cpu {

// Calls body(begin, end) over [0, n) split into one contiguous range per OpenMP thread,
// or once on the calling thread when n is below `parallel_above`.
template <typename Body>
void ParallelRanges(int64_t n, int64_t parallel_above, Body body) {
  if (n <= parallel_above) {
    if (n > 0) body(int64_t{0}, n);
    return;
  }
#pragma omp parallel
  {
    const int64_t threads = omp_get_num_threads();
    const int64_t t = omp_get_thread_num();
    // Ranges rounded to 64 elements so that no two threads write into one cache line.
    const int64_t chunk = ((n + threads - 1) / threads + 63) / 64 * 64;
    const int64_t begin = std::min(n, t * chunk), end = std::min(n, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

}  // namespace mpc::cpu
