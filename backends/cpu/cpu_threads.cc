// OpenMP threads shared among the ranks of one host (see cpu_threads.h).
#include "backends/cpu/cpu_threads.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace mpc {

std::string ShareCpuThreadsAmongLocalRanks(int local_ranks) {
  if (local_ranks <= 1 || std::getenv("OMP_NUM_THREADS") != nullptr) return "";
  const int usable = omp_get_num_procs();  // the CPUs this process's affinity allows
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  const int host = online > 0 ? static_cast<int>(online) : usable;
  const int threads = std::max(1, std::min(usable, host / local_ranks));
  const int before = omp_get_max_threads();
  if (threads >= before) return "";
  omp_set_num_threads(threads);
  return absl::StrCat(local_ranks, " ranks share this host's ", host, " CPUs: ", threads,
                      " OpenMP thread", threads == 1 ? "" : "s", " each instead of ", before,
                      " (set OMP_NUM_THREADS to choose)");
}

}  // namespace mpc
