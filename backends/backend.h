// The Backend interface: what a device can do (Capabilities, graph/capabilities.h), its
// memory, and the kernels it runs, looked up by (op, backend, dtype) in a KernelRegistry
// the way ONNX Runtime's kernel registry works. Passes only ever see Capabilities, so
// every pass is testable on the CPU with a fake capability set.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "graph/capabilities.h"
#include "graph/graph.h"

namespace mpc {

class Communicator;  // distributed/communicator.h

// A tensor as a kernel sees it: where it lives on the device, what it is.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  int64_t num_elements() const { return NumElements(shape); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// Everything a kernel call needs besides its node: its operands, and the per-step
// values stochastic kernels derive their random streams from.
struct KernelContext {
  std::vector<TensorView> inputs;  // an absent optional input has data == nullptr
  std::vector<TensorView> outputs;
  uint64_t seed = 0;
  int64_t step = 0;
  // The same two values in the backend's memory, as {int64 seed bits, int64 step},
  // rewritten before every step. Kernels on a backend that replays captured steps
  // (CUDA graphs) must read seed and step from here: the host values above are frozen
  // into the capture.
  const int64_t* device_seed_step = nullptr;
};

// A step recorded once and replayed (a CUDA graph): same kernels, same buffers.
class CapturedStep {
 public:
  virtual ~CapturedStep() = default;
  virtual absl::Status Replay() = 0;
};

// A kernel is created once per node when a program is loaded (so primitives, plans
// and descriptors are built outside the step) and run once per step.
class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual absl::Status Run(KernelContext& ctx) = 0;
};

class Backend;
using KernelFactory = std::function<absl::StatusOr<std::unique_ptr<Kernel>>(const Node& node, Backend& backend)>;

// The dtype a node's kernel is selected by: its first present input's dtype, or its
// first output's for nodes without inputs.
DType KernelDType(const Node& node);

class KernelRegistry {
 public:
  void Register(const std::string& op, const std::string& backend, DType dtype, KernelFactory factory);
  // Error naming the op, the backend and the dtype, and listing the dtypes that exist.
  absl::StatusOr<const KernelFactory*> Find(const std::string& op, const std::string& backend, DType dtype) const;
  bool Has(const std::string& op, const std::string& backend, DType dtype) const;
  // Every registered (op, dtype name) of `backend`, sorted: for coverage tests and reports.
  std::vector<std::pair<std::string, std::string>> Entries(const std::string& backend) const;

 private:
  absl::flat_hash_map<std::string, KernelFactory> factories_;  // key: op|backend|dtype
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual const Capabilities& capabilities() const = 0;

  virtual absl::StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  virtual absl::Status CopyToDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual absl::Status Synchronize() = 0;

  // Makes `bytes` of host memory at `ptr` memory the device can copy from directly (CUDA:
  // page-locked with cudaHostRegister), so CopyToDevice from it is one DMA at the link's
  // speed that does not block the host, where pageable memory is staged through the
  // driver's bounce buffers. Afterwards the buffer must not be rewritten until the stream
  // has passed a copy from it (Synchronize or CopyToHost), and it must be unpinned before
  // it is freed. False when the backend has no such memory (the CPU copies with memcpy):
  // nothing changed, and the buffer is used as it is.
  virtual absl::StatusOr<bool> PinHostBuffer(void* ptr, size_t bytes) { return false; }
  virtual void UnpinHostBuffer(void* ptr) {}

  // Copying the next step's input while this step's kernels run (the engine's prefetched
  // batches). UploadAhead starts copying pinned host `src` into the device buffer
  // `staging` on a stream of its own and returns at once; the copy waits only for the
  // CopyFromUpload calls made before it (which read the staging buffers), not for the
  // step's kernels. CopyFromUpload copies `staging` to `dst` on the step's stream once the
  // uploads started before it have landed (a device-to-device copy, at the memory's
  // bandwidth rather than the host link's). Synchronize waits for the uploads too; the
  // host leaves `src` alone until then. UploadAhead returns false, having done nothing,
  // on a backend without such a stream (the CPU: its "device" memory is the host's).
  virtual absl::StatusOr<bool> UploadAhead(void* staging, const void* src, size_t bytes) { return false; }
  virtual absl::Status CopyFromUpload(void* dst, const void* staging, size_t bytes) {
    return absl::UnimplementedError(absl::StrCat("backend '", name(), "' has no uploads ahead to copy from"));
  }

  // Records what `enqueue` submits to the backend's stream, without running it, into a
  // replayable step. Null when the backend has no such thing (the CPU runs kernels
  // eagerly); an error when recording failed.
  virtual absl::StatusOr<std::unique_ptr<CapturedStep>> Capture(const std::function<absl::Status()>& enqueue) {
    return std::unique_ptr<CapturedStep>();
  }

  virtual const KernelRegistry& kernels() const = 0;
  absl::StatusOr<std::unique_ptr<Kernel>> CreateKernel(const Node& node);

  // Executor::Create brackets the kernels of one program with these (on one thread): the
  // kernels made in between run once per step, one after another in the order they were
  // made. A backend may let a later kernel of the group read what an earlier one leaves in
  // its own buffers each step (the CPU: a value's reorder into a oneDNN layout,
  // backends/cpu/shared_reorders.h).
  virtual void BeginKernelGroup() {}
  virtual void EndKernelGroup() {}

  // The job's communicator, which the collective ops' kernels call (AllReduce); null in a
  // single-process run, whose programs contain no collective. Set before kernels are made.
  void set_communicator(Communicator* communicator) { communicator_ = communicator; }
  Communicator* communicator() const { return communicator_; }

 private:
  Communicator* communicator_ = nullptr;
};

}  // namespace mpc
