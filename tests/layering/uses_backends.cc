// Layering probe (tests/CMakeLists.txt): compiled against the passes or graph view, this
// must fail: passes see Capabilities (graph/capabilities.h), never a backend.
#include "backends/backend.h"
