// JoinWorld and LaunchedWorldSize (see communicator.h): which job this process is part of.
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "distributed/communicator.h"
#include "distributed/mpi_communicator.h"

namespace mpc {

namespace {

// The first of `names` set in the environment to a positive integer (1 when none is).
int FirstPositive(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    const char* value = std::getenv(name);
    int size = 0;
    if (value && absl::SimpleAtoi(value, &size) && size > 0) return size;
  }
  return 1;
}

}  // namespace

int LaunchedWorldSize() {
  // Open MPI's mpirun, then the PMI variables of Slurm's srun and MPICH's Hydra.
  return FirstPositive({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"});
}

int LaunchedLocalSize() {
  // Open MPI's mpirun, MPICH's Hydra, PMIx launchers (Slurm's srun among them).
  return FirstPositive({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "PMIX_LOCAL_SIZE"});
}

absl::StatusOr<Communicator*> JoinWorld(double timeout_s) {
  const int launched = LaunchedWorldSize();
  if (launched <= 1) return nullptr;
#ifdef MPC_WITH_MPI
  return ConnectMpiWorld(timeout_s);
#else
  return absl::FailedPreconditionError(
      absl::StrCat("this process was started as one of ", launched,
                   " ranks (mpirun), but this mpc was built without MPI: install libopenmpi-dev (scripts/"
                   "install-deps.sh does) and rebuild, or run it without mpirun"));
#endif
}

}  // namespace mpc
