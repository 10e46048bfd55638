// What one rank holds for a compiled training program, by what it is for, and the spec's
// per-rank limit (memory.limit_mb; docs/memory.md). The compiler plans every byte ahead
// (passes/memory_plan.h), so the numbers are known before the first step: a user reads
// them in `mpc compile --ranks N`'s table (each ZeRO stage x recomputation policy) and
// picks a configuration before renting the machines; a program over the limit is refused
// with the smallest configuration that fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/program.h"

namespace mpc {

struct MemoryBreakdown {
  int64_t weights = 0;        // parameters and their bf16/fp16 copies
  int64_t gradients = 0;      // gradient accumulators, and the backward's values live at the arena's peak
  int64_t optimizer = 0;      // optimizer state (moments, momentum, steps), EMA, FP8 scaling state, loss scale
  int64_t activations = 0;    // forward (and recomputed) activations live at the arena's peak
  int64_t communication = 0;  // collectives' buffers live at the arena's peak
  int64_t arena = 0;          // the planned arena: the three above plus what fragmentation leaves
  int64_t other = 0;          // the batch's inputs, constants
  int64_t total() const { return weights + optimizer + arena + other + accumulators; }
  int64_t accumulators = 0;   // of `gradients`: the persistent accumulators (outside the arena)
};

// The breakdown of a compiled training program.
MemoryBreakdown BreakdownOf(const Program& program);

struct MemoryConfiguration {
  int zero_stage = 0;
  std::string recompute;  // none, selective, full
  MemoryBreakdown memory;
};

// The spec compiled at each ZeRO stage (0 only for one rank) and recomputation policy, in
// the order of least cost: less recomputation first, then lower stages (less traffic).
absl::StatusOr<std::vector<MemoryConfiguration>> MemoryConfigurations(const TrainSpec& spec, const Capabilities& caps,
                                                                      const ProgramOptions& options);

// The table `mpc compile` prints, in MiB per rank.
std::string MemoryTableText(const std::vector<MemoryConfiguration>& rows, int world_size, double limit_mb);

// memory.recompute AUTO: the spec with the least recomputation whose plan fits
// memory.limit_mb: NONE, else SELECTIVE, else FULL over the fewest leading blocks (SELECTIVE after them)
// (full_blocks), else FULL over every block (which CheckMemoryLimit then refuses, naming
// what would fit). Each candidate is compiled once; the blocks by bisection.
absl::StatusOr<TrainSpec> ChooseRecomputation(const TrainSpec& spec, const Capabilities& caps,
                                              const ProgramOptions& options);

// OK when the spec sets no limit or `program` fits it; otherwise the error names what the
// program needs and the first configuration of MemoryConfigurations that fits (or says
// none does at this world size).
absl::Status CheckMemoryLimit(const Program& program, const TrainSpec& spec, const Capabilities& caps,
                              const ProgramOptions& options);

}  // namespace mpc
