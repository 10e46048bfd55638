// Runs training steps of a 3-layer MLP through the executor in a build instrumented
// with AddressSanitizer. The arena is one allocation of exactly the planned size, and
// every parameter/state/input buffer its own exact allocation, so any kernel that
// reads or writes outside its planned buffer at the arena's end, or outside a
// persistent buffer, aborts the test with an ASan report.
#include "engine/mpc.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

TEST(ExecutorAsanTest, TrainingAndEvaluationStayInsideTheirBuffers) {
  for (const char* run : {"sgd", "adamw"}) {
    EngineOptions options;
    options.spec_path = testing::SourcePath(std::string("tests/golden/mlp/") + run + ".spec");
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    for (int i = 0; i < 5; ++i) {
      auto step = (*engine)->Step();
      ASSERT_TRUE(step.ok()) << step.status();
      EXPECT_TRUE(std::isfinite(step->loss));
    }
    auto eval = (*engine)->Evaluate();
    ASSERT_TRUE(eval.ok()) << eval.status();
    EXPECT_GT(eval->examples, 0);
  }
}

}  // namespace
}  // namespace mpc
