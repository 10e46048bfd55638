// TensorBoard event files (see tensorboard_writer.h).
#include "engine/tensorboard_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/crc32c.h"
#include "base/status_macros.h"
#include "proto/tensorboard_event.pb.h"

namespace mpc {
namespace {

// TFRecord integers are little-endian whatever the host.
void AppendLittleEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

double WallTime() { return absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()); }

}  // namespace

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(const std::string& dir, int64_t first_step) {
  if (dir.empty()) return absl::InvalidArgumentError("--tensorboard: the directory name is empty");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tensorboard ", dir, ": cannot create the directory: ", ec ? ec.message() : "a file of that name exists",
        "; pass a directory that can be created or written"));
  }
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<OutputLock> lock,
                       OutputLock::Acquire(OutputLock::ForDirectory(dir), absl::StrCat("--tensorboard directory ", dir),
                                           "pass another --tensorboard directory (TensorBoard shows each "
                                           "subdirectory of its --logdir as a run)"));
  const std::string base =
      absl::StrCat(dir, "/events.out.tfevents.", absl::ToUnixSeconds(absl::Now()), ".", HostName());
  // O_EXCL: a second run started in the same second in the same directory must not
  // truncate the first one's file; it gets a numbered name instead.
  std::string path = base;
  int fd = -1;
  for (int attempt = 1; attempt <= 100; ++attempt) {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0 || errno != EEXIST) break;
    path = absl::StrCat(base, ".", attempt);
  }
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--tensorboard ", dir, ": cannot create the event file ", path, ": ",
                                                   std::strerror(errno),
                                                   "; check the directory's permissions and free space"));
  }
  std::FILE* file = ::fdopen(fd, "wb");
  if (!file) {
    const int err = errno;
    ::close(fd);
    return absl::InternalError(absl::StrCat("--tensorboard: fdopen of ", path, " failed: ", std::strerror(err)));
  }
  std::unique_ptr<TensorBoardWriter> writer(new TensorBoardWriter(file, path, std::move(lock)));
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_file_version("brain.Event:2");
  if (absl::Status st = writer->WriteRecord(event.SerializeAsString()); !st.ok()) return st;
  tensorboard::Event start;
  start.set_wall_time(WallTime());
  start.set_step(first_step);
  start.mutable_session_log()->set_status(tensorboard::SessionLog::START);
  if (absl::Status st = writer->WriteRecord(start.SerializeAsString()); !st.ok()) return st;
  return writer;
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_) std::fclose(file_);
  file_ = nullptr;
}

absl::Status TensorBoardWriter::WriteRecord(const std::string& bytes) {
  std::string record;
  record.reserve(bytes.size() + 16);
  AppendLittleEndian(&record, bytes.size(), 8);
  AppendLittleEndian(&record, MaskCrc32c(Crc32c(record)), 4);
  record += bytes;
  AppendLittleEndian(&record, MaskCrc32c(Crc32c(bytes)), 4);
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() || std::fflush(file_) != 0) {
    return absl::DataLossError(absl::StrCat("--tensorboard: writing ", path_, " failed: ", std::strerror(errno),
                                            "; check free space on its file system"));
  }
  return absl::OkStatus();
}

absl::Status TensorBoardWriter::WriteScalar(const std::string& tag, int64_t step, double value) {
  return WriteScalars(step, {{tag, value}});
}

absl::Status TensorBoardWriter::WriteScalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  tensorboard::Event event;
  event.set_wall_time(WallTime());
  event.set_step(step);
  tensorboard::Summary* summary = event.mutable_summary();
  for (const auto& [tag, value] : values) {
    tensorboard::Summary::Value* v = summary->add_value();
    v->set_tag(tag);
    v->set_simple_value(static_cast<float>(value));
  }
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteStep(const StepMetrics& m) {
  skipped_total_ += m.skipped;
  std::vector<std::pair<std::string, double>> values = {{"train/loss", m.loss},
                                                        {"train/lr", m.lr},
                                                        {"train/loss_scale", m.loss_scale},
                                                        {"train/skipped", m.skipped ? 1.0 : 0.0},
                                                        {"train/skipped_total", static_cast<double>(skipped_total_)}};
  if (m.grad_norm >= 0) values.emplace_back("train/grad_norm", m.grad_norm);
  for (const auto& [name, v] : m.fp8) values.emplace_back("fp8/" + name, v);
  for (const TensorStats& t : m.tensor_stats) {
    const std::string prefix = absl::StrCat("stats/", t.tensor, "/");
    values.emplace_back(prefix + "amax", t.amax);
    values.emplace_back(prefix + "zero_fraction", t.zero_fraction);
    values.emplace_back(prefix + "nonfinite", static_cast<double>(t.nonfinite));
    if (t.subnormal_fraction >= 0) values.emplace_back(prefix + "subnormal_fraction", t.subnormal_fraction);
  }
  return WriteScalars(m.step, values);
}

absl::Status TensorBoardWriter::WriteEval(const EvalMetrics& m) {
  // The averaged weights' evaluation (spec ema.evaluate) goes beside the trained weights'.
  const std::string prefix = m.averaged_weights ? "eval_ema/" : "eval/";
  std::vector<std::pair<std::string, double>> values = {{prefix + "loss", m.loss}, {prefix + "accuracy", m.accuracy}};
  if (m.top_k_accuracy >= 0) values.emplace_back(prefix + "top_k_accuracy", m.top_k_accuracy);
  if (m.macro_f1 >= 0) values.emplace_back(prefix + "macro_f1", m.macro_f1);
  if (m.perplexity >= 0) values.emplace_back(prefix + "perplexity", m.perplexity);
  return WriteScalars(m.step, values);
}

}  // namespace mpc
