// Capabilities lookups (see capabilities.h).
#include "graph/capabilities.h"

#include <algorithm>

namespace mpc {

bool Capabilities::Native(DType d) const {
  return std::find(native_compute.begin(), native_compute.end(), d) != native_compute.end();
}

int Capabilities::PadMultiple(DType d) const {
  auto it = pad_multiple.find(d);
  return it == pad_multiple.end() ? 1 : it->second;
}

}  // namespace mpc
