// The executor runs a compiled program on a backend: one arena sized by the memory
// plan holds every activation; parameters and optimizer state have their own
// persistent buffers (shareable with another program, so the evaluation program reads
// the weights the training program updates); inputs and constants are uploaded into
// buffers of their own. Kernels are created once; a step is a loop of kernel calls with
// no allocation.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "backends/backend.h"
#include "passes/compile_results.h"

namespace mpc {

struct OpTiming {
  int64_t calls = 0;
  double total_ms = 0;
};

// Sees every node's outputs right after the node ran, on the host's side of the step
// (numerics checks and tensor statistics, engine/numerics_observer.h).
class StepObserver {
 public:
  virtual ~StepObserver() = default;
  // An error stops the step; it is returned from Executor::Run as it is.
  virtual absl::Status AfterNode(const Node& node, const KernelContext& ctx, Backend& backend) = 0;
};

class Executor {
 public:
  // `share_persistent`: take parameter/state buffers with the same names from there.
  static absl::StatusOr<std::unique_ptr<Executor>> Create(const Graph& graph, const MemoryPlanResult& plan,
                                                          Backend& backend, Executor* share_persistent = nullptr);
  ~Executor();

  // Copies a host tensor into a graph input; dtype must match, and the element count
  // (the data is row-major, so e.g. [B,784] feeds [B,1,28,28]).
  absl::Status SetInput(const std::string& name, const Tensor& value);
  // The next run's value of input `name` copied ahead (Backend::UploadAhead) into a
  // device buffer of that input's own, overlapping the kernels already queued; `value` is
  // pinned host memory the caller leaves alone until the backend synchronises. False when
  // the backend copies only on its step stream (then nothing was done: use SetInput).
  absl::StatusOr<bool> UploadInputAhead(const std::string& name, const Tensor& value);
  // Input `name` from what UploadInputAhead copied last (a device-to-device copy).
  absl::Status SetInputFromUpload(const std::string& name);
  // One pass over the program. `seed` and `step` feed stochastic kernels.
  absl::Status Run(uint64_t seed, int64_t step);

  absl::StatusOr<Tensor> Fetch(const std::string& value_name) const;
  // Parameters and state by name (the training state that checkpoints carry).
  std::vector<const Value*> PersistentValues() const;
  absl::StatusOr<Tensor> ReadPersistent(const std::string& name) const;
  absl::Status WritePersistent(const std::string& name, const Tensor& value);

  void EnableProfiling(bool on) { profiling_ = on; }
  // Calls `observer` after every node of each Run while set (null: none). Steps then run
  // kernel by kernel: a captured step (CUDA graph) has no place to stop between nodes.
  void SetObserver(StepObserver* observer) { observer_ = observer; }
  // Replaying captured steps (CUDA graphs) from the second Run on; on by default.
  void EnableStepCapture(bool on) { capture_enabled_ = on; }
  bool replaying_captured_step() const { return captured_ != nullptr; }
  const std::map<std::string, OpTiming>& profile() const { return profile_; }
  int64_t arena_bytes() const { return arena_bytes_; }

 private:
  struct Step {
    const Node* node;
    std::unique_ptr<Kernel> kernel;
    KernelContext ctx;
  };

  explicit Executor(Backend& backend) : backend_(backend) {}
  absl::StatusOr<void*> OwnBuffer(size_t bytes);
  absl::Status RunKernels();
  const Value* FindValue(const std::string& name) const;
  // The input `name`, if `value` fits it (dtype and element count).
  absl::StatusOr<const Value*> CheckedInput(const std::string& name, const Tensor& value) const;

  Backend& backend_;
  void* arena_ = nullptr;
  int64_t arena_bytes_ = 0;
  std::vector<void*> owned_;  // freed in the destructor
  absl::flat_hash_map<const Value*, void*> location_;
  absl::flat_hash_map<const Value*, void*> upload_staging_;  // UploadInputAhead's buffers
  absl::flat_hash_map<std::string, const Value*> by_name_;
  std::vector<const Value*> persistent_;
  std::vector<Step> steps_;
  bool profiling_ = false;
  StepObserver* observer_ = nullptr;
  int64_t* seed_step_ = nullptr;  // device copy of {seed, step}; see KernelContext
  bool capture_enabled_ = true;
  int64_t runs_ = 0;
  std::unique_ptr<CapturedStep> captured_;
  std::map<std::string, OpTiming> profile_;
};

}  // namespace mpc
