#!/bin/bash
# Issue 44: every number in README.md, single-threaded. ~25 min on one core.
# Uses a copy of the mpc binaries (the build directory may be rebuilt meanwhile).
set -e
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
W=${W:-/tmp/regnet_se}
mkdir -p $W/bin && cp build/mpc-train build/mpc $W/bin/
export MPC_TRAIN=$W/bin/mpc-train MPC=$W/bin/mpc
PY=.venv/bin/python
D=tools/investigations/regnet_se
# 1. mpc vs PyTorch f32 (default, mkldnn off, channels_last) vs float64, one SGD step
$PY $D/regnet_se.py --bs 8 --hw 64 --seed 0 --work $W/bs8 --variants nomkldnn,cl      # full per-parameter table
for bs in 2 4 16 32; do $PY $D/regnet_se.py --bs $bs --hw 64 --seed 0 --work $W/bs$bs --variants nomkldnn,cl --quiet; done
for seed in 1 2 3; do for bs in 8 16 32; do
  $PY $D/regnet_se.py --bs $bs --hw 64 --seed $seed --work $W/s${seed}_bs$bs --variants nomkldnn,cl --quiet; done; done
for hw in 96 128; do for bs in 8 32; do
  $PY $D/regnet_se.py --bs $bs --hw $hw --seed 0 --work $W/hw${hw}_bs$bs --variants nomkldnn,cl --quiet; done; done
$PY $D/summarize.py $W/*/result.json
# 2. conditioning: BN-sum cancellation, f64 with f32-sized noise
$PY $D/conditioning.py --bs 8 --hw 64 --seed 0 --noise-runs 2
$PY $D/conditioning.py --bs 32 --hw 64 --seed 0 --noise-runs 2
# 3. attribution of every implementation's error to ReLU sign flips
$PY $D/mask_flips.py --bs 8 --hw 64 --seed 0 --tau 2e-4 --coords 200000 --grads $W/bs8/grads.npz
$PY $D/mask_flips.py --bs 32 --hw 64 --seed 0 --tau 2e-4 --max-cand 1500 --coords 200000 --grads $W/bs32/grads.npz
# 4. forward accuracy: mpc run (eval with this batch's f64 statistics) and the BN batch means
$PY $D/fwd_error.py --bs 8 --hw 64 --seed 0 --work $W/fwd_bs8
$PY $D/fwd_error.py --bs 32 --hw 64 --seed 0 --work $W/fwd_bs32
(cd $D && ../../../$PY bn_stats.py --bs 32 --hw 64 --seed 0 --work $W/bs32)
# 5. PyTorch with mpc's BatchNorm statistics order emulated (f32, and f64 accumulators)
$PY $D/bn_emulation.py --bs 32 --hw 64 --seeds 0,1,2,3 --root $W
$PY $D/bn_emulation.py --bs 32 --hw 128 --seeds 0 --root $W
$PY $D/bn_emulation.py --bs 16 --hw 64 --seeds 0,1,2,3 --root $W
