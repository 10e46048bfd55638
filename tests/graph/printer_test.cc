// Tests for the graph printers: the text listing has the declared header lines and one
// line per node in the documented form; DOT output is a digraph with one box per node
// and escapes names.
#include "graph/printer.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/string_view.h"
#include "graph/graph.h"
#include "tests/test_util.h"

namespace mpc {
namespace {

::testing::AssertionResult HasText(absl::string_view text, absl::string_view needle) {
  if (text.find(needle) != absl::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "'" << needle << "' not found in:\n" << text;
}

int CountOf(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t pos = text.find(needle); pos != std::string::npos; pos = text.find(needle, pos + 1)) ++n;
  return n;
}

// x[32,784] -> h1 = Gemm(x, w1, b1; transB=1) -> a1 = Relu -> y = Reshape(a1, [64,128]).
std::unique_ptr<Graph> MakeGraph(const std::string& gemm_name = "h1") {
  auto g = std::make_unique<Graph>();
  Value* x = g->AddInput("x", DType::kF32, {32, 784});
  Value* w1 = g->AddParameter("w1", testing::RandomTensor(DType::kF32, {256, 784}, 1));
  Value* b1 = g->AddParameter("b1", testing::RandomTensor(DType::kF32, {256}, 2));
  Value* shape = g->AddConstant("shape", Tensor::FromVector<int64_t>({2}, {64, 128}));
  AttrMap gemm_attrs;
  gemm_attrs.Set("transB", int64_t{1});
  auto h1 = g->AddNode("Gemm", {x, w1, b1}, gemm_attrs, gemm_name);
  EXPECT_TRUE(h1.ok()) << h1.status();
  if (!h1.ok()) return g;
  auto a1 = g->AddNode("Relu", {(*h1)->outputs[0]}, {}, "a1");
  EXPECT_TRUE(a1.ok()) << a1.status();
  if (!a1.ok()) return g;
  auto y = g->AddNode("Reshape", {(*a1)->outputs[0], shape}, {}, "y");
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return g;
  g->AddOutput((*y)->outputs[0]);
  return g;
}

TEST(Printer, TextHasHeadersAndOneLinePerNode) {
  auto g = MakeGraph();
  ASSERT_EQ(g->nodes().size(), 3u);
  const std::string text = GraphToText(*g);
  EXPECT_TRUE(HasText(text, "input %x: f32[32,784]\n"));
  EXPECT_TRUE(HasText(text, "parameter %w1: f32[256,784]\n"));
  EXPECT_TRUE(HasText(text, "parameter %b1: f32[256]\n"));
  EXPECT_TRUE(HasText(text, "constant %shape: i64[2] = [64,128]\n"));
  EXPECT_TRUE(HasText(text, "%h1:0 f32[32,256] = Gemm(%x, %w1, %b1) {transB=1}\n"));
  EXPECT_TRUE(HasText(text, "%a1:0 f32[32,256] = Relu(%h1:0)\n"));
  EXPECT_TRUE(HasText(text, "%y:0 f32[64,128] = Reshape(%a1:0, %shape)\n"));
  EXPECT_TRUE(HasText(text, "output %y:0: f32[64,128]\n"));
  // Nodes appear in topological order, after the declarations.
  EXPECT_LT(text.find("constant %shape"), text.find("= Gemm("));
  EXPECT_LT(text.find("= Gemm("), text.find("= Relu("));
  EXPECT_LT(text.find("= Relu("), text.find("= Reshape("));
  EXPECT_EQ(CountOf(text, " = "), 3 + 1);  // three nodes and the constant's preview
}

TEST(Printer, TextShowsNamesNotVisibleInOutputs) {
  Graph g;
  Value* x = g.AddInput("x", DType::kF32, {4});
  auto n = g.AddNode("Relu", {x}, {}, "act", {"features"});
  ASSERT_TRUE(n.ok()) << n.status();
  g.AddOutput((*n)->outputs[0]);
  const std::string text = GraphToText(g);
  EXPECT_TRUE(HasText(text, "%features f32[4] = Relu(%x)  # node 'act'\n"));
}

TEST(Printer, DotIsDigraphWithOneBoxPerNode) {
  auto g = MakeGraph();
  ASSERT_EQ(g->nodes().size(), 3u);
  const std::string dot = GraphToDot(*g);
  EXPECT_EQ(dot.rfind("digraph", 0), 0u) << dot;
  EXPECT_EQ(CountOf(dot, "shape=box"), 3) << dot;
  EXPECT_TRUE(HasText(dot, "label=\"Gemm\\nh1\""));
  EXPECT_TRUE(HasText(dot, "[label=\"f32[32,256]\"]"));  // h1 -> a1 edge
  EXPECT_EQ(CountOf(dot, "{"), CountOf(dot, "}"));
  EXPECT_EQ(dot.substr(dot.size() - 2), "}\n");
}

TEST(Printer, DotEscapesQuotes) {
  auto g = MakeGraph("gemm \"one\"");
  const std::string dot = GraphToDot(*g);
  EXPECT_TRUE(HasText(dot, "gemm \\\"one\\\""));
  EXPECT_FALSE(HasText(dot, "gemm \"one\""));
}

}  // namespace
}  // namespace mpc
