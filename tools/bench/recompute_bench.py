#!/usr/bin/env python3
"""Activation recomputation on the CPU: each memory.recompute policy on the zoo's char_gpt and
resnet18 (their own specs: bf16, AdamW / SGD), side by side in one run.

Per policy: the planned arena and the per-rank total (`mpc compile --memory_table`), the
extra FLOPs the recompute pass reports, the step time, and whether the losses are those of
NONE bit for bit. Step time is the difference between mpc-train's Train() wall time for
WARMUP + STEPS steps and for WARMUP steps, over STEPS (setup and the first steps drop out);
the policies run interleaved, --repeat times, and the table shows the median.

    /usr/bin/python3 tools/bench/recompute_bench.py --out tools/bench/results/X.md
"""
import argparse
import datetime
import json
import os
import re
import statistics
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MPC = os.path.join(ROOT, "build", "mpc")
MPC_TRAIN = os.path.join(ROOT, "build", "mpc-train")
MODELS = {"char_gpt": os.path.join(ROOT, "models", "char_gpt", "char_gpt.spec"),
          "resnet18": os.path.join(ROOT, "models", "resnet", "resnet18.spec")}
POLICIES = ("none", "selective", "full")


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def spec_with_steps(spec, steps, tag):
    """A copy of the spec beside it training `steps` steps, without evaluation or checkpoints."""
    with open(spec) as f:
        text = f.read()
    text = re.sub(r"^steps: \d+", f"steps: {steps}", text, flags=re.M)
    text = re.sub(r"^eval \{.*?^\}\n", "", text, flags=re.M | re.S)
    text = re.sub(r"^eval \{[^\n]*\}\n", "", text, flags=re.M)
    text = re.sub(r"^checkpoint \{[^\n]*\}\n", "", text, flags=re.M)
    out = os.path.join(os.path.dirname(spec), f".bench_{tag}.spec")
    with open(out, "w") as f:
        f.write(text)
    return out


def compiled(spec, policy):
    text = run([MPC, "compile", "--spec", spec, "--recompute", policy, "--memory_table"])
    arena = float(re.search(r"activations planned into ([0-9.]+) MiB", text).group(1))
    extra = re.search(r"\+([0-9.]+)% FLOPs per step", text)
    row = re.search(r"^\s+0\s+" + policy + r"\s+(.*)$", text, re.M).group(1).split()
    return arena, float(extra.group(1)) if extra else 0.0, float(row[-1]), text


def train(spec, policy, metrics):
    text = run([MPC_TRAIN, "--spec", spec, "--recompute", policy, "--metrics", metrics])
    seconds = float(re.search(r"done: \d+ steps \(\d+ skipped\) in ([0-9.]+) s", text).group(1))
    losses = []
    with open(metrics) as f:
        for line in f:
            record = json.loads(line)
            if record.get("type") == "train" or record.get("kind") == "train":
                losses.append(record["loss"])
    return seconds, losses


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="char_gpt,resnet18")
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows, details = [], []
    for name in args.models.split(","):
        spec = MODELS[name]
        short = spec_with_steps(spec, args.warmup, "short")
        long_ = spec_with_steps(spec, args.warmup + args.steps, "long")
        plans = {policy: compiled(long_, policy) for policy in POLICIES}
        times = {policy: [] for policy in POLICIES}
        losses = {}
        for r in range(args.repeat):
            for policy in POLICIES:
                s0, _ = train(short, policy, "/tmp/recompute_bench_short.jsonl")
                s1, loss = train(long_, policy, "/tmp/recompute_bench_long.jsonl")
                ms = 1000.0 * (s1 - s0) / args.steps
                times[policy].append(ms)
                losses.setdefault(policy, loss)
                details.append(f"| {name} | {policy} | {r + 1} | {ms:.1f} |")
                print(details[-1], flush=True)
        base_ms = statistics.median(times["none"])
        base_arena = plans["none"][0]
        for policy in POLICIES:
            arena, extra, total, _ = plans[policy]
            ms = statistics.median(times[policy])
            same = "yes" if losses[policy] == losses["none"] and losses[policy] else "NO"
            rows.append(f"| {name} | {policy} | {arena:.1f} | {arena / base_arena:.2f} | {total:.1f} | +{extra:.1f}% | "
                        f"{ms:.1f} | {ms / base_ms:.2f} | {same} ({len(losses[policy])} steps) |")
        for path in (short, long_):
            os.remove(path)
    now = datetime.datetime.now(datetime.timezone.utc)
    commit = run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"]).strip()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    text = f"""# Activation recomputation on the CPU — {now:%Y-%m-%d %H:%M} UTC

| model | recompute | planned arena MiB | vs none | per-rank total MiB | extra FLOPs | ms/step (median of {args.repeat}) | vs none | losses = none's, bit for bit |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

The zoo's own specs (char_gpt: 6 x 384, context 256, batch 16, bf16, AdamW; resnet18: 64 x 64
images, batch 32, bf16, SGD with momentum). The arena is the memory plan's (activations,
gradients and backward temporaries); the total adds weights, optimizer state, inputs and
constants (`mpc compile --memory_table`). Extra FLOPs: the recompute pass's estimate of the
clones' FLOPs against the step's (graph/flops.h).

## Method
- step time: Train() wall time of mpc-train ("done: N steps in S s") for {args.warmup} + {args.steps} steps minus
  that for {args.warmup} steps, over {args.steps}; the policies interleaved, {args.repeat} times.
- losses: the {args.warmup + args.steps} per-step losses of the first long run of each policy compared with NONE's exactly.
- machine: {cpu}, {os.cpu_count()} CPUs; mpc commit `{commit}` (plus the working tree)
- command: `/usr/bin/python3 tools/bench/recompute_bench.py {' '.join(f'--{k} {v}' for k, v in vars(args).items())}`

## Every run
| model | recompute | repeat | ms/step |
|---|---|---|---|
{chr(10).join(details)}
"""
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
