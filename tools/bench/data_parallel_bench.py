#!/usr/bin/env python3
"""Data-parallel on this machine: 2 ranks x 1 thread (mpirun), without ZeRO and with ZeRO-1,
2 and 3, against 1 rank x 2 threads, with each configuration's planned memory per rank.

Same spec, model, data and global batch (bench.py's seed_mlp and fashion_cnn assets), f32.
Step time is the Train() wall time mpc-train reports ("done: N steps in S s"), as the
difference between a run of WARMUP + STEPS steps and one of WARMUP steps, divided by STEPS:
setup, data loading and the first steps' primitive creation drop out. The communication
share is the collectives' time in rank 0's --profile (AllReduce; under ZeRO-1 also
ReduceScatter and AllGatherInPlace: packing, the MPI calls and the wait for the other rank,
which includes any imbalance between the ranks) over its step time.
Every configuration runs --repeat times, interleaved; the table shows the median. Memory per
rank is the plan's total for that configuration (`mpc compile --ranks N`'s table, recompute
none: weights, gradients, optimizer state, arena, inputs), known before the run.

    /usr/bin/python3 tools/bench/data_parallel_bench.py --out tools/bench/results/X.md
"""
import argparse
import datetime
import importlib.util
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("bench", os.path.join(HERE, "bench.py"))
bench = importlib.util.module_from_spec(spec)
sys.argv, argv = sys.argv[:1], sys.argv  # bench.py parses nothing at import; keep ours
spec.loader.exec_module(bench)
sys.argv = argv

MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"]
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def run(cmd, threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), **ROOT_ENV)
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout


def train_seconds(text):
    m = re.search(r"done: (\d+) steps \(\d+ skipped\) in ([0-9.]+) s", text)
    return int(m.group(1)), float(m.group(2))


def collective_ms(text):
    """(calls, ms) of the collective ops in a --profile."""
    calls, ms = 0, 0.0
    for op in ("AllReduce", "ReduceScatter", "AllGatherInPlace", "AllGather"):
        m = re.search(r"^\s+" + op + r"\s+(\d+) calls\s+([0-9.]+) ms", text, re.M)
        if m:
            calls, ms = calls + int(m.group(1)), ms + float(m.group(2))
    return calls, ms


def with_fields(spec_path, fields, suffix):
    """A copy of the spec with `fields` appended (the same spec otherwise)."""
    if not fields:
        return spec_path
    out = spec_path + suffix
    with open(spec_path) as f, open(out, "w") as g:
        g.write(f.read() + "\n" + fields + "\n")
    return out


def planned_mib(spec_path, ranks, fields):
    """The per-rank total of the plan for the stage `fields` sets (0 without ZeRO)."""
    stage = re.search(r"zero_stage: (\d)", fields)
    text = run([bench.MPC, "compile", "--spec", spec_path, "--ranks", str(ranks), "--memory_table"], 1)
    row = re.search(r"^\s+" + (stage.group(1) if stage else "0") + r"\s+none\s+(.*)$", text, re.M)
    return float(row.group(1).split()[-1])


