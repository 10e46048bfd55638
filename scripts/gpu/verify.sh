#!/usr/bin/env bash
# GPU verification on the H100 machine, from the bundle scripts/gpu/make_bundle.sh made
# (carried as .device/). Every stage writes its log under $OUT (the device tool brings
# $OUT back) and prints a one-line verdict at the end.
#
#   bash scripts/gpu/verify.sh STAGE...   STAGE: env tests train memcheck bench all
#     env       nvidia-smi, library versions, the bundle's commit
#     tests     mpc_gpu_tests (gpu-label tests incl. the CUDA-vs-CPU conformance harness)
#     train     Fashion-MNIST MLP on the GPU in f32, bf16 and fp16 (dynamic loss scaling)
#               and on the CPU in f32; test accuracies side by side (the GPU within 0.3 points of the CPU)
#     memcheck  compute-sanitizer memcheck on a 20-step run
#     bench     tools/bench/bench.py --device cuda (mpc beside PyTorch eager/AMP/compile)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
OUT=${OUT:-$root/.device/out}
mkdir -p "$OUT"
mpc=/tmp/mpc-bundle
# Unpack again whenever the carried bundle changed: a warm machine keeps /tmp between calls,
# and a rebuilt bundle must not run the previous binaries.
[ -f .device/bundle.tar.xz ] || { echo "verify: no .device/bundle.tar.xz (run scripts/gpu/make_bundle.sh here and carry .device)"; exit 1; }
bundle_sum=$(cksum < .device/bundle.tar.xz)
if [ ! -x "$mpc/bin/mpc-train" ] || [ "$(cat "$mpc/.bundle_sum" 2>/dev/null)" != "$bundle_sum" ]; then
  rm -rf "$mpc" && mkdir -p "$mpc" && tar -C "$mpc" -xJf .device/bundle.tar.xz || { echo "verify: cannot unpack .device/bundle.tar.xz"; exit 1; }
  echo "$bundle_sum" > "$mpc/.bundle_sum"
fi
# cuDNN and cuBLAS may live in Python wheels there (docs/gpu.md).
extra=""
for m in nvidia.cudnn nvidia.cublas nvidia.cuda_runtime; do
  d=$(python3 -c "import $m as x; print(x.__path__[0])" 2>/dev/null) && [ -d "$d/lib" ] && extra="$extra:$d/lib"
done
export LD_LIBRARY_PATH="$mpc/lib$extra:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# Use the bundle's libstdc++ only when the device's lacks what the binaries were built against.
if ! "$mpc/bin/mpc" --help >/dev/null 2>&1; then export LD_LIBRARY_PATH="$mpc/lib-stdcxx:$LD_LIBRARY_PATH"; fi
summary=()

stage_env() {
  { nvidia-smi; nvcc --version 2>/dev/null; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)";
    echo "bundle commit $(cat $mpc/COMMIT) built $(cat $mpc/BUILT)"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH";
    ldd "$mpc/bin/mpc-train" | grep -i "cud\|cublas\|not found"; } > "$OUT/env.txt" 2>&1
  summary+=("env: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)")
}

stage_tests() {
  "$mpc/bin/mpc_gpu_tests" --gtest_output="xml:$OUT/gpu_tests.xml" > "$OUT/gpu_tests.log" 2>&1
  local rc=$?
  # gtest's closing counts only ("[  PASSED  ] 10 tests.", "[  FAILED  ] 1 test, listed below:").
  summary+=("tests: rc=$rc; $(grep -E '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?' "$OUT/gpu_tests.log" | tr '\n' ' ')")
  # A device fault (an illegal address, say) poisons the CUDA context, and every test after
  # it in the same process fails too. Rerun each failed test alone, with synchronous
  # launches so an error names the kernel that caused it: what still fails is real.
  local failed
  failed=$(grep -oE '^\[  FAILED  \] [A-Za-z_][A-Za-z0-9_/]*\.[A-Za-z0-9_/.]+' "$OUT/gpu_tests.log" |
    sed 's/^\[  FAILED  \] //' | sort -u | head -300)
  if [ -n "$failed" ]; then
    local alone_fail=0 alone_pass=0
    : > "$OUT/gpu_tests_alone.log"
    for t in $failed; do
      if CUDA_LAUNCH_BLOCKING=1 timeout 120 "$mpc/bin/mpc_gpu_tests" --gtest_filter="$t" >> "$OUT/gpu_tests_alone.log" 2>&1; then
        alone_pass=$((alone_pass + 1))
      else
        alone_fail=$((alone_fail + 1)); echo "$t" >> "$OUT/gpu_tests_failing_alone.txt"
      fi
    done
    summary+=("tests rerun alone (first 300 failures): $alone_pass pass, $alone_fail fail (gpu_tests_failing_alone.txt)")
  fi
}

# A copy of the Fashion-MNIST spec reading the carried data.
spec_for() {  # spec_for "epochs: 10" | "steps: 20" -> path
  local s="$OUT/fashion_mlp.$(echo "$1" | tr -dc 'a-z0-9').spec"
  sed "s#/usr/share/datasets/fashion-mnist#$root/.device/data#; s#^model: \"fashion_mlp.onnx\"#model: \"$root/models/fashion_mlp/fashion_mlp.onnx\"#; s#^epochs: .*#$1#" \
    models/fashion_mlp/fashion_mlp.spec > "$s"
  echo "$s"
}

accuracy() { grep '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"accuracy": *\([0-9.]*\).*/\1/p'; }

stage_train() {
  local spec line=""
  spec=$(spec_for "epochs: 10")
  for run in cuda:f32 cuda:bf16 cuda:fp16 cpu:f32; do
    local dev=${run%%:*} prec=${run##*:} tag=${run/:/_}
    local extra_flags=()
    [ "$prec" = fp16 ] && extra_flags=(--loss_scaling dynamic)
    /usr/bin/time -v "$mpc/bin/mpc-train" --spec "$spec" --device "$dev" --precision "$prec" "${extra_flags[@]}" \
      --metrics "$OUT/train_$tag.jsonl" > "$OUT/train_$tag.log" 2>&1
    local rc=$?
    line="$line $tag=$(accuracy "$OUT/train_$tag.jsonl")(rc $rc)"
  done
  summary+=("train (test accuracy after 10 epochs):$line")
}

stage_memcheck() {
  local spec cs
  spec=$(spec_for "steps: 20")
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  "$cs" --tool memcheck --leak-check full --error-exitcode 3 "$mpc/bin/mpc-train" --spec "$spec" --device cuda \
    --precision bf16 > "$OUT/memcheck.log" 2>&1
  summary+=("memcheck: rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)")
}

stage_bench() {
  # One device call runs at most 10 minutes: pick models per call with MPC_BENCH_ARGS
  # (tools/bench/README.md lists the issue-5/6/7 command lines).
  python3 tools/bench/bench.py --device cuda --build-dir "$mpc/bin" --out-dir "$OUT" \
    ${MPC_BENCH_ARGS:---models seed_mlp,fashion_mlp --time-budget 400} > "$OUT/bench.log" 2>&1
  summary+=("bench: rc=$? (table in $OUT/bench.log and the results file there)")
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(all)
[ "${stages[0]}" = all ] && stages=(env tests train memcheck bench)
for s in "${stages[@]}"; do "stage_$s"; done
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
