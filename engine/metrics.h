// The --metrics file: JSON Lines, one record per training step ("train"), evaluation
// ("eval") and a final "summary"; a resumed run adds {"kind":"resume","step":S}. Key names are an interface other tools
// rely on: new keys may be added, these are never renamed.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "engine/mpc.h"

namespace mpc {

class MetricsWriter {
 public:
  // Opens the file, truncating it; an empty path writes nothing. `resumed_at` >= 0: a run
  // resumed from the checkpoint of that step: the file keeps the records of steps up to
  // it (those the interrupted run wrote after it are dropped, so they are not there
  // twice; rewritten atomically), then gets a "resume" record, and is appended to.
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Open(const std::string& path, int64_t resumed_at = -1);
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
