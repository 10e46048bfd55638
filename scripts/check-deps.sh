#!/usr/bin/env bash
# Proves scripts/deps/debian-packages.txt is complete and has nothing unused: configures
# mpc afresh in build/dep-check with a CMake trace, then tools/check_deps.py maps every
# file the configure found or loaded to its Debian package (see that file for the rules).
# `scripts/check-deps.sh --compiled build` checks instead every header the objects of
# an already built tree were compiled from (ninja's dependency log).
# Run after scripts/install-deps.sh; CI runs the first form before building and the
# second after the tests.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--compiled" ]; then
  exec /usr/bin/python3 tools/check_deps.py --build "${2:?usage: check-deps.sh --compiled BUILD_DIR}" --ninja-deps
fi
scratch=build/dep-check
rm -rf "$scratch"
mkdir -p "$scratch"
if ! cmake -S . -B "$scratch" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo --trace-expand \
     --trace-format=json-v1 --trace-redirect="$scratch/trace.json" >"$scratch/configure.log" 2>&1; then
  tail -n 30 "$scratch/configure.log" >&2
  echo "check-deps: configuring failed (above); a package the configure needs is missing from" \
       "scripts/deps/debian-packages.txt or not installed (run scripts/install-deps.sh)" >&2
  exit 1
fi
exec /usr/bin/python3 tools/check_deps.py --build "$scratch" --trace "$scratch/trace.json"
