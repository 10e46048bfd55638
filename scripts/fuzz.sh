#!/usr/bin/env bash
# Builds and runs one libFuzzer target (tools/fuzz/, docs/building.md "Fuzzing").
#   scripts/fuzz.sh TARGET SECONDS [LIBFUZZER_FLAG...]   e.g. scripts/fuzz.sh npy 60
#   scripts/fuzz.sh TARGET -runs=N [LIBFUZZER_FLAG...]   a fixed number of executions
# TARGET: onnx_import, train_spec, npy, idx_images, idx_labels, checkpoint. Configures build-fuzz/
# with clang (-DMPC_FUZZ=ON: -fsanitize=fuzzer,address,undefined), builds the target under
# /tmp/mpc-build.lock with -j2, then fuzzes with tests/fuzz_corpus/TARGET as the seed
# corpus (new inputs go to build-fuzz/corpus/TARGET, never into the source tree), prints
# libFuzzer's cov:/ft: lines and final stats, and copies every crash, leak, timeout or
# out-of-memory input into tests/fuzz_regressions/TARGET/, which ctest replays (label fuzz).
set -euo pipefail
cd "$(dirname "$0")/.."
targets="onnx_import train_spec npy idx_images idx_labels checkpoint"
target=${1:-}
budget=${2:-}
if [ -z "$target" ] || [ -z "$budget" ] || ! [[ " $targets " == *" $target "* ]]; then
  echo "usage: scripts/fuzz.sh TARGET SECONDS|-runs=N [LIBFUZZER_FLAG...]; TARGET one of: $targets" >&2
  exit 2
fi
shift 2
if [[ "$budget" == -runs=* ]]; then
  limit=("$budget")
else
  limit=("-max_total_time=$budget")
fi
# Inputs larger than these add time per run but no new code paths.
case "$target" in
  onnx_import) max_len=16384 ;;
  train_spec) max_len=4096 ;;
  checkpoint) max_len=20480 ;;  # the seeds: tiny models (<1 KiB) and the golden MLP (12-18 KiB)
  *) max_len=2048 ;;
esac

# A libFuzzer dictionary (tokens worth splicing in) where the target has one.
dict=()
[ -f "tools/fuzz/$target.dict" ] && dict=("-dict=tools/fuzz/$target.dict")

build=build-fuzz
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMPC_FUZZ=ON \
    -DMPC_BUILD_TESTS=OFF -DMPC_WITH_CUDA=OFF >/dev/null
fi
flock /tmp/mpc-build.lock cmake --build "$build" -j2 --target "${target}_fuzzer"

corpus="$build/corpus/$target"
artifacts="$build/artifacts/$target"
rm -rf "$artifacts"  # earlier runs' findings were copied out already
mkdir -p "$corpus" "$artifacts"
log="$build/fuzz-$target.log"
echo "fuzz.sh: $build/${target}_fuzzer ${limit[*]} ${dict[*]} -max_len=$max_len -rss_limit_mb=2048; log $log"
set +e
# One process (no -fork/-jobs: the machine has 2 cores); -print_final_stats=1 for the totals.
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} \
  "$build/${target}_fuzzer" "$corpus" "tests/fuzz_corpus/$target" "${limit[@]}" "${dict[@]}" -max_len="$max_len" \
  -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" >"$log" 2>&1
rc=$?
set -e
# The progress lines (cov: ft: exec/s) and the totals.
grep -E '^#[0-9]+[[:space:]]+(INITED|DONE|pulse)' "$log" | tail -n 5 || true
grep -E '^stat::|^Done|^INFO: (Loaded|seed corpus)' "$log" || true

found=0
for f in "$artifacts"/crash-* "$artifacts"/leak-* "$artifacts"/timeout-* "$artifacts"/oom-*; do
  [ -f "$f" ] || continue
  mkdir -p "tests/fuzz_regressions/$target"
  cp "$f" "tests/fuzz_regressions/$target/"
  echo "fuzz.sh: kept $(basename "$f") in tests/fuzz_regressions/$target/"
  found=1
done
if [ $rc -ne 0 ]; then
  grep -E 'ERROR: |SUMMARY: |runtime error' "$log" | head -n 5 >&2 || true
  echo "fuzz.sh: $target stopped with status $rc (see $log)" >&2
  exit $rc
fi
[ $found -eq 0 ] && echo "fuzz.sh: $target: no crashes"
exit 0
