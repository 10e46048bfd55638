// OpenMP threads per process when several ranks of a job share one host's CPUs.
//
// OpenMP (mpc's kernel loops and oneDNN's primitives) starts one thread per CPU the process
// may run on. mpirun binds each of 1-2 ranks to a core, so each sees one CPU; with more ranks
// it binds to a whole socket, and with --oversubscribe not at all, so every rank on the host
// starts a thread per CPU: N ranks run N times as many threads as CPUs, whose spinning
// waits take the cores the others need (on 2 cores, two processes of 2 spinning threads
// each took 2.3x as long as with sleeping waits; docs/building.md). The CPU backend
// therefore gives each of L local ranks min(the CPUs it may use, the host's CPUs / L)
// threads, unless OMP_NUM_THREADS says otherwise.
#pragma once

#include <string>

namespace mpc {

// Sizes the calling thread's OpenMP team for `local_ranks` processes on this host; returns
// what it did, for the run's notices ("" when it changed nothing: one rank, OMP_NUM_THREADS
// set, or already few enough threads).
std::string ShareCpuThreadsAmongLocalRanks(int local_ranks);

}  // namespace mpc
