// The --metrics file: JSON Lines, one record per training step ("train"), evaluation
// ("eval") and a final "summary". Key names are an interface other tools rely on:
// new keys may be added, these are never renamed.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/mpc.h"

namespace mpc {

class MetricsWriter {
 public:
  // Opens (truncating, or appending when resuming) the file; an empty path writes nothing.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path, bool append);
  ~MetricsWriter();

  void WriteTrain(const StepMetrics& m);
  void WriteEval(const EvalMetrics& m);
  // `stopped`: why the run stopped early (written as "stopped"), empty when it did not.
  void WriteSummary(const TrainSummary& s, const std::string& stopped = "");

 private:
  explicit MetricsWriter(std::FILE* file) : file_(file) {}
  void WriteLine(const std::string& line);
  std::FILE* file_;
};

// A JSON number; NaN and infinities (which JSON cannot spell as numbers) as the strings
// "NaN", "Infinity" and "-Infinity", so a reader can tell them apart.
std::string JsonNumber(double v);
// The contents of a JSON string: quotes, backslashes and control characters escaped.
std::string JsonEscape(const std::string& s);

}  // namespace mpc
