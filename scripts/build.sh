#!/usr/bin/env bash
# Configures and builds mpc (release with debug info) into build/ with 2 jobs.
# Arguments name the targets to build (default: everything, tests included).
set -euo pipefail
cd "$(dirname "$0")/.."
"$(dirname "$0")/install-deps.sh"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if [ $# -gt 0 ]; then
  cmake --build build -j 2 --target "$@"
else
  cmake --build build -j 2
fi
