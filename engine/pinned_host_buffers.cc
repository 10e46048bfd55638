// PinnedHostBuffers: registration of the batch buffers with the backend (see the header).
#include "engine/pinned_host_buffers.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace mpc {

void PinnedHostBuffers::Pin(Backend& backend, Tensor& tensor, const std::string& what) {
  if (tensor.empty() || tensor.bytes() < kMinPinnedBytes) return;
  if (backend_ != nullptr && backend_ != &backend) Clear();  // one backend at a time
  absl::StatusOr<bool> pinned = backend.PinHostBuffer(tensor.raw(), tensor.bytes());
  if (!pinned.ok()) {
    refusals_.push_back(absl::StrCat(what, " (", tensor.bytes(), " bytes) stays in pageable memory, so each step's copy ",
                                     "of it to the device is staged: ", pinned.status().message()));
    return;
  }
  if (!*pinned) return;  // the backend copies from any memory alike
  backend_ = &backend;
  pinned_.push_back(tensor.raw());
  pinned_bytes_ += tensor.bytes();
}

bool PinnedHostBuffers::IsPinned(const Tensor& tensor) const {
  return !tensor.empty() && std::find(pinned_.begin(), pinned_.end(), tensor.raw()) != pinned_.end();
}

void PinnedHostBuffers::Clear() {
  for (void* p : pinned_) backend_->UnpinHostBuffer(p);
  pinned_.clear();
  pinned_bytes_ = 0;
  backend_ = nullptr;
}

}  // namespace mpc
