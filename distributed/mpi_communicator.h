// The MPI Communicator (Open MPI on our machines): built only when CMake finds MPI
// (MPC_WITH_MPI). JoinWorld (communicator.h) is how the rest of mpc reaches it.
#pragma once

#include "absl/status/statusor.h"
#include "distributed/communicator.h"

namespace mpc {

#ifdef MPC_WITH_MPI
// MPI_Init on first use (threads: funneled, the engine's thread makes every call), one
// process-wide communicator over MPI_COMM_WORLD, finalized at exit.
absl::StatusOr<Communicator*> ConnectMpiWorld(double timeout_s);
#endif

}  // namespace mpc
