#!/usr/bin/env bash
# What a behaviour-preserving change (a refactor) must leave unchanged, written as text
# files to diff: the per-step training losses of the Fashion-MNIST MLP and CNN (20 steps,
# every precision) and the compile report of every zoo model in every precision, training
# and evaluation, with timings removed.
#
#   tools/refactor/snapshot.sh BUILD_DIR OUT_DIR     # before and after the change, then
#   diff -r OUT_BEFORE OUT_AFTER                     # must print nothing
#
# The ResNet and char_gpt models must have been generated (models/*/make_*.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:?usage: snapshot.sh BUILD_DIR OUT_DIR}")
out=$(realpath -m "${2:?usage: snapshot.sh BUILD_DIR OUT_DIR}")
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
strip_timing() { sed -E 's/"(ms|wall_s|step_ms|seconds)":[0-9.eE+-]+,?//g'; }

for model in fashion_mlp fashion_cnn; do
  sed -e "s|^model: \"|model: \"$PWD/models/$model/|" -e 's/^epochs: [0-9]*/steps: 20/' \
    "models/$model/$model.spec" > "$tmp/$model.spec"
  for precision in f32 bf16 fp16 fp8; do
    "$build/mpc-train" --spec "$tmp/$model.spec" --device cpu --precision "$precision" \
      --metrics "$tmp/m.jsonl" --checkpoint_dir "$tmp/ckpt-$model-$precision" >/dev/null
    strip_timing < "$tmp/m.jsonl" > "$out/train-$model-$precision.jsonl"
  done
done

for spec in models/fashion_mlp/fashion_mlp.spec models/fashion_cnn/fashion_cnn.spec \
            models/resnet/resnet18.spec models/char_gpt/char_gpt.spec; do
  name=$(basename "$spec" .spec)
  for precision in f32 bf16 fp16 fp8; do
    for mode in train eval; do
      flags=(); [ "$mode" = eval ] && flags=(--eval)
      "$build/mpc" compile --spec "$spec" --device cpu --precision "$precision" "${flags[@]}" \
        --report "$tmp/r.json" > "$tmp/summary.txt"
      strip_timing < "$tmp/r.json" > "$out/report-$name-$precision-$mode.json"
      sed -E 's/^([a-z0-9-]+ +[a-z]+) +[0-9.]+ +([0-9]+)$/\1 \2/' "$tmp/summary.txt" > "$out/summary-$name-$precision-$mode.txt"
    done
  done
done
echo "snapshot: $(ls "$out" | wc -l) files in $out"
