// JSON Lines metrics (see metrics.h).
#include "engine/metrics.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/file_util.h"
#include "base/status_macros.h"

namespace mpc {

std::string JsonNumber(double v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  return absl::StrFormat("%.9g", v);
}

std::string JsonEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

// The step of a record ("step", or a summary's "steps"); -1 when it has none.
int64_t RecordStep(const std::string& line) {
  for (const char* key : {"\"step\":", "\"steps\":"}) {
    const size_t at = line.find(key);
    if (at == std::string::npos) continue;
    int64_t step = 0;
    const std::string digits = line.substr(at + std::strlen(key), 20);
    const size_t end = digits.find_first_not_of("0123456789");
    if (absl::SimpleAtoi(digits.substr(0, end), &step)) return step;
  }
  return -1;
}

// The file's records up to step `resumed_at` and a resume marker, written atomically.
absl::Status TruncateForResume(const std::string& path, int64_t resumed_at) {
  std::string kept;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    MPC_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
    // A last line without its newline was cut by the crash: dropped.
    if (!text.empty() && text.back() != '\n')
      text.erase(text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1);
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (RecordStep(std::string(line)) <= resumed_at) absl::StrAppend(&kept, line, "\n");
    }
  }
  absl::StrAppend(&kept, "{\"kind\":\"resume\",\"step\":", resumed_at, "}\n");
  absl::Status st = WriteFileAtomically(path, kept);
  if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat("--metrics ", path, ": ", st.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsWriter>> MetricsWriter::Open(const std::string& path, int64_t resumed_at) {
  if (path.empty()) return std::unique_ptr<MetricsWriter>(new MetricsWriter(nullptr));
  if (resumed_at >= 0) MPC_RETURN_IF_ERROR(TruncateForResume(path, resumed_at));
  std::FILE* f = std::fopen(path.c_str(), resumed_at >= 0 ? "a" : "w");
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
  WriteLine(absl::StrCat(
      "{\"kind\":\"train\",\"step\":", m.step, ",\"epoch\":", m.epoch, ",\"loss\":", JsonNumber(m.loss), ",\"lr\":",
      JsonNumber(m.lr), ",\"loss_scale\":", JsonNumber(m.loss_scale), ",\"skipped\":", m.skipped ? "true" : "false",
      m.grad_norm >= 0 ? absl::StrCat(",\"grad_norm\":", JsonNumber(m.grad_norm)) : "", Fp8Json(m),
      m.overflow_node.empty() ? "" : absl::StrCat(",\"overflow_node\":\"", JsonEscape(m.overflow_node), "\""), "}"));
  for (const TensorStats& t : m.tensor_stats) {
    std::string line =
        absl::StrCat("{\"kind\":\"tensor_stats\",\"step\":", m.step, ",\"tensor\":\"", JsonEscape(t.tensor),
                     "\",\"node\":\"", JsonEscape(t.node), "\",\"op\":\"", t.op, "\",\"phase\":\"", t.phase,
                     "\",\"dtype\":\"", t.dtype, "\",\"elements\":", t.elements, ",\"amax\":", JsonNumber(t.amax),
                     ",\"min\":", JsonNumber(t.min), ",\"max\":", JsonNumber(t.max),
                     ",\"zero_fraction\":", JsonNumber(t.zero_fraction), ",\"nonfinite\":", t.nonfinite);
    if (t.subnormal_fraction >= 0) absl::StrAppend(&line, ",\"subnormal_fraction\":", JsonNumber(t.subnormal_fraction));
    if (t.fp8_underflow_fraction >= 0) {
      absl::StrAppend(&line, ",\"fp8_underflow_fraction\":", JsonNumber(t.fp8_underflow_fraction),
                      ",\"fp8_saturated_fraction\":", JsonNumber(t.fp8_saturated_fraction));
    }
    WriteLine(line + "}");
  }
}

// [v0,v1,...] with JsonNumber's formatting.
static std::string JsonArray(const std::vector<double>& values) {
  std::vector<std::string> items;
  items.reserve(values.size());
  for (double v : values) items.push_back(JsonNumber(v));
  return absl::StrCat("[", absl::StrJoin(items, ","), "]");
}

void MetricsWriter::WriteEval(const EvalMetrics& m) {
  std::string line =
      absl::StrCat("{\"kind\":\"eval\",\"step\":", m.step, ",\"epoch\":", m.epoch, ",\"loss\":", JsonNumber(m.loss),
                   ",\"accuracy\":", JsonNumber(m.accuracy), ",\"examples\":", m.examples);
  // Classification metrics only where they apply (see EvalMetrics).
  if (m.top_k > 1 && m.top_k_accuracy >= 0) {
    absl::StrAppend(&line, ",\"top_k\":", m.top_k, ",\"top_k_accuracy\":", JsonNumber(m.top_k_accuracy));
  }
  if (m.macro_f1 >= 0) {
    absl::StrAppend(&line, ",\"macro_f1\":", JsonNumber(m.macro_f1), ",\"precision\":", JsonArray(m.class_precision),
                    ",\"recall\":", JsonArray(m.class_recall), ",\"f1\":", JsonArray(m.class_f1));
  }
  if (m.perplexity >= 0) absl::StrAppend(&line, ",\"perplexity\":", JsonNumber(m.perplexity));
  if (m.averaged_weights) absl::StrAppend(&line, ",\"weights\":\"ema\"");  // the moving average's evaluation
  WriteLine(line + "}");
}

namespace {

// A data-parallel job's per-rank step times, as a summary field ("" for one process).
std::string RankTimes(const std::vector<double>& ms) {
  if (ms.size() < 2) return "";
  std::vector<std::string> parts;
  for (double v : ms) parts.push_back(JsonNumber(v));
  return absl::StrCat(",\"rank_ms_per_step\":[", absl::StrJoin(parts, ","), "]");
}

}  // namespace

void MetricsWriter::WriteSummary(const TrainSummary& s, const std::string& stopped) {
  WriteLine(absl::StrCat("{\"kind\":\"summary\",\"steps\":", s.steps, ",\"wall_s\":", JsonNumber(s.wall_s),
                         ",\"planned_peak_bytes\":", s.planned_peak_bytes, ",\"skipped_steps\":", s.skipped_steps,
                         s.evaluated ? absl::StrCat(",\"final_accuracy\":", JsonNumber(s.last_eval.accuracy)) : "",
                         stopped.empty() ? "" : absl::StrCat(",\"stopped\":\"", JsonEscape(stopped), "\""),
                         RankTimes(s.rank_ms_per_step), "}"));
}

}  // namespace mpc
