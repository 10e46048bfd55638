// PinnedHostBuffers: the engine's per-step host batch buffers (features, labels, more
// inputs), made copyable by the device directly where the backend can (CUDA: page-locked
// memory). A pageable 128 MiB batch goes to an H100 through the driver's bounce buffers at
// a few GB/s and holds the host meanwhile; pinned, it is one DMA at the link's speed. The
// buffers stay the Tensors the batch iterator fills; this object only registers them and
// unregisters them before they are freed (declare it after the Tensors it pins).
//
// Pinning is a speed-up, never a requirement: a buffer the backend refuses stays pageable
// and the reason is kept for Engine::notices().
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "graph/tensor.h"

namespace mpc {

class PinnedHostBuffers {
 public:
  // Buffers smaller than this are copied in microseconds either way; pinning them would
  // only cost page-locked memory and registration calls.
  static constexpr size_t kMinPinnedBytes = size_t{1} << 20;

  PinnedHostBuffers() = default;
  PinnedHostBuffers(const PinnedHostBuffers&) = delete;
  PinnedHostBuffers& operator=(const PinnedHostBuffers&) = delete;
  ~PinnedHostBuffers() { Clear(); }

  // Pins `tensor`'s memory on `backend` when it is at least kMinPinnedBytes and the backend
  // has pinned memory. The tensor must not be reallocated or freed while pinned. `what`
  // names it in the notice when the backend refuses.
  void Pin(Backend& backend, Tensor& tensor, const std::string& what);
  // Unpins everything (before the tensors are reallocated or freed).
  void Clear();

  size_t pinned_count() const { return pinned_.size(); }
  // Whether `tensor`'s memory is one of the pinned buffers.
  bool IsPinned(const Tensor& tensor) const;
  size_t pinned_bytes() const { return pinned_bytes_; }
  // Why buffers stayed pageable, one line each (empty when none was refused).
  const std::vector<std::string>& refusals() const { return refusals_; }

 private:
  Backend* backend_ = nullptr;
  std::vector<void*> pinned_;
  size_t pinned_bytes_ = 0;
  std::vector<std::string> refusals_;
};

}  // namespace mpc