def measure(spec_short, spec_long, ranks, threads, steps):
    """(ms per step, collective ms per step, collective calls per step) of one configuration."""
    prefix = MPIRUN + ["-np", str(ranks)] if ranks > 1 else []
    short = run(prefix + [bench.MPC_TRAIN, "--spec", spec_short, "--profile"], threads)
    long_ = run(prefix + [bench.MPC_TRAIN, "--spec", spec_long, "--profile"], threads)
    (_, s0), (_, s1) = train_seconds(short), train_seconds(long_)
    (c0, a0), (c1, a1) = collective_ms(short), collective_ms(long_)
    return 1000.0 * (s1 - s0) / steps, (a1 - a0) / steps, (c1 - c0) / steps


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default="seed_mlp,fashion_cnn")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rows, details = [], []
    configs = [("1 rank x 2 threads", 1, 2, ""), ("2 ranks x 1 thread", 2, 1, ""),
               ("2 ranks x 1 thread, ZeRO-1", 2, 1, "distributed { zero_stage: 1 }"),
               ("2 ranks x 1 thread, ZeRO-2", 2, 1, "distributed { zero_stage: 2 bucket_mb: 1 }"),
               ("2 ranks x 1 thread, ZeRO-3", 2, 1, "distributed { zero_stage: 3 bucket_mb: 1 }")]
    for name in args.models.split(","):
        cfg = bench.MODELS[name]
        batch = cfg["batch"]
        onnx_path, feats, labels = bench.ensure_assets(name, cfg, batch)[:3]
        short = bench.write_spec(name, cfg, onnx_path, feats, labels, batch, args.warmup, "f32")
        long_ = bench.write_spec(name, cfg, onnx_path, feats, labels, batch, args.warmup + args.steps, "f32")
        results = {c[0]: [] for c in configs}
        memory = {label: planned_mib(with_fields(long_, fields, f".config{i}"), ranks, fields)
                  for i, (label, ranks, _, fields) in enumerate(configs)}
        for r in range(args.repeat):
            for i, (label, ranks, threads, fields) in enumerate(configs):
                ms, comm, calls = measure(with_fields(short, fields, f".config{i}"),
                                          with_fields(long_, fields, f".config{i}"), ranks, threads, args.steps)
                results[label].append((ms, comm, calls))
                details.append(f"| {name} | {label} | {r + 1} | {ms:.1f} | {comm:.2f} | {calls:.0f} |")
                print(details[-1], flush=True)
        base = statistics.median(x[0] for x in results[configs[0][0]])
        for label, _, _, _ in configs:
            ms = statistics.median(x[0] for x in results[label])
            comm = statistics.median(x[1] for x in results[label])
            rows.append(f"| {name} | {batch} | {label} | {ms:.1f} | {ms / base:.2f} | "
                        + (f"{comm:.2f} ms ({100 * comm / ms:.1f}%)" if comm else "—") + f" | {memory[label]:.2f} |")
    now = datetime.datetime.now(datetime.timezone.utc)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=bench.ROOT, capture_output=True,
                            text=True).stdout.strip()
    text = f"""# Data-parallel on the CPU: 2 ranks x 1 thread vs 1 rank x 2 threads — {now:%Y-%m-%d %H:%M} UTC

| model | global batch | configuration | ms/step (median of {args.repeat}) | vs 1 rank x 2 threads | collectives per step (share) | planned MiB per rank |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

Lower is better. Both configurations use the machine's 2 cores and train the same global batch
(2 ranks: half each); f32, the models' bench.py specs (AdamW, constant rate). ZeRO-1 adds
`distributed {{ zero_stage: 1 }}`: gradients reduce-scattered, each rank updates half of every
weight with half of the Adam moments, the updated weights all-gathered. ZeRO-2 adds
`zero_stage: 2 bucket_mb: 1`: each 1 MiB bucket reduce-scattered as soon as the backward made it.
ZeRO-3 (`zero_stage: 3`): the parameters held as slices too, each gathered (AllGather) before its
forward and its backward readers.

## Method
- step time: Train() wall time of mpc-train ("done: N steps in S s") for {args.warmup} + {args.steps} steps minus
  that for {args.warmup} steps, over {args.steps}; setup and the first steps drop out.
- 2 ranks: `mpirun -np 2 --oversubscribe --bind-to none`, `OMP_NUM_THREADS=1`; 1 rank: `OMP_NUM_THREADS=2`.
- communication: rank 0's `--profile` time per step in AllReduce (the gradient buckets, the loss; packing,
  MPI_Alltoallv + MPI_Allgatherv over shared memory, and the wait for the other rank), and under ZeRO-1
  also ReduceScatter (MPI_Alltoallv) and AllGatherInPlace (MPI_Allgather).
- machine: {bench.cpu_model()}, 2 CPUs; mpc commit `{commit}`; Open MPI {run(['mpirun', '--version'], 1).splitlines()[0]}
- command: `/usr/bin/python3 tools/bench/data_parallel_bench.py {' '.join(argv[1:])}`

## Every run
| model | configuration | repeat | ms/step | collectives ms/step | collective calls/step |
|---|---|---|---|---|---|
{chr(10).join(details)}
"""
    with open(args.out, "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
