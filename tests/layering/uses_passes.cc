// Layering probe (tests/CMakeLists.txt): compiled against a backend's or graph's view,
// this must fail: backends run graphs, they never see the compiler's passes.
#include "passes/pass.h"
