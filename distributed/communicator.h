// The Communicator: the collectives data-parallel training runs on (DESIGN.md "Scale-out"),
// between the processes of one job. Kernels of the collective ops (AllReduce) call it
// through their backend; the engine uses it outside the step (setup checks, the summary).
// Implementations: MPI on the CPU (mpi_communicator.cc), none at all in a single-process
// run (JoinWorld returns null, and no program contains a collective).
//
// Every call is collective: all ranks make the same calls in the same order, with the
// same counts. `what` names the call in errors and in the hang watchdog's message.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace mpc {

enum class ReduceOp { kSum, kMax };

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place: every rank ends with the element-wise reduction of all ranks' `count`
  // floats. Sums are taken in rank order 0, 1, ..., N-1 by whichever rank owns a chunk,
  // so every rank gets bit-identical values and a run is reproducible for a world size.
  virtual absl::Status AllReduce(float* data, int64_t count, ReduceOp op, const std::string& what) = 0;
  // ZeRO-1's halves of an AllReduce. ReduceScatter: `send` holds size() chunks of `count`
  // floats, chunk r for rank r; every rank receives in `recv` the sum of all ranks' copies
  // of its chunk, added in rank order (the same bits AllReduce gives that chunk).
  virtual absl::Status ReduceScatter(const float* send, float* recv, int64_t count, const std::string& what) = 0;
  // Every rank's `count` floats of `mine`, in rank order, into `all` (size() * count).
  virtual absl::Status AllGatherFloats(const float* mine, float* all, int64_t count, const std::string& what) = 0;
  // Every rank's bytes, in rank order.
  virtual absl::StatusOr<std::vector<std::string>> AllGather(const std::string& mine, const std::string& what) = 0;
  // Ends every process of the job with `exit_code` (after this rank failed: the others
  // would otherwise wait in their next collective).
  [[noreturn]] virtual void Abort(int exit_code) = 0;
};

// The job this process belongs to. Null when it runs alone: not started by a launcher
// (mpirun sets OMPI_COMM_WORLD_SIZE / PMI_SIZE), or started as a job of one. An error when
// a launcher started several ranks but this build has no MPI. The first call connects
// (MPI_Init); later calls return the same communicator, which lives until the process
// exits. `timeout_s`: a collective waiting longer ends the job with a message naming the
// rank and the collective (the watchdog; only the first call's value counts).
absl::StatusOr<Communicator*> JoinWorld(double timeout_s);

// The world size a launcher announced in the environment (1 when none did).
int LaunchedWorldSize();
// How many of the job's ranks the launcher started on this host (1 when it did not say):
// they share its CPUs.
int LaunchedLocalSize();

}  // namespace mpc
