#!/usr/bin/env bash
# GPU verification on the H100 machine, from the bundle scripts/gpu/make_bundle.sh made
# (carried as .device/). Every stage writes its log under $OUT (the device tool brings
# $OUT back) and prints a one-line verdict at the end.
#
#   bash scripts/gpu/verify.sh STAGE...   STAGE: env tests train memcheck bench all
#     env       nvidia-smi, library versions, the bundle's commit
#     tests     mpc_gpu_tests (gpu-label tests incl. the CUDA-vs-CPU conformance harness)
#     train     Fashion-MNIST MLP on the GPU in f32, bf16, fp16 (dynamic loss scaling) and fp8
#               and on the CPU in f32; test accuracies side by side (the GPU within 0.3 points of the CPU)
#     fp8recipes  each FP8 recipe lowered on the GPU against the CPU's emulation (final losses)
#     memcheck  compute-sanitizer memcheck on a 20-step run
#     bench     tools/bench/bench.py --device cuda (mpc beside PyTorch eager/AMP/compile)
#     diag      the command in VERIFY_DIAG, with the bundle's environment (diag.log)
#
# A lent machine gives a session minutes, not hours, and one call at most 10 of them, so
# every stage runs under a time limit and the whole run under VERIFY_DEADLINE seconds
# (default 0: none): a stage that would outlive it is cut short and says so in the summary,
# instead of the call being killed with nothing packed. VERIFY_PACK=DIR packs every log into
# DIR/verify-logs.tar.gz beside summary.txt (the device tool brings back only a few files,
# 16 MiB each: the training checkpoints stay out).
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
# cuDNN, cuBLAS and NCCL may live in Python wheels there (docs/gpu.md): every folder of the
# `nvidia` namespace package that holds a shared library (the CUDA 13 wheels put theirs in
# nvidia/cu13/lib, cuDNN and NCCL in nvidia/cudnn/lib and nvidia/nccl/lib).
extra=""
for d in $(python3 -c "import nvidia; print(' '.join(nvidia.__path__))" 2>/dev/null); do
  for l in $(find "$d" -name 'lib*.so*' -printf '%h\n' 2>/dev/null | sort -u); do extra="$extra:$l"; done
done
export LD_LIBRARY_PATH="$mpc/lib$extra:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# Use the bundle's libstdc++ only when the device's lacks what the binaries were built against
# (`mpc --version` exits 0; `--help` exits 1 by abseil's convention, which once put the
# bundle's copy first on a device that did not need it).
if ! "$mpc/bin/mpc" --version >/dev/null 2>&1; then export LD_LIBRARY_PATH="$mpc/lib-stdcxx:$LD_LIBRARY_PATH"; fi
summary=()
started=$SECONDS
deadline=${VERIFY_DEADLINE:-0}

# budget SEC -> SEC, or what is left before the deadline if that is less (at least 1).
budget() {
  local want=$1
  if [ "$deadline" -gt 0 ]; then
    local left=$((deadline - (SECONDS - started)))
    [ "$left" -lt "$want" ] && want=$left
    [ "$want" -lt 1 ] && want=1
  fi
  echo "$want"
}
# `timeout` exits 124 when it stopped the command.
verdict() { [ "$1" -eq 124 ] && echo "rc=124 (cut at its time limit)" || echo "rc=$1"; }

