// Shared test helpers (see test_util.h).
#include "tests/test_util.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "backends/cpu/cpu_backend.h"
#include "base/status_macros.h"
#include "graph/graph_builder.h"
#include "passes/autodiff.h"
#include "passes/memory_plan.h"

namespace mpc::testing {

Tensor RandomTensor(DType dtype, const Shape& shape, uint64_t seed, double lo, double hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Tensor f64(DType::kF64, shape);
  for (int64_t i = 0; i < f64.num_elements(); ++i) f64.data<double>()[i] = dist(rng);
  return dtype == DType::kF64 ? f64 : f64.CastTo(dtype);
}

int CountOps(const Graph& graph, const std::string& op) {
  int n = 0;
  for (const auto& node : graph.nodes()) n += node->op == op;
  return n;
}

double RelativeError(const Tensor& a, const Tensor& b) {
  double diff = 0, norm = 0;
  for (int64_t i = 0; i < b.num_elements(); ++i) {
    const double x = a.GetAsDouble(i), y = b.GetAsDouble(i);
    if (std::isnan(x) || std::isnan(y)) return INFINITY;
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::filesystem::path dir = std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string()) /
                              ("mpc_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string SourcePath(const std::string& relative) { return std::string(MPC_SOURCE_DIR) + "/" + relative; }

std::string Python() { return MPC_PYTHON; }

Backend& CpuBackend() {
  static Backend* backend = CreateCpuBackend().release();
  return *backend;
}

absl::StatusOr<std::unique_ptr<Executor>> ExecutorFor(const Graph& graph, Backend& backend) {
  MemoryPlanResult plan;
  auto order = graph.TopologicalOrder();
  if (!order.ok()) return order.status();
  plan.order = *order;
  auto memory = PlanMemory(graph, plan.order);
  if (!memory.ok()) return memory.status();
  plan.plan = *memory;
  return Executor::Create(graph, plan, backend);
}

absl::StatusOr<std::map<std::string, Tensor>> ReadPersistentTensors(const Graph& graph, const Executor& executor) {
  std::map<std::string, Tensor> out;
  for (const auto& v : graph.values()) {
    if (v->kind != ValueKind::kParameter && v->kind != ValueKind::kState) continue;
    auto t = executor.ReadPersistent(v->name);
    if (!t.ok()) return t.status();
    out[v->name] = *std::move(t);
  }
  return out;
}

std::string FirstDifference(const std::map<std::string, Tensor>& want, const std::map<std::string, Tensor>& got) {
  if (want.size() != got.size()) {
    return "expected " + std::to_string(want.size()) + " tensors, got " + std::to_string(got.size());
  }
  for (const auto& [name, t] : want) {
    auto it = got.find(name);
    if (it == got.end()) return "'" + name + "' is missing";
    if (it->second.dtype() != t.dtype() || it->second.shape() != t.shape()) return "'" + name + "' has another type";
    if (std::memcmp(it->second.raw(), t.raw(), t.bytes()) != 0) return "'" + name + "' differs";
  }
  return "";
}

std::string FashionMnistPath(const std::string& file) { return std::string(MPC_FASHION_MNIST_DIR) + "/" + file; }

std::vector<double> ReadLosses(const std::string& path) {
  std::ifstream in(path);
  std::vector<double> out;
  for (double v; in >> v;) out.push_back(v);
  return out;
}

absl::StatusOr<std::vector<Tensor>> RunOnce(const Graph& graph, Backend& backend,
                                            const std::map<std::string, Tensor>& feeds,
                                            const std::vector<std::string>& outputs) {
  MPC_ASSIGN_OR_RETURN(std::unique_ptr<Executor> ex, ExecutorFor(graph, backend));
  for (const auto& [name, t] : feeds) {
    if (graph.FindValue(name)) MPC_RETURN_IF_ERROR(ex->SetInput(name, t));
  }
  MPC_RETURN_IF_ERROR(ex->Run(0, 0));
  std::vector<Tensor> out;
  for (const std::string& name : outputs) {
    MPC_ASSIGN_OR_RETURN(Tensor t, ex->Fetch(name));
    out.push_back(std::move(t));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> AddLossAndGradients(Graph& graph, const std::vector<std::string>& wrt) {
  GraphBuilder b(&graph);
  Value* y = graph.outputs()[0];
  Value* r = graph.AddConstant(graph.UniqueName("loss_weights"), RandomTensor(y->dtype, y->shape, 9));
  AttrMap keep;
  keep.Set("keepdims", int64_t{0});
  Value* loss = b.Op("ReduceSum", {b.Mul(y, r)}, std::move(keep));
  MPC_RETURN_IF_ERROR(b.status());
  std::vector<Value*> values;
  for (const std::string& name : wrt) values.push_back(graph.FindValue(name));
  MPC_ASSIGN_OR_RETURN(std::vector<Value*> grads, BuildGradients(graph, loss, values));
  std::vector<Value*> outputs{loss};
  outputs.insert(outputs.end(), grads.begin(), grads.end());
  graph.SetOutputs(outputs);
  std::vector<std::string> names;
  for (const Value* v : outputs) names.push_back(v->name);
  return names;
}

}  // namespace mpc::testing
