// The CPU backend's OpenMP team when several ranks share a host (backends/cpu/cpu_threads.h):
// each of L local ranks gets min(usable CPUs, host CPUs / L) threads, at least one, unless
// OMP_NUM_THREADS is set or there is one rank; the team is never made larger.
#include "backends/cpu/cpu_threads.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace mpc {
namespace {

// Restores the OpenMP team size and OMP_NUM_THREADS after a test.
class CpuThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    before_ = omp_get_max_threads();
    const char* env = std::getenv("OMP_NUM_THREADS");
    had_env_ = env != nullptr;
    if (had_env_) env_ = env;
    unsetenv("OMP_NUM_THREADS");
  }
  void TearDown() override {
    omp_set_num_threads(before_);
    if (had_env_) setenv("OMP_NUM_THREADS", env_.c_str(), 1);
  }
  int before_ = 1;
  bool had_env_ = false;
  std::string env_;
};

TEST_F(CpuThreadsTest, EachLocalRankGetsItsShareOfTheHost) {
  const int host = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  const int usable = omp_get_num_procs();
  // More ranks than CPUs: one thread each.
  const std::string said = ShareCpuThreadsAmongLocalRanks(2 * host);
  if (before_ > 1) {
    EXPECT_EQ(omp_get_max_threads(), 1);
    EXPECT_NE(said.find(std::to_string(2 * host) + " ranks share"), std::string::npos) << said;
    EXPECT_NE(said.find("1 OpenMP thread each"), std::string::npos) << said;
  } else {
    EXPECT_EQ(said, "") << "a team of one is not changed";
  }
  // Two ranks: half the host each, never more than the process may use or had.
  omp_set_num_threads(before_);
  ShareCpuThreadsAmongLocalRanks(2);
  EXPECT_EQ(omp_get_max_threads(), std::min(before_, std::max(1, std::min(usable, host / 2))));
}

TEST_F(CpuThreadsTest, OneRankOrOmpNumThreadsLeavesTheTeamAlone) {
  EXPECT_EQ(ShareCpuThreadsAmongLocalRanks(1), "");
  EXPECT_EQ(omp_get_max_threads(), before_);
  setenv("OMP_NUM_THREADS", "7", 1);
  EXPECT_EQ(ShareCpuThreadsAmongLocalRanks(64), "");
  EXPECT_EQ(omp_get_max_threads(), before_);
}

}  // namespace
}  // namespace mpc
