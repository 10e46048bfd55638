// The `mpc parity` report (see parity_report.h).
#include "tools/parity_report.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/metrics.h"

namespace mpc {
namespace {

bool Classification(const ParityReport& r) { return r.eval_f32.examples > 0 && r.eval_f32.accuracy > 0; }

double RelativeDivergence(double other, double f32) {
  if (!std::isfinite(other)) return INFINITY;
  return std::fabs(other - f32) / std::max(std::fabs(f32), 1e-12);
}

struct LossSummary {
  double max_divergence = 0;
  int64_t max_step = 0;
  double tail_mean_divergence = 0;  // over the last tenth of the steps (at least one)
};

LossSummary SummarizeLosses(const ParityReport& r) {
  LossSummary s;
  const size_t n = r.loss_f32.size();
  const size_t tail = std::max<size_t>(1, n / 10);
  for (size_t i = 0; i < n; ++i) {
    const double d = RelativeDivergence(r.loss_other[i], r.loss_f32[i]);
    if (d > s.max_divergence || s.max_step == 0) {
      s.max_divergence = d;
      s.max_step = static_cast<int64_t>(i) + 1;
    }
    if (i + tail >= n) s.tail_mean_divergence += d / static_cast<double>(tail);
  }
  return s;
}

int64_t SkippedCount(const ParityReport& r) { return std::count(r.skipped_other.begin(), r.skipped_other.end(), true); }

std::string Mib(int64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0)); }

std::string Ratio(double a, double b) { return b > 0 ? absl::StrFormat("%.2fx", a / b) : std::string("n/a"); }

std::string DescribeValue(const ParityValue& v) {
  std::string out = absl::StrFormat("'%s' (%s node '%s', %s, %s): relative error %.3g, tolerance %.0e", v.value, v.op,
                                    v.node, v.phase, v.dtype, v.relative_error, v.tolerance);
  if (v.cancelled) absl::StrAppend(&out, " (cancellation: relative to its inputs' magnitude)");
  absl::StrAppend(&out, "; node from ", v.origin);
  if (!v.reason.empty()) absl::StrAppend(&out, "; autocast: ", v.reason);
  return out;
}

std::string ValueJson(const ParityValue& v) {
  return absl::StrCat("{\"value\":\"", JsonEscape(v.value), "\",\"node\":\"", JsonEscape(v.node), "\",\"op\":\"",
                      JsonEscape(v.op), "\",\"phase\":\"", v.phase, "\",\"dtype\":\"", v.dtype,
                      "\",\"elements\":", v.elements, ",\"relative_error\":", JsonNumber(v.relative_error),
                      ",\"tolerance\":", JsonNumber(v.tolerance), ",\"cancelled\":", v.cancelled ? "true" : "false",
                      ",\"origin\":\"", JsonEscape(v.origin), "\",\"autocast_reason\":\"", JsonEscape(v.reason), "\"}");
}

// Indices of `values` by descending error (non-finite first).
std::vector<size_t> ByError(const std::vector<ParityValue>& values) {
  std::vector<size_t> order(values.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) {
    const double e = values[i].relative_error;
    return std::isnan(e) ? INFINITY : e;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return key(x) > key(y); });
  return order;
}

}  // namespace

double AccuracyDrop(const ParityReport& r) {
  return Classification(r) ? r.eval_f32.accuracy - r.eval_other.accuracy : 0.0;
}

