// See output_lock.h. The lock file is removed by its holder before the lock is released;
// a process that opened the old file in between then locks a file no longer at the path,
// which it notices (the path's inode differs from its descriptor's) and opens again.
#include "engine/output_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace mpc {
std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

namespace {

// This process's command line, arguments joined by spaces ("" where /proc has none).
std::string CommandLine() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (char& c : raw) c = c == '\0' ? ' ' : c;
  return std::string(absl::StripSuffix(raw, " "));
}

std::string Holder() {
  return absl::StrCat("pid ", ::getpid(), " on host ", HostName(), ", started ",
                      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::Now(), absl::UTCTimeZone()), ": ",
                      CommandLine());
}

// What the holder wrote into the lock file (its first line), or a placeholder.
std::string ReadHolder(int fd) {
  char buf[1024] = {};
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  std::string_view text(buf, n > 0 ? static_cast<size_t>(n) : 0);
  text = text.substr(0, text.find('\n'));
  return text.empty() ? std::string("another process (it has not written its name yet)") : std::string(text);
}

bool SameFile(int fd, const std::string& path) {
  struct stat by_fd {}, by_path {};
  return ::fstat(fd, &by_fd) == 0 && ::stat(path.c_str(), &by_path) == 0 && by_fd.st_dev == by_path.st_dev &&
         by_fd.st_ino == by_path.st_ino;
}

}  // namespace

std::string OutputLock::ForDirectory(const std::string& dir) { return absl::StrCat(dir, "/.mpc-lock"); }
std::string OutputLock::ForFile(const std::string& path) { return absl::StrCat(path, ".lock"); }

absl::StatusOr<std::unique_ptr<OutputLock>> OutputLock::Acquire(const std::string& lock_path, const std::string& what,
                                                                const std::string& alternative) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": cannot create its lock file ", lock_path, ": ",
                                                     std::strerror(errno), "; check the permissions"));
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = err == EWOULDBLOCK ? ReadHolder(fd) : "";
      ::close(fd);
      if (err != EWOULDBLOCK) {
        return absl::InternalError(
            absl::StrCat(what, ": cannot lock ", lock_path, ": ", std::strerror(err)));
      }
      // The holder may be this very process: another Engine (or writer) in it.
      const bool this_process = absl::StartsWith(holder, absl::StrCat("pid ", ::getpid(), " on host ", HostName(), ","));
      return absl::FailedPreconditionError(
          absl::StrCat(what, " is in use by another run (", holder, "); wait for it to finish, or ", alternative,
                       this_process ? " (the holder is this process: destroy the Engine or writer that has it open "
                                      "first; an Engine that only reads checkpoints takes use_checkpoint_dir = "
                                      "false and LoadCheckpoint)"
                                    : ""));
    }
    if (!SameFile(fd, lock_path)) {  // its holder removed it as we opened it: open it again
      ::close(fd);
      continue;
    }
    // The holder's name for a refused run's message. Should the write fail, the lock
    // still holds, and a refused run says it cannot name the holder.
    const std::string holder = absl::StrCat(Holder(), "\n");
    const bool named = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, holder.data(), holder.size(), 0) > 0;
    (void)named;
    return std::unique_ptr<OutputLock>(new OutputLock(fd, lock_path));
  }
  return absl::InternalError(absl::StrCat(what, ": its lock file ", lock_path,
                                          " kept being replaced while this run tried to lock it; try again"));
}

OutputLock::~OutputLock() {
  ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace mpc
