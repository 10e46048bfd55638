#!/usr/bin/env bash
# Installs dependencies, builds, and runs the whole test suite (GPU tests skip
# themselves when no GPU is present). Safe to run repeatedly.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -j 2 --timeout 1800 "$@"
