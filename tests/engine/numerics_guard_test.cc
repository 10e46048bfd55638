// When a run stops on non-finite numbers (engine/numerics_guard.h): a non-finite loss,
// too many consecutive skipped steps, a dynamic loss scale below its floor; each with the
// step and the spec field in the message, and never for an ordinary run.
#include "engine/numerics_guard.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace mpc {
namespace {

StepMetrics Step(int64_t step, double loss, bool skipped) {
  StepMetrics m;
  m.step = step;
  m.loss = loss;
  m.skipped = skipped;
  return m;
}

TEST(NumericsGuardTest, NonFiniteLossStopsNamingTheStep) {
  NumericsGuard guard(NumericsSpec(), /*dynamic_loss_scaling=*/false, /*checking_every_op=*/false);
  EXPECT_TRUE(guard.Check(Step(1, 2.3, false), 1).ok());
  const absl::Status st = guard.Check(Step(2, std::numeric_limits<double>::infinity(), false), 1);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("step 2: the training loss is +inf"), std::string::npos) << st;
  EXPECT_NE(st.message().find("--check-numerics"), std::string::npos) << st;

  NumericsSpec off;
  off.set_stop_on_nonfinite_loss(false);
  NumericsGuard lenient(off, false, false);
  EXPECT_TRUE(lenient.Check(Step(1, NAN, true), 1).ok());
}

TEST(NumericsGuardTest, ConsecutiveSkipsStopAtTheLimitAndACleanStepResetsTheCount) {
  NumericsSpec spec;
  spec.set_max_consecutive_skipped_steps(3);
  NumericsGuard guard(spec, /*dynamic_loss_scaling=*/true, false);
  EXPECT_TRUE(guard.Check(Step(1, 2, true), 1024).ok());
  EXPECT_TRUE(guard.Check(Step(2, 2, true), 512).ok());
  EXPECT_TRUE(guard.Check(Step(3, 2, false), 512).ok());  // resets
  EXPECT_TRUE(guard.Check(Step(4, 2, true), 256).ok());
  EXPECT_TRUE(guard.Check(Step(5, 2, true), 128).ok());
  const absl::Status st = guard.Check(Step(6, 2, true), 64);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("steps 4 to 6: 3 consecutive steps"), std::string::npos) << st;
  EXPECT_NE(st.message().find("loss scale is now 64"), std::string::npos) << st;
}

TEST(NumericsGuardTest, DynamicScaleBelowTheFloorStops) {
  NumericsGuard guard(NumericsSpec(), /*dynamic_loss_scaling=*/true, false);
  EXPECT_TRUE(guard.Check(Step(1, 2, true), 2).ok());
  EXPECT_TRUE(guard.Check(Step(2, 2, true), 1).ok());
  const absl::Status st = guard.Check(Step(3, 2, true), 0.5);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("step 3: the dynamic loss scale fell to 0.5, below numerics.min_loss_scale 1"),
            std::string::npos)
      << st;
  // A static scale never moves: no floor.
  NumericsGuard fixed(NumericsSpec(), /*dynamic_loss_scaling=*/false, false);
  EXPECT_TRUE(fixed.Check(Step(1, 2, true), 0.25).ok());
}

}  // namespace
}  // namespace mpc