std::string ParityReportText(const ParityReport& r, double max_accuracy_drop, int top) {
  const std::string p = r.precision;
  std::string out =
      absl::StrFormat("mpc parity: f32 against %s, %d steps from the same weights on the same batches\n", p, r.steps);
  if (!r.loss_f32.empty()) {
    const LossSummary s = SummarizeLosses(r);
    absl::StrAppendFormat(&out, "  loss        step 1: f32 %.6g, %s %.6g; step %d: f32 %.6g, %s %.6g\n", r.loss_f32[0],
                          p, r.loss_other[0], r.steps, r.loss_f32.back(), p, r.loss_other.back());
    absl::StrAppendFormat(
        &out, "              relative divergence: largest %.3g (step %d), mean over the last %d steps %.3g\n",
        s.max_divergence, s.max_step, std::max<int64_t>(1, r.steps / 10), s.tail_mean_divergence);
  }
  absl::StrAppendFormat(&out, "  skipped     %s: %d steps (non-finite gradients)\n", p, SkippedCount(r));
  if (Classification(r)) {
    const double drop = AccuracyDrop(r);
    absl::StrAppendFormat(&out, "  accuracy    f32 %.4f, %s %.4f: drop %.2f points (limit %.2f): %s\n",
                          r.eval_f32.accuracy, p, r.eval_other.accuracy, 100 * drop, 100 * max_accuracy_drop,
                          drop > max_accuracy_drop ? "FAILED" : "ok");
  } else {
    absl::StrAppendFormat(&out, "  eval loss   f32 %.6g, %s %.6g\n", r.eval_f32.loss, p, r.eval_other.loss);
  }
  absl::StrAppendFormat(&out, "  memory      planned peak f32 %s, %s %s (%s)\n", Mib(r.planned_peak_bytes_f32), p,
                        Mib(r.planned_peak_bytes_other),
                        Ratio(static_cast<double>(r.planned_peak_bytes_other), r.planned_peak_bytes_f32));
  absl::StrAppendFormat(&out, "  step time   median f32 %.2f ms, %s %.2f ms (%s)\n", r.step_ms_f32, p, r.step_ms_other,
                        Ratio(r.step_ms_other, r.step_ms_f32));
  for (const ParityProbe& probe : r.probes) {
    absl::StrAppendFormat(&out,
                          "\nprobe at step %d (%s on FP32's weights and batch): loss f32 %.6g, %s %.6g; %d values "
                          "compared, %d only in one program\n",
                          probe.step, p, probe.loss_f32, p, probe.loss_other, probe.values.size(), probe.not_compared);
    if (probe.first_past_tolerance >= 0) {
      absl::StrAppend(&out, "  divergence starts at ",
                      DescribeValue(probe.values[static_cast<size_t>(probe.first_past_tolerance)]), "\n");
    } else {
      absl::StrAppend(&out, "  every compared value is within its tolerance\n");
    }
    if (probe.first_gemm_past_tolerance >= 0 && probe.first_gemm_past_tolerance != probe.first_past_tolerance) {
      absl::StrAppend(&out, "  first GEMM past tolerance: ",
                      DescribeValue(probe.values[static_cast<size_t>(probe.first_gemm_past_tolerance)]), "\n");
    }
    absl::StrAppendFormat(&out, "  largest errors:\n    %-10s %-8s %-6s %-9s %-22s %s\n", "rel.error", "tol", "dtype",
                          "phase", "op", "value");
    const std::vector<size_t> order = ByError(probe.values);
    for (size_t k = 0; k < order.size() && k < static_cast<size_t>(top); ++k) {
      const ParityValue& v = probe.values[order[k]];
      absl::StrAppendFormat(&out, "    %-10.3g %-8.0e %-6s %-9s %-22s %s%s\n", v.relative_error, v.tolerance, v.dtype,
                            v.phase, v.op, v.value, v.cancelled ? " (cancellation)" : "");
    }
    if (!probe.gradients.empty()) {
      absl::StrAppend(&out, "  parameter gradients (as the optimizer applies them):\n");
      const std::vector<size_t> grads = ByError(probe.gradients);
      for (size_t k = 0; k < grads.size() && k < static_cast<size_t>(top); ++k) {
        const ParityValue& v = probe.gradients[grads[k]];
        absl::StrAppendFormat(&out, "    %-10.3g %-8.0e %-6s %s%s\n", v.relative_error, v.tolerance, v.dtype, v.value,
                              v.cancelled ? " (cancellation)" : "");
      }
    }
  }
  for (const std::string& n : r.notices) absl::StrAppend(&out, "note: ", n, "\n");
  return out;
}

