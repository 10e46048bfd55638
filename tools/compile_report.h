// The `mpc compile` report: a JSON object with "passes" (name, changed, ms) and
// "memory" (planned_peak_bytes, unplanned_bytes), plus the model and program sizes.
// Later passes add keys ("nodes", "padding", ...); existing keys are never renamed.
#pragma once

#include <string>

#include "engine/program.h"

namespace mpc {

std::string CompileReportJson(const Program& program);
// The short terminal summary: one line per pass, then sizes.
std::string CompileSummaryText(const Program& program);

}  // namespace mpc
