// defer-widening-casts: a widening Cast whose reader runs late moves next to that reader,
// which shortens the wide value's life in the memory plan; a narrowing Cast stays; the
// computed values do not change.
#include "passes/defer_widening_casts.h"

#include <algorithm>
#include <cstring>

#include "graph/graph_builder.h"
#include "gtest/gtest.h"
#include "passes/memory_plan.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

// x (bf16) -> wide = Cast(x, f32) early; then a chain of bf16 ops on a larger input z whose
// intermediates make the plan's peak; y = wide + Cast(column sums of the chain).
struct CastGraph {
  std::unique_ptr<Graph> g = std::make_unique<Graph>();
  Node* widen = nullptr;
  Node* reader = nullptr;
};

CastGraph Build() {
  CastGraph c;
  GraphBuilder b(c.g.get());
  Value* x = c.g->AddInput("x", DType::kBF16, {64, 64});
  Value* z = c.g->AddInput("z", DType::kBF16, {256, 64});
  Value* wide = b.Cast(x, DType::kF32);
  Value* chain = z;
  for (int i = 0; i < 3; ++i) chain = b.Op("Relu", {b.Op("Mul", {chain, z})});
  Value* sums = b.ReduceSumTo(chain, {64});
  Value* y = b.Op("Add", {wide, b.Cast(sums, DType::kF32)});
  EXPECT_TRUE(b.status().ok()) << b.status();
  c.g->SetOutputs({y});
  c.widen = wide->producer;
  c.reader = y->producer;
  return c;
}

int Position(const std::vector<Node*>& order, const Node* n) {
  return static_cast<int>(std::find(order.begin(), order.end(), n) - order.begin());
}

TEST(DeferWideningCastsTest, WideningCastRunsNextToItsReader) {
  CastGraph c = Build();
  auto before = c.g->TopologicalOrder();
  ASSERT_TRUE(before.ok());
  EXPECT_LT(Position(*before, c.widen), 2);  // eager: right after the input exists

  absl::StatusOr<bool> changed = DeferWideningCastsPass().Run(*c.g);
  ASSERT_TRUE(changed.ok()) << changed.status();
  EXPECT_TRUE(*changed);
  auto after = c.g->TopologicalOrder();
  ASSERT_TRUE(after.ok());
  // Everything of the chain runs first; the cast comes right before the Add's other input.
  EXPECT_GT(Position(*after, c.widen), Position(*after, c.reader) - 3);
  EXPECT_GT(Position(*after, c.widen), Position(*after, c.g->outputs()[0]->producer->inputs[1]->producer) - 2);
  EXPECT_EQ(Position(*after, c.reader), static_cast<int>(after->size()) - 1);

  // A second run finds nothing left to move.
  changed = DeferWideningCastsPass().Run(*c.g);
  ASSERT_TRUE(changed.ok());
  EXPECT_FALSE(*changed);
}

TEST(DeferWideningCastsTest, SmallerPlanSameValues) {
  CastGraph eager = Build();
  CastGraph deferred = Build();
  ASSERT_TRUE(DeferWideningCastsPass().Run(*deferred.g).ok());
  MemoryPlanResult eager_plan, deferred_plan;
  ASSERT_TRUE(MemoryPlanPass(&eager_plan).Run(*eager.g).ok());
  ASSERT_TRUE(MemoryPlanPass(&deferred_plan).Run(*deferred.g).ok());
  EXPECT_LT(deferred_plan.plan.peak_bytes, eager_plan.plan.peak_bytes);

  const Tensor x = testing::RandomTensor(DType::kF32, {64, 64}, 3).CastTo(DType::kBF16);
  const Tensor z = testing::RandomTensor(DType::kF32, {256, 64}, 4).CastTo(DType::kBF16);
  auto run = [&](const Graph& g) {
    auto ex = testing::ExecutorFor(g, testing::CpuBackend());
    EXPECT_TRUE(ex.ok()) << ex.status();
    EXPECT_TRUE((*ex)->SetInput("x", x).ok());
    EXPECT_TRUE((*ex)->SetInput("z", z).ok());
    EXPECT_TRUE((*ex)->Run(0, 0).ok());
    return *(*ex)->Fetch(g.outputs()[0]->name);
  };
  const Tensor a = run(*eager.g), b = run(*deferred.g);
  ASSERT_EQ(a.bytes(), b.bytes());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.bytes()), 0);
}

TEST(DeferWideningCastsTest, NarrowingCastStays) {
  Graph g;
  GraphBuilder b(&g);
  Value* x = g.AddInput("x", DType::kF32, {8});
  Value* narrow = b.Cast(x, DType::kBF16);
  Value* chain = b.Op("Relu", {b.Op("Relu", {x})});
  Value* y = b.Op("Add", {b.Cast(narrow, DType::kF32), chain});
  ASSERT_TRUE(b.status().ok());
  g.SetOutputs({y});
  const int rank = narrow->producer->schedule_rank;
  ASSERT_TRUE(DeferWideningCastsPass().Run(g).ok());
  EXPECT_EQ(narrow->producer->schedule_rank, rank);
}

}  // namespace
}  // namespace mpc
