// ZeRO-3's parameter slices and gathers (see shard_parameters.h).
#include "passes/shard_parameters.h"

#include <algorithm>
#include <climits>
#include <map>
#include <regex>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "graph/sharding.h"
#include "passes/forward_nodes.h"

namespace mpc {
namespace {

// The rank's slice of a whole tensor, flattened, zero-padded to the slice length.
Tensor SliceOfTensor(const Tensor& whole, int world, int rank) {
  const int64_t n = whole.num_elements();
  Tensor slice(DType::kF32, {ShardLength(n, world)});
  float* out = slice.data<float>();
  std::fill(out, out + slice.num_elements(), 0.0f);
  const ShardRange range = ShardRangeOf(n, world, rank);
  const Tensor f32 = whole.dtype() == DType::kF32 ? whole : whole.CastTo(DType::kF32);
  std::copy_n(f32.data<float>() + range.begin, range.count, out);
  return slice;
}

void Unorder(Graph& g, const Node* gone) {
  for (const auto& n : g.nodes()) {
    auto& deps = n->control_deps;
    deps.erase(std::remove(deps.begin(), deps.end(), gone), deps.end());
  }
}

class Sharder {
 public:
  Sharder(Graph& g, const ShardParametersOptions& o, ShardParametersResult& r,
          const absl::flat_hash_set<const Node*>& forward)
      : g_(g), o_(o), r_(r), forward_(forward) {}

  bool IsForward(const Node* n) const { return !o_.training || forward_.contains(n); }

  absl::Status Shard(Value* p, Node* shard_node) {
    const Shape whole = p->shape;
    const int64_t length = ShardLength(NumElements(whole), o_.world_size);
    r_.sharded.push_back(p->name);
    r_.sharded_bytes += static_cast<int64_t>(p->bytes());
    // Who reads the whole parameter, before it becomes a slice.
    std::vector<Node*> readers;
    for (Node* c : p->consumers) {
      if (c != shard_node && std::find(readers.begin(), readers.end(), c) == readers.end()) readers.push_back(c);
    }
    if (p->logical_shape.empty()) p->logical_shape = whole;
    p->sharded_from = whole;
    p->data = SliceOfTensor(p->data, o_.world_size, o_.rank);
    p->shape = {length};
    // The update wrote ZeRO-1's Shard copy; now it writes the slice itself.
    std::vector<Node*> writers;
    if (shard_node) {
      Value* copy = shard_node->outputs[0];
      for (Node* c : copy->consumers) writers.push_back(c);
      g_.ReplaceAllUsesWith(copy, p);
      Unorder(g_, shard_node);
      MPC_RETURN_IF_ERROR(g_.RemoveNode(shard_node));
    }
    std::vector<Node*> made;
    // One gather per phase and dtype, shared by that phase's readers.
    std::map<std::pair<bool, DType>, Value*> gathered;
    auto gather = [&](bool forward, DType dtype) -> absl::StatusOr<Value*> {
      Value*& g = gathered[{forward, dtype}];
      if (g) return g;
      Value* source = p;
      if (dtype != DType::kF32) {
        AttrMap cast;
        cast.Set("to", static_cast<int64_t>(DTypeToOnnx(dtype)));
        MPC_ASSIGN_OR_RETURN(Node * c, g_.AddNode("Cast", {p}, std::move(cast),
                                                   g_.UniqueName("zero3/cast/" + p->name)));
        made.push_back(c);
        source = c->outputs[0];
        ++r_.gathers_16bit;
      }
      AttrMap attrs;
      attrs.Set("world_size", static_cast<int64_t>(o_.world_size));
      attrs.Set("shape", std::vector<int64_t>(whole.begin(), whole.end()));
      MPC_ASSIGN_OR_RETURN(Node * n, g_.AddNode("AllGather", {source}, std::move(attrs),
                                                 g_.UniqueName(absl::StrCat("zero3/gather_", forward ? "fwd/" : "bwd/",
                                                                            p->name))));
      made.push_back(n);
      ++r_.gathers;
      g = n->outputs[0];
      return g;
    };
    for (Node* reader : readers) {
      const bool cast16 = reader->op == "Cast" && reader->inputs.size() == 1 && reader->control_deps.empty() &&
                          (reader->outputs[0]->dtype == DType::kBF16 || reader->outputs[0]->dtype == DType::kF16) &&
                          !g_.IsOutput(reader->outputs[0]);
      if (cast16) {
        // The copy's readers read a 16-bit gather of the cast slice instead.
        Value* out = reader->outputs[0];
        const std::vector<Node*> uses = out->consumers;
        for (Node* use : uses) {
          MPC_ASSIGN_OR_RETURN(Value * g, gather(IsForward(use), out->dtype));
          for (int i = 0; i < static_cast<int>(use->inputs.size()); ++i) {
            if (use->inputs[i] == out) g_.SetNodeInput(use, i, g);
          }
        }
        Unorder(g_, reader);
        MPC_RETURN_IF_ERROR(g_.RemoveNode(reader));
        continue;
      }
      MPC_ASSIGN_OR_RETURN(Value * g, gather(IsForward(reader), DType::kF32));
      for (int i = 0; i < static_cast<int>(reader->inputs.size()); ++i) {
        if (reader->inputs[i] == p) g_.SetNodeInput(reader, i, g);
      }
    }
    // Each gather (and its cast) runs right before its first reader.
    for (auto& [key, value] : gathered) {
      int first = INT_MAX;
      for (const Node* reader : value->consumers) first = std::min(first, reader->schedule_rank);
      if (first == INT_MAX) continue;
      value->producer->schedule_rank = first;
      Value* source = value->producer->inputs[0];
      if (source->producer) source->producer->schedule_rank = first;
    }
    // The update rewrites the slice in place: after every gather read it.
    for (Node* w : writers) {
      for (Node* n : made) w->control_deps.push_back(n);
    }
    return absl::OkStatus();
  }

