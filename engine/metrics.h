// The --metrics file: JSON Lines, one record per training step ("train"), evaluation
// ("eval") and a final "summary". Key names are an interface other tools rely on:
// new keys may be added, these are never renamed.
#pragma once

#include <cstdio>
#include <string>

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
  void WriteSummary(const TrainSummary& s);

 private:
  explicit MetricsWriter(std::FILE* file) : file_(file) {}
  void WriteLine(const std::string& line);
  std::FILE* file_;
};

// A JSON number, or null for NaN/inf (JSON has no literals for them).
std::string JsonNumber(double v);

}  // namespace mpc
