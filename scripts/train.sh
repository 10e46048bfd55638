#!/usr/bin/env bash
# Trains the default model (Fashion-MNIST MLP) after installing and building what it
# needs. Uses the GPU when mpc was built with CUDA and a GPU is present; otherwise the CPU.
# Then draws the run (tools/plot_metrics.py) into runs/fashion_mlp.png.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh mpc_train
mkdir -p runs
metrics=runs/fashion_mlp.metrics.jsonl
# Metrics newer than this marker were written by this run (not left from an earlier one).
started=$(mktemp)
trap 'rm -f "$started"' EXIT
status=0
# Safe to run again: a new run replaces the previous run's checkpoints, unless the
# arguments say to resume them (--resume, --resume_if_present).
checkpoints=--overwrite_checkpoints
for arg in "$@"; do
  case "$arg" in --resume* | --overwrite*) checkpoints= ;; esac
done
build/mpc-train --spec models/fashion_mlp/fashion_mlp.spec --device auto \
  --metrics "$metrics" --checkpoint_dir runs/fashion_mlp_checkpoint $checkpoints \
  --export_onnx runs/fashion_mlp.trained.onnx "$@" || status=$?
# Plotted even when training failed (a diverged run is worth seeing); a failed plot is
# reported but never changes the exit status, which stays mpc-train's.
if [ -s "$metrics" ] && [ "$metrics" -nt "$started" ]; then
  if /usr/bin/python3 tools/plot_metrics.py "$metrics" --out runs/fashion_mlp.png; then
    echo "train.sh: plotted the run into runs/fashion_mlp.png"
  else
    echo "train.sh: plotting $metrics failed (above); the training's result is unaffected" >&2
  fi
fi
exit "$status"