std::string ParityReportJson(const ParityReport& r, double max_accuracy_drop) {
  std::vector<std::string> steps;
  for (size_t i = 0; i < r.loss_f32.size(); ++i) {
    steps.push_back(absl::StrCat("{\"step\":", i + 1, ",\"loss_f32\":", JsonNumber(r.loss_f32[i]),
                                 ",\"loss_other\":", JsonNumber(r.loss_other[i]), ",\"relative_divergence\":",
                                 JsonNumber(RelativeDivergence(r.loss_other[i], r.loss_f32[i])),
                                 ",\"skipped\":", r.skipped_other[i] ? "true" : "false", "}"));
  }
  std::vector<std::string> probes;
  for (const ParityProbe& probe : r.probes) {
    std::vector<std::string> values, grads;
    for (const ParityValue& v : probe.values) values.push_back(ValueJson(v));
    for (const ParityValue& v : probe.gradients) grads.push_back(ValueJson(v));
    const std::string first =
        probe.first_past_tolerance >= 0
            ? absl::StrCat("\"", JsonEscape(probe.values[static_cast<size_t>(probe.first_past_tolerance)].value), "\"")
            : std::string("null");
    const std::string first_gemm =
        probe.first_gemm_past_tolerance >= 0
            ? absl::StrCat("\"", JsonEscape(probe.values[static_cast<size_t>(probe.first_gemm_past_tolerance)].value),
                           "\"")
            : std::string("null");
    probes.push_back(absl::StrCat("{\"step\":", probe.step, ",\"loss_f32\":", JsonNumber(probe.loss_f32),
                                  ",\"loss_other\":", JsonNumber(probe.loss_other), ",\"first_past_tolerance\":", first,
                                  ",\"first_gemm_past_tolerance\":", first_gemm,
                                  ",\"not_compared\":", probe.not_compared, ",\"values\":[", absl::StrJoin(values, ","),
                                  "],\"gradients\":[", absl::StrJoin(grads, ","), "]}"));
  }
  const LossSummary s = SummarizeLosses(r);
  const double drop = AccuracyDrop(r);
  auto eval = [](const EvalMetrics& e) {
    return absl::StrCat("{\"loss\":", JsonNumber(e.loss), ",\"accuracy\":", JsonNumber(e.accuracy),
                        ",\"examples\":", e.examples, "}");
  };
  std::vector<std::string> notices;
  for (const std::string& n : r.notices) notices.push_back(absl::StrCat("\"", JsonEscape(n), "\""));
  return absl::StrCat(
      "{\"precision\":\"", JsonEscape(r.precision), "\",\"steps\":", r.steps,
      ",\"loss\":{\"max_relative_divergence\":", JsonNumber(s.max_divergence), ",\"max_divergence_step\":", s.max_step,
      ",\"tail_mean_relative_divergence\":", JsonNumber(s.tail_mean_divergence), ",\"per_step\":[",
      absl::StrJoin(steps, ","), "]},\"skipped_steps\":", SkippedCount(r), ",\"eval_f32\":", eval(r.eval_f32),
      ",\"eval_other\":", eval(r.eval_other), ",\"accuracy_drop\":", JsonNumber(drop),
      ",\"max_accuracy_drop\":", JsonNumber(max_accuracy_drop),
      ",\"accuracy_ok\":", drop > max_accuracy_drop ? "false" : "true",
      ",\"planned_peak_bytes\":{\"f32\":", r.planned_peak_bytes_f32, ",\"other\":", r.planned_peak_bytes_other,
      "},\"step_ms\":{\"f32\":", JsonNumber(r.step_ms_f32), ",\"other\":", JsonNumber(r.step_ms_other),
      "},\"probes\":[", absl::StrJoin(probes, ","), "],\"notices\":[", absl::StrJoin(notices, ","), "]}\n");
}

}  // namespace mpc
