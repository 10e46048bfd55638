// The per-thread groups of shared reorders (see shared_reorders.h).
#include "backends/cpu/shared_reorders.h"

#include <memory>
#include <vector>

namespace mpc {
namespace cpu {
namespace {

struct Offered {
  const Value* value;
  dnnl::memory buffer;  // a handle: shares the owner's buffer
};

using Group = std::vector<Offered>;

thread_local std::vector<Group> groups;  // innermost last
thread_local int64_t shared_count = 0;

}  // namespace

void OpenReorderGroup() { groups.emplace_back(); }

void CloseReorderGroup() {
  if (!groups.empty()) groups.pop_back();
}

std::optional<dnnl::memory> FindSharedReorder(const Value* value, const dnnl::memory::desc& layout) {
  if (groups.empty() || !value) return std::nullopt;
  for (const Offered& o : groups.back()) {
    if (o.value == value && o.buffer.get_desc() == layout) {
      ++shared_count;
      return o.buffer;
    }
  }
  return std::nullopt;
}

void OfferSharedReorder(const Value* value, const dnnl::memory& buffer) {
  if (groups.empty() || !value) return;
  groups.back().push_back({value, buffer});
}

int64_t SharedReorderCount() { return shared_count; }

}  // namespace cpu
}  // namespace mpc
