// Graph construction and surgery: node creation with inference, use-def upkeep,
// unique naming and a deterministic topological order.
#include "graph/graph.h"

#include <algorithm>
#include <queue>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/op_registry.h"

namespace mpc {

const char* ValueKindName(ValueKind kind) {
  switch (kind) {
    case ValueKind::kActivation:
      return "activation";
    case ValueKind::kInput:
      return "input";
    case ValueKind::kParameter:
      return "parameter";
    case ValueKind::kState:
      return "state";
    case ValueKind::kConstant:
      return "constant";
  }
  return "?";
}

std::string Graph::UniqueName(const std::string& base) {
  std::string name = base.empty() ? "v" : base;
  if (!value_by_name_.contains(name) && !name_counts_.contains(name)) {
    name_counts_[name] = 0;
    return name;
  }
  int& count = name_counts_[name];
  std::string candidate;
  do {
    candidate = absl::StrCat(name, "_", ++count);
  } while (value_by_name_.contains(candidate) || name_counts_.contains(candidate));
  name_counts_[candidate] = 0;
  return candidate;
}

Value* Graph::NewValue(const std::string& name, DType dtype, Shape shape, ValueKind kind) {
  auto value = std::make_unique<Value>();
  value->id = next_id_++;
  value->name = UniqueName(name);
  value->dtype = dtype;
  value->shape = std::move(shape);
  value->kind = kind;
  Value* raw = value.get();
  value_by_name_[raw->name] = raw;
  values_.push_back(std::move(value));
  return raw;
}

Value* Graph::AddInput(const std::string& name, DType dtype, Shape shape) {
  Value* v = NewValue(name, dtype, std::move(shape), ValueKind::kInput);
  inputs_.push_back(v);
  return v;
}

Value* Graph::AddParameter(const std::string& name, Tensor initial) {
  Value* v = NewValue(name, initial.dtype(), initial.shape(), ValueKind::kParameter);
  v->data = std::move(initial);
  return v;
}

Value* Graph::AddState(const std::string& name, Tensor initial) {
  Value* v = NewValue(name, initial.dtype(), initial.shape(), ValueKind::kState);
  v->data = std::move(initial);
  return v;
}

Value* Graph::AddConstant(const std::string& name, Tensor value) {
  Value* v = NewValue(name, value.dtype(), value.shape(), ValueKind::kConstant);
  v->data = std::move(value);
  return v;
}

absl::StatusOr<Node*> Graph::AddNode(const std::string& op, std::vector<Value*> inputs, AttrMap attrs,
                                     const std::string& name, const std::vector<std::string>& output_names) {
  const std::string node_name = name.empty() ? absl::StrCat(op, "_", next_id_) : name;
  MPC_ASSIGN_OR_RETURN(const OpDef* def, OpRegistry::Global().FindOrError(op, node_name));
  // Trailing absent optional inputs are dropped so arity checks see the real count.
  while (!inputs.empty() && inputs.back() == nullptr) inputs.pop_back();
  const int n_in = static_cast<int>(inputs.size());
  if (n_in < def->min_inputs || n_in > def->max_inputs) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node_name, "' (", op, ") has ", n_in, " inputs; ", op,
                                                   " takes ", def->min_inputs, " to ", def->max_inputs));
  }
  auto node = std::make_unique<Node>();
  node->id = next_id_++;
  node->schedule_rank = node->id;
  node->name = node_name;
  node->op = op;
  node->inputs = std::move(inputs);
  node->attrs = std::move(attrs);
  auto types = def->infer(*node);
  if (!types.ok()) {
    return absl::Status(types.status().code(),
                        absl::StrCat("node '", node_name, "' (", op, "): ", types.status().message()));
  }
  const int n_out = std::max<int>(static_cast<int>(types->size()), static_cast<int>(output_names.size()));
  if (n_out < def->min_outputs || n_out > def->max_outputs || static_cast<int>(types->size()) < n_out) {
    return absl::InvalidArgumentError(absl::StrCat("node '", node_name, "' (", op, ") has ", n_out, " outputs; ", op,
                                                   " produces ", def->min_outputs, " to ", def->max_outputs));
  }
  Node* raw = node.get();
  for (Value* in : raw->inputs) {
    if (in) in->consumers.push_back(raw);
  }
  for (int i = 0; i < n_out; ++i) {
    std::string out_name = i < static_cast<int>(output_names.size()) && !output_names[i].empty()
                               ? output_names[i]
                               : absl::StrCat(node_name, ":", i);
    Value* v = NewValue(out_name, (*types)[i].dtype, (*types)[i].shape, ValueKind::kActivation);
    v->producer = raw;
    raw->outputs.push_back(v);
  }
  nodes_.push_back(std::move(node));
  return raw;
}

static void EraseOneUse(std::vector<Node*>& consumers, const Node* node) {
  auto it = std::find(consumers.begin(), consumers.end(), node);
  if (it != consumers.end()) consumers.erase(it);
}

