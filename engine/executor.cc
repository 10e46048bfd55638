// Executor: binding values to memory, creating kernels, running steps.
#include "engine/executor.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace mpc {

Executor::~Executor() {
  captured_.reset();
  steps_.clear();  // kernels may reference buffers; destroy them first
  for (void* p : owned_) backend_.Free(p);
}

absl::StatusOr<void*> Executor::OwnBuffer(size_t bytes) {
  MPC_ASSIGN_OR_RETURN(void* p, backend_.Allocate(std::max<size_t>(bytes, 1)));
  owned_.push_back(p);
  return p;
}

absl::StatusOr<std::unique_ptr<Executor>> Executor::Create(const Graph& graph, const MemoryPlanResult& memory,
                                                           Backend& backend, Executor* share) {
  std::unique_ptr<Executor> ex(new Executor(backend));
  if (memory.order.size() != graph.nodes().size()) {
    return absl::FailedPreconditionError("the program has no execution order; run the memory-plan pass");
  }
  ex->arena_bytes_ = memory.plan.peak_bytes;
  MPC_ASSIGN_OR_RETURN(void* seed_step, ex->OwnBuffer(2 * sizeof(int64_t)));
  ex->seed_step_ = static_cast<int64_t*>(seed_step);
  MPC_ASSIGN_OR_RETURN(ex->arena_, ex->OwnBuffer(static_cast<size_t>(memory.plan.peak_bytes)));
  for (const auto& v : graph.values()) {
    const Value* value = v.get();
    ex->by_name_[value->name] = value;
    switch (value->kind) {
      case ValueKind::kActivation: {
        auto it = memory.plan.offsets.find(value);
        if (it == memory.plan.offsets.end()) continue;  // produced by no node (or a state's bytes: below)
        ex->location_[value] = static_cast<char*>(ex->arena_) + it->second;
        break;
      }
      case ValueKind::kParameter:
      case ValueKind::kState: {
        ex->persistent_.push_back(value);
        if (share) {
          const Value* twin = share->FindValue(value->name);
          if (twin && twin->persistent()) {
            if (twin->dtype != value->dtype || twin->shape != value->shape) {
              return absl::InternalError(absl::StrCat(
                  "'", value->name, "' is ", DTypeName(value->dtype), ShapeToString(value->shape), " here but ",
                  DTypeName(twin->dtype), ShapeToString(twin->shape), " in the program it shares weights with"));
            }
            ex->location_[value] = share->location_.at(twin);
            break;
          }
        }
        MPC_ASSIGN_OR_RETURN(void* p, ex->OwnBuffer(value->bytes()));
        MPC_RETURN_IF_ERROR(backend.CopyToDevice(p, value->data.raw(), value->bytes()));
        ex->location_[value] = p;
        break;
      }
      case ValueKind::kConstant: {
        MPC_ASSIGN_OR_RETURN(void* p, ex->OwnBuffer(value->bytes()));
        MPC_RETURN_IF_ERROR(backend.CopyToDevice(p, value->data.raw(), value->bytes()));
        ex->location_[value] = p;
        break;
      }
      case ValueKind::kInput: {
        MPC_ASSIGN_OR_RETURN(void* p, ex->OwnBuffer(value->bytes()));
        ex->location_[value] = p;
        break;
      }
    }
  }
  for (const auto& [out, state] : memory.plan.state_aliases) ex->location_[out] = ex->location_.at(state);
  // The kernels run in the order they are made (RunKernels), which lets the backend share
  // per-step work between them (Backend::BeginKernelGroup).
  backend.BeginKernelGroup();
  struct EndGroup {
    Backend& backend;
    ~EndGroup() { backend.EndKernelGroup(); }
  } end_group{backend};
  for (Node* node : memory.order) {
    Step step;
    step.node = node;
    step.ctx.device_seed_step = ex->seed_step_;
    MPC_ASSIGN_OR_RETURN(step.kernel, backend.CreateKernel(*node));
    for (const Value* in : node->inputs) {
      step.ctx.inputs.push_back(in ? TensorView{ex->location_.at(in), in->dtype, in->shape} : TensorView{});
    }
    for (const Value* out : node->outputs) {
      auto it = ex->location_.find(out);
      if (it == ex->location_.end()) {
        return absl::InternalError(
            absl::StrCat("output '", out->name, "' of node '", node->name, "' has no planned buffer"));
      }
      step.ctx.outputs.push_back(TensorView{it->second, out->dtype, out->shape});
    }
    ex->steps_.push_back(std::move(step));
  }
  return ex;
}

const Value* Executor::FindValue(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

absl::StatusOr<const Value*> Executor::CheckedInput(const std::string& name, const Tensor& value) const {
  const Value* v = FindValue(name);
  if (!v || v->kind != ValueKind::kInput) {
    return absl::NotFoundError(absl::StrCat("the program has no input named '", name, "'"));
  }
  // Same element count suffices: a [B,28,28] batch feeds a [B,1,28,28] input unchanged.
  if (v->dtype != value.dtype() || NumElements(v->shape) != value.num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat("input '", name, "' expects ", DTypeName(v->dtype),
                                                   ShapeToString(v->shape), " but was given ", DTypeName(value.dtype()),
                                                   ShapeToString(value.shape())));
  }
  return v;
}

absl::Status Executor::SetInput(const std::string& name, const Tensor& value) {
  MPC_ASSIGN_OR_RETURN(const Value* v, CheckedInput(name, value));
  return backend_.CopyToDevice(location_.at(v), value.raw(), value.bytes());
}

