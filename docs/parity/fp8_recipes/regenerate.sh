#!/bin/bash
# Regenerates the FP8 recipe comparison (docs/fp8-recipes.md): `mpc parity` of each
# recipe (delayed, current, rowwise, block) and of bf16 against f32, 200 steps from the
# same weights on the same batches, on the Fashion-MNIST MLP (every GEMM in FP8:
# include_first_last, padded to 16) and on char_gpt; then summarize.py writes the table
# and the loss-curve plot from the JSON reports.
# Usage: docs/parity/fp8_recipes/regenerate.sh [BUILD_DIR] [CHAR_GPT_SPEC]
#   BUILD_DIR default build; CHAR_GPT_SPEC default models/char_gpt/char_gpt.spec, whose
#   model and data models/char_gpt/make_char_gpt.py makes. A smaller char_gpt for a quick
#   run: copy the spec to DIR, then make_char_gpt.py --layers 2 --width 128 --heads 2
#   --context 64 --out DIR/char_gpt.onnx --data DIR/data. STEPS=N overrides 200.
set -u
cd "$(dirname "$0")/../../.."
mpc="${1:-build}/mpc"
char_gpt_spec="${2:-models/char_gpt/char_gpt.spec}"
steps="${STEPS:-200}"
out=docs/parity/fp8_recipes
status=0
spec_dir=$(mktemp -d)
trap 'rm -rf "$spec_dir"' EXIT
cp models/fashion_mlp/fashion_mlp.spec "$spec_dir/fashion_mlp.spec"
echo 'fp8 { include_first_last: true }' >>"$spec_dir/fashion_mlp.spec"
run() {  # name spec precision recipe [extra flags...]
  local name=$1 spec=$2 precision=$3 recipe=$4
  shift 4
  local tag=$precision
  [ "$precision" = fp8 ] && tag="fp8_$recipe"
  local recipe_flag=()
  [ "$precision" = fp8 ] && recipe_flag=(--fp8-recipe "$recipe")
  echo "== $name $tag" >&2
  "$mpc" parity --spec "$spec" --precision "$precision" "${recipe_flag[@]}" --steps "$steps" \
    --max-accuracy-drop 1 "$@" --report "$out/${name}_$tag.json" >"$out/${name}_$tag.txt" 2>&1 || status=1
}
for r in bf16:- fp8:delayed fp8:current fp8:rowwise fp8:block; do
  run fashion_mlp "$spec_dir/fashion_mlp.spec" "${r%%:*}" "${r##*:}" \
    --model models/fashion_mlp/fashion_mlp.onnx --pad-multiple 16
  run char_gpt "$char_gpt_spec" "${r%%:*}" "${r##*:}"
done
/usr/bin/python3 "$out/summarize.py" "$out" || status=1
exit $status