absl::Status Graph::RemoveNode(Node* node) {
  for (Value* out : node->outputs) {
    if (!out->consumers.empty() || IsOutput(out)) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot remove node '", node->name, "': its output '", out->name, "' is still used"));
    }
  }
  for (Value* in : node->inputs) {
    if (in) EraseOneUse(in->consumers, node);
  }
  for (Value* out : node->outputs) out->producer = nullptr;
  for (auto& other : nodes_) {
    auto& deps = other->control_deps;
    deps.erase(std::remove(deps.begin(), deps.end(), node), deps.end());
  }
  nodes_.erase(std::find_if(nodes_.begin(), nodes_.end(), [node](const auto& n) { return n.get() == node; }));
  return absl::OkStatus();
}

void Graph::ReplaceAllUsesWith(Value* from, Value* to) {
  if (from == to) return;
  for (Node* consumer : from->consumers) {
    for (Value*& in : consumer->inputs) {
      if (in == from) {
        in = to;
        to->consumers.push_back(consumer);
      }
    }
  }
  from->consumers.clear();
  for (Value*& out : outputs_) {
    if (out == from) out = to;
  }
}

void Graph::SetNodeInput(Node* node, int index, Value* value) {
  Value*& slot = node->inputs[index];
  if (slot) EraseOneUse(slot->consumers, node);
  slot = value;
  if (value) value->consumers.push_back(node);
}

void Graph::TradeProducers(Value* a, Value* b) {
  if (a == b) return;
  auto slot = [](Value* v) -> Value** {
    if (!v->producer) return nullptr;
    auto& outs = v->producer->outputs;
    return &*std::find(outs.begin(), outs.end(), v);
  };
  Value** slot_a = slot(a);
  Value** slot_b = slot(b);
  if (slot_a) *slot_a = b;
  if (slot_b) *slot_b = a;
  std::swap(a->producer, b->producer);
}

void Graph::InsertNodeInput(Node* node, int index, Value* value) {
  node->inputs.insert(node->inputs.begin() + index, value);
  if (value) value->consumers.push_back(node);
}

void Graph::RemoveDeadValues() {
  auto dead = [this](const std::unique_ptr<Value>& v) {
    const bool removable = v->kind == ValueKind::kActivation ? v->producer == nullptr : v->kind == ValueKind::kConstant;
    return removable && v->consumers.empty() && !IsOutput(v.get());
  };
  for (auto& v : values_) {
    if (dead(v)) value_by_name_.erase(v->name);
  }
  values_.erase(std::remove_if(values_.begin(), values_.end(), dead), values_.end());
}

bool Graph::IsOutput(const Value* value) const {
  return std::find(outputs_.begin(), outputs_.end(), value) != outputs_.end();
}

std::vector<Value*> Graph::ValuesOfKind(ValueKind kind) const {
  std::vector<Value*> out;
  for (const auto& v : values_) {
    if (v->kind == kind) out.push_back(v.get());
  }
  return out;
}

absl::Status Graph::RenameValue(Value* value, const std::string& name) {
  if (value->name == name) return absl::OkStatus();
  if (value_by_name_.contains(name)) {
    return absl::AlreadyExistsError(absl::StrCat("a value named '", name, "' already exists"));
  }
  value_by_name_.erase(value->name);
  value->name = name;
  value_by_name_[name] = value;
  name_counts_.try_emplace(name, 0);
  return absl::OkStatus();
}

Value* Graph::FindValue(const std::string& name) const {
  auto it = value_by_name_.find(name);
  return it == value_by_name_.end() ? nullptr : it->second;
}

Node* Graph::FindNode(const std::string& name) const {
  for (const auto& n : nodes_) {
    if (n->name == name) return n.get();
  }
  return nullptr;
}

absl::StatusOr<std::vector<Node*>> Graph::TopologicalOrder() const {
  absl::flat_hash_map<const Node*, int> pending;
  absl::flat_hash_map<const Node*, std::vector<Node*>> successors;
  for (const auto& n : nodes_) {
    int count = 0;
    for (const Value* in : n->inputs) {
      if (in && in->producer) {
        ++count;
        successors[in->producer].push_back(n.get());
      }
    }
    for (Node* dep : n->control_deps) {
      ++count;
      successors[dep].push_back(n.get());
    }
    pending[n.get()] = count;
  }
  // Min-heap on (schedule rank, id): among ready nodes the oldest runs first, so the order
  // is deterministic and stays close to the model's own order.
  auto later = [](const Node* a, const Node* b) {
    return a->schedule_rank != b->schedule_rank ? a->schedule_rank > b->schedule_rank : a->id > b->id;
  };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later)> ready(later);
  for (const auto& n : nodes_) {
    if (pending[n.get()] == 0) ready.push(n.get());
  }
  std::vector<Node*> order;
  order.reserve(nodes_.size());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    order.push_back(n);
    for (Node* succ : successors[n]) {
      if (--pending[succ] == 0) ready.push(succ);
    }
  }
  if (order.size() != nodes_.size()) {
    for (const auto& n : nodes_) {
      if (pending[n.get()] > 0) {
        return absl::FailedPreconditionError(
            absl::StrCat("the graph has a cycle through node '", n->name, "' (", n->op, ")"));
      }
    }
  }
  return order;
}

}  // namespace mpc
