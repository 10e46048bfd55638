// JSON Lines metrics (see metrics.h).
#include "engine/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace mpc {

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path, bool append) {
  if (path.empty()) return std::unique_ptr<MetricsWriter>(new MetricsWriter(nullptr));
  std::FILE* f = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics ", path, ": cannot open for writing: ", std::strerror(errno)));
  }
  return std::unique_ptr<MetricsWriter>(new MetricsWriter(f));
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::WriteLine(const std::string& line) {
  if (!file_) return;
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  std::fflush(file_);
}

// ,"fp8":{"<tensor>.amax":..,"<tensor>.scale":..} when fp8.report_tensor matched something.
static std::string Fp8Json(const StepMetrics& m) {
  if (m.fp8.empty()) return "";
  std::vector<std::string> fields;
  for (const auto& [name, v] : m.fp8) fields.push_back(absl::StrCat("\"", name, "\":", JsonNumber(v)));
  return absl::StrCat(",\"fp8\":{", absl::StrJoin(fields, ","), "}");
}

void MetricsWriter::WriteTrain(const StepMetrics& m) {
  WriteLine(absl::StrCat("{\"kind\":\"train\",\"step\":", m.step, ",\"epoch\":", m.epoch,
                         ",\"loss\":", JsonNumber(m.loss), ",\"lr\":", JsonNumber(m.lr),
                         ",\"loss_scale\":", JsonNumber(m.loss_scale), ",\"skipped\":", m.skipped ? "true" : "false",
                         m.grad_norm >= 0 ? absl::StrCat(",\"grad_norm\":", JsonNumber(m.grad_norm)) : "", Fp8Json(m),
                         "}"));
}

void MetricsWriter::WriteEval(const EvalMetrics& m) {
  WriteLine(absl::StrCat("{\"kind\":\"eval\",\"step\":", m.step, ",\"epoch\":", m.epoch,
                         ",\"loss\":", JsonNumber(m.loss), ",\"accuracy\":", JsonNumber(m.accuracy),
                         ",\"examples\":", m.examples, "}"));
}

void MetricsWriter::WriteSummary(const TrainSummary& s) {
  WriteLine(absl::StrCat("{\"kind\":\"summary\",\"steps\":", s.steps, ",\"wall_s\":", JsonNumber(s.wall_s),
                         ",\"planned_peak_bytes\":", s.planned_peak_bytes, ",\"skipped_steps\":", s.skipped_steps,
                         s.evaluated ? absl::StrCat(",\"final_accuracy\":", JsonNumber(s.last_eval.accuracy)) : "",
                         "}"));
}

}  // namespace mpc
