// The `mpc parity` report (Engine::Parity's ParityReport): a text summary for the terminal
// and a JSON document with every number in it, and the verdict on the accuracy drop.
#pragma once

#include <string>

#include "engine/mpc.h"

namespace mpc {

// The drop of the lower precision's final accuracy below FP32's (positive: worse), in
// accuracy units (0.01 = one point); 0 when the loss is not a classification.
double AccuracyDrop(const ParityReport& report);

// `top`: how many of the largest per-value errors of each probe to list.
std::string ParityReportText(const ParityReport& report, double max_accuracy_drop, int top = 12);
std::string ParityReportJson(const ParityReport& report, double max_accuracy_drop);

}  // namespace mpc
