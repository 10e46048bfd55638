// The IR every pass works on: Nodes (ops with attributes) connected by typed,
// statically shaped Values. A Value is produced by at most one Node; graph inputs,
// parameters, persistent state and constants have no producer. Nodes are created
// through AddNode, which runs the op's shape/dtype inference, so every Value in a
// graph always has a known dtype and shape.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "graph/attributes.h"
#include "graph/dtype.h"
#include "graph/shape.h"
#include "graph/tensor.h"

namespace mpc {

struct Node;

enum class ValueKind {
  kActivation,  // produced by a node; lives in the planned arena
  kInput,       // fed by the caller every step (features, labels, learning rate)
  kParameter,   // trainable weight: persistent, initial value in `data`
  kState,       // persistent non-trainable state (optimizer moments, step counters)
  kConstant,    // immutable data baked into the program
};
const char* ValueKindName(ValueKind kind);

struct Value {
  int id = 0;
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  ValueKind kind = ValueKind::kActivation;
  Node* producer = nullptr;
  std::vector<Node*> consumers;  // one entry per use
  Tensor data;                   // initial value of parameters/state, value of constants
  // The model's shape when the pad-dims pass stored this value padded (parameters and
  // their optimizer state); empty when unpadded. Checkpoints and exports use it.
  Shape logical_shape;
  // ZeRO-1 optimizer state: this value holds one rank's slice (graph/sharding.h) of a
  // tensor of this (padded) shape; empty when it holds the whole tensor. Checkpoints
  // gather the slices into the whole tensor and slice it again on load; logical_shape is
  // then always set (the model's shape of the whole tensor).
  Shape sharded_from;

  bool persistent() const { return kind == ValueKind::kParameter || kind == ValueKind::kState; }
  size_t bytes() const { return static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype); }
};

struct Node {
  int id = 0;
  std::string name;
  std::string op;
  std::vector<Value*> inputs;  // nullptr marks an absent optional input
  std::vector<Value*> outputs;
  AttrMap attrs;
  std::vector<Node*> control_deps;  // must run after these (in-place state updates)
  // Where the node runs among those ready at the same time: the smaller first. AddNode sets
  // it to the id (creation order, close to the model's own); a rewrite that replaces a node
  // gives the new nodes the old one's rank, so they run where it would have (a rewrite's
  // new nodes otherwise run last and keep their inputs alive to the end of the step).
  int schedule_rank = 0;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  Value* AddInput(const std::string& name, DType dtype, Shape shape);
  Value* AddParameter(const std::string& name, Tensor initial);
  Value* AddState(const std::string& name, Tensor initial);
  Value* AddConstant(const std::string& name, Tensor value);

  // Creates a node; output dtypes/shapes come from the op registry's inference.
  // Output names default to "<node name>:<i>"; names are made unique.
  absl::StatusOr<Node*> AddNode(const std::string& op, std::vector<Value*> inputs, AttrMap attrs = {},
                                const std::string& name = "", const std::vector<std::string>& output_names = {});

  // Detaches and deletes a node. Its outputs must have no remaining consumers and
  // must not be graph outputs.
  absl::Status RemoveNode(Node* node);
  // Points every consumer (and graph-output slot) of `from` at `to`.
  void ReplaceAllUsesWith(Value* from, Value* to);
  void SetNodeInput(Node* node, int index, Value* value);
  // Exchanges the producers of two activations: each value becomes the other's producer's
  // output, in the other's slot; uses, graph-output slots and names stay with the values.
  // A rewrite that puts a new op behind an existing value builds the op (with a fresh
  // output) and trades: everything that refers to the value (its uses, the graph
  // outputs, the passes' results) still refers to it, and the fresh value goes with the
  // old producer.
  void TradeProducers(Value* a, Value* b);
  // Inserts `value` as input `index` of `node`, shifting the later inputs one place (an op
  // with variadic operands gaining one). The caller re-establishes the op's arity rules.
  void InsertNodeInput(Node* node, int index, Value* value);
  // Deletes values with no producer-less role left: unused activations and constants.
  void RemoveDeadValues();

  void AddOutput(Value* value) { outputs_.push_back(value); }
  void SetOutputs(std::vector<Value*> outputs) { outputs_ = std::move(outputs); }
  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  bool IsOutput(const Value* value) const;

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }
  std::vector<Value*> ValuesOfKind(ValueKind kind) const;

  Value* FindValue(const std::string& name) const;
  Node* FindNode(const std::string& name) const;
  std::string UniqueName(const std::string& base);
  // Renames a value; error if the name is taken.
  absl::Status RenameValue(Value* value, const std::string& name);

  // Deterministic topological order (ties broken by creation order), honouring
  // control dependencies. Error on a cycle, naming a node on it.
  absl::StatusOr<std::vector<Node*>> TopologicalOrder() const;

 private:
  Value* NewValue(const std::string& name, DType dtype, Shape shape, ValueKind kind);

  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  absl::flat_hash_map<std::string, Value*> value_by_name_;
  absl::flat_hash_map<std::string, int> name_counts_;
  int next_id_ = 0;
};

}  // namespace mpc
