#!/usr/bin/env bash
# Requests/s and latency of examples/inference_service (mpc::Predictor behind a thread pool
# and a Unix socket) under concurrent clients, on the Fashion-MNIST MLP trained for one
# epoch. Installs BUILD_DIR into a temporary prefix, builds the example against it (as a
# consumer would: find_package(mpc), shared library), trains models/fashion_mlp for one
# epoch with the installed mpc-train (--export_onnx), runs the example's `check` (8 clients,
# answers bit-identical to the installed `mpc run`) and then its `bench`.
#
#   tools/bench/inference_service_bench.sh [BUILD_DIR] [SECONDS] [CLIENTS] [THREADS]
#
# Defaults: build, 20 s, 8 clients, 8 threads. Prints the bench's lines; the result file
# (tools/bench/results/*-inference-service.md) records them with this command.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$here/build}
seconds=${2:-20}
clients=${3:-8}
threads=${4:-8}
work=$(mktemp -d /tmp/mpc-inference-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT

echo "== installing $build into $work/prefix"
cmake --install "$build" --prefix "$work/prefix" > "$work/install.log"
echo "== building examples/inference_service against it"
cmake -S "$here/examples/inference_service" -B "$work/service" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" -DCMAKE_PREFIX_PATH="$work/prefix" > "$work/configure.log"
cmake --build "$work/service" > "$work/build.log"

echo "== training models/fashion_mlp for one epoch"
sed -e 's/^epochs: .*/epochs: 1/' "$here/models/fashion_mlp/fashion_mlp.spec" > "$work/fashion_mlp_1epoch.spec"
"$work/prefix/bin/mpc-train" --spec "$work/fashion_mlp_1epoch.spec" --model "$here/models/fashion_mlp/fashion_mlp.onnx" \
  --checkpoint_dir "$work/ckpt" --export_onnx "$work/fashion_mlp_trained.onnx" --device cpu 2>&1 | tail -3

echo "== check: $clients clients against mpc run"
"$work/service/inference_service" check "$work/fashion_mlp_trained.onnx" "$work/prefix/bin/mpc" "$work/check" \
  --clients "$clients" --requests 40 --threads "$threads"
echo "== bench: $clients clients, $seconds s"
echo "machine: $(nproc) CPUs ($(lscpu | sed -n 's/^Model name: *//p' | head -1)); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$work/service/inference_service" bench "$work/fashion_mlp_trained.onnx" --clients "$clients" --seconds "$seconds" \
  --threads "$threads"
