// The registry of op-numerics case tables, and the running half of the harness: a
// case's inputs, its one-node graph (and that graph under a scalar loss with autodiff's
// gradients), compiled and run on a backend (see op_cases.h).
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "graph/graph_builder.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "tests/graph/op_cases.h"
#include "tests/test_util.h"

namespace mpc::opcases {
namespace {

std::map<std::string, CaseTable>& Tables() {
  static auto* tables = new std::map<std::string, CaseTable>();
  return *tables;
}

Tensor Materialize(const In& in, DType float_dtype, uint64_t seed) {
  const DType dtype = in.dtype.value_or(float_dtype);
  const bool random = in.role == Role::kFloat || (in.role == Role::kState && in.value.empty());
  if (!random) return in.value.dtype() == dtype ? in.value : in.value.CastTo(dtype);
  Tensor x = ::mpc::testing::RandomTensor(DType::kF64, in.shape, seed, in.lo, in.hi);
  if (in.min_abs > 0) {
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      double& v = x.data<double>()[i];
      v += std::copysign(in.min_abs, v);
    }
  }
  return dtype == DType::kF64 ? x : x.CastTo(dtype);
}

// Compiles `g` (whose outputs are set) on `backend`, feeds it, runs it once and
// fetches `fetch`.
absl::StatusOr<std::vector<Tensor>> CompileRunFetch(const OpGraph& g, const OpCase& c, Backend& backend,
                                                    const std::vector<Value*>& fetch) {
  auto ex = CompileOn(*g.graph, backend);
  if (!ex.ok()) return ex.status();
  if (absl::Status st = Feed(**ex, g, c); !st.ok()) return st;
  if (absl::Status st = (*ex)->Run(kRunSeed, kRunStep); !st.ok()) return st;
  // Kernels may only have been enqueued (CUDA): wait for them before reading back.
  if (absl::Status st = backend.Synchronize(); !st.ok()) return st;
  std::vector<Tensor> out;
  for (const Value* v : fetch) {
    auto t = (*ex)->Fetch(v->name);
    if (!t.ok()) return t.status();
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace

std::vector<OpCase> FamilyCases(const std::string& family) { return Tables().at(family)(); }

bool RegisterCaseTable(const char* family, CaseTable table) {
  Tables().emplace(family, table);
  return true;
}

const std::vector<OpCase>& AllCases() {
  static const std::vector<OpCase>* cases = [] {
    auto* all = new std::vector<OpCase>();
    for (const auto& [family, table] : Tables()) {
      for (OpCase& c : table()) all->push_back(std::move(c));
    }
    return all;
  }();
  return *cases;
}

uint64_t CaseSeed(const OpCase& c, DType float_dtype) {
  return HashName(c.name) ^ (float_dtype == DType::kF64 ? 0x5151 : 0);
}

std::vector<Tensor> MakeInputs(const OpCase& c, DType float_dtype, uint64_t seed) {
  std::vector<Tensor> data;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    data.push_back(in.same_as >= 0 ? data.at(in.same_as) : Materialize(in, float_dtype, seed + 7919 * (i + 1)));
  }
  return data;
}

absl::StatusOr<OpGraph> BuildOpGraph(const OpCase& c, const std::vector<Tensor>& inputs) {
  if (inputs.size() != c.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("case ", c.name, " has ", c.inputs.size(), " input specs but ",
                                                   inputs.size(), " input tensors were given (use MakeInputs)"));
  }
  OpGraph g;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const In& in = c.inputs[i];
    if (in.same_as >= 0) {
      g.values.push_back(g.values.at(in.same_as));
      g.data.push_back(g.data.at(in.same_as));
    } else {
      const Tensor& t = inputs[i];
      Value* v = in.role == Role::kConst   ? g.graph->AddConstant(in.name, t)
                 : in.role == Role::kState ? g.graph->AddState(in.name, t)
                                           : g.graph->AddInput(in.name, t.dtype(), t.shape());
      g.values.push_back(v);
      g.data.push_back(t);
    }
  }
  auto node = g.graph->AddNode(c.op, g.values, c.attrs, c.name);
  if (!node.ok()) return node.status();
  g.node = *node;
  return g;
}

