// A convenience layer over Graph::AddNode for code that emits many nodes (gradient
// builders, the optimizer and loss passes): errors are sticky, like XlaBuilder's, so
// emission code reads as straight-line math and checks status() once at the end.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "graph/graph.h"

namespace mpc {

class GraphBuilder {
 public:
  explicit GraphBuilder(Graph* graph, std::string name_prefix = "") : graph_(graph), prefix_(std::move(name_prefix)) {}

  Graph* graph() { return graph_; }
  const absl::Status& status() const { return status_; }

  // Adds a node and returns all its outputs (empty after an error).
  std::vector<Value*> OpN(const std::string& op, std::vector<Value*> inputs, AttrMap attrs = {});
  // Adds a node and returns its first output (nullptr after an error).
  Value* Op(const std::string& op, std::vector<Value*> inputs, AttrMap attrs = {});
  Node* last_node() const { return last_node_; }

  Value* ScalarConstant(double value, DType dtype);
  Value* ShapeConstant(const Shape& shape);  // i64 1-D tensor, for Reshape

  // Common shorthands.
  Value* Add(Value* a, Value* b) { return Op("Add", {a, b}); }
  Value* Sub(Value* a, Value* b) { return Op("Sub", {a, b}); }
  Value* Mul(Value* a, Value* b) { return Op("Mul", {a, b}); }
  Value* Div(Value* a, Value* b) { return Op("Div", {a, b}); }
  Value* Neg(Value* a) { return Op("Neg", {a}); }
  Value* Reshape(Value* x, const Shape& shape);
  Value* Transpose(Value* x, std::vector<int64_t> perm);
  // Sums `x` over broadcast dimensions so it has `shape` (identity if equal).
  Value* ReduceSumTo(Value* x, const Shape& shape);
  Value* Cast(Value* x, DType dtype);

  void SetError(absl::Status status) {
    if (status_.ok()) status_ = std::move(status);
  }

 private:
  Graph* graph_;
  std::string prefix_;
  absl::Status status_;
  Node* last_node_ = nullptr;
};

}  // namespace mpc
