// One writer per output. A run holds an advisory lock (flock) on a small file for each
// thing it writes to over its life: its checkpoint directory (DIR/.mpc-lock), metrics file
// (FILE.lock), TensorBoard directory (DIR/.mpc-lock) and ONNX exports (FILE.lock). A
// second run asking for the same output is refused at start, naming the process that holds
// it (pid, host, start time, command line, written into the lock file). The kernel releases
// the lock when the process dies, kill -9 included, so nothing is left to clean up: a
// stale lock file is simply locked again by the next run. Advisory locks are shared
// between hosts only where the file system implements flock across them (local disks, and
// NFSv4 where the server does); the holder's host is named for that reason.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace mpc {

// This machine's host name ("localhost" when it has none): named in lock files and in
// TensorBoard's event file names.
std::string HostName();

class OutputLock {
 public:
  // Locks `lock_path` (created if missing; its directory must exist) for the output `what`
  // (e.g. "checkpoint directory runs/a"); `alternative` says how to run beside the holder
  // (e.g. "choose another --checkpoint_dir"). FailedPrecondition naming the holder when
  // another process holds it.
  static absl::StatusOr<std::unique_ptr<OutputLock>> Acquire(const std::string& lock_path, const std::string& what,
                                                             const std::string& alternative);
  // The lock file for a directory output and for a file output.
  static std::string ForDirectory(const std::string& dir);
  static std::string ForFile(const std::string& path);

  // Removes the lock file, then releases the lock.
  ~OutputLock();
  OutputLock(const OutputLock&) = delete;
  OutputLock& operator=(const OutputLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  OutputLock(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_;
  std::string path_;
};

}  // namespace mpc
