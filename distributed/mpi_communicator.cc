// The MPI Communicator (see mpi_communicator.h). AllReduce is a reduce-scatter followed by
// an all-gather, both written with MPI_Alltoallv / MPI_Allgatherv rather than left to
// MPI_Allreduce: the rank that owns a chunk adds the ranks' contributions in rank order,
// so every rank holds the same bits whichever algorithm Open MPI picks for the message
// size (MPI_Allreduce promises neither), and ZeRO-style sharding can reuse the halves.
// A watchdog thread ends the job when one collective waits longer than the timeout.
#include "distributed/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"

namespace mpc {
namespace {

// Ends the process when a collective outlives the timeout: mpirun then ends the other
// ranks (a process that exits without MPI_Finalize aborts the job).
class Watchdog {
 public:
  Watchdog(int rank, int size, double timeout_s) : rank_(rank), size_(size), timeout_s_(timeout_s) {
    thread_ = std::thread([this] { Watch(); });
  }
  ~Watchdog() { Stop(); }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  void Begin(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu_);
    what_ = what;
    started_ = std::chrono::steady_clock::now();
    active_ = true;
  }
  void End() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = false;
  }

 private:
  void Watch() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(200));
      if (stop_ || !active_) continue;
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
      if (waited < timeout_s_) continue;
      std::fprintf(stderr,
                   "mpc: rank %d of %d: collective %s has waited %.0f s for the other ranks (distributed.timeout_s "
                   "%.0f): one of them died or hangs; ending the job\n",
                   rank_, size_, what_.c_str(), waited, timeout_s_);
      std::fflush(stderr);
      std::_Exit(3);
    }
  }

  const int rank_, size_;
  const double timeout_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, active_ = false;
  std::string what_;
  std::chrono::steady_clock::time_point started_;
  std::thread thread_;
};

absl::Status MpiError(int code, const std::string& call, const std::string& what, int rank) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return absl::InternalError(
      absl::StrCat("rank ", rank, ": ", call, " failed in collective ", what, ": ", std::string(text, length)));
}

