#!/usr/bin/env bash
# A model whose parameters exceed 2 GiB, end to end (issue 22; not part of CI):
#   1. make_large_mlp.py writes a 604M-parameter MLP (2.42 GB float32) with ONNX external data;
#   2. mpc-train imports it, trains 3 SGD steps on synthetic data and checkpoints
#      (checkpoint format 2 streams tensor by tensor, so no 2 GiB message);
#   3. a second run resumes from that checkpoint, trains step 4 and exports ONNX, which
#      switches to external data on its own above ExportOptions::kMaxInlineOnnxBytes;
#   4. an uninterrupted 4-step run checks that the resumed step 4 has the same loss;
#   5. Python onnx checks the exported model (checker on the path, data file included).
# Peak RSS of each run comes from /usr/bin/time -v. Needs ~12 GiB of free memory and
# ~10 GB of disk under WORK_DIR.
#
#   tools/large_model/run_large_model.sh [WORK_DIR]     (default /tmp/mpc_large_model)
# Environment: MPC_TRAIN (default build/mpc-train), PYTHON (default /usr/bin/python3),
# HIDDEN / LAYERS / FEATURES to change the model's size, VERIFY=0 to skip step 4.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${1:-/tmp/mpc_large_model}"
MPC_TRAIN="${MPC_TRAIN:-$ROOT/build/mpc-train}"
PYTHON="${PYTHON:-/usr/bin/python3}"
FEATURES="${FEATURES:-4096}"
HIDDEN="${HIDDEN:-16384}"
LAYERS="${LAYERS:-2}"
VERIFY="${VERIFY:-1}"

rm -rf "$WORK"
mkdir -p "$WORK/model" "$WORK/export"

# Runs a command under /usr/bin/time -v (niced: this is a background demonstration) and
# prints its wall time and peak RSS.
timed() {
  local label="$1"
  shift
  /usr/bin/time -v -o "$WORK/$label.time" nice -n 10 "$@" > "$WORK/$label.log" 2>&1 || {
    echo "$label failed:"
    tail -20 "$WORK/$label.log"
    exit 1
  }
  local rss_kb wall
  rss_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$WORK/$label.time")
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$WORK/$label.time")
  printf '%-10s wall %-9s peak RSS %6.2f GiB\n' "$label" "$wall" "$(echo "$rss_kb / 1048576" | bc -l)"
}

step_loss() {  # the loss of train step $2 in metrics file $1
  grep "\"kind\":\"train\",\"step\":$2," "$1" | tail -1 | sed 's/.*"loss":\([^,]*\),.*/\1/'
}

echo "== model (features $FEATURES, hidden $HIDDEN x $LAYERS) in $WORK"
timed generate "$PYTHON" "$ROOT/tools/large_model/make_large_mlp.py" "$WORK/model" \
  --features "$FEATURES" --hidden "$HIDDEN" --layers "$LAYERS"
tail -1 "$WORK/generate.log"

write_spec() {  # $1: file, $2: steps
  cat > "$1" << SPEC
model: "$WORK/model/model.onnx"
features_input: "x"
loss { type: SOFTMAX_CROSS_ENTROPY output: "logits" }
train_data { synthetic { num_examples: 64 feature_shape: $FEATURES num_classes: 10 seed: 7 } }
batch_size: 8
steps: $2
seed: 1
optimizer { sgd { lr: 0.01 } }
checkpoint { every_n_steps: 0 at_end: true keep_last: 1 }
SPEC
}
write_spec "$WORK/train3.spec" 3
write_spec "$WORK/train4.spec" 4

echo "== train 3 steps, checkpoint"
timed train "$MPC_TRAIN" --spec "$WORK/train3.spec" --device cpu --checkpoint_dir "$WORK/ckpt" \
  --metrics "$WORK/train.jsonl"
echo "checkpoint: $(du -sb "$WORK/ckpt" | cut -f1) bytes in $(find "$WORK/ckpt" -type f | wc -l) files"

echo "== resume, train step 4, export ONNX"
timed resume "$MPC_TRAIN" --spec "$WORK/train4.spec" --device cpu --checkpoint_dir "$WORK/ckpt" --resume \
  --metrics "$WORK/resume.jsonl" --export_onnx "$WORK/export/trained.onnx"
ls -l "$WORK/export"

for s in 1 2 3; do echo "step $s loss $(step_loss "$WORK/train.jsonl" $s)"; done
resumed=$(step_loss "$WORK/resume.jsonl" 4)
echo "step 4 loss $resumed (resumed)"
if [[ "$VERIFY" == 1 ]]; then
  echo "== uninterrupted 4 steps (resume check)"
  timed straight "$MPC_TRAIN" --spec "$WORK/train4.spec" --device cpu --checkpoint_dir "$WORK/ckpt_straight" \
    --metrics "$WORK/straight.jsonl"
  straight=$(step_loss "$WORK/straight.jsonl" 4)
  echo "step 4 loss $straight (uninterrupted)"
  if [[ "$resumed" == "$straight" ]]; then echo "resume verified: identical step-4 loss"; else
    echo "RESUME MISMATCH: $resumed vs $straight"
    exit 1
  fi
fi

echo "== exported model checked by Python onnx"
"$PYTHON" - "$WORK/export/trained.onnx" << 'PY'
import sys
import onnx
from onnx import TensorProto
path = sys.argv[1]
m = onnx.load(path, load_external_data=False)
ext = [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]
onnx.checker.check_model(path)
print(f"{path}: checker ok, {len(ext)} of {len(m.graph.initializer)} initializers external, "
      f"in {sorted({e.value for t in ext for e in t.external_data if e.key == 'location'})}")
PY
echo "done: $WORK"
