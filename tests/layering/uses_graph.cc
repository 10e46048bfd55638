// Layering probe (tests/CMakeLists.txt): compiled against a module's include view, this
// must succeed wherever graph/ is below the module.
#include "graph/graph.h"
