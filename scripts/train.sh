#!/usr/bin/env bash
# Trains the default model (Fashion-MNIST MLP) after installing and building what it
# needs. Uses the GPU when mpc was built with CUDA and a GPU is present; otherwise the CPU.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh mpc_train
mkdir -p runs
exec build/mpc-train --spec models/fashion_mlp/fashion_mlp.spec --device auto \
  --metrics runs/fashion_mlp.metrics.jsonl --checkpoint_dir runs/fashion_mlp_checkpoint \
  --export_onnx runs/fashion_mlp.trained.onnx "$@"
