// PassPipeline::Run: verify → run → verify-if-changed → dump, pass after pass.
#include "passes/pass_pipeline.h"

#include <chrono>
#include <filesystem>
#include <optional>
#include <regex>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/file_util.h"
#include "base/status_macros.h"
#include "graph/printer.h"
#include "graph/verifier.h"

namespace mpc {

std::vector<std::string> PassPipeline::PassNames() const {
  std::vector<std::string> names;
  for (const auto& p : passes_) names.emplace_back(p->name());
  return names;
}

absl::Status PassPipeline::Dump(const Graph& graph, int index, std::string_view pass_name) const {
  std::error_code ec;
  std::filesystem::create_directories(options_.dump_dir, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("--dump-dir ", options_.dump_dir, ": cannot create: ", ec.message()));
  }
  const std::string base = absl::StrFormat("%s/%02d-%s", options_.dump_dir, index, std::string(pass_name));
  MPC_RETURN_IF_ERROR(WriteFileAtomically(base + ".txt", GraphToText(graph)));
  return WriteFileAtomically(base + ".dot", GraphToDot(graph));
}

absl::StatusOr<std::vector<PassReport>> PassPipeline::Run(Graph& graph) {
  std::optional<std::regex> dump_regex;
  if (!options_.dump_after.empty()) {
    try {
      dump_regex.emplace(options_.dump_after);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dump-after '", options_.dump_after, "' is not a valid regular expression: ", e.what()));
    }
    if (options_.dump_dir.empty()) {
      return absl::InvalidArgumentError("--dump-after needs --dump-dir (where to write the dumps)");
    }
  }
  for (const std::string& name : options_.disabled) {
    const auto names = PassNames();
    if (std::find(names.begin(), names.end(), name) == names.end()) {
      return absl::InvalidArgumentError(absl::StrCat("cannot disable unknown pass '", name, "'"));
    }
  }
  if (absl::Status st = VerifyGraph(graph); !st.ok()) {
    return absl::Status(st.code(), absl::StrCat("input graph: ", st.message()));
  }
  origins_.clear();
  for (const auto& node : graph.nodes()) origins_[node->id] = "model";
  std::vector<PassReport> reports;
  int index = 0;
  for (const auto& pass : passes_) {
    ++index;
    PassReport report;
    report.name = std::string(pass->name());
    if (options_.disabled.count(report.name)) {
      report.skipped = true;
      reports.push_back(report);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<bool> changed = pass->Run(graph);
    report.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (!changed.ok()) {
      return absl::Status(changed.status().code(),
                          absl::StrCat("pass '", report.name, "': ", changed.status().message()));
    }
    report.changed = *changed;
    if (report.changed) {
      if (absl::Status st = VerifyGraph(graph); !st.ok()) {
        return absl::Status(st.code(), absl::StrCat("pass '", report.name, "' left an invalid graph: ", st.message()));
      }
    }
    report.nodes_after = static_cast<int64_t>(graph.nodes().size());
    for (const auto& node : graph.nodes()) origins_.try_emplace(node->id, report.name);
    if (dump_regex && std::regex_search(report.name, *dump_regex)) {
      MPC_RETURN_IF_ERROR(Dump(graph, index, report.name));
    }
    reports.push_back(report);
  }
  return reports;
}

}  // namespace mpc