 private:
  Graph& g_;
  const ShardParametersOptions& o_;
  ShardParametersResult& r_;
  const absl::flat_hash_set<const Node*>& forward_;
};

}  // namespace

absl::StatusOr<bool> ShardParametersPass::Run(Graph& graph) {
  *result_ = ShardParametersResult{};
  if (options_.zero_stage != 3 || options_.world_size <= 1) return false;
  std::vector<std::pair<Value*, Node*>> targets;  // (parameter, ZeRO-1's Shard of it)
  if (options_.training) {
    for (const auto& n : graph.nodes()) {
      if (n->op == "Shard" && n->inputs[0]->kind == ValueKind::kParameter) targets.emplace_back(n->inputs[0], n.get());
    }
    if (targets.empty()) {
      return absl::FailedPreconditionError("shard-parameters: no Shard of a parameter; the optimizer pass (ZeRO) must "
                                           "run first");
    }
    // ZeRO-1's all-gather of the updated weights: the slices are now the weights.
    std::vector<Node*> gathers;
    for (const auto& n : graph.nodes()) {
      if (n->op == "AllGatherInPlace") gathers.push_back(n.get());
    }
    for (Node* n : gathers) {
      Unorder(graph, n);
      MPC_RETURN_IF_ERROR(graph.RemoveNode(n));
    }
  } else {
    std::vector<std::regex> frozen;
    for (const std::string& pattern : options_.freeze) {
      try {
        frozen.emplace_back(pattern);
      } catch (const std::regex_error& e) {
        return absl::InvalidArgumentError(absl::StrCat("freeze pattern '", pattern, "' is not a valid regex: ", e.what()));
      }
    }
    for (Value* p : graph.ValuesOfKind(ValueKind::kParameter)) {
      if (std::none_of(frozen.begin(), frozen.end(), [&](const std::regex& re) { return std::regex_match(p->name, re); }))
        targets.emplace_back(p, nullptr);
    }
  }
  const absl::flat_hash_set<const Node*> forward =
      options_.training && loss_ ? ForwardNodesOf(loss_->loss) : absl::flat_hash_set<const Node*>{};
  Sharder sharder(graph, options_, *result_, forward);
  for (auto& [p, shard] : targets) MPC_RETURN_IF_ERROR(sharder.Shard(p, shard));
  return !targets.empty();
}

}  // namespace mpc
