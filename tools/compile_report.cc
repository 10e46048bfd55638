// JSON and text renderings of a compiled program's pass report (see compile_report.h).
#include "tools/compile_report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mpc {

std::string CompileReportJson(const Program& p) {
  std::vector<std::string> passes;
  for (const PassReport& r : p.report) {
    passes.push_back(absl::StrFormat("{\"name\":\"%s\",\"changed\":%s,\"skipped\":%s,\"ms\":%.3f,\"nodes_after\":%d}",
                                     r.name, r.changed ? "true" : "false", r.skipped ? "true" : "false", r.ms,
                                     r.nodes_after));
  }
  const MemoryPlan& m = p.info.plan;
  return absl::StrCat(
      "{\"passes\":[", absl::StrJoin(passes, ","), "],",
      absl::StrFormat("\"memory\":{\"planned_peak_bytes\":%d,\"unplanned_bytes\":%d,\"persistent_bytes\":%d,"
                      "\"unshared_activation_bytes\":%d},",
                      m.peak_bytes, m.unplanned_bytes, m.persistent_bytes, m.total_activation_bytes),
      absl::StrFormat("\"model\":{\"forward_nodes\":%d,\"parameters\":%d,\"batch_size\":%d},", p.forward_nodes,
                      p.parameter_count, p.batch_size),
      absl::StrFormat("\"program\":{\"nodes\":%d,\"values\":%d}", p.graph->nodes().size(), p.graph->values().size()),
      "}\n");
}

std::string CompileSummaryText(const Program& p) {
  std::string out = absl::StrFormat("%-16s %8s %10s %8s\n", "pass", "changed", "ms", "nodes");
  for (const PassReport& r : p.report) {
    absl::StrAppendFormat(&out, "%-16s %8s %10.2f %8d\n", r.name, r.skipped ? "skipped" : (r.changed ? "yes" : "no"),
                          r.ms, r.nodes_after);
  }
  const MemoryPlan& m = p.info.plan;
  absl::StrAppendFormat(&out,
                        "model: %d nodes, %d parameters (batch %d)\n"
                        "program: %d nodes; activations planned into %.2f MiB (%.2f MiB without reuse); "
                        "%.2f MiB outside the arena (parameters, state, inputs, constants)\n",
                        p.forward_nodes, p.parameter_count, p.batch_size, p.graph->nodes().size(),
                        m.peak_bytes / 1048576.0, m.total_activation_bytes / 1048576.0, m.unplanned_bytes / 1048576.0);
  return out;
}

}  // namespace mpc
