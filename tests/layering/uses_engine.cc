// Layering probe (tests/CMakeLists.txt): compiled against the passes view, this must
// fail: the engine sits above the passes.
#include "engine/program.h"
