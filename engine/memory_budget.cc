// Per-rank memory by purpose, the configuration table and the limit (see memory_budget.h).
#include "engine/memory_budget.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "graph/capabilities.h"
#include "passes/forward_nodes.h"
#include "passes/memory_plan.h"

namespace mpc {
namespace {

double MiB(int64_t bytes) { return bytes / 1048576.0; }

enum class Purpose { kActivation, kGradient, kCommunication };

// A view's output shares its input's bytes (memory_plan.h): only the owner counts.
bool IsView(const Node& n) {
  return !n.inputs.empty() && n.inputs[0] && n.inputs[0]->kind == ValueKind::kActivation && IsPlannedView(n);
}

std::string ConfigurationSpec(const MemoryConfiguration& c) {
  return absl::StrCat("distributed { zero_stage: ", c.zero_stage, " } memory { recompute: ",
                      absl::AsciiStrToUpper(c.recompute), " }");
}

}  // namespace

MemoryBreakdown BreakdownOf(const Program& program) {
  MemoryBreakdown m;
  const Graph& g = *program.graph;
  for (const auto& v : g.values()) {
    const int64_t bytes = static_cast<int64_t>(v->bytes());
    switch (v->kind) {
      case ValueKind::kParameter:
        m.weights += bytes;
        break;
      case ValueKind::kState:
        if (absl::EndsWith(v->name, ".lowp")) {
          m.weights += bytes;
        } else if (absl::EndsWith(v->name, ".grad_accum")) {
          m.accumulators += bytes;
        } else {
          m.optimizer += bytes;
        }
        break;
      case ValueKind::kInput:
      case ValueKind::kConstant:
        m.other += bytes;
        break;
      case ValueKind::kActivation:
        break;
    }
  }
  const MemoryPlanResult& planned = program.results.memory_plan;
  m.arena = planned.plan.peak_bytes;
  // The values live at each step of the order, by purpose; the breakdown is the step where
  // the most bytes are live.
  const absl::flat_hash_set<const Node*> forward = ForwardNodesOf(program.results.loss.loss);
  absl::flat_hash_map<const Node*, int> position;
  for (size_t i = 0; i < planned.order.size(); ++i) position[planned.order[i]] = static_cast<int>(i);
  const int steps = static_cast<int>(planned.order.size());
  std::map<Purpose, std::vector<int64_t>> delta;
  for (Purpose p : {Purpose::kActivation, Purpose::kGradient, Purpose::kCommunication}) {
    delta[p].assign(static_cast<size_t>(steps) + 2, 0);
  }
  for (const Node* n : planned.order) {
    if (IsView(*n)) continue;
    const Purpose purpose = forward.contains(n) || absl::StartsWith(n->name, "recompute/") ? Purpose::kActivation
                            : n->op == "AllReduce" || n->op == "ReduceScatter"             ? Purpose::kCommunication
                                                                                           : Purpose::kGradient;
    for (const Value* out : n->outputs) {
      if (planned.plan.state_aliases.count(out) > 0 || planned.plan.offsets.count(out) == 0) continue;
      int last = position[n];
      // Readers of the value and of its views keep its bytes alive.
      std::vector<const Value*> users{out};
      for (size_t k = 0; k < users.size(); ++k) {
        for (const Node* c : users[k]->consumers) {
          last = std::max(last, position[c]);
          if (IsView(*c) && c->inputs[0] == users[k]) users.push_back(c->outputs[0]);
        }
        if (g.IsOutput(users[k])) last = steps;
      }
      const int64_t bytes = (static_cast<int64_t>(out->bytes()) + kArenaAlignment - 1) / kArenaAlignment *
                            kArenaAlignment;
      delta[purpose][position[n]] += bytes;
      delta[purpose][last + 1] -= bytes;
    }
  }
  int64_t best = -1, live_a = 0, live_g = 0, live_c = 0;
  for (int i = 0; i <= steps; ++i) {
    live_a += delta[Purpose::kActivation][i];
    live_g += delta[Purpose::kGradient][i];
    live_c += delta[Purpose::kCommunication][i];
    if (live_a + live_g + live_c > best) {
      best = live_a + live_g + live_c;
      m.activations = live_a;
      m.gradients = live_g;
      m.communication = live_c;
    }
  }
  m.gradients += m.accumulators;
  return m;
}

absl::StatusOr<std::vector<MemoryConfiguration>> MemoryConfigurations(const TrainSpec& spec, const Capabilities& caps,
                                                                      const ProgramOptions& options) {
  std::vector<MemoryConfiguration> rows;
  const int max_stage = options.world_size > 1 ? 3 : 0;
  for (MemorySpec::Recompute policy : {MemorySpec::NONE, MemorySpec::SELECTIVE, MemorySpec::FULL}) {
    for (int stage = 0; stage <= max_stage; ++stage) {
      TrainSpec variant = spec;
      variant.mutable_memory()->set_recompute(policy);
      variant.mutable_memory()->clear_full_blocks();
      variant.mutable_memory()->clear_limit_mb();
      variant.mutable_distributed()->set_zero_stage(stage);
      MPC_ASSIGN_OR_RETURN(Program p, CompileProgram(variant, caps, options));
      rows.push_back({stage, absl::AsciiStrToLower(MemorySpec::Recompute_Name(policy)), BreakdownOf(p)});
    }
  }
  return rows;
}

std::string MemoryTableText(const std::vector<MemoryConfiguration>& rows, int world_size, double limit_mb) {
  std::string out = absl::StrFormat(
      "memory per rank at %d rank%s (MiB; gradients, activations and communication as live at the arena's peak):\n",
      world_size, world_size == 1 ? "" : "s");
  absl::StrAppendFormat(&out, "  %-5s %-9s %9s %9s %9s %11s %9s %9s %9s\n", "zero", "recompute", "weights", "gradients",
                        "optimizer", "activations", "comm", "arena", "total");
  for (const MemoryConfiguration& r : rows) {
    const MemoryBreakdown& m = r.memory;
    absl::StrAppendFormat(&out, "  %-5d %-9s %9.2f %9.2f %9.2f %11.2f %9.2f %9.2f %9.2f%s\n", r.zero_stage,
                          r.recompute, MiB(m.weights), MiB(m.gradients), MiB(m.optimizer), MiB(m.activations),
                          MiB(m.communication), MiB(m.arena), MiB(m.total()),
                          limit_mb > 0 && MiB(m.total()) > limit_mb ? "  over the limit" : "");
  }
  return out;
}

absl::StatusOr<TrainSpec> ChooseRecomputation(const TrainSpec& spec, const Capabilities& caps,
                                              const ProgramOptions& options) {
  const double limit_mb = spec.memory().limit_mb();
  if (!(limit_mb > 0)) {
    return absl::InvalidArgumentError(
        "spec field memory.recompute: AUTO chooses the least recomputation that fits memory.limit_mb; set limit_mb "
        "(MiB per rank)");
  }
  auto variant = [&](MemorySpec::Recompute policy, int blocks) {
    TrainSpec v = spec;
    v.mutable_memory()->set_recompute(policy);
    v.mutable_memory()->set_full_blocks(blocks);
    return v;
  };
  // The variant compiled without the limit: whether it fits, and (FULL) its block count.
  int blocks = 0;
  auto fits = [&](const TrainSpec& v) -> absl::StatusOr<bool> {
    TrainSpec unlimited = v;
    unlimited.mutable_memory()->clear_limit_mb();
    MPC_ASSIGN_OR_RETURN(const Program p, CompileProgram(unlimited, caps, options));
    blocks = p.results.recompute.blocks_recomputed;
    return MiB(BreakdownOf(p).total()) <= limit_mb;
  };
  for (MemorySpec::Recompute policy : {MemorySpec::NONE, MemorySpec::SELECTIVE}) {
    MPC_ASSIGN_OR_RETURN(const bool ok, fits(variant(policy, 0)));
    if (ok) return variant(policy, 0);
  }
  MPC_ASSIGN_OR_RETURN(const bool full_fits, fits(variant(MemorySpec::FULL, 0)));
  if (!full_fits) {
    // FULL keeps the head after the last block input, which FULL over all but the last
    // block recomputes as SELECTIVE would: on a model with a large head that can be less.
    const int all_blocks = blocks;
    if (all_blocks > 1) {
      MPC_ASSIGN_OR_RETURN(const bool ok, fits(variant(MemorySpec::FULL, all_blocks - 1)));
      if (ok) return variant(MemorySpec::FULL, all_blocks - 1);
    }
    // Nothing fits: FULL, which the limit check then refuses naming what would fit.
    return variant(MemorySpec::FULL, 0);
  }
  // The fewest leading blocks that fit (the plan's peak falls as blocks are added).
  const int all_blocks = blocks;
  int lo = 1, hi = all_blocks;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    MPC_ASSIGN_OR_RETURN(const bool ok, fits(variant(MemorySpec::FULL, mid)));
    if (ok) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return variant(MemorySpec::FULL, hi >= all_blocks ? 0 : hi);
}

absl::Status CheckMemoryLimit(const Program& program, const TrainSpec& spec, const Capabilities& caps,
                              const ProgramOptions& options) {
  const double limit_mb = spec.memory().limit_mb();
  if (limit_mb < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec field memory.limit_mb: ", limit_mb, " must be >= 0 (MiB per rank; 0: no limit)"));
  }
  if (limit_mb == 0 || !options.training) return absl::OkStatus();
  const MemoryBreakdown m = BreakdownOf(program);
  if (MiB(m.total()) <= limit_mb) return absl::OkStatus();
  const std::string needs = absl::StrFormat(
      "spec field memory.limit_mb: this program needs %.2f MiB per rank (weights %.2f, optimizer state %.2f, "
      "gradient accumulators %.2f, the arena %.2f (at its peak: gradients %.2f, activations %.2f, communication "
      "%.2f), inputs and constants %.2f) at %d rank%s with zero_stage %d and recompute %s, over the limit of %.2f MiB",
      MiB(m.total()), MiB(m.weights), MiB(m.optimizer), MiB(m.accumulators), MiB(m.arena),
      MiB(m.gradients - m.accumulators), MiB(m.activations), MiB(m.communication), MiB(m.other), options.world_size,
      options.world_size == 1 ? "" : "s", spec.distributed().zero_stage(),
      absl::AsciiStrToLower(MemorySpec::Recompute_Name(spec.memory().recompute())), limit_mb);
  MPC_ASSIGN_OR_RETURN(std::vector<MemoryConfiguration> rows, MemoryConfigurations(spec, caps, options));
  for (const MemoryConfiguration& r : rows) {
    if (MiB(r.memory.total()) > limit_mb) continue;
    return absl::ResourceExhaustedError(absl::StrFormat("%s. The smallest configuration that fits: %s (%.2f MiB).\n%s",
                                                        needs, ConfigurationSpec(r), MiB(r.memory.total()),
                                                        MemoryTableText(rows, options.world_size, limit_mb)));
  }
  return absl::ResourceExhaustedError(absl::StrFormat(
      "%s. No ZeRO stage and recomputation policy fits at %d rank%s: run on more ranks (ZeRO-1/2/3 divide the "
      "optimizer state, the gradients and, with 3, the weights by their number), a smaller batch, or a lower "
      "precision.\n%s",
      needs, options.world_size, options.world_size == 1 ? "" : "s",
      MemoryTableText(rows, options.world_size, limit_mb)));
}

}  // namespace mpc