// The largest piece one MPI call moves: counts and displacements are ints.
constexpr int64_t kMaxPiece = int64_t{1} << 28;

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator(int rank, int size, double timeout_s) : rank_(rank), size_(size), watchdog_(rank, size, timeout_s) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduce(float* data, int64_t count, ReduceOp op, const std::string& what) override {
    for (int64_t begin = 0; begin < count; begin += kMaxPiece) {
      const int64_t n = std::min(kMaxPiece, count - begin);
      if (absl::Status s = AllReducePiece(data + begin, n, op, what); !s.ok()) return s;
    }
    return absl::OkStatus();
  }

  absl::Status ReduceScatter(const float* send, float* recv, int64_t count, const std::string& what) override {
    Scope scope(this, what);
    std::vector<int> counts(size_), send_displs(size_), recv_displs(size_);
    // Sent in place when every chunk's start fits an int displacement (count * size <=
    // kMaxPiece); larger buffers go in pieces, each packed first.
    const bool in_place = count * size_ <= kMaxPiece;
    for (int64_t begin = 0; begin < count; begin += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - begin));
      const float* source = send;
      if (in_place) {
        for (int r = 0; r < size_; ++r) {
          counts[r] = n;
          send_displs[r] = static_cast<int>(r * count);
          recv_displs[r] = r * n;
        }
      } else {
        packed_.resize(static_cast<size_t>(n) * size_);
        for (int r = 0; r < size_; ++r) {
          std::copy_n(send + static_cast<int64_t>(r) * count + begin, n, packed_.data() + static_cast<size_t>(r) * n);
          counts[r] = n;
          send_displs[r] = recv_displs[r] = r * n;
        }
        source = packed_.data();
      }
      scratch_.resize(static_cast<size_t>(n) * size_);
      if (int rc = MPI_Alltoallv(source, counts.data(), send_displs.data(), MPI_FLOAT, scratch_.data(), counts.data(),
                                 recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
          rc != MPI_SUCCESS) {
        return MpiError(rc, "MPI_Alltoallv", what, rank_);
      }
      float* mine = recv + begin;
      std::copy_n(scratch_.data(), n, mine);
      for (int r = 1; r < size_; ++r) {
        const float* theirs = scratch_.data() + static_cast<size_t>(r) * n;
        for (int i = 0; i < n; ++i) mine[i] += theirs[i];
      }
    }
    return absl::OkStatus();
  }

  absl::Status AllGatherFloats(const float* mine, float* all, int64_t count, const std::string& what) override {
    Scope scope(this, what);
    if (count * size_ <= kMaxPiece) {  // straight into `all`
      if (int rc = MPI_Allgather(mine, static_cast<int>(count), MPI_FLOAT, all, static_cast<int>(count), MPI_FLOAT,
                                 MPI_COMM_WORLD);
          rc != MPI_SUCCESS) {
        return MpiError(rc, "MPI_Allgather", what, rank_);
      }
      return absl::OkStatus();
    }
    for (int64_t begin = 0; begin < count; begin += kMaxPiece) {
      const int n = static_cast<int>(std::min(kMaxPiece, count - begin));
      scratch_.resize(static_cast<size_t>(n) * size_);
      if (int rc = MPI_Allgather(mine + begin, n, MPI_FLOAT, scratch_.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
          rc != MPI_SUCCESS) {
        return MpiError(rc, "MPI_Allgather", what, rank_);
      }
      for (int r = 0; r < size_; ++r) {
        std::copy_n(scratch_.data() + static_cast<size_t>(r) * n, n, all + static_cast<int64_t>(r) * count + begin);
      }
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine, const std::string& what) override {
    if (mine.size() > static_cast<size_t>(INT_MAX)) {
      return absl::InvalidArgumentError(absl::StrCat("collective ", what, ": ", mine.size(), " bytes is too many"));
    }
    Scope scope(this, what);
    const int my_size = static_cast<int>(mine.size());
    std::vector<int> sizes(size_), displs(size_);
    if (int rc = MPI_Allgather(&my_size, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD); rc != MPI_SUCCESS)
      return MpiError(rc, "MPI_Allgather", what, rank_);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[r] = static_cast<int>(total);
      total += sizes[r];
    }
    if (total > INT_MAX) {
      return absl::InvalidArgumentError(absl::StrCat("collective ", what, ": ", total, " bytes in all is too many"));
    }
    std::string all(static_cast<size_t>(total), '\0');
    if (int rc = MPI_Allgatherv(mine.data(), my_size, MPI_BYTE, all.data(), sizes.data(), displs.data(), MPI_BYTE,
                                MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      return MpiError(rc, "MPI_Allgatherv", what, rank_);
    }
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(displs[r], sizes[r]));
    return out;
  }

  [[noreturn]] void Abort(int exit_code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);  // MPI_Abort does not return; in case it does
  }

  void Shutdown() { watchdog_.Stop(); }

 private:
  // The watchdog times the collective for the life of the scope.
  struct Scope {
    Scope(MpiCommunicator* c, const std::string& what) : c(c) { c->watchdog_.Begin(what); }
    ~Scope() { c->watchdog_.End(); }
    MpiCommunicator* c;
  };

  // Chunk r of `count` elements: [count*r/N, count*(r+1)/N); no chunk is larger than
  // ceil(count/N), and every element is in exactly one, whatever count is.
  int64_t ChunkBegin(int64_t count, int r) const { return count * r / size_; }

  absl::Status AllReducePiece(float* data, int64_t count, ReduceOp op, const std::string& what) {
    Scope scope(this, what);
    std::vector<int> send_counts(size_), send_displs(size_), recv_counts(size_), recv_displs(size_);
    const int64_t my_begin = ChunkBegin(count, rank_);
    const int my_count = static_cast<int>(ChunkBegin(count, rank_ + 1) - my_begin);
    for (int r = 0; r < size_; ++r) {
      send_displs[r] = static_cast<int>(ChunkBegin(count, r));
      send_counts[r] = static_cast<int>(ChunkBegin(count, r + 1) - ChunkBegin(count, r));
      recv_counts[r] = my_count;
      recv_displs[r] = r * my_count;
    }
    // Reduce-scatter: every rank's copy of my chunk, in rank order, then the sum.
    scratch_.resize(static_cast<size_t>(my_count) * size_);
    if (int rc = MPI_Alltoallv(data, send_counts.data(), send_displs.data(), MPI_FLOAT, scratch_.data(),
                               recv_counts.data(), recv_displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      return MpiError(rc, "MPI_Alltoallv", what, rank_);
    }
    float* mine = data + my_begin;
    for (int i = 0; i < my_count; ++i) mine[i] = scratch_[i];
    for (int r = 1; r < size_; ++r) {
      const float* theirs = scratch_.data() + static_cast<size_t>(r) * my_count;
      if (op == ReduceOp::kSum) {
        for (int i = 0; i < my_count; ++i) mine[i] += theirs[i];
      } else {
        for (int i = 0; i < my_count; ++i)
          mine[i] = (theirs[i] > mine[i] || std::isnan(theirs[i])) ? theirs[i] : mine[i];
      }
    }
    // All-gather: every rank's reduced chunk to every rank.
    if (int rc = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, send_counts.data(), send_displs.data(),
                                MPI_FLOAT, MPI_COMM_WORLD);
        rc != MPI_SUCCESS) {
      return MpiError(rc, "MPI_Allgatherv", what, rank_);
    }
    return absl::OkStatus();
  }

  const int rank_, size_;
  Watchdog watchdog_;
  std::vector<float> scratch_, packed_;
};

MpiCommunicator* world = nullptr;

// Normal exit: stop the watchdog and finalize, or mpirun reports the rank as failed.
void FinalizeAtExit() {
  if (!world) return;
  world->Shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

absl::StatusOr<Communicator*> ConnectMpiWorld(double timeout_s) {
  if (world) return world;
  if (!(timeout_s > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("spec field distributed.timeout_s: ", timeout_s, " must be > 0"));
  }
  int provided = 0;
  if (int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided); rc != MPI_SUCCESS) {
    return absl::UnavailableError(absl::StrCat("MPI_Init_thread failed (code ", rc,
                                               "); is this process started by mpirun from the same Open MPI?"));
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  world = new MpiCommunicator(rank, size, timeout_s);
  std::atexit(FinalizeAtExit);
  return world;
}

}  // namespace mpc
