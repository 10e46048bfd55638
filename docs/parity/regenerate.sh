#!/bin/bash
# Regenerates the example `mpc parity` reports in this directory (docs/parity.md):
# the Fashion-MNIST MLP over its whole schedule (6000 steps) and the CNN over its first
# epoch (600 steps), each against bf16, fp16 and fp8. About 15 minutes on 2 cores.
# Usage: docs/parity/regenerate.sh [BUILD_DIR]   (default: build)
set -u
cd "$(dirname "$0")/../.."
mpc="${1:-build}/mpc"
status=0
for p in bf16 fp16 fp8; do
  "$mpc" parity --spec models/fashion_mlp/fashion_mlp.spec --precision "$p" \
    --report "docs/parity/fashion_mlp_$p.json" >"docs/parity/fashion_mlp_$p.txt" 2>&1 || status=1
done
for p in bf16 fp16; do
  "$mpc" parity --spec models/fashion_cnn/fashion_cnn.spec --precision "$p" --steps 600 \
    --report "docs/parity/fashion_cnn_$p.json" >"docs/parity/fashion_cnn_$p.txt" 2>&1 || status=1
done
# By default FP8 leaves the CNN's two GEMMs in bf16 (the first and last GEMM of a model
# stay out, and N=10 is not a multiple of 16): include them and pad, so FP8 runs.
spec_dir=$(mktemp -d)
cp models/fashion_cnn/fashion_cnn.spec "$spec_dir/"
echo 'fp8 { include_first_last: true }' >>"$spec_dir/fashion_cnn.spec"
"$mpc" parity --spec "$spec_dir/fashion_cnn.spec" --model models/fashion_cnn/fashion_cnn.onnx --precision fp8 \
  --pad-multiple 16 --steps 600 --report docs/parity/fashion_cnn_fp8.json >docs/parity/fashion_cnn_fp8.txt 2>&1 || status=1
rm -rf "$spec_dir"
exit $status