absl::StatusOr<bool> Executor::UploadInputAhead(const std::string& name, const Tensor& value) {
  MPC_ASSIGN_OR_RETURN(const Value* v, CheckedInput(name, value));
  auto it = upload_staging_.find(v);
  if (it != upload_staging_.end()) return backend_.UploadAhead(it->second, value.raw(), value.bytes());
  // The first upload allocates the buffer, and a backend without uploads ahead keeps none.
  MPC_ASSIGN_OR_RETURN(void* staging, backend_.Allocate(std::max<size_t>(value.bytes(), 1)));
  absl::StatusOr<bool> uploaded = backend_.UploadAhead(staging, value.raw(), value.bytes());
  if (!uploaded.ok() || !*uploaded) {
    backend_.Free(staging);
    return uploaded;
  }
  owned_.push_back(staging);
  upload_staging_[v] = staging;
  return true;
}

absl::Status Executor::SetInputFromUpload(const std::string& name) {
  const Value* v = FindValue(name);
  auto it = v ? upload_staging_.find(v) : upload_staging_.end();
  if (it == upload_staging_.end()) {
    return absl::FailedPreconditionError(
        absl::StrCat("input '", name, "' was never uploaded ahead; call UploadInputAhead before SetInputFromUpload"));
  }
  return backend_.CopyFromUpload(location_.at(v), it->second, static_cast<size_t>(NumElements(v->shape)) *
                                                                  DTypeSize(v->dtype));
}

absl::Status Executor::Run(uint64_t seed, int64_t step_index) {
  const int64_t seed_step[2] = {static_cast<int64_t>(seed), step_index};
  MPC_RETURN_IF_ERROR(backend_.CopyToDevice(seed_step_, seed_step, sizeof(seed_step)));
  for (Step& step : steps_) {
    step.ctx.seed = seed;
    step.ctx.step = step_index;
  }
  ++runs_;
  const bool eager = profiling_ || observer_;
  if (captured_ && !eager) return captured_->Replay();
  // The first run goes eagerly: libraries may allocate or tune lazily on first use,
  // which a capture must not record. The first plain run after it is recorded and
  // replayed from then on.
  if (runs_ >= 2 && !captured_ && capture_enabled_ && !eager) {
    auto captured = backend_.Capture([this] { return RunKernels(); });
    if (!captured.ok()) {
      // Capture is an optimisation: say why once and keep running eagerly.
      fprintf(stderr, "mpc: step capture failed, running kernels one by one: %s\n",
              std::string(captured.status().message()).c_str());
      capture_enabled_ = false;
    } else if (*captured) {
      captured_ = std::move(*captured);
      return captured_->Replay();
    } else {
      capture_enabled_ = false;  // the backend runs kernels eagerly (the CPU)
    }
  }
  return RunKernels();
}

absl::Status Executor::RunKernels() {
  for (Step& step : steps_) {
    absl::Status st;
    if (profiling_) {
      MPC_RETURN_IF_ERROR(backend_.Synchronize());
      const auto start = std::chrono::steady_clock::now();
      st = step.kernel->Run(step.ctx);
      MPC_RETURN_IF_ERROR(backend_.Synchronize());
      OpTiming& t = profile_[step.node->op];
      t.calls++;
      t.total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    } else {
      st = step.kernel->Run(step.ctx);
    }
    if (!st.ok()) {
      return absl::Status(st.code(),
                          absl::StrCat("node '", step.node->name, "' (", step.node->op, "): ", st.message()));
    }
    if (observer_) MPC_RETURN_IF_ERROR(observer_->AfterNode(*step.node, step.ctx, backend_));
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> Executor::Fetch(const std::string& value_name) const {
  const Value* v = FindValue(value_name);
  if (!v || !location_.contains(v)) {
    return absl::NotFoundError(absl::StrCat("the program has no value named '", value_name, "'"));
  }
  Tensor out(v->dtype, v->shape);
  MPC_RETURN_IF_ERROR(backend_.CopyToHost(out.raw(), location_.at(v), out.bytes()));
  return out;
}

std::vector<const Value*> Executor::PersistentValues() const { return persistent_; }

absl::StatusOr<Tensor> Executor::ReadPersistent(const std::string& name) const {
  const Value* v = FindValue(name);
  if (!v || !v->persistent()) return absl::NotFoundError(absl::StrCat("no parameter or state named '", name, "'"));
  return Fetch(name);
}

absl::Status Executor::WritePersistent(const std::string& name, const Tensor& value) {
  const Value* v = FindValue(name);
  if (!v || !v->persistent()) return absl::NotFoundError(absl::StrCat("no parameter or state named '", name, "'"));
  if (v->dtype != value.dtype() || v->shape != value.shape()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' is ", DTypeName(v->dtype), ShapeToString(v->shape),
                                                   " but the value given is ", DTypeName(value.dtype()),
                                                   ShapeToString(value.shape())));
  }
  MPC_RETURN_IF_ERROR(backend_.CopyToDevice(location_.at(v), value.raw(), value.bytes()));
  // A parameter's low-precision copy (written by its optimizer update, see
  // passes/optimizer.cc) follows the new master weight.
  const Value* copy = FindValue(name + ".lowp");
  if (v->kind == ValueKind::kParameter && copy && copy->persistent() && copy->shape == v->shape) {
    const Tensor rounded = value.CastTo(copy->dtype);
    MPC_RETURN_IF_ERROR(backend_.CopyToDevice(location_.at(copy), rounded.raw(), rounded.bytes()));
  }
  return absl::OkStatus();
}

}  // namespace mpc