stage_env() {
  { nvidia-smi; nvcc --version 2>/dev/null; python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)";
    echo "bundle commit $(cat $mpc/COMMIT) built $(cat $mpc/BUILT)"; echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH";
    ldd "$mpc/bin/mpc-train" | grep -i "cud\|cublas\|not found"; } > "$OUT/env.txt" 2>&1
  local missing
  missing=$(for b in "$mpc"/bin/*; do ldd "$b"; done 2>&1 | grep "not found" | sort -u | awk '{print $1}' | tr '\n' ' ')
  summary+=("env: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); missing libraries: ${missing:-none}")
}

stage_tests() {
  # A crash (a fault that kills the process) ends a gtest run without its closing counts;
  # the test it was running is then excluded and the binary run again on the rest, up to
  # three times, so one bad kernel does not hide every result after it.
  local exclude="" pass=0 rc=0 crashed=()
  : > "$OUT/gpu_tests.log"
  while :; do
    pass=$((pass + 1))
    timeout "$(budget "${VERIFY_TESTS_S:-240}")" "$mpc/bin/mpc_gpu_tests" --gtest_filter="*${exclude:+-$exclude}" \
      --gtest_output="xml:$OUT/gpu_tests_$pass.xml" > "$OUT/gpu_tests_$pass.log" 2>&1
    rc=$?
    cat "$OUT/gpu_tests_$pass.log" >> "$OUT/gpu_tests.log"
    grep -qE '^\[==========\] [0-9]+ tests? from .* ran' "$OUT/gpu_tests_$pass.log" && break
    [ "$rc" -eq 124 ] && break
    local last
    last=$(grep -oE '^\[ RUN +\] [^ ]+' "$OUT/gpu_tests_$pass.log" | tail -1 | awk '{print $NF}')
    [ -n "$last" ] && [ "$pass" -lt 4 ] || break
    crashed+=("$last"); exclude="${exclude:+$exclude:}$last"
  done
  # gtest's closing counts only ("[  PASSED  ] 10 tests.", "[  FAILED  ] 1 test, listed below:").
  summary+=("tests: $(verdict $rc) after $pass run(s); crashed: ${crashed[*]:-none}; $(grep -E '^\[ +(PASSED|SKIPPED|FAILED) +\] [0-9]+ tests?' "$OUT/gpu_tests_$pass.log" | tr '\n' ' ')")
  # A device fault (an illegal address, say) poisons the CUDA context, and every test after
  # it in the same process fails too. Rerun each failed test alone, with synchronous
  # launches so an error names the kernel that caused it: what still fails is real.
  local failed
  failed=$( { grep -oE '^\[  FAILED  \] [A-Za-z_][A-Za-z0-9_/]*\.[A-Za-z0-9_/.]+' "$OUT/gpu_tests.log" |
    sed 's/^\[  FAILED  \] //'; [ ${#crashed[@]} -gt 0 ] && printf '%s\n' "${crashed[@]}"; } | sort -u | head -300)
  if [ -n "$failed" ]; then
    local alone_fail=0 alone_pass=0 not_rerun=0 rerun_until=$((SECONDS + $(budget "${VERIFY_RERUN_S:-90}")))
    : > "$OUT/gpu_tests_alone.log"; : > "$OUT/gpu_tests_failing_alone.txt"
    for t in $failed; do
      if [ "$SECONDS" -ge "$rerun_until" ]; then not_rerun=$((not_rerun + 1)); echo "$t (not rerun: time)" >> "$OUT/gpu_tests_failing_alone.txt"; continue; fi
      if CUDA_LAUNCH_BLOCKING=1 timeout 60 "$mpc/bin/mpc_gpu_tests" --gtest_filter="$t" >> "$OUT/gpu_tests_alone.log" 2>&1; then
        alone_pass=$((alone_pass + 1))
      else
        alone_fail=$((alone_fail + 1)); echo "$t" >> "$OUT/gpu_tests_failing_alone.txt"
      fi
    done
    summary+=("tests rerun alone (first 300 failures and crashes): $alone_pass pass, $alone_fail fail, $not_rerun not rerun (gpu_tests_failing_alone.txt)")
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
  local spec line="" time_v=()
  # Peak RSS and CPU time in the log where GNU time exists (the device image may lack it).
  [ -x /usr/bin/time ] && time_v=(/usr/bin/time -v)
  spec=$(spec_for "epochs: 10")
  for run in cuda:f32 cuda:bf16 cuda:fp16 cuda:fp8 cpu:f32; do
    local dev=${run%%:*} prec=${run##*:} tag=${run/:/_}
    local extra_flags=()
    [ "$prec" = fp16 ] && extra_flags=(--loss-scaling dynamic)
    local t0=$SECONDS
    timeout "$(budget "${VERIFY_TRAIN_RUN_S:-120}")" "${time_v[@]}" "$mpc/bin/mpc-train" --spec "$spec" --device "$dev" --precision "$prec" "${extra_flags[@]}" \
      --metrics "$OUT/train_$tag.jsonl" --checkpoint_dir "$OUT/checkpoints_$tag" > "$OUT/train_$tag.log" 2>&1
    local rc=$?
    line="$line $tag=$(accuracy "$OUT/train_$tag.jsonl")($(verdict $rc), $((SECONDS - t0)) s)"
  done
  summary+=("train (test accuracy after 10 epochs):$line")
}

# The FP8 recipes lowered to cuBLASLt on the GPU (batch 128: every GEMM's M, N and K a
# multiple of 16, so every one lowers; the per-tensor, OUTER_VEC, VEC128 and BLK128x128
# scale modes) against the CPU's emulation of the same recipe: final train loss and time.
last_loss() { grep '"kind":"train"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"loss": *\([0-9.e+-]*\).*/\1/p'; }

stage_fp8recipes() {
  local spec line=""
  spec=$(spec_for "steps: ${VERIFY_FP8_STEPS:-200}")
  sed -i 's/^batch_size: .*/batch_size: 128/' "$spec"
  for recipe in delayed current rowwise block; do
    for dev in cuda cpu; do
      local tag=fp8_${recipe}_$dev t0=$SECONDS
      timeout "$(budget "${VERIFY_FP8_RUN_S:-60}")" "$mpc/bin/mpc-train" --spec "$spec" --device "$dev" --precision fp8 \
        --fp8-recipe "$recipe" --metrics "$OUT/$tag.jsonl" --checkpoint_dir "$OUT/checkpoints_$tag" > "$OUT/$tag.log" 2>&1
      local rc=$?
      line="$line $tag=$(last_loss "$OUT/$tag.jsonl")($(verdict $rc), $((SECONDS - t0)) s)"
    done
  done
  summary+=("fp8 recipes (batch 128, final train loss, GPU lowered vs CPU emulated):$line")
}

stage_memcheck() {
  local spec cs
  spec=$(spec_for "steps: 20")
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  timeout "$(budget "${VERIFY_MEMCHECK_S:-150}")" "$cs" --tool memcheck --leak-check full --error-exitcode 3 "$mpc/bin/mpc-train" --spec "$spec" --device cuda \
    --precision bf16 --checkpoint_dir "$OUT/checkpoints_memcheck" > "$OUT/memcheck.log" 2>&1
  summary+=("memcheck: $(verdict $?) $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)")
}

stage_bench() {
  # One device call runs at most 10 minutes: pick models per call with MPC_BENCH_ARGS
  # (tools/bench/README.md lists the command lines, e.g. "--suite issue45" for the zoo rows).
  # bench.py's own deadline (MPC_BENCH_TIME_BUDGET, unless MPC_BENCH_ARGS has --time-budget) is the stage's
  # limit less VERIFY_BENCH_MARGIN_S for the closing matmul-rate probe and the report: rows that would start
  # after it are skipped and listed as such in the results file, instead of the stage being cut mid-row.
  local limit margin
  limit=$(budget "${VERIFY_BENCH_S:-540}")
  margin=${VERIFY_BENCH_MARGIN_S:-25}
  [ "$limit" -gt $((2 * margin)) ] || margin=$((limit / 2))
  MPC_BENCH_TIME_BUDGET=$((limit - margin)) timeout "$limit" python3 tools/bench/bench.py --device cuda \
    --build-dir "$mpc/bin" --out-dir "$OUT" ${MPC_BENCH_ARGS:---models seed_mlp,fashion_mlp} > "$OUT/bench.log" 2>&1
  local rc=$?
  summary+=("bench: $(verdict $rc) in a ${limit}s limit, $(grep -c 'past the time budget' "$OUT/bench.log") rows or runs skipped for time (table in $OUT/bench.log and the results file there)")
}

stage_diag() {
  # VERIFY_DIAG: a command of your own, run with the bundle's environment ($mpc is the
  # unpacked bundle), e.g. a single test under CUBLASLT_LOG_LEVEL=5.
  mpc=$mpc timeout "$(budget "${VERIFY_DIAG_S:-60}")" bash -c "${VERIFY_DIAG:-true}" > "$OUT/diag.log" 2>&1
  summary+=("diag: $(verdict $?) (diag.log)")
}

stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(all)
[ "${stages[0]}" = all ] && stages=(env tests train memcheck bench)
for s in "${stages[@]}"; do
  if [ "$deadline" -gt 0 ] && [ $((SECONDS - started)) -ge "$deadline" ]; then
    summary+=("$s: not run (VERIFY_DEADLINE ${deadline}s reached)"); continue
  fi
  "stage_$s"
done
summary+=("total: $((SECONDS - started)) s")
printf '%s\n' "${summary[@]}" | tee "$OUT/summary.txt"
if [ -n "${VERIFY_PACK:-}" ]; then
  mkdir -p "$VERIFY_PACK" && cp "$OUT/summary.txt" "$VERIFY_PACK/" && tar -C "$OUT" --exclude='./checkpoints_*' -czf "$VERIFY_PACK/verify-logs.tar.gz" .
fi