absl::StatusOr<std::unique_ptr<Executor>> CompileOn(const Graph& graph, Backend& backend) {
  return testing::ExecutorFor(graph, backend);
}

absl::Status Feed(Executor& ex, const OpGraph& g, const OpCase& c) {
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const Role role = c.inputs[i].role;
    if (c.inputs[i].same_as >= 0 || role == Role::kConst || role == Role::kState) continue;
    absl::Status st = ex.SetInput(g.values[i]->name, g.data[i]);
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> RunCase(const OpCase& c, Backend& backend, const std::vector<Tensor>& inputs) {
  auto built = BuildOpGraph(c, inputs);
  if (!built.ok()) return built.status();
  OpGraph& g = *built;
  g.graph->SetOutputs(g.node->outputs);
  std::vector<Value*> fetch = g.node->outputs;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].role == Role::kState && c.inputs[i].same_as < 0) fetch.push_back(g.values[i]);
  }
  return CompileRunFetch(g, c, backend, fetch);
}

Tensor LossWeights(const OpCase& c, int k, const Shape& shape) {
  return ::mpc::testing::RandomTensor(DType::kF64, shape, HashName(c.name) + 31 * k);
}

absl::StatusOr<GradientGraph> BuildGradientGraph(const OpCase& c, const std::vector<Tensor>& inputs, DType loss_dtype) {
  auto built = BuildOpGraph(c, inputs);
  if (!built.ok()) return built.status();
  GradientGraph gg;
  gg.g = std::move(*built);
  Graph& graph = *gg.g.graph;
  const Node* node = gg.g.node;

  // L = sum_k sum(out_k * R_k) in loss_dtype (outputs of other dtypes are cast first).
  GraphBuilder b(&graph, "loss/");
  Value* loss = nullptr;
  for (int k : c.loss_outputs) {
    Value* y = b.Cast(node->outputs.at(k), loss_dtype);
    Tensor r = LossWeights(c, k, node->outputs.at(k)->shape);
    Value* rv = graph.AddConstant(absl::StrCat("R", k), loss_dtype == DType::kF64 ? r : r.CastTo(loss_dtype));
    Value* term = b.ReduceSumTo(b.Mul(y, rv), {});
    loss = loss ? b.Add(loss, term) : term;
  }
  if (!b.status().ok()) return b.status();
  if (!loss) return absl::InvalidArgumentError(absl::StrCat("case ", c.name, " has no loss_outputs"));
  gg.loss = loss;

  std::vector<Value*> wrt;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    if (c.inputs[i].role == Role::kFloat && c.inputs[i].same_as < 0) {
      gg.wrt_specs.push_back(static_cast<int>(i));
      wrt.push_back(gg.g.values[i]);
    }
  }
  auto grads = BuildGradients(graph, loss, wrt);
  if (!grads.ok()) return grads.status();
  std::vector<Value*> outputs{loss};
  for (size_t j = 0; j < wrt.size(); ++j) {
    if (!(*grads)[j]) {
      return absl::InternalError(absl::StrCat("BuildGradients returned no gradient for input '", wrt[j]->name,
                                              "', but the loss depends on it"));
    }
    if ((*grads)[j]->dtype != wrt[j]->dtype || (*grads)[j]->shape != wrt[j]->shape) {
      return absl::InternalError(absl::StrCat("gradient of '", wrt[j]->name, "' is ", DTypeName((*grads)[j]->dtype),
                                              ShapeToString((*grads)[j]->shape)));
    }
    outputs.push_back((*grads)[j]);
  }
  gg.grads = std::vector<Value*>(outputs.begin() + 1, outputs.end());
  graph.SetOutputs(outputs);
  return gg;
}

absl::StatusOr<std::vector<Tensor>> RunGradientCase(const OpCase& c, Backend& backend,
                                                    const std::vector<Tensor>& inputs, DType loss_dtype) {
  auto gg = BuildGradientGraph(c, inputs, loss_dtype);
  if (!gg.ok()) return gg.status();
  std::vector<Value*> fetch{gg->loss};
  fetch.insert(fetch.end(), gg->grads.begin(), gg->grads.end());
  return CompileRunFetch(gg->g, c, backend, fetch);
}

}  // namespace mpc::opcases
