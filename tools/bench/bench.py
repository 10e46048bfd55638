#!/usr/bin/python3
"""Side-by-side training benchmark: mpc against PyTorch on the CPU (or the GPU: --device cuda), in one command.

For each model x precision it trains the same network with mpc (`build/mpc-train`) and with
PyTorch (same ONNX weights, same data in the same order, same batch, AdamW with the same
hyperparameters, same thread count), excludes the warm-up steps, takes the median of the
timed steps, measures the machine's matmul rate in the same run (oneDNN matmul primitives,
the library mpc's CPU backend uses) and prints a markdown table. The table and
everything needed to judge it (date, machine, versions, load, command, method) go to
tools/bench/results/<YYYY-MM-DD>-cpu-<machine>-mlp.md (-<models> when a CNN is included).

Usage (Debian's torch/numpy/onnx are importable only from the system interpreter):

    /usr/bin/python3 tools/bench/bench.py                 # full run (~4 min on 2 idle cores)
    /usr/bin/python3 tools/bench/bench.py --repeat 3 --wait-idle 1800   # how the committed results were made
    /usr/bin/python3 tools/bench/bench.py --quick         # smoke test: few steps, results under build/bench/
    /usr/bin/python3 tools/bench/bench.py --models seed_mlp --steps 50 --warmup 5
    /usr/bin/python3 tools/bench/bench.py --wait-idle 600 # first wait (up to 600 s) for a quiet machine

GPU (--device cuda; tools/bench/README.md "On the GPU" has the details and the H100 commands):
    python3 tools/bench/bench.py --device cuda --models seed_mlp,fashion_mlp --out-dir DIR
    python3 tools/bench/bench.py --device cuda --suite issue45 --out-dir DIR   # ResNet-18/50, char_gpt, a GPT-2-124M-
        # shaped decoder and a TE-quickstart-sized block (tools/bench/gpu_models.py builds and exports them there),
        # rows in priority order, a ResNet-50 bf16-vs-TF32 table and the largest batch per precision
    python3 tools/bench/bench.py --device cuda --models wide_mlp_4095,wide_mlp_4096 --precision tf32,bf16,fp16
    python3 tools/bench/bench.py --device cuda --models mlp_block_4096 --precision bf16,fp8,fp16
    /usr/bin/python3 tools/bench/bench.py --device cuda --dry-run           # what would run (no GPU needed)
    /usr/bin/python3 tools/bench/bench.py --device cuda --emulate-on-cpu --models fashion_mlp --steps 4
    mpc-train --device cuda --precision f32|tf32|bf16|fp16|fp8 (padding auto, and --pad-multiple 1 for
    wide_mlp_4095) against PyTorch eager (FP32 / TF32 / AMP bf16 / AMP fp16 + GradScaler) and torch.compile
    (tools/bench/torch_gpu_worker.py, one process per row), with the cuBLASLt matmul rate
    (tools/bench/cublaslt_matmul_rate.cc) as the roof. Run it with the Python that has CUDA PyTorch.

Options (CPU):
    --models seed_mlp,fashion_mlp    which models (default: both)
    --precision f32,bf16             precision axis (default f32,bf16). A precision mpc's build does not
                                     accept (its `mpc compile` rejects the spec) prints a 'not yet
                                     supported by mpc' row; nothing is faked. bf16: mpc's autocast
                                     (`precision { compute: BF16 }`), torch.autocast("cpu", bfloat16)
    --steps S / --warmup W           timed steps (default 20) after W warm-up steps (default 3)
    --threads T                      threads for both (default: os.cpu_count(), which is what mpc's
                                     OpenMP uses by default)
    --torch-blas V1,V2,...           comparison variants (default all; --quick: onednn): onednn, system
                                     (Debian's PyTorch 1.13 on the oneDNN sgemm shim / as installed, see
                                     "PyTorch's BLAS" below), torch2, torch2-compile (PyTorch 2.x from
                                     --torch2-python, default .venv/bin/python: eager / torch.compile(model),
                                     default mode, the warm-up absorbing the compile, step 1 recorded), ort
                                     (ONNX Runtime training, tools/bench/ort_training_worker.py, run by
                                     --torch2-python with PYTHONPATH=--ort-pythonpath; f32 only). Each row's
                                     "mpc / fastest torch" is against the fastest PyTorch variant of it
    --variant-timeout SEC            limit for one torch2/torch2-compile/ort child (default 1800)
    --mpc-timing fifo|diff           how mpc's per-step times are taken, see "Method"
    --batch B                        override every model's batch size
    --machine NAME                   name in the results file (default 'dev')
    --out FILE                       results file (default tools/bench/results/..., --quick: build/bench/results/)
    --no-profile                     skip the `mpc-train --profile` run
    --wait-idle SEC                  before each measurement wait up to SEC s for the CPUs to go idle
    --retry-noisy N                  re-measure (keep the quietest) when others used >10% of the CPUs (default 1)
    --repeat N                       run every measurement N times, interleaved, and report the middle run
                                     (default 1; the committed results use 3)
    --system-blas-steps N            timed steps for torch on the system BLAS (default 5, 1 warm-up)

Models:
    seed_mlp     Linear(1024,4096) ReLU Linear(4096,4096) ReLU Linear(4096,10), batch 256,
                 AdamW(lr 1e-3, weight_decay 0) == Adam, random data (N(0,1) features, uniform labels).
                 The ONNX file (~80 MB) and data are generated deterministically into build/bench/seed_mlp/
                 (never committed) and regenerated when missing.
    fashion_cnn  models/fashion_cnn/fashion_cnn.onnx (two conv-BN-ReLU-maxpool blocks, FC 128 with
                 dropout, FC 10), batch 100, AdamW as fashion_mlp, the same 8 batches; the torch side
                 builds the module of models/fashion_cnn/make_fashion_cnn.py with the ONNX weights.
                 FLOPs count convolutions as their multiply-accumulates (CNN_MACS) like linear layers.
    char_gpt     models/char_gpt/char_gpt.onnx, batch 16, AdamW(lr 6e-4, wd 0.1); resnet18: models/resnet/
                 resnet18.onnx, batch 32, SGD(lr 0.05, momentum 0.9, wd 1e-4), random images. The torch modules are
                 rebuilt from their seed and checked byte for byte against the ONNX initializers (matched by content:
                 the export renames some). Their rows add a roofline floor (FLOPs at the matmul rate + optimizer
                 bytes at the memory bandwidth, both measured in the run).
    fashion_mlp  models/fashion_mlp/fashion_mlp.onnx (784-256-128-10), batch 100 (its spec's),
                 AdamW(lr 1e-3, weight_decay 1e-4) (its spec's, constant lr), the first 8 batches of
                 Fashion-MNIST's training set, scaled as in its spec. Its steps take ~2 ms, so it runs
                 10x --warmup and --steps.

Method:
    mpc    `mpc-train --metrics` writes one JSON line per step and flushes it. With --mpc-timing fifo
           (default) the metrics file is a named pipe; this script blocks on it and timestamps every
           train record as it arrives (time.perf_counter), so step i's time is the gap between records
           i-1 and i. Warm-up steps are dropped, the median of the rest is reported. With
           --mpc-timing diff, mpc-train runs twice (W and W+S steps) and the step time is
           (wall_s(W+S) - wall_s(W)) / S from the summary records (a mean, not a median).
    torch  a plain loop: batch copy, zero_grad(set_to_none=True), forward, CrossEntropyLoss,
           backward, AdamW.step(), loss.item(); each step timed with time.perf_counter, warm-up
           dropped, median reported. Run in a child process so its memory is its own.
    FLOPs  the matmul work one training step needs: forward 2*B*in*out per layer, weight gradient
           2*B*in*out per layer, input gradient 2*B*in*out for every layer but the first (neither
           framework computes the gradient of the input data). The conventional 6*B*sum(in*out)
           is shown in the per-model notes.
    rate   oneDNN matmul primitives, 2048x2048x2048, median of 10 (tools/bench/dnnl_matmul_rate.cc):
           f32 for the f32 rows, bf16 inputs with f32 output for the bf16 rows; measured before and
           after the models, the larger of the two is the reference.
    memory mpc: the compiler's plan (activation arena + everything outside it: parameters, optimizer
           state, inputs) and the process's peak RSS (VmHWM from /proc, sampled while it runs);
           torch: the worker's peak RSS growth over its RSS before the model was built (the ONNX
           loading temporaries are freed and the VmHWM mark reset through /proc/self/clear_refs
           before training, so they do not count) and that peak RSS. Plans and RSS measure different
           things (RSS includes code, the runtime, the parsed model file and the data set).

PyTorch's BLAS:
    Debian's python3-torch 1.13 is built with BLAS_INFO=generic: its f32 GEMMs call libblas.so.3,
    which without OpenBLAS installed is the netlib reference BLAS (single-threaded, a few GFLOP/s).
    `system` runs torch as installed; `onednn` LD_PRELOADs tools/bench/dnnl_sgemm_shim.c, which
    answers sgemm_ with oneDNN's dnnl_sgemm, so both frameworks use the same GEMM library. Each row
    says which variant it is and which BLAS the worker actually loaded.

Load: 2 cores are easily disturbed. The script records the load average and, from /proc/stat, how
much CPU other processes used while each measurement ran, and flags the results when that is
more than 10%.
"""

import argparse
import ctypes
import datetime
import gc
import gzip
import json
import os
import platform
import resource
import select
import shlex
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
BUILD = os.path.join(ROOT, "build")
BENCH = os.path.join(BUILD, "bench")
BUILD_DIR = BUILD   # where mpc and mpc-train are (--build-dir); scratch output stays in build/bench
MPC_TRAIN = os.path.join(BUILD, "mpc-train")
MPC = os.path.join(BUILD, "mpc")
PY = "/usr/bin/python3"
# CPU comparison variants (--torch-blas): Debian's PyTorch 1.13 on two BLAS (run by PY), PyTorch 2.x from the
# development venv (--torch2-python) eager and torch.compile'd, and ONNX Runtime training (ort_training_worker.py).
TORCH_VARIANTS = ("onednn", "system", "torch2", "torch2-compile")
CPU_VARIANTS = TORCH_VARIANTS + ("ort",)
CPU_VARIANT_LABEL = {"onednn": "torch 1.13, oneDNN sgemm (shim)", "system": "torch 1.13, system libblas",
                     "torch2": "torch 2.x eager", "torch2-compile": "torch 2.x torch.compile",
                     "ort": "ONNX Runtime training"}
TORCH2_PY = os.path.join(ROOT, ".venv", "bin", "python")
ORT_PYTHONPATH = ":".join(os.path.join(ROOT, d, "lib", "python3.11", "site-packages") for d in (".venv-ort", ".venv"))
ORT_WORKER = os.path.join(HERE, "ort_training_worker.py")

MODELS = {
    "seed_mlp": {
        "layers": [1024, 4096, 4096, 10],
        "batch": 256,
        "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0,
        "features_input": "x",
        "flatten": False,
        "step_multiplier": 1,
        "describe": "Linear 1024-4096-4096-10, batch 256, AdamW(lr 1e-3, wd 0) = Adam, random data",
    },
    "fashion_mlp": {
        "layers": [784, 256, 128, 10],
        "batch": 100,
        "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-4,
        "features_input": "image",
        "flatten": True,
        "step_multiplier": 10,  # ~2 ms steps: 10x --warmup/--steps for a steadier median
        "describe": "Flatten + Linear 784-256-128-10, batch 100, AdamW(lr 1e-3, wd 1e-4), Fashion-MNIST",
    },
    "fashion_cnn": {
        # No "layers": the torch side builds models/fashion_cnn's module and the FLOPs come
        # from its convolution and linear shapes (CNN_MACS below).
        "module": "fashion_cnn",
        "batch": 100,
        "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 1e-4,
        "features_input": "image",
        "step_multiplier": 1,
        "describe": "conv3x3(1-32)-BN-ReLU-maxpool, conv3x3(32-64)-BN-ReLU-maxpool, Linear 3136-128-10 with "
                    "dropout, batch 100, AdamW(lr 1e-3, wd 1e-4), Fashion-MNIST",
    },
    "char_gpt": {
        # The zoo's transformer as its spec trains it, schedule constant. Both sides start from
        # models/char_gpt/char_gpt.onnx: the torch module is rebuilt with the seed that made it
        # (torch.manual_seed(0)) and every parameter is checked byte for byte against an ONNX
        # initializer (the export renames some of them, so they are matched by content).
        "module": "char_gpt",
        "batch": 16,
        "lr": 6e-4, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1,
        "features_input": "tokens",
        "step_multiplier": 1,
        "arch": {"layers": 6, "width": 384, "heads": 6, "context": 256},
        "describe": "models/char_gpt (6 layers, width 384, 6 heads, context 256, 10.8M parameters), batch 16, "
                    "AdamW(lr 6e-4, wd 0.1), the first 8 batches of its fortunes windows",
    },
    "resnet18": {
        "module": "resnet18",
        "batch": 32,
        "optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4,
        "features_input": "image",
        "step_multiplier": 1,
        "image": 64,
        "describe": "models/resnet/resnet18.onnx (torchvision resnet18, 10 classes, 3x64x64 input), batch 32, "
                    "SGD(lr 0.05, momentum 0.9, wd 1e-4) as its zoo spec, random N(0,1) images and uniform labels",
    },
}
ZOO_ONNX = {"char_gpt": os.path.join(ROOT, "models", "char_gpt", "char_gpt.onnx"),
            "resnet18": os.path.join(ROOT, "models", "resnet", "resnet18.onnx")}
# Bytes the optimizer moves per parameter each step (f32 master weights): AdamW reads
# param, grad, m, v and writes param, m, v; SGD with momentum reads param, grad, buffer and
# writes param, buffer.
OPTIMIZER_BYTES_PER_PARAM = {"adamw": 28, "sgd": 20}
# Multiply-accumulates per example of the Fashion CNN's forward pass, first layer first:
# conv1 28*28*32*9*1, conv2 14*14*64*32*9, fc1 3136*128, fc2 128*10.
CNN_MACS = [28 * 28 * 32 * 9, 14 * 14 * 64 * 32 * 9, 3136 * 128, 128 * 10]
BATCHES_OF_DATA = 8          # data sets hold 8 batches; both frameworks cycle through them in order
# Spec text per precision (the autocast issue's PrecisionSpec). A build without it rejects the
# field, and the row then says "not yet supported by mpc".
MPC_SPEC_PRECISION = {"f32": "", "bf16": "precision { compute: BF16 }\n"}
FASHION_IDX = "/usr/share/datasets/fashion-mnist"
FASHION_SCALE, FASHION_SHIFT = 0.0123, -0.3530   # models/fashion_mlp/fashion_mlp.spec


def log(*args):
    print("[bench]", *args, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- machine state

def cpu_busy_jiffies():
    """(busy, total) jiffies over all CPUs from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])
    return total - idle, total


def own_cpu_seconds():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


class LoadProbe:
    """How busy the machine was, and how much of that was someone else, over a span."""

    def __init__(self):
        self.busy0, self.total0 = cpu_busy_jiffies()
        self.own0 = own_cpu_seconds()
        self.load0 = os.getloadavg()[0]

    def finish(self):
        busy1, total1 = cpu_busy_jiffies()
        hz = os.sysconf("SC_CLK_TCK")
        ncpu = os.cpu_count()
        wall_cpu_s = (total1 - self.total0) / hz  # CPU-seconds available across all CPUs
        busy_s = (busy1 - self.busy0) / hz
        own_s = own_cpu_seconds() - self.own0
        other = max(0.0, busy_s - own_s)
        return {
            "load_start": round(self.load0, 2),
            "load_end": round(os.getloadavg()[0], 2),
            "other_cpu_pct": round(100.0 * other / wall_cpu_s, 1) if wall_cpu_s > 0 else 0.0,
            "cpus": ncpu,
        }


def busy_fraction(seconds=2.0):
    b0, t0 = cpu_busy_jiffies()
    time.sleep(seconds)
    b1, t1 = cpu_busy_jiffies()
    return (b1 - b0) / max(1, t1 - t0)


def wait_for_idle(seconds, max_busy=0.15, window=5.0):
    """Waits up to `seconds` for a 5-second window in which the CPUs are less than 15% busy."""
    deadline = time.time() + seconds
    said = False
    while True:
        f = busy_fraction(window)
        if f < max_busy:
            return f
        if time.time() >= deadline:
            log(f"machine still {100 * f:.0f}% busy after waiting {seconds:.0f} s; measuring anyway")
            return f
        if not said:
            log(f"machine {100 * f:.0f}% busy (load average {os.getloadavg()[0]:.2f}); waiting for it to go idle")
            said = True


def proc_status_bytes(pid, field):
    """VmHWM / VmRSS of a live process, in bytes (0 once it is gone).

    Peak RSS is read from /proc rather than from getrusage: a child's ru_maxrss also counts the
    parent's memory at fork time (Linux records the replaced mm's high-water mark at exec), and
    this script holds torch, so every child would look at least that big."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_text(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def cpu_model():
    for line in run_text(["lscpu"]).splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


# --------------------------------------------------------------------------- native helpers

def build_native():
    """Builds the oneDNN matmul-rate probe and the sgemm shim into build/bench/ when stale."""
    os.makedirs(BENCH, exist_ok=True)
    targets = [
        (os.path.join(HERE, "dnnl_matmul_rate.cc"), os.path.join(BENCH, "dnnl_matmul_rate"),
         ["g++", "-O2", "-std=c++17", "-fopenmp"], ["-ldnnl"]),
        (os.path.join(HERE, "dnnl_sgemm_shim.c"), os.path.join(BENCH, "libdnnl_sgemm_shim.so"),
         ["gcc", "-O2", "-shared", "-fPIC"], ["-ldnnl", "-ldl"]),
    ]
    for src, out, pre, post in targets:
        if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
            continue
        cmd = pre + ["-o", out, src] + post
        log("building", os.path.relpath(out, ROOT))
        subprocess.run(cmd, check=True)
    return targets[0][1], targets[1][1]


def dnnl_matmul_rate(probe_bin, threads, n=2048, reps=10):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    probe = LoadProbe()
    out = subprocess.run([probe_bin, str(n), str(reps)], capture_output=True, text=True, env=env, check=True)
    res = json.loads(out.stdout)
    res["load"] = probe.finish()
    return res


# --------------------------------------------------------------------------- assets

BANDWIDTH_SNIPPET = """
import json, statistics, sys, time, torch
torch.set_num_threads(int(sys.argv[1]))
n = 1 << 25  # 128 MiB per f32 array: far beyond the caches
a, b, c = torch.rand(n), torch.rand(n), torch.empty(n)
torch.add(a, b, out=c)
ts = []
for _ in range(10):
    t0 = time.perf_counter(); torch.add(a, b, out=c); ts.append(time.perf_counter() - t0)
print(json.dumps({"gbps": 3 * 4 * n / statistics.median(ts) / 1e9}))
"""


def memory_bandwidth(threads):
    """Streaming bandwidth (GB/s): c = a + b over 128 MiB f32 arrays in torch with `threads`
    threads, counted as 2 reads + 1 write (STREAM's convention), median of 10."""
    probe = LoadProbe()
    out = subprocess.run([PY, "-c", BANDWIDTH_SNIPPET, str(threads)], capture_output=True, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS=str(threads)))
    res = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"gbps": None}
    res["load"] = probe.finish()
    return res


def ensure_seed_mlp(batch):
    """Seed MLP ONNX + random data in build/bench/seed_mlp/ (deterministic; regenerated when missing)."""
    d = os.path.join(BENCH, "seed_mlp")
    os.makedirs(d, exist_ok=True)
    onnx_path = os.path.join(d, "seed_mlp.onnx")
    n = batch * BATCHES_OF_DATA
    feats = os.path.join(d, f"features_{n}.npy")
    labels = os.path.join(d, f"labels_{n}.npy")
    if not os.path.exists(onnx_path):
        import torch
        from torch import nn
        log("exporting", os.path.relpath(onnx_path, ROOT))
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(1024, 4096), nn.ReLU(), nn.Linear(4096, 4096), nn.ReLU(),
                              nn.Linear(4096, 10))
        tmp = onnx_path + ".tmp"
        torch.onnx.export(model, (torch.zeros(2, 1024),), tmp, opset_version=17, input_names=["x"],
                          output_names=["logits"], dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
        os.replace(tmp, onnx_path)
    if not (os.path.exists(feats) and os.path.exists(labels)):
        import numpy as np
        rng = np.random.default_rng(0)
        np.save(feats, rng.standard_normal((n, 1024), dtype=np.float32))
        np.save(labels, rng.integers(0, 10, size=n, dtype=np.int64))
    return onnx_path, feats, labels


def read_idx(path):
    import numpy as np
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def ensure_fashion(batch, model="fashion_mlp"):
    """A committed Fashion-MNIST model (fashion_mlp or fashion_cnn) and its first 8 batches."""
    import numpy as np
    onnx_path = os.path.join(ROOT, "models", model, f"{model}.onnx")
    if not os.path.exists(onnx_path):
        subprocess.run([PY, os.path.join(ROOT, "models", model, f"make_{model}.py")], check=True)
    d = os.path.join(BENCH, "fashion_mlp")  # the data is the same for both models
    os.makedirs(d, exist_ok=True)
    n = batch * BATCHES_OF_DATA
    feats = os.path.join(d, f"features_{n}.npy")
    labels = os.path.join(d, f"labels_{n}.npy")
    if not (os.path.exists(feats) and os.path.exists(labels)):
        images = read_idx(os.path.join(FASHION_IDX, "train-images-idx3-ubyte.gz"))[:n]
        ys = read_idx(os.path.join(FASHION_IDX, "train-labels-idx1-ubyte.gz"))[:n]
        # Same transform mpc applies to IDX bytes: x * scale + shift in float32.
        x = images.astype(np.float32) * np.float32(FASHION_SCALE) + np.float32(FASHION_SHIFT)
        np.save(feats, x.reshape(n, 1, 28, 28))
        np.save(labels, ys.astype(np.int64))
    return onnx_path, feats, labels


def ensure_zoo(name, cfg, batch):
    """A zoo model's committed ONNX file and 8 batches of its data in build/bench/<name>/."""
    import numpy as np
    onnx_path = ZOO_ONNX[name]
    if not os.path.exists(onnx_path):
        sys.exit(f"bench: {os.path.relpath(onnx_path, ROOT)} is missing (models/*/make_*.py writes it)")
    d = os.path.join(BENCH, name)
    os.makedirs(d, exist_ok=True)
    n = batch * BATCHES_OF_DATA
    feats = os.path.join(d, f"features_{n}.npy")
    labels = os.path.join(d, f"labels_{n}.npy")
    if not (os.path.exists(feats) and os.path.exists(labels)):
        if name == "char_gpt":
            data = os.path.join(ROOT, "models", "char_gpt", "data")
            if not os.path.exists(os.path.join(data, "train_tokens.npy")):
                subprocess.run([PY, os.path.join(ROOT, "models", "char_gpt", "make_char_data.py"), "--context",
                                str(cfg["arch"]["context"]), "--out", data], check=True)
            np.save(feats, np.load(os.path.join(data, "train_tokens.npy"))[:n])
            np.save(labels, np.load(os.path.join(data, "train_targets.npy"))[:n])
        else:
            rng = np.random.default_rng(0)
            np.save(feats, rng.standard_normal((n, 3, cfg["image"], cfg["image"]), dtype=np.float32))
            np.save(labels, rng.integers(0, 10, size=n, dtype=np.int64))
    return onnx_path, feats, labels


def ensure_assets(name, cfg, batch):
    if name == "seed_mlp":
        return ensure_seed_mlp(batch)
    if name in ZOO_ONNX:
        return ensure_zoo(name, cfg, batch)
    return ensure_fashion(batch, name)


def optimizer_spec(cfg):
    if cfg.get("optimizer") == "sgd":
        return f"sgd {{ lr: {cfg['lr']} momentum: {cfg['momentum']} weight_decay: {cfg['weight_decay']} }}"
    return (f"adamw {{ lr: {cfg['lr']} beta1: {cfg['beta1']} beta2: {cfg['beta2']} eps: {cfg['eps']} "
            f"weight_decay: {cfg['weight_decay']} }}")


def write_spec(model_name, cfg, onnx_path, feats, labels, batch, steps, precision):
    d = os.path.join(BENCH, model_name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, f"bench_b{batch}_s{steps}_{precision}.spec")
    text = f"""# Generated by tools/bench/bench.py; do not edit.
model: "{onnx_path}"
features_input: "{cfg['features_input']}"
loss {{ type: SOFTMAX_CROSS_ENTROPY output: "logits" }}
train_data {{
  npy {{ features: "{feats}" labels: "{labels}" }}
  shuffle: false
}}
batch_size: {batch}
steps: {steps}
optimizer {{ {optimizer_spec(cfg)} }}
schedule {{ constant {{}} }}
seed: 1
{MPC_SPEC_PRECISION[precision]}"""
    with open(path, "w") as f:
        f.write(text)
    return path


def zoo_forward_macs(cfg):
    """(multiply-accumulates of one example's forward pass, of its first layer) for a zoo model."""
    if cfg["module"] == "char_gpt":
        a = cfg["arch"]
        t, w = a["context"], a["width"]
        vocab = 0
        with open(os.path.join(ROOT, "models", "char_gpt", "data", "vocab.txt")) as f:
            vocab = len(f.read().split())
        # per layer: qkv 3w², proj w², MLP 8w² per position; scores Q·Kᵀ and P·V, t·w each.
        per_layer = t * 12 * w * w + 2 * t * t * w
        return a["layers"] * per_layer + t * w * vocab, 0  # the first GEMM's input (embeddings) needs its gradient
    import torch
    import torchvision
    from torch import nn
    model = torchvision.models.resnet18(num_classes=10)
    macs = []

    def hook(mod, inp, out):
        if isinstance(mod, nn.Conv2d):
            macs.append(out.numel() * mod.in_channels // mod.groups * mod.kernel_size[0] * mod.kernel_size[1])
        else:
            macs.append(out.numel() * mod.in_features)
    for mod in model.modules():
        if isinstance(mod, (nn.Conv2d, nn.Linear)):
            mod.register_forward_hook(hook)
    with torch.no_grad():
        model.eval()(torch.zeros(1, 3, cfg["image"], cfg["image"]))
    return sum(macs), macs[0]


def matmul_flops(cfg, batch):
    """(needed, conventional) matmul/convolution FLOPs of one training step, see the module docstring."""
    if cfg.get("net"):
        import gpu_models   # pure Python for the counts; torch only when it builds a model
        total, first = gpu_models.forward_macs(cfg["net"])
        return 6 * batch * total - 2 * batch * first, 6 * batch * total
    if cfg.get("module") in ZOO_ONNX:
        if "_macs" not in cfg:
            cfg["_macs"] = zoo_forward_macs(cfg)
        total, first = cfg["_macs"]
        return 6 * batch * total - 2 * batch * first, 6 * batch * total
    if cfg.get("module") == "fashion_cnn":
        macs = CNN_MACS
    else:
        macs = [i * o for i, o in zip(cfg["layers"][:-1], cfg["layers"][1:])]
    s = sum(macs)
    return 6 * batch * s - 2 * batch * macs[0], 6 * batch * s


# --------------------------------------------------------------------------- mpc

def run_mpc_fifo(spec, threads, log_path, extra=(), env=None, on_start=None, timeout=None):
    """Runs mpc-train with its metrics going to a named pipe; returns per-record arrival times.
    `extra`: more mpc-train flags (--device cuda ...); `env`: the environment (default os.environ);
    `on_start(pid)` is called once mpc-train has started; after `timeout` seconds it is killed."""
    tmpdir = tempfile.mkdtemp(prefix="mpc-bench-")
    fifo = os.path.join(tmpdir, "metrics.fifo")
    os.mkfifo(fifo)
    # O_RDWR: never blocks and never reads EOF before mpc-train opens its end.
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    env = dict(os.environ if env is None else env, OMP_NUM_THREADS=str(threads))
    records, buf = [], b""
    with open(log_path, "w") as logf:
        proc = subprocess.Popen([MPC_TRAIN, "--spec", spec, "--metrics", fifo, *extra], stdout=logf,
                                stderr=subprocess.STDOUT, env=env)
        if on_start:
            on_start(proc.pid)
        status, hwm = None, 0
        started, killed = time.perf_counter(), False
        while True:
            ready, _, _ = select.select([fd], [], [], 0.25)
            now = time.perf_counter()
            if status is None:
                hwm = max(hwm, proc_status_bytes(proc.pid, "VmHWM"))
                if timeout and not killed and now - started > timeout:
                    proc.kill()
                    killed = True
            if ready:
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    chunk = b""
                buf += chunk
                lines = []
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    lines.append(json.loads(line))
                if lines:
                    records.append((now, lines))
                continue
            if status is None:
                pid, st, _ = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    status = st
                    continue  # drain once more
            else:
                break
    os.close(fd)
    shutil.rmtree(tmpdir, ignore_errors=True)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if killed:
        raise RuntimeError(f"mpc-train did not finish in {timeout:.0f} s and was killed")
    if proc.returncode != 0:
        with open(log_path) as f:
            raise RuntimeError(f"mpc-train failed ({proc.returncode}):\n{f.read()[-2000:]}")
    return records, hwm


def run_mpc_plain(spec, threads, metrics_path, log_path, extra=()):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    with open(log_path, "w") as logf:
        proc = subprocess.Popen([MPC_TRAIN, "--spec", spec, "--metrics", metrics_path, *extra], stdout=logf,
                                stderr=subprocess.STDOUT, env=env)
        hwm = 0
        while True:
            hwm = max(hwm, proc_status_bytes(proc.pid, "VmHWM"))
            pid, st, _ = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            time.sleep(0.05)
    rc = os.waitstatus_to_exitcode(st)
    if rc != 0:
        with open(log_path) as f:
            raise RuntimeError(f"mpc-train failed ({rc}):\n{f.read()[-2000:]}")
    with open(metrics_path) as f:
        recs = [json.loads(l) for l in f if l.strip()]
    return recs, hwm


def fifo_step_times(chunks, warmup, steps):
    """(timed step times, train records, summary record, merged count) from run_mpc_fifo's chunks.

    Each chunk is what one read returned: (arrival time, records). Step k's time is the gap
    between the arrivals of records k-1 and k. When the reader fell behind and k records came
    in one read, their gap is split evenly over them (counted in `merged`)."""
    times, train, prev, merged = [], [], None, 0
    for t, recs in chunks:
        tr = [r for r in recs if r.get("kind") == "train"]
        if not tr:
            continue
        if prev is not None:
            times += [(t - prev) / len(tr)] * len(tr)
            merged += len(tr) - 1
        else:
            times += [None] * len(tr)  # step 1 (and any that came with it): no start time
        train += tr
        prev = t
    summary = [r for _, recs in chunks for r in recs if r.get("kind") == "summary"][0]
    if len(train) != warmup + steps:
        raise RuntimeError(f"expected {warmup + steps} train records, got {len(train)}")
    # Records that came with the first one have no start time; they are left out.
    timed = [x for x in times[warmup:] if x is not None]
    if len(timed) < max(1, steps // 2):
        raise RuntimeError(f"only {len(timed)} of {steps} steps could be timed; use a larger --warmup")
    return timed, train, summary, merged


class Unsupported(Exception):
    pass


def mpc_compile_report(spec, out_json, extra=(), env=None, timeout=None):
    out = subprocess.run([MPC, "compile", "--spec", spec, "--report", out_json, *extra], capture_output=True,
                         text=True, env=env, timeout=timeout)
    if out.returncode != 0:
        raise Unsupported((out.stderr.strip().splitlines() or ["mpc compile failed"])[-1])
    with open(out_json) as f:
        return json.load(f)


def bench_mpc(name, cfg, assets, batch, warmup, steps, threads, timing, precision):
    onnx_path, feats, labels = assets
    d = os.path.join(BENCH, name)
    spec = write_spec(name, cfg, onnx_path, feats, labels, batch, warmup + steps, precision)
    report = mpc_compile_report(spec, os.path.join(d, f"compile_report_{precision}.json"))
    mem = report["memory"]
    probe = LoadProbe()
    res = {"spec": spec}
    if timing == "fifo":
        chunks, maxrss = run_mpc_fifo(spec, threads, os.path.join(d, f"mpc-train_{precision}.log"))
        timed, train, summary, merged = fifo_step_times(chunks, warmup, steps)
        res["merged_reads"] = merged
        res.update(step_times=timed, median_s=statistics.median(timed), mean_s=statistics.fmean(timed),
                   method="per step: the gaps between arrivals of the flushed metrics records, read from a named "
                          "pipe (records that arrive in one read share their gap evenly), median")
        res["losses"] = [r["loss"] for r in train]
    else:
        spec_w = write_spec(name, cfg, onnx_path, feats, labels, batch, warmup, precision)
        rw, _ = run_mpc_plain(spec_w, threads, os.path.join(d, "m_w.jsonl"), os.path.join(d, "mpc-train-w.log"))
        rs, maxrss = run_mpc_plain(spec, threads, os.path.join(d, "m_ws.jsonl"), os.path.join(d, "mpc-train.log"))
        sw = [r for r in rw if r["kind"] == "summary"][0]
        summary = [r for r in rs if r["kind"] == "summary"][0]
        t = (summary["wall_s"] - sw["wall_s"]) / steps
        res.update(step_times=[t], median_s=t, mean_s=t,
                   method="difference: (wall_s(W+S) - wall_s(W)) / S from two runs' summary records (a mean)")
        res["losses"] = [r["loss"] for r in rs if r["kind"] == "train"]
    res["load"] = probe.finish()
    res["summary"] = summary
    res["max_rss"] = maxrss
    res["arena_bytes"] = mem["planned_peak_bytes"]
    res["outside_arena_bytes"] = mem["unplanned_bytes"]
    res["persistent_bytes"] = mem.get("persistent_bytes")
    res["program"] = report.get("program", {})
    res["parameters"] = report.get("model", {}).get("parameters")
    return res


def mpc_profile(spec, threads, log_path, extra=(), env=None, timeout=None):
    env = dict(os.environ if env is None else env, OMP_NUM_THREADS=str(threads))
    out = subprocess.run([MPC_TRAIN, "--spec", spec, "--profile", *extra], capture_output=True, text=True, env=env,
                         check=True, timeout=timeout).stdout
    with open(log_path, "w") as f:
        f.write(out)
    rows, on = [], False
    done_line = ""
    for line in out.splitlines():
        if line.startswith("done:"):
            done_line = line.strip()
        if line.startswith("profile"):
            on = True
            continue
        if on and line.strip():
            parts = line.split()
            # "  <op> <calls> calls <ms> ms"
            try:
                rows.append((parts[0], int(parts[1]), float(parts[3])))
            except (IndexError, ValueError):
                pass
    return rows, done_line


# --------------------------------------------------------------------------- torch

def torch_worker(cfg_json):
    """Runs in a child process: trains with PyTorch and prints one JSON line."""
    cfg = json.loads(cfg_json)
    import numpy as np
    import onnx
    from onnx import numpy_helper
    import torch
    from torch import nn

    torch.set_num_threads(cfg["threads"])
    maps = open("/proc/self/maps").read()
    blas = sorted({os.path.basename(l.split()[-1]) for l in maps.splitlines()
                   if l.split()[-1].startswith("/") and any(k in l for k in ("blas", "dnnl", "mkl"))})
    X = torch.from_numpy(np.load(cfg["features"]))
    Y = torch.from_numpy(np.load(cfg["labels"]))
    rss_before = proc_status_bytes("self", "VmRSS")  # before anything model-related

    zoo = cfg.get("module") in ("char_gpt", "resnet18")
    if cfg.get("module") == "fashion_cnn":
        sys.path.insert(0, os.path.join(ROOT, "models", "fashion_cnn"))
        from make_fashion_cnn import build_model
        model = build_model()
    elif cfg.get("module") == "char_gpt":
        sys.path.insert(0, os.path.join(ROOT, "models", "char_gpt"))
        from char_gpt import CharGpt
        with open(os.path.join(ROOT, "models", "char_gpt", "data", "vocab.txt")) as f:
            vocab = len(f.read().split())
        a = cfg["arch"]
        torch.manual_seed(0)  # as models/char_gpt/make_char_gpt.py
        model = CharGpt(vocab, a["layers"], a["width"], a["heads"], a["context"])
    elif cfg.get("module") == "resnet18":
        import torchvision
        torch.manual_seed(0)  # as models/resnet/make_resnet.py
        model = torchvision.models.resnet18(num_classes=10, zero_init_residual=True)
    else:
        layers = cfg["layers"]
        mods = [nn.Flatten()] if cfg["flatten"] else []
        for i, (a, b) in enumerate(zip(layers[:-1], layers[1:])):
            mods.append(nn.Linear(a, b))
            if i < len(layers) - 2:
                mods.append(nn.ReLU())
        model = nn.Sequential(*mods)
    # The exact initial weights mpc starts from: the ONNX initializers (named after module paths;
    # batch norm's step counters are not exported, hence strict only for the MLPs).
    proto = onnx.load(cfg["onnx"])
    inits = {t.name: torch.from_numpy(numpy_helper.to_array(t).copy()) for t in proto.graph.initializer}
    if zoo:
        # Rebuilt from its seed; the export renamed some initializers (and stores a Linear's
        # weight transposed, as MatMul's right operand), so prove every trainable parameter
        # equal, byte for byte, to an initializer of its shape or of its transpose.
        by_content = {(tuple(v.shape), v.numpy().tobytes()) for v in inits.values()}

        def exported(p):
            p = p.detach()
            forms = [p] + ([p.t().contiguous()] if p.dim() == 2 else [])
            return any((tuple(f.shape), f.numpy().tobytes()) in by_content for f in forms)
        unmatched = [k for k, p in model.named_parameters() if not exported(p)]
        if unmatched:
            raise SystemExit(f"torch parameters not found among {cfg['onnx']}'s initializers: {unmatched[:5]}")
    else:
        missing, unexpected = model.load_state_dict(inits, strict=False)
        if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
            raise SystemExit(f"ONNX initializers do not match the torch module: missing {missing}, "
                             f"unexpected {unexpected}")
    # Drop the loading temporaries (protobuf, numpy copies) so they do not count as training memory,
    # then restart the peak-RSS mark from here (Linux >= 4.0: "5" > clear_refs resets VmHWM to VmRSS).
    del proto, inits
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    if cfg.get("optimizer") == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                              weight_decay=cfg["weight_decay"])
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]),
                                eps=cfg["eps"], weight_decay=cfg["weight_decay"])
    model.train()
    if cfg.get("compile"):
        model = torch.compile(model)   # default mode; the warm-up steps absorb the compilation
    loss_fn = nn.CrossEntropyLoss()
    b = cfg["batch"]
    nb = X.shape[0] // b
    bf16 = cfg["precision"] == "bf16"
    times, losses = [], []
    for step in range(cfg["warmup"] + cfg["steps"]):
        t0 = time.perf_counter()
        j = step % nb
        xb = X[j * b:(j + 1) * b].clone()
        yb = Y[j * b:(j + 1) * b].clone()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(xb)
            # Per-position labels (char_gpt: logits [B*T, V], labels [B, T]) are flattened.
            loss = loss_fn(out.float().reshape(-1, out.shape[-1]), yb.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - t0)
    max_rss = proc_status_bytes("self", "VmHWM")
    timed = times[cfg["warmup"]:]

    # torch's own f32 matmul rate, for the record (which BLAS it really runs on).
    n = cfg.get("matmul_n", 2048)
    a, c = torch.randn(n, n), torch.randn(n, n)
    t0 = time.perf_counter()
    a @ c
    first = time.perf_counter() - t0
    reps = 2 if first > 1.0 else 5
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ c
        ts.append(time.perf_counter() - t0)
    print(json.dumps({
        "step_times": timed, "median_s": statistics.median(timed), "mean_s": statistics.fmean(timed),
        "first_step_s": times[0], "compiled": bool(cfg.get("compile")), "python": platform.python_version(),
        "losses": losses, "max_rss": max_rss, "rss_before_model": rss_before,
        "rss_growth": max_rss - rss_before, "blas_libs": blas,
        "torch_matmul_gflops": 2.0 * n ** 3 / statistics.median(ts) / 1e9,
        "threads": torch.get_num_threads(), "foreach": opt.defaults.get("foreach"),
        "torch": torch.__version__, "numpy": np.__version__, "onnx": onnx.__version__,
    }), flush=True)


def last_json_line(text):
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def error_line(stderr):
    """The last informative line of a failed worker's stderr (the exception), for the row."""
    lines = [l.strip() for l in stderr.strip().splitlines() if l.strip()]
    for l in reversed(lines):
        if not l.startswith(("File ", "^", "~")) and "Warning" not in l:
            return l[:240]
    return (lines[-1] if lines else "no output")[:240]


def bench_torch(name, cfg, assets, batch, warmup, steps, threads, variant, shim, precision,
                torch2_python=TORCH2_PY, timeout=None):
    """One PyTorch measurement in a child process. torch 1.13 variants fail loudly; the torch 2.x ones
    (another interpreter, torch.compile) return {"error": ...} for the row instead."""
    onnx_path, feats, labels = assets
    wcfg = dict(cfg, onnx=onnx_path, features=feats, labels=labels, batch=batch, warmup=warmup, steps=steps,
                threads=threads, precision=precision, compile=variant == "torch2-compile")
    wcfg.pop("describe", None)
    wcfg.pop("_macs", None)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("LD_PRELOAD", None)
    env.pop("PYTHONPATH", None)
    if variant == "onednn":
        env["LD_PRELOAD"] = shim
    python = torch2_python if variant.startswith("torch2") else PY
    probe = LoadProbe()
    try:
        out = subprocess.run([python, os.path.abspath(__file__), "--_torch-worker", json.dumps(wcfg)],
                             capture_output=True, text=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        if not variant.startswith("torch2"):
            raise
        return {"error": first_line(e), "load": probe.finish(), "interpreter": python}
    load = probe.finish()
    if out.returncode != 0:
        if variant.startswith("torch2"):
            return {"error": error_line(out.stderr), "load": load, "interpreter": python}
        raise RuntimeError(f"torch worker failed:\n{out.stderr[-3000:]}")
    res = last_json_line(out.stdout)
    res["load"] = load
    res["interpreter"] = python
    if variant == "onednn" and not any("dnnl_sgemm_shim" in l for l in res["blas_libs"]):
        raise RuntimeError("the sgemm shim was not loaded into the torch worker")
    return res


def bench_ort(name, cfg, assets, batch, warmup, steps, threads, precision, python=TORCH2_PY,
              pythonpath=ORT_PYTHONPATH, timeout=None):
    """ONNX Runtime training on the ONNX file the mpc row trains (tools/bench/ort_training_worker.py, a child
    process). f32 only: ORT training has no CPU autocast. Returns {"error": ...} when ORT cannot train it."""
    onnx_path, feats, labels = assets
    wcfg = {k: v for k, v in cfg.items() if k not in ("describe", "_macs")}
    wcfg.update(onnx=onnx_path, features=feats, labels=labels, batch=batch, warmup=warmup, steps=steps,
                threads=threads, precision=precision)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), PYTHONPATH=pythonpath)
    env.pop("LD_PRELOAD", None)
    probe = LoadProbe()
    try:
        out = subprocess.run([python, ORT_WORKER, json.dumps(wcfg)], capture_output=True, text=True, env=env,
                             timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"error": first_line(e), "load": probe.finish()}
    load = probe.finish()
    res = last_json_line(out.stdout)
    if res is None:
        res = {"error": f"worker exited {out.returncode}: {error_line(out.stderr)}"}
    res["load"] = load
    res["interpreter"] = f"PYTHONPATH={pythonpath} {python}"
    return res


# --------------------------------------------------------------------------- report

def res_spec(row):
    return row["mpc_runs"][0]["spec"]


def middle_run(runs):
    """The run whose median step time is the middle one (the lower middle for an even count),
    with every run's median attached; memory, losses and load come from that run."""
    mid = dict(sorted(runs, key=lambda r: r["median_s"])[(len(runs) - 1) // 2])
    mid["repeat_medians"] = [r["median_s"] for r in runs]
    mid["noisy_runs"] = sum(1 for r in runs if r["load"]["other_cpu_pct"] > 10)
    return mid


def variant_result(runs):
    """middle_run over a variant's successful runs; its first error when none succeeded."""
    ok = [r for r in runs if "error" not in r]
    return middle_run(ok) if ok else dict(runs[0], repeat_medians=[], noisy_runs=0)


def fastest_torch(row):
    """(variant, result) of the fastest successful PyTorch variant of a row (ORT is not PyTorch), or None."""
    ok = [(v, t) for v, t in row.get("torch", {}).items() if v in TORCH_VARIANTS and "error" not in t]
    return min(ok, key=lambda vt: vt[1]["median_s"]) if ok else None


def mib(x):
    return f"{x / 1048576:.1f}"


def fmt_ms(s):
    return f"{1000 * s:.1f}" if s >= 0.01 else f"{1000 * s:.2f}"


# =========================================================================== --device cuda
# mpc-train --device cuda against PyTorch on the same GPU: eager (FP32 / TF32 / AMP) and torch.compile.
# The PyTorch side runs in tools/bench/torch_gpu_worker.py, one child process per measurement.

WORKER = os.path.join(HERE, "torch_gpu_worker.py")
GPU_BENCH = os.path.join(BENCH, "gpu")
_ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.0}
GPU_MODELS = {
    # warmup/steps: defaults per model (--warmup/--steps override them for every model).
    "seed_mlp": dict(MODELS["seed_mlp"], warmup=20, steps=200, data_batches=BATCHES_OF_DATA, generate=True),
    "fashion_mlp": dict(MODELS["fashion_mlp"], warmup=50, steps=500, data_batches=BATCHES_OF_DATA, generate=False),
    "wide_mlp_4095": dict(
        _ADAM, layers=[1024, 4095, 4095, 4095, 1024], batch=4096, features_input="x", flatten=False,
        warmup=10, steps=100, data_batches=4, generate=True, pad_variants=["auto", 1],
        describe="Linear 1024-4095-4095-4095-1024 (ReLU), batch 4096, 1024 classes, AdamW(lr 1e-3, wd 0) = Adam, "
                 "random data: GEMM-bound, hidden size one short of a multiple of 8. mpc runs it with "
                 "padding on (the backend's multiple: 4095 -> 4096) and off (--pad-multiple 1); PyTorch runs it "
                 "as it is"),
    "wide_mlp_4096": dict(
        _ADAM, layers=[1024, 4096, 4096, 4096, 1024], batch=4096, features_input="x", flatten=False,
        warmup=10, steps=100, data_batches=4, generate=True,
        describe="Linear 1024-4096-4096-4096-1024 (ReLU), batch 4096, 1024 classes, AdamW(lr 1e-3, wd 0) = Adam, "
                 "random data: wide_mlp_4095 with tensor-core-friendly sizes"),
    "mlp_block_4096": dict(
        _ADAM, layers=[4096, 16384, 4096], batch=8192, features_input="x", flatten=False,
        warmup=5, steps=40, data_batches=2, generate=True, fp8_include_first_last=True,
        describe="transformer-style MLP block: Linear 4096-16384, ReLU, Linear 16384-4096 on 8192 tokens per step "
                 "(e.g. batch 4 x sequence 2048), softmax cross-entropy over the 4096 outputs as the loss, "
                 "AdamW(lr 1e-3, wd 0), random data. ReLU, not GELU: exported at opset 17 (PyTorch 1.13), where "
                 "GELU exists only as an Erf decomposition (five elementwise passes over the 8192x16384 "
                 "activation). Under --precision fp8 both GEMMs are eligible (spec `fp8 { include_first_last: "
                 "true }`)"),
}
# The zoo-shaped models (issue 45): built, exported and fed on the machine that runs them by gpu_models.py (their
# ONNX files, 43 to 772 MiB, cannot be carried), from torch.manual_seed(0); `net` says what to build.
_SGD_ZOO = {"optimizer": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4}      # models/resnet/*.spec
_ADAMW_GPT = {"lr": 6e-4, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.1}  # models/char_gpt's spec
_CNN_VARIANTS = ["eager", "channels_last", "compile"]
GPU_MODELS.update({
    "resnet18": dict(
        _SGD_ZOO, net={"kind": "resnet", "arch": "resnet18", "image": 224, "classes": 10}, batch=256,
        features_input="image", warmup=5, steps=20, data_batches=2, generate=True, torch_variants=_CNN_VARIANTS,
        describe="torchvision ResNet-18 as models/resnet exports it (random init from torch.manual_seed(0), "
                 "zero_init_residual, 10 classes), at ImageNet's 3x224x224 instead of the zoo spec's 64x64; SGD(lr "
                 "0.05, momentum 0.9, wd 1e-4) as its zoo spec, constant lr; random N(0,1) images, uniform labels"),
    "resnet50": dict(
        _SGD_ZOO, net={"kind": "resnet", "arch": "resnet50", "image": 224, "classes": 10}, batch=128,
        features_input="image", warmup=5, steps=20, data_batches=2, generate=True, torch_variants=_CNN_VARIANTS,
        describe="torchvision ResNet-50 as models/resnet exports it (random init from torch.manual_seed(0), "
                 "zero_init_residual, 10 classes), at 3x224x224; SGD(lr 0.05, momentum 0.9, wd 1e-4) as its zoo "
                 "spec, constant lr; random N(0,1) images, uniform labels"),
    "char_gpt": dict(
        _ADAMW_GPT, net={"kind": "gpt", "vocab": 114, "layers": 6, "width": 384, "heads": 6, "context": 256},
        batch=16, features_input="tokens", warmup=10, steps=100, data_batches=8, generate=True,
        describe="models/char_gpt's decoder (6 layers, width 384, 6 heads, context 256, its 114-byte vocabulary; "
                 "10.8M parameters) from torch.manual_seed(0), batch 16 as its zoo spec, AdamW(lr 6e-4, wd 0.1), "
                 "constant lr; random token windows (the fortunes corpus is not on the GPU machine)"),
    "gpt2_124m": dict(
        _ADAMW_GPT, net={"kind": "gpt", "vocab": 50257, "layers": 12, "width": 768, "heads": 12, "context": 1024},
        batch=8, features_input="tokens", warmup=3, steps=10, data_batches=2, generate=True,
        describe="GPT-2-124M-shaped decoder: char_gpt's architecture at 12 layers, width 768, 12 heads, context "
                 "1024, vocabulary 50257 (untied head, so 163M parameters; ONNX 623 MiB, exported on the machine), "
                 "8 sequences = 8192 tokens a step, AdamW(lr 6e-4, wd 0.1), constant lr; random token windows"),
    "te_block_4096": dict(
        _ADAM, net={"kind": "block", "width": 4096, "ffn": 16384, "heads": 32, "context": 2048}, batch=4,
        features_input="x", warmup=3, steps=15, data_batches=2, generate=True, fp8_include_first_last=True,
        precisions=["bf16", "fp8"],
        describe="one decoder block of Transformer Engine's quickstart size (hidden 4096, FFN 16384, 32 heads, "
                 "sequence 2048, batch 4): char_gpt's Block (LayerNorm, causal self-attention, LayerNorm, GELU MLP), "
                 "its [8192, 4096] output read as logits (softmax cross-entropy against random labels, as "
                 "mlp_block_4096); 201M parameters, ONNX 772 MiB exported on the machine; AdamW(lr 1e-3, wd 0); "
                 "random N(0,1) hidden states. Under fp8 every GEMM is eligible (`fp8 { include_first_last: true }`)"),
})
GPU_PRECISIONS = ["f32", "tf32", "bf16", "fp16", "fp8"]
RATE_KEY = {"f32": "f32", "tf32": "tf32", "bf16": "bf16", "fp16": "f16", "fp8": "fp8"}
TORCH_SETUP = {"f32": "FP32 (TF32 off)", "tf32": "TF32 matmuls", "bf16": "AMP bf16", "fp16": "AMP fp16 + GradScaler"}
TORCH_VARIANT_NAME = {"eager": "torch eager", "channels_last": "torch eager channels_last",
                      "compile": "torch.compile"}
# Dense tensor-core ceilings for MFU: docs/gpu.md's H100 measurements (cuBLASLt 8192³ TN, the top of each
# range; the H200 has the same SMs and clocks), TFLOP/s.
MFU_PEAK_TFLOPS = {"f32": 51.6, "tf32": 423, "bf16": 911, "fp16": 928, "fp8": 1620}
# The suite the issue-45 device call runs (`--suite issue45`): rows in priority order, so that a run cut short by
# its time budget has measured the most wanted ones first: ResNet-50 bf16 against TF32 (the seed's claim), the
# GPT-2-shaped decoder and the FP8 block in bf16, then the slow torch.compile runs (a cold compile takes about a
# minute), the batch search, then the remaining precisions. `model:maxbatch` is the batch-size search; a third
# field names the runners of that entry (see --rows).
_CNN_FAST = "mpc+eager+channels_last"
SUITES = {
    "issue45": {
        "rows": ["resnet50:bf16:" + _CNN_FAST, "resnet50:tf32:" + _CNN_FAST, "gpt2_124m:bf16:mpc+eager",
                 "te_block_4096:bf16:mpc+eager", "te_block_4096:fp8", "resnet50:bf16:compile",
                 "gpt2_124m:bf16:compile", "resnet50:maxbatch", "resnet50:f32:" + _CNN_FAST,
                 "resnet18:bf16:" + _CNN_FAST, "char_gpt:bf16:mpc+eager", "gpt2_124m:tf32:mpc+eager",
                 "resnet50:fp16:" + _CNN_FAST, "resnet50:fp8", "gpt2_124m:fp8", "gpt2_124m:fp16:mpc+eager",
                 "resnet18:tf32:" + _CNN_FAST, "char_gpt:tf32:mpc+eager", "gpt2_124m:f32:mpc+eager",
                 "resnet18:f32:" + _CNN_FAST, "char_gpt:f32:mpc+eager", "resnet18:fp16:" + _CNN_FAST,
                 "char_gpt:fp16:mpc+eager", "resnet18:fp8", "char_gpt:fp8", "te_block_4096:bf16:compile",
                 "resnet18:bf16:compile", "char_gpt:bf16:compile"],
        "compile_precisions": [],
        "batch_search": ["bf16", "tf32", "f32"],
        "no_profile": True,
        "what": "issue45-zoo",
    },
}


def gpu_steps(cfg, args):
    if args.quick:
        return (args.warmup or 3), (args.steps or 10)
    return (args.warmup or cfg["warmup"]), (args.steps or cfg["steps"])


def gpu_pad_variants(cfg, args):
    if args.pad_variants:
        return [v if v == "auto" else int(v) for v in args.pad_variants.split(",")]
    return cfg.get("pad_variants", ["auto"])


def mpc_gpu_flags(device, precision, pad):
    """mpc-train / mpc compile flags of one mpc row (the spec itself is precision-neutral)."""
    flags = ["--device", device, "--precision", precision]
    if pad != "auto":
        flags += ["--pad-multiple", str(pad)]
    if precision == "fp16":
        flags += ["--loss-scaling", "dynamic"]   # what `auto` gives fp16; explicit in the recorded command
    return flags


def mpc_label(pad, pads):
    if len(pads) == 1 and pad == "auto":
        return "mpc"
    return "mpc, padding auto" if pad == "auto" else f"mpc, --pad-multiple {pad}" + (" (off)" if pad == 1 else "")


def gpu_model_dir(name):
    return os.path.join(GPU_BENCH, name)


def gpu_asset_cfg(name, cfg, batch):
    if cfg.get("net"):
        return {"dir": gpu_model_dir(name), "name": name, "net": cfg["net"], "batch": batch,
                "data_batches": cfg["data_batches"], "generate": True}
    a = {"dir": gpu_model_dir(name), "name": name, "layers": cfg["layers"], "batch": batch,
         "data_batches": cfg["data_batches"], "generate": cfg["generate"]}
    if not cfg["generate"]:
        a.update(onnx=os.path.join(ROOT, "models", name, f"{name}.onnx"), fashion_idx=FASHION_IDX,
                 scale=FASHION_SCALE, shift=FASHION_SHIFT)
    return a


def gpu_spec_path(name, batch, total_steps):
    return os.path.join(gpu_model_dir(name), f"bench_b{batch}_s{total_steps}.spec")


def gpu_spec_text(cfg, assets, batch, total_steps):
    fp8 = "fp8 { include_first_last: true }\n" if cfg.get("fp8_include_first_last") else ""
    return f"""# Generated by tools/bench/bench.py --device cuda; do not edit. Device, precision, padding and
# loss scaling are given on the command line (see the results file).
model: "{assets['onnx']}"
features_input: "{cfg['features_input']}"
loss {{ type: SOFTMAX_CROSS_ENTROPY output: "logits" }}
train_data {{
  npy {{ features: "{assets['features']}" labels: "{assets['labels']}" }}
  shuffle: false
}}
batch_size: {batch}
steps: {total_steps}
optimizer {{ {optimizer_spec(cfg)} }}
schedule {{ constant {{}} }}
seed: 1
{fp8}"""


def worker_cfg(name, cfg, assets, batch, warmup, steps, precision, variant, device):
    w = {"device": device, "variant": variant, "precision": precision, "onnx": assets["onnx"],
         "features": assets["features"], "labels": assets["labels"], "layers": cfg.get("layers"),
         "flatten": bool(cfg.get("flatten")), "batch": batch, "warmup": warmup, "steps": steps,
         "matmul_n": 4096 if device == "cuda" else 256}
    w.update({k: cfg[k] for k in ("optimizer", "lr", "beta1", "beta2", "eps", "momentum", "weight_decay") if k in cfg})
    if cfg.get("net"):
        w.update(net=cfg["net"], pin_memory=True)
    return w


def gpu_torch_variants(cfg, args, precision):
    """The PyTorch variants of one row: --torch-variants (default: the model's, else eager,compile), channels_last
    only for the CNNs, compile only at --compile-precisions."""
    if args.torch_variants:
        vs = args.torch_variants.split(",")
    else:
        vs = cfg.get("torch_variants", ["eager", "compile"])
    if not (cfg.get("net") or {}).get("kind") == "resnet":
        vs = [v for v in vs if v != "channels_last"]
    if args.compile_precisions is not None and precision not in args.compile_precisions:
        vs = [v for v in vs if v != "compile"]
    return vs


def torch_variant_label(cfg, variant, precision):
    name = TORCH_VARIANT_NAME[variant]
    if variant == "compile" and (cfg.get("net") or {}).get("kind") == "resnet":
        name += " (channels_last)"
    return f"{name}, {TORCH_SETUP.get(precision, precision)}"


def throughput_unit(cfg):
    net = cfg.get("net") or {}
    return ("tok/s", net["context"]) if net.get("kind") in ("gpt", "block") else (
        ("img/s", 1) if net.get("kind") == "resnet" else ("ex/s", 1))


class SmiSampler:
    """GPU memory while a child process runs, from two `nvidia-smi ... -lms INTERVAL` loops started
    before it and stopped after it: per-process used memory (--query-compute-apps) and the device's
    memory.used (--query-gpu; its peak minus the value just before the child started is the fallback
    where the process list is empty, as it is in many containers)."""

    def __init__(self, interval_ms):
        self.procs = []
        self.baseline = None
        if interval_ms <= 0 or not shutil.which("nvidia-smi"):
            return
        self.baseline = device_memory_used_mib()
        for kind, query in (("apps", "--query-compute-apps=pid,used_memory"), ("gpu", "--query-gpu=memory.used")):
            f = tempfile.TemporaryFile(mode="w+")
            p = subprocess.Popen(["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", str(interval_ms)],
                                 stdout=f, stderr=subprocess.DEVNULL)
            self.procs.append((kind, p, f))

    def stop(self, pid):
        if not self.procs:
            return None
        per_pid, device_peak = {}, None
        for kind, p, f in self.procs:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            f.seek(0)
            for line in f:
                parts = [x.strip() for x in line.split(",")]
                try:
                    if kind == "apps" and len(parts) == 2:
                        q, mib_used = int(parts[0]), float(parts[1])
                        per_pid[q] = max(per_pid.get(q, 0.0), mib_used)
                    elif kind == "gpu" and len(parts) == 1:
                        device_peak = max(device_peak or 0.0, float(parts[0]))
                except ValueError:
                    pass
            f.close()
        peak, matched = per_pid.get(pid), pid in per_pid
        if peak is None and len(per_pid) == 1:
            # Inside a container nvidia-smi lists host PIDs; the one process it saw is the child.
            peak = next(iter(per_pid.values()))
        out = {"pid_peak_mib": peak, "pid_matched": matched, "pids_seen": {str(k): v for k, v in per_pid.items()},
               "device_peak_mib": device_peak, "device_baseline_mib": self.baseline}
        if device_peak is not None and self.baseline is not None:
            out["device_delta_mib"] = device_peak - self.baseline
        return out


def device_memory_used_mib():
    try:
        return max(float(x) for x in run_text(["nvidia-smi", "--query-gpu=memory.used",
                                               "--format=csv,noheader,nounits"]).split())
    except ValueError:
        return None


def smi_peak_mib(smi):
    """The measured device peak of a process: nvidia-smi's per-process figure, else the device's used memory above
    its value before the run; None when neither was sampled."""
    if not smi:
        return None
    if smi.get("pid_peak_mib") is not None:
        return smi["pid_peak_mib"]
    return smi.get("device_delta_mib")


def smi_text(smi):
    """The nvidia-smi part of a memory cell."""
    if not smi:
        return "nvidia-smi: n/a"
    if smi.get("pid_peak_mib") is not None:
        return (f"nvidia-smi process peak {smi['pid_peak_mib']:.0f} MiB" +
                ("" if smi.get("pid_matched") else " (the only process listed; its PID is another namespace's)"))
    if smi.get("device_delta_mib") is not None:
        return (f"nvidia-smi device used +{smi['device_delta_mib']:.0f} MiB over idle (the process was not in "
                "nvidia-smi's process list)")
    return "nvidia-smi: no samples"


def gpu_info():
    """GPU name, driver, memory and the driver's CUDA version, from nvidia-smi."""
    info = {}
    q = run_text(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,pci.bus_id,power.limit,clocks.max.sm",
                  "--format=csv,noheader"])
    if q:
        first = [x.strip() for x in q.splitlines()[0].split(",")]
        keys = ["name", "driver", "memory_total", "pci_bus_id", "power_limit", "max_sm_clock"]
        info.update(zip(keys, first))
        info["count"] = len(q.splitlines())
    head = run_text(["nvidia-smi"])
    for tok in head.split("CUDA Version:")[1:2]:
        info["cuda_driver_version"] = tok.split()[0]
    return info


def machine_slug(info):
    """'h100' from 'NVIDIA H100 80GB HBM3', for the results file name."""
    for tok in info.get("name", "").replace("-", " ").split():
        if len(tok) >= 3 and tok[0].isalpha() and any(c.isdigit() for c in tok) and tok.upper() not in ("80GB", "HBM3"):
            return tok.lower()
    rest = [t.lower() for t in info.get("name", "").replace("-", " ").split() if t.lower() != "nvidia"]
    return "-".join(rest) or "gpu"


def cuda_home():
    for c in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if c and os.path.exists(os.path.join(c, "include", "cublasLt.h")):
            return c
    nvcc = shutil.which("nvcc")
    return os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else "/usr/local/cuda"


def rate_probe_plan(build_dir):
    """(binary, build command or None, where it comes from) for the cuBLASLt matmul-rate probe."""
    src = os.path.join(HERE, "cublaslt_matmul_rate.cc")
    cmake_bin = os.path.join(build_dir, "cublaslt_matmul_rate")
    if os.path.exists(cmake_bin) and os.path.getmtime(cmake_bin) >= os.path.getmtime(src):
        return cmake_bin, None, "the CMake target in the build directory"
    out = os.path.join(BENCH, "cublaslt_matmul_rate")
    cuda = cuda_home()
    lib = os.path.join(cuda, "lib64") if os.path.isdir(os.path.join(cuda, "lib64")) else os.path.join(cuda, "lib")
    cmd = ["g++", "-O2", "-std=c++17", f"-I{cuda}/include", "-o", out, src, f"-L{lib}", "-lcublasLt", "-lcudart",
           f"-Wl,-rpath,{lib}"]
    if os.path.exists(out) and os.path.getmtime(out) >= os.path.getmtime(src):
        return out, None, f"build/bench (built earlier with `{' '.join(cmd)}`)"
    return out, cmd, f"build/bench, built with `{' '.join(cmd)}`"


def cublaslt_rate(binary, n, reps, env):
    probe = LoadProbe()
    try:
        out = subprocess.run([binary, str(n), str(reps)], capture_output=True, text=True, env=env, timeout=900)
        lines = [l for l in out.stdout.splitlines() if l.startswith("{")]
        res = json.loads(lines[-1]) if lines else {"error": f"no output (exit {out.returncode}): {out.stderr[-500:]}"}
    except (OSError, subprocess.TimeoutExpired) as e:
        res = {"error": f"{type(e).__name__}: {e}"}
    res["load"] = probe.finish()
    return res


def missing_libs(binary, env):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, env=env, check=False).stdout
    return [l.split()[0] for l in out.splitlines() if "not found" in l]


def wheel_lib_dirs(python):
    """The lib/ folders of the nvidia-* wheels (cuDNN, cuBLAS, ...) next to this Python's torch."""
    code = ("import json, os\nd = []\ntry:\n    import nvidia\n    for p in nvidia.__path__:\n"
            "        for s in sorted(os.listdir(p)):\n            l = os.path.join(p, s, 'lib')\n"
            "            if os.path.isdir(l): d.append(l)\nexcept Exception: pass\nprint(json.dumps(d))")
    try:
        return json.loads(run_text([python, "-c", code]) or "[]")
    except ValueError:
        return []


def mpc_gpu_env(python):
    """os.environ, plus the nvidia wheels' lib folders appended to LD_LIBRARY_PATH when mpc-train
    cannot otherwise find a library it needs (docs/gpu.md). Returns (env, note)."""
    env = dict(os.environ)
    missing = missing_libs(MPC_TRAIN, env)
    if not missing:
        return env, ""
    dirs = wheel_lib_dirs(python)
    if dirs:
        env["LD_LIBRARY_PATH"] = ":".join([p for p in [env.get("LD_LIBRARY_PATH", "")] if p] + dirs)
    still = missing_libs(MPC_TRAIN, env)
    note = (f"mpc-train could not find {', '.join(missing)}; appended {len(dirs)} nvidia wheel lib folders to "
            f"LD_LIBRARY_PATH for mpc" + (f"; still missing: {', '.join(still)}" if still else ""))
    return env, note


def compile_report_notes(report):
    """Padding and FP8 facts from `mpc compile --report`, for the row's note."""
    notes = []
    pads = report.get("padding") or []
    if pads:
        extra = report.get("padding_extra", {})
        dims = sorted({f"{p['from']}→{p['to']}" for p in pads})
        notes.append(f"padded {len(pads)} dims ({', '.join(dims)}; +{extra.get('flops_pct', 0):.2f}% GEMM FLOPs)")
    fp8 = report.get("fp8") or []
    if report.get("fp8_fallback"):
        notes.append(f"fp8 fallback: {report['fp8_fallback']}")
    elif fp8 or report.get("fp8_skipped"):
        fwd = [g["node"] for g in fp8 if g["node"] == g["forward"]]
        notes.append(f"FP8 GEMMs: {len(fwd)} forward + {len(fp8) - len(fwd)} backward, "
                     f"{len(report.get('fp8_skipped') or [])} forward GEMMs left in {report.get('compute_dtype')}")
    return notes


def bench_mpc_gpu(name, cfg, assets, batch, warmup, steps, precision, pad, ctx, tag=None):
    """One mpc row: compile report (plan), a timed mpc-train run, GPU memory sampled meanwhile."""
    d = gpu_model_dir(name)
    tag = tag or f"{precision}_pad{pad}"
    spec = gpu_spec_path(name, batch, warmup + steps)
    flags = mpc_gpu_flags(ctx["mpc_device"], precision, pad)
    if os.access(MPC, os.X_OK):
        report = mpc_compile_report(spec, os.path.join(d, f"compile_report_{tag}.json"), flags, ctx["mpc_env"],
                                    ctx["worker_timeout"])
    else:
        report = {}   # no `mpc` binary: the activation plan comes from mpc-train's summary record below
    mem = report.get("memory", {})
    log_path = os.path.join(d, f"mpc-train_{tag}.log")
    probe = LoadProbe()
    sampler = SmiSampler(ctx["smi_interval"])
    started = {}
    try:
        if ctx["timing"] == "fifo":
            chunks, maxrss = run_mpc_fifo(spec, ctx["threads"], log_path, flags, ctx["mpc_env"],
                                          on_start=lambda pid: started.update(pid=pid),
                                          timeout=ctx["worker_timeout"])
            timed, train, summary, merged = fifo_step_times(chunks, warmup, steps)
            method = "fifo"
        else:
            recs, maxrss = run_mpc_plain_env(spec, ctx["threads"], os.path.join(d, f"m_{tag}.jsonl"), log_path, flags,
                                             ctx["mpc_env"], ctx["worker_timeout"])
            recs_w, _ = run_mpc_plain_env(gpu_spec_for_steps(name, cfg, assets, batch, warmup), ctx["threads"],
                                          os.path.join(d, f"m_w_{tag}.jsonl"), log_path + ".warmup", flags,
                                          ctx["mpc_env"], ctx["worker_timeout"])
            summary = [r for r in recs if r["kind"] == "summary"][0]
            sw = [r for r in recs_w if r["kind"] == "summary"][0]
            timed = [(summary["wall_s"] - sw["wall_s"]) / steps]
            train = [r for r in recs if r["kind"] == "train"]
            merged, method = 0, "diff"
    finally:
        smi = sampler.stop(started.get("pid"))
    log_text = open(log_path).read() if os.path.exists(log_path) else ""
    notes = compile_report_notes(report)
    for line in log_text.splitlines():
        if "capture failed" in line:
            notes.append("CUDA graph capture failed, kernels ran one by one: " + line.split(":", 2)[-1].strip()[:160])
    if summary.get("skipped_steps"):
        notes.append(f"{summary['skipped_steps']} steps skipped (loss scaling)")
    return {"kind": "mpc", "pad": pad, "flags": flags, "spec": spec, "step_times": timed,
            "median_s": statistics.median(timed), "mean_s": statistics.fmean(timed), "method": method,
            "merged_reads": merged, "losses": [r["loss"] for r in train], "summary": summary, "max_rss": maxrss,
            "arena_bytes": mem.get("planned_peak_bytes", summary.get("planned_peak_bytes", 0)),
            "outside_arena_bytes": mem.get("unplanned_bytes"),
            "persistent_bytes": mem.get("persistent_bytes"), "report": {k: report.get(k) for k in (
                "padding", "padding_extra", "fp8", "fp8_skipped", "fp8_fallback", "compute_dtype", "program")},
            "smi": smi, "load": probe.finish(), "notes": notes, "log": log_path}


def run_mpc_plain_env(spec, threads, metrics_path, log_path, extra, env, timeout=None):
    """run_mpc_plain with extra flags and an environment (--mpc-timing diff on the GPU)."""
    env = dict(env, OMP_NUM_THREADS=str(threads))
    with open(log_path, "w") as logf:
        proc = subprocess.run([MPC_TRAIN, "--spec", spec, "--metrics", metrics_path, *extra], stdout=logf,
                              stderr=subprocess.STDOUT, env=env, timeout=timeout)
    if proc.returncode != 0:
        with open(log_path) as f:
            raise RuntimeError(f"mpc-train failed ({proc.returncode}):\n{f.read()[-2000:]}")
    with open(metrics_path) as f:
        return [json.loads(l) for l in f if l.strip()], 0


def gpu_spec_for_steps(name, cfg, assets, batch, total):
    path = gpu_spec_path(name, batch, total)
    with open(path, "w") as f:
        f.write(gpu_spec_text(cfg, assets, batch, total))
    return path


def bench_torch_gpu(name, cfg, assets, batch, warmup, steps, precision, variant, ctx):
    """One PyTorch row: torch_gpu_worker.py in a child process; failures become the row's note."""
    wcfg = worker_cfg(name, cfg, assets, batch, warmup, steps, precision, variant, ctx["torch_device"])
    log_path = os.path.join(gpu_model_dir(name), f"torch_{variant}_{precision}.log")
    probe = LoadProbe()
    sampler = SmiSampler(ctx["smi_interval"])
    proc = subprocess.Popen([ctx["python"], WORKER, json.dumps(wcfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=ctx["worker_timeout"])
        timed_out = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        timed_out = True
    smi = sampler.stop(proc.pid)
    load = probe.finish()
    with open(log_path, "w") as f:
        f.write(err)
    lines = [l for l in out.splitlines() if l.startswith("{")]
    if timed_out:
        res = {"error": f"timed out after {ctx['worker_timeout']} s (--worker-timeout)"}
    elif not lines:
        res = {"error": f"worker exited {proc.returncode} without a result: "
                        f"{(err.strip().splitlines() or [''])[-1][:300]}"}
    else:
        res = json.loads(lines[-1])
    res.update(kind="torch", variant=variant, smi=smi, load=load, log=log_path)
    return res


def gpu_profile(name, precision, spec, flags, ctx):
    log_path = os.path.join(gpu_model_dir(name), f"mpc-train-profile_{precision}.log")
    return mpc_profile(spec, ctx["threads"], log_path, flags, ctx["mpc_env"], ctx["worker_timeout"])


def first_line(e):
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]


# --shrink: the zoo models' code paths at toy sizes (a rehearsal on the CPU; numbers meaningless).
SHRUNK_NETS = {
    "resnet": {"image": 32, "batch": 4},
    "gpt": {"layers": 2, "width": 64, "heads": 2, "context": 32, "batch": 2},
    "block": {"width": 256, "ffn": 1024, "heads": 4, "context": 64, "batch": 2},
}


def shrink_models():
    global GPU_BENCH
    GPU_BENCH = os.path.join(BENCH, "gpu-shrunk")   # the toy files never stand in for the real ones
    for name, cfg in GPU_MODELS.items():
        if cfg.get("net"):
            small = dict(SHRUNK_NETS[cfg["net"]["kind"]])
            cfg["batch"] = small.pop("batch")
            cfg["net"] = dict(cfg["net"], **small)
            cfg["describe"] = f"SHRUNK to {small} (--shrink): " + cfg["describe"]


def gpu_row_plan(args):
    """[(model, precision | 'maxbatch', runners | None)] in run order: --rows (or the suite's), else every --models x
    --precision pair (a model's own `precisions` list filters the cross product). A --rows entry is
    MODEL:PRECISION, MODEL:PRECISION:RUNNERS (RUNNERS a '+' list of mpc, eager, channels_last, compile: only those
    run, and they join the row of that model and precision if it ran before: so the slow torch.compile runs can
    come last in a budgeted run) or MODEL:maxbatch."""
    if args.rows:
        plan = []
        for entry in args.rows.split(","):
            name, _, rest = entry.strip().partition(":")
            what, _, runners = rest.partition(":")
            if name not in GPU_MODELS:
                sys.exit(f"bench: unknown model {name!r} in --rows (have {', '.join(GPU_MODELS)})")
            if what not in GPU_PRECISIONS + ["maxbatch"]:
                sys.exit(f"bench: --rows entry {entry!r}: say MODEL:PRECISION[:RUNNERS] ({', '.join(GPU_PRECISIONS)}) "
                         "or MODEL:maxbatch")
            if what == "maxbatch" and (GPU_MODELS[name].get("net") or {}).get("kind") != "resnet":
                sys.exit(f"bench: --rows entry {entry!r}: the batch search needs a batch axis the export keeps "
                         "dynamic (the ResNets)")
            runners = runners.split("+") if runners else None
            for r in runners or []:
                if r != "mpc" and r not in TORCH_VARIANT_NAME:
                    sys.exit(f"bench: --rows entry {entry!r}: runner {r!r} is none of mpc, "
                             f"{', '.join(TORCH_VARIANT_NAME)}")
            plan.append((name, what, runners))
        return plan
    models = (args.models or "seed_mlp,fashion_mlp").split(",")
    for m in models:
        if m not in GPU_MODELS:
            sys.exit(f"bench: unknown model {m!r} for --device cuda (have {', '.join(GPU_MODELS)})")
    precisions = (args.precision or ",".join(GPU_PRECISIONS)).split(",")
    for p in precisions:
        if p not in GPU_PRECISIONS:
            sys.exit(f"bench: unknown precision {p!r} for --device cuda (have {', '.join(GPU_PRECISIONS)})")
    plan = []
    for m in models:
        own = GPU_MODELS[m].get("precisions")
        plan += [(m, p, None) for p in precisions if not own or p in own or args.precision]
    if args.batch_search:
        plan += [(m, "maxbatch", None) for m in models if (GPU_MODELS[m].get("net") or {}).get("kind") == "resnet"]
    return plan


def apply_suite(args):
    """--suite NAME: its rows, compile precisions, batch search and output name, where not given explicitly."""
    if not args.suite:
        return
    if args.suite not in SUITES:
        sys.exit(f"bench: unknown --suite {args.suite!r} (have {', '.join(SUITES)})")
    suite = SUITES[args.suite]
    args.rows = args.rows or ",".join(suite["rows"])
    if args.compile_precisions is None:
        args.compile_precisions = ",".join(suite["compile_precisions"])
    args.batch_search = args.batch_search or ",".join(suite["batch_search"])
    args.no_profile = args.no_profile or suite.get("no_profile", False)
    args.what = args.what or suite.get("what")


class Deadline:
    """--time-budget (or $MPC_BENCH_TIME_BUDGET): seconds from the start; runs that would start with less than
    they need are skipped (and listed), and every child process is given at most what is left."""

    def __init__(self, budget):
        self.t0 = time.time()
        self.budget = budget or 0

    def left(self):
        return float("inf") if not self.budget else self.budget - (time.time() - self.t0)

    def allows(self, need_s):
        self.need = need_s
        return self.left() >= need_s

    def why(self):
        """Why the last run allows() refused was skipped ("past the time budget" is what verify.sh counts)."""
        spent = time.time() - self.t0
        return (f"skipped: past the time budget ({self.budget:.0f} s; {spent:.0f} s spent, "
                f"{max(0.0, self.budget - spent):.0f} s left, a run needs ≥ {getattr(self, 'need', 0):.0f} s)")

    def timeout(self, ctx):
        """ctx with worker_timeout capped by what is left (at least 5 s)."""
        return dict(ctx, worker_timeout=max(5.0, min(ctx["worker_timeout"], self.left())))


# Rough lower bounds of a run's wall time on the GPU machine (process start, model import and compile, CUDA
# context), below which a run is not started: its result would be cut off by the budget anyway.
MIN_RUN_S = {"mpc": 12, "eager": 12, "channels_last": 12, "compile": 45, "assets": 20}


def gpu_assets(name, cfg, batch, ctx, deadline, cache):
    """make-assets once per (model, batch); returns the assets dict or raises RuntimeError."""
    key = (name, batch)
    if key in cache:
        return cache[key]
    acfg = gpu_asset_cfg(name, cfg, batch)
    t0 = time.time()
    try:
        a = subprocess.run([ctx["python"], WORKER, "--make-assets", json.dumps(acfg)], capture_output=True, text=True,
                           timeout=max(5.0, min(ctx["worker_timeout"], deadline.left())))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"making {name}'s model and data did not finish before the time budget / --worker-timeout")
    if a.returncode != 0 or not a.stdout.strip():
        raise RuntimeError(f"making {name}'s model and data failed: {(a.stderr.strip().splitlines() or ['?'])[-1]}")
    assets = json.loads(a.stdout.strip().splitlines()[-1])
    assets["make_s"] = round(time.time() - t0, 1)
    with open(os.path.join(gpu_model_dir(name), f"assets_b{batch}.log"), "w") as f:
        f.write(a.stderr)
    cache[key] = assets
    log(f"{name}: assets ready in {assets['make_s']} s" + (f" ({assets.get('exporter')}, ONNX {assets.get('onnx_mib')} "
                                                            "MiB)" if assets.get("export_s") is not None else ""))
    return assets


def run_gpu_row(name, cfg, precision, batch, warmup, steps, pads, args, ctx, deadline, assets, runners=None):
    """The mpc run(s) and PyTorch variants of one model x precision row (only `runners` when given); returns the
    row's runs."""
    runs = []
    for pad in (pads if runners is None or "mpc" in runners else []):
        label = mpc_label(pad, pads)
        if not deadline.allows(MIN_RUN_S["mpc"]):
            runs.append({"kind": "mpc", "pad": pad, "label": label, "skipped": deadline.why(),
                         "flags": mpc_gpu_flags(ctx["mpc_device"], precision, pad)})
            log(f"{name} {precision}: {label}: {deadline.why()}")
            continue
        log(f"{name} {precision}: {label} ({warmup}+{steps} steps)")
        try:
            res = bench_mpc_gpu(name, cfg, assets, batch, warmup, steps, precision, pad, deadline.timeout(ctx))
            log(f"  {fmt_ms(res['median_s'])} ms/step")
        except Unsupported as e:
            # No device / no CUDA backend is a broken setup, not a missing feature.
            broken = any(k in str(e) for k in ("no CUDA device", "has no CUDA backend"))
            res = {"kind": "mpc", "pad": pad, ("error" if broken else "unsupported"): str(e),
                   "flags": mpc_gpu_flags(ctx["mpc_device"], precision, pad)}
            log(f"  {'failed' if broken else 'not supported by mpc'}: {e}")
        except (RuntimeError, OSError, IndexError, KeyError, ValueError, subprocess.TimeoutExpired) as e:
            res = {"kind": "mpc", "pad": pad, "error": first_line(e),
                   "flags": mpc_gpu_flags(ctx["mpc_device"], precision, pad)}
            log(f"  failed: {first_line(e)}")
        res["label"] = label
        runs.append(res)
    variants = gpu_torch_variants(cfg, args, precision) if runners is None else [
        v for v in runners if v != "mpc" and (v != "channels_last" or (cfg.get("net") or {}).get("kind") == "resnet")]
    for v in variants:
        label = torch_variant_label(cfg, v, precision)
        if precision == "fp8":
            if v == variants[0]:
                runs.append({"kind": "torch", "variant": v, "label": "torch", "na": True})
            continue
        if not deadline.allows(MIN_RUN_S[v]):
            runs.append({"kind": "torch", "variant": v, "label": label, "skipped": deadline.why()})
            log(f"{name} {precision}: {label}: {deadline.why()}")
            continue
        w = max(warmup, 3) if v == "compile" else warmup
        log(f"{name} {precision}: {label} ({w}+{steps} steps)")
        res = bench_torch_gpu(name, cfg, assets, batch, w, steps, precision, v, deadline.timeout(ctx))
        res["label"] = label
        log(f"  {fmt_ms(res['median_s']) + ' ms/step' if 'median_s' in res else res.get('error')}")
        runs.append(res)
    return runs


def main_gpu(args):
    """--device cuda: see the module docstring and tools/bench/README.md."""
    emulate = args.emulate_on_cpu
    apply_suite(args)
    if args.shrink:
        shrink_models()
    if args.torch_variants:
        for v in args.torch_variants.split(","):
            if v not in TORCH_VARIANT_NAME:
                sys.exit(f"bench: unknown --torch-variants entry {v!r} (have {', '.join(TORCH_VARIANT_NAME)})")
    if args.compile_precisions is not None:
        args.compile_precisions = [p for p in args.compile_precisions.split(",") if p]
    if args.batch_search:
        args.batch_search = args.batch_search.split(",")
        for p in args.batch_search:
            if p not in GPU_PRECISIONS[:4]:
                sys.exit(f"bench: --batch-search takes f32, tf32, bf16, fp16, not {p!r}")
    if args.pad_variants:
        for v in args.pad_variants.split(","):
            if v != "auto" and not (v.isdigit() and int(v) >= 1):
                sys.exit(f"bench: --pad-variants takes 'auto' or positive integers, not {v!r}")
    ctx = {"python": sys.executable, "threads": args.threads, "timing": args.mpc_timing,
           "mpc_device": "cpu" if emulate else "cuda", "torch_device": "cpu" if emulate else "cuda",
           "smi_interval": 0 if emulate else args.smi_interval_ms, "worker_timeout": args.worker_timeout}
    command = (f"{sys.executable} tools/bench/bench.py" + "".join(" " + shlex.quote(a) for a in sys.argv[1:]))
    start_time = datetime.datetime.now().astimezone()
    deadline = Deadline(args.time_budget)

    row_plan = gpu_row_plan(args)
    models = list(dict.fromkeys(m for m, _, _ in row_plan))
    if args.dry_run:
        return gpu_dry_run(args, ctx, row_plan, command)

    if not os.access(MPC_TRAIN, os.X_OK):
        sys.exit(f"bench: {MPC_TRAIN} is missing; build first, or point --build-dir at the build with the CUDA backend")
    if not os.access(MPC, os.X_OK):
        log(f"{MPC} is missing: running without `mpc compile --report` (no padding/FP8 notes; the memory plan is "
            "the activation arena from mpc-train's summary only)")
    ctx["mpc_env"], env_note = (dict(os.environ), "") if emulate else mpc_gpu_env(ctx["python"])
    if env_note:
        log(env_note)
    info = {} if emulate else gpu_info()
    machine = args.machine or ("cpu-emulation" if emulate else machine_slug(info))
    os.makedirs(BENCH, exist_ok=True)

    rate_bin, rate_build, rate_from = (None, None, "") if emulate else rate_probe_plan(BUILD_DIR)
    rate_before = rate_after = {"error": "not measured (--emulate-on-cpu)"} if emulate else None
    if not emulate:
        if rate_build:
            log("building", os.path.relpath(rate_bin, ROOT))
            b = subprocess.run(rate_build, capture_output=True, text=True)
            if b.returncode != 0:
                rate_before = {"error": f"building the probe failed: {b.stderr[-400:]}"}
        if rate_before is None:
            log(f"measuring the cuBLASLt matmul rate ({args.rate_n}³)")
            rate_before = cublaslt_rate(rate_bin, args.rate_n, args.rate_reps, ctx["mpc_env"])
            log("  " + (", ".join(f"{k} {rate_before[k].get('median_gflops', rate_before[k].get('error'))}"
                                  for k in RATE_KEY.values() if isinstance(rate_before.get(k), dict))
                        or str(rate_before.get("error"))))

    results, searches = [], []
    state = {"command": command, "start_time": start_time, "machine": machine, "info": info, "env_note": env_note,
             "rate_from": rate_from, "emulate": emulate, "args": args, "ctx": ctx, "models": models,
             "searches": searches, "deadline": deadline}
    out_path = gpu_results_path(args, state)
    asset_cache = {}
    for name, what, runners in row_plan:
        cfg = GPU_MODELS[name]
        batch = args.batch or cfg["batch"]
        warmup, steps = gpu_steps(cfg, args)
        if what == "maxbatch":
            searches.append(gpu_batch_search(name, cfg, batch, args, ctx, deadline, asset_cache, info))
            write_gpu_report(out_path, state, results, rate_before, None, final=False)
            continue
        precision = what
        row = next((r for r in results if r["model"] == name and r["precision"] == precision), None)
        if row is None:
            row = {"model": name, "precision": precision, "batch": batch, "cfg": cfg, "warmup": warmup,
                   "steps": steps, "assets": {}, "runs": []}
            results.append(row)
        elif row.get("skipped"):
            continue   # its first entry found no time or no model; the later runners would not either
        need = MIN_RUN_S["assets"] if (name, batch) not in asset_cache else min(
            MIN_RUN_S[r] for r in (runners or ["mpc"]))
        if not deadline.allows(need):
            if row["runs"]:
                row["runs"] += [{"kind": "torch", "variant": v, "label": torch_variant_label(cfg, v, precision),
                                 "skipped": deadline.why()} for v in (runners or []) if v in TORCH_VARIANT_NAME]
            else:
                row["skipped"] = deadline.why()
            log(f"{name} {precision}{':' + '+'.join(runners) if runners else ''}: {deadline.why()}")
            continue
        try:
            assets = gpu_assets(name, cfg, batch, ctx, deadline, asset_cache)
        except RuntimeError as e:
            row["skipped"] = f"not run: {first_line(e)}"
            log(f"{name} {precision}: {row['skipped']}")
            continue
        row["assets"] = assets
        gpu_spec_for_steps(name, cfg, assets, batch, warmup + steps)
        row["runs"] += run_gpu_row(name, cfg, precision, batch, warmup, steps, gpu_pad_variants(cfg, args), args, ctx,
                                   deadline, assets, runners)
        if row.get("profile") or row.get("profile_error"):
            write_gpu_report(out_path, state, results, rate_before, None, final=False)
            continue
        first_mpc = next((r for r in row["runs"] if r["kind"] == "mpc" and "median_s" in r), None)
        if first_mpc and not args.no_profile and deadline.allows(MIN_RUN_S["mpc"]):
            log(f"{name} {precision}: mpc-train --profile")
            try:
                row["profile"] = gpu_profile(name, precision, first_mpc["spec"], first_mpc["flags"],
                                             deadline.timeout(ctx))
            except subprocess.CalledProcessError as e:
                row["profile_error"] = first_line(e.stderr or e)
            except subprocess.TimeoutExpired as e:
                row["profile_error"] = first_line(e)
        write_gpu_report(out_path, state, results, rate_before, None, final=False)
    if not emulate and rate_bin and "error" not in rate_before:
        log("measuring the cuBLASLt matmul rate again")
        rate_after = cublaslt_rate(rate_bin, args.rate_n, args.rate_reps, ctx["mpc_env"])
    elif not emulate:
        rate_after = rate_before
    table = write_gpu_report(out_path, state, results, rate_before, rate_after, final=True)
    print(table)
    raw = os.path.join(args.out_dir or BENCH, "last_gpu_run.json")
    os.makedirs(os.path.dirname(os.path.abspath(raw)), exist_ok=True)
    with open(raw, "w") as f:
        json.dump({"results": [{k: v for k, v in r.items() if k != "cfg"} for r in results], "batch_search": searches,
                   "gpu": info, "rate_before": rate_before, "rate_after": rate_after, "command": command,
                   "seconds": round(time.time() - deadline.t0, 1)}, f, indent=1, default=str)
    if args.out_dir:
        copy_logs(results, os.path.join(args.out_dir, "logs"), models)
    log(f"wrote {out_path} (raw numbers: {raw}) after {time.time() - deadline.t0:.0f} s")
    return 0


# --------------------------------------------------------------------------- largest batch

def device_free_bytes(info):
    """Free device memory before the search (nvidia-smi total - used), or None."""
    try:
        out = run_text(["nvidia-smi", "--query-gpu=memory.total,memory.used", "--format=csv,noheader,nounits"])
        total, used = (float(x) for x in out.splitlines()[0].split(","))
        return int((total - used) * 1048576)
    except (ValueError, IndexError):
        return None


def gpu_batch_search(name, cfg, batch, args, ctx, deadline, asset_cache, info):
    """The largest batch each precision in --batch-search fits, bounded by --batch-search-s (and the budget).

    mpc: the memory plan (`mpc compile --report`: activation arena + parameters, optimizer state, inputs) at
    doubling batches from the row's up to --batch-search-max, then mpc-train for 2 + 2 steps at the largest
    batch whose plan fits the free device memory, and at half of it if that fails; the run is the proof, the
    plan only picks where to look (it leaves out the CUDA context and cuDNN/cuBLAS workspaces).
    PyTorch: eager (channels_last for the CNNs) at doubling batches in one worker process until CUDA runs out
    of memory (torch.cuda.OutOfMemoryError), 3 steps each on device-generated random data."""
    out = {"model": name, "batch": batch, "precisions": {}, "max_batch": args.batch_search_max}
    limit = Deadline(args.batch_search_s)
    free = None if ctx["mpc_device"] == "cpu" else device_free_bytes(info)
    out["free_bytes"] = free
    if not deadline.allows(MIN_RUN_S["mpc"]) or not limit.allows(5):
        out["skipped"] = deadline.why() if not deadline.allows(MIN_RUN_S["mpc"]) else "skipped: --batch-search-s"
        log(f"{name} batch search: {out['skipped']}")
        return out
    try:
        assets = gpu_assets(name, cfg, batch, ctx, deadline, asset_cache)
        tiny = gpu_net_data(name, cfg, 1, ctx, deadline)
    except RuntimeError as e:
        out["skipped"] = f"not run: {first_line(e)}"
        return out
    d = gpu_model_dir(name)
    whole = limit
    for i, precision in enumerate(args.batch_search):
        # Each precision gets an equal share of what is left, so the last is not starved by the first.
        limit = Deadline(max(1.0, whole.left() / (len(args.batch_search) - i)))
        rec = {"plans": [], "runs": []}
        out["precisions"][precision] = rec
        keep = MIN_RUN_S["eager"] if precision in TORCH_SETUP else 0   # left over for PyTorch's search
        flags = mpc_gpu_flags(ctx["mpc_device"], precision, "auto")
        b, fits = batch, None
        while b <= args.batch_search_max and os.access(MPC, os.X_OK):
            if not (deadline.allows(MIN_RUN_S["mpc"]) and limit.allows(MIN_RUN_S["mpc"] + keep)):
                rec["cut"] = "time"
                break
            spec = gpu_spec_for_steps(name, cfg, dict(assets, features=tiny["features"], labels=tiny["labels"]), b, 4)
            try:
                rep = mpc_compile_report(spec, os.path.join(d, f"compile_report_maxbatch_{precision}_b{b}.json"), flags,
                                         ctx["mpc_env"], max(5.0, min(deadline.left(), limit.left())))
                mem = rep.get("memory", {})
                plan = mem.get("planned_peak_bytes", 0) + mem.get("unplanned_bytes", 0)
            except (Unsupported, subprocess.TimeoutExpired) as e:
                rec["plans"].append({"batch": b, "error": first_line(e)})
                break
            ok = free is None or plan <= free
            rec["plans"].append({"batch": b, "plan_bytes": plan, "fits_plan": ok})
            if not ok:
                break
            fits = b
            b *= 2
        if not os.access(MPC, os.X_OK):
            fits = batch   # no planner: try the row's batch only
        for tryb in ([fits, fits // 2] if fits else []):
            if tryb < 1 or not (deadline.allows(MIN_RUN_S["mpc"]) and limit.allows(MIN_RUN_S["mpc"] + keep)):
                rec.setdefault("cut", "time")
                break
            log(f"{name} batch search {precision}: mpc-train at batch {tryb}")
            try:
                data = gpu_net_data(name, cfg, tryb, ctx, deadline)
                gpu_spec_for_steps(name, cfg, dict(assets, **data), tryb, 4)
                t = deadline.timeout(ctx)
                t["worker_timeout"] = max(5.0, min(t["worker_timeout"], limit.left() - keep))
                r = bench_mpc_gpu(name, cfg, dict(assets, **data), tryb, 2, 2, precision, "auto", t,
                                  tag=f"maxbatch_{precision}_b{tryb}")
                rec["runs"].append({"batch": tryb, "median_s": r["median_s"], "smi": r.get("smi"),
                                    "plan_bytes": (r["arena_bytes"] or 0) + (r.get("outside_arena_bytes") or 0),
                                    "loss1": (r.get("losses") or [None])[0]})
                rec["mpc_largest"] = tryb
                log(f"  ran: {fmt_ms(r['median_s'])} ms/step")
                break
            except (Unsupported, RuntimeError, OSError, IndexError, KeyError, ValueError,
                    subprocess.TimeoutExpired) as e:
                rec["runs"].append({"batch": tryb, "error": first_line(e)})
                log(f"  failed: {first_line(e)}")
        # PyTorch: one worker, doubling until OOM.
        if precision in TORCH_SETUP and deadline.allows(MIN_RUN_S["eager"]) and limit.allows(MIN_RUN_S["eager"]):
            variant = "channels_last" if cfg["net"]["kind"] == "resnet" else "eager"
            wc = dict(worker_cfg(name, cfg, assets, batch, 1, 2, precision, variant, ctx["torch_device"]),
                      max_batch=args.batch_search_max, time_s=max(5.0, min(deadline.left(), limit.left()) - 5))
            log(f"{name} batch search {precision}: {torch_variant_label(cfg, variant, precision)}")
            try:
                p = subprocess.run([ctx["python"], WORKER, "--max-batch", json.dumps(wc)], capture_output=True, text=True,
                                   timeout=max(10.0, min(deadline.left(), limit.left()) + 5))
                out_text, err_text, how = p.stdout, p.stderr, f"exit {p.returncode}"
            except subprocess.TimeoutExpired as e:   # the worker prints its state after every trial
                out_text, err_text, how = e.stdout or "", e.stderr or "", "timed out"
                out_text = out_text.decode(errors="replace") if isinstance(out_text, bytes) else out_text
                err_text = err_text.decode(errors="replace") if isinstance(err_text, bytes) else err_text
            lines = [l for l in out_text.splitlines() if l.startswith("{")]
            rec["torch"] = json.loads(lines[-1]) if lines else {
                "error": f"{how}: {(err_text.strip().splitlines() or [''])[-1][:200]}"}
            if how == "timed out" and lines:
                rec["torch"]["cut"] = "time"
            with open(os.path.join(d, f"torch_maxbatch_{precision}.log"), "w") as f:
                f.write(err_text)
            rec["torch"]["label"] = torch_variant_label(cfg, variant, precision)
            log(f"  largest batch that ran: {rec['torch'].get('largest_ok')}")
    return out


def gpu_net_data(name, cfg, n, ctx, deadline):
    """A data set of exactly n examples for a net model (the batch search's)."""
    acfg = dict(gpu_asset_cfg(name, cfg, n), examples=n, data_only=True)
    a = subprocess.run([ctx["python"], WORKER, "--make-assets", json.dumps(acfg)], capture_output=True, text=True,
                       timeout=max(5.0, min(ctx["worker_timeout"], deadline.left())))
    if a.returncode != 0 or not a.stdout.strip():
        raise RuntimeError(f"making {n} examples for {name} failed: {(a.stderr.strip().splitlines() or ['?'])[-1]}")
    return {k: v for k, v in json.loads(a.stdout.strip().splitlines()[-1]).items() if k in ("features", "labels")}


def copy_logs(results, dest, models=()):
    """The small per-run logs (mpc-train, torch workers, compile reports, profiles) next to the results."""
    os.makedirs(dest, exist_ok=True)
    for name in sorted({r["model"] for r in results} | set(models)):
        d = gpu_model_dir(name)
        if not os.path.isdir(d):
            continue
        for f in os.listdir(d):
            if f.endswith((".log", ".json", ".spec", ".warmup")) and os.path.getsize(os.path.join(d, f)) < 4 << 20:
                shutil.copy(os.path.join(d, f), os.path.join(dest, f"{name}__{f}"))


def gpu_results_path(args, state):
    if args.out:
        return args.out
    what = args.what or "-".join(state["models"])
    base = f"{state['start_time']:%Y-%m-%d}-gpu-{state['machine']}-{what}.md"
    if args.out_dir:
        return os.path.join(args.out_dir, base)
    if args.quick or state["emulate"]:
        return os.path.join(BENCH, "results", base)
    return os.path.join(HERE, "results", base)


def estimate_run_s(cfg, kind, precision, batch, warmup, steps):
    """A rough guess of one run's wall time on the H100/H200 machine (16 CPUs), for the dry run's schedule: process
    start, ONNX import (~1 s per 100 MB; twice for mpc: `mpc compile --report`, then mpc-train), a cold
    torch.compile (~60 s), and the steps at 35% of the precision's ceiling. Not a measurement."""
    needed, _ = matmul_flops(cfg, batch)
    step_s = needed / (0.35 * MFU_PEAK_TFLOPS[precision] * 1e12)
    mb = 4 * gpu_models_params(cfg) / 1e6
    if kind == "mpc":
        return 8 + 2 * mb / 100 + (warmup + steps) * step_s
    base = {"eager": 9, "channels_last": 9, "compile": 60}[kind] + mb / 200
    return base + (max(warmup, 3) if kind == "compile" else warmup + steps) * step_s * (1.3 if kind != "compile" else 1)


def gpu_models_params(cfg):
    if cfg.get("net"):
        import gpu_models
        return gpu_models.parameter_count(cfg["net"])
    layers = cfg.get("layers") or []
    return sum(a * b + b for a, b in zip(layers[:-1], layers[1:]))


def gpu_dry_run(args, ctx, row_plan, command):
    """Prints what `--device cuda` would run, in order, without running (or generating) anything."""
    q = lambda cmd: " ".join(shlex.quote(str(c)) for c in cmd)   # noqa: E731
    print(f"# {command}\n# dry run: nothing is generated, built or run\n")
    print(f"python for the PyTorch workers: {ctx['python']}")
    for b in (MPC_TRAIN, MPC):
        print(f"mpc binary: {b} ({'present' if os.access(b, os.X_OK) else 'MISSING'})")
    rate_bin, rate_build, rate_from = rate_probe_plan(BUILD_DIR)
    print("GPU info: nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id,power.limit,clocks.max.sm "
          "--format=csv,noheader; nvidia-smi (header: CUDA version)")
    if rate_build:
        print(f"build matmul-rate probe: {q(rate_build)}")
    print(f"matmul rate (before and after the models; probe from {rate_from.split(',')[0]}): "
          f"{q([rate_bin, args.rate_n, args.rate_reps])}")
    if ctx["smi_interval"] > 0:
        print(f"while each run: nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits "
              f"-lms {ctx['smi_interval']}  and  nvidia-smi --query-gpu=memory.used ... -lms {ctx['smi_interval']}")
    print(f"time budget: {args.time_budget:.0f} s" if args.time_budget else "time budget: none")
    fake = "<fifo>"
    seen = set()
    est = [10.0]   # the matmul-rate probe before the models (and after them)

    def guess(s_):
        est[0] += s_
        return f"  (guess ~{s_:.0f} s; ~{est[0]:.0f} s from the start)"
    for name, what, runners in row_plan:
        cfg = GPU_MODELS[name]
        batch = args.batch or cfg["batch"]
        warmup, steps = gpu_steps(cfg, args)
        pads = gpu_pad_variants(cfg, args)
        acfg = gpu_asset_cfg(name, cfg, batch)
        n = batch * cfg["data_batches"]
        if cfg.get("net"):
            onnx = os.path.join(acfg["dir"], f"{name}.onnx")
        else:
            onnx = acfg.get("onnx") or os.path.join(acfg["dir"], f"{name}.onnx")
        assets = {"onnx": onnx, "features": os.path.join(acfg["dir"], f"features_{n}.npy"),
                  "labels": os.path.join(acfg["dir"], f"labels_{n}.npy")}
        spec = gpu_spec_path(name, batch, warmup + steps)
        if name not in seen:
            seen.add(name)
            print(f"\n## {name}: {cfg['describe']}")
            print(f"assets: {q([ctx['python'], WORKER, '--make-assets', json.dumps(acfg)])}"
                  + (guess(6 + 4 * gpu_models_params(cfg) / 1e6 / 50) if cfg.get("net") else ""))
            print(f"spec {spec}:")
            print("    " + gpu_spec_text(cfg, assets, batch, warmup + steps).replace("\n", "\n    ").rstrip())
            needed, conv = matmul_flops(cfg, batch)
            print(f"matmul work per step: {fmt_flops(needed)} needed ({fmt_flops(conv)} as 6·B·Σ in·out)")
        if what == "maxbatch":
            print(f"\n### {name} largest batch: precisions {','.join(args.batch_search or [])}, from {batch} up to "
                  f"{args.batch_search_max}, at most {args.batch_search_s:.0f} s" + guess(args.batch_search_s))
            print(f"  per precision: mpc compile --report at batches {batch}, {2 * batch}, ... (a one-example data set) "
                  "until the plan exceeds the free device memory; mpc-train (2 + 2 steps) at the largest that fits "
                  "(then half of it if that fails); "
                  f"{q([ctx['python'], WORKER, '--max-batch', '<json: the row config + max_batch, time_s>'])}")
            continue
        precision = what
        print(f"\n### {name} {precision}: {warmup} warm-up + {steps} timed steps"
              + (f" (runners: {', '.join(runners)})" if runners else ""))
        for pad in (pads if runners is None or "mpc" in runners else []):
            flags = mpc_gpu_flags(ctx["mpc_device"], precision, pad)
            tag = f"{precision}_pad{pad}"
            print(f"[{mpc_label(pad, pads)}]" + guess(estimate_run_s(cfg, "mpc", precision, batch, warmup, steps)))
            print("  " + q([MPC, "compile", "--spec", spec, "--report",
                            os.path.join(gpu_model_dir(name), f"compile_report_{tag}.json"), *flags]))
            print("  " + q([MPC_TRAIN, "--spec", spec, "--metrics", fake, *flags]))
            if not args.no_profile and pad == pads[0]:
                print("  " + q([MPC_TRAIN, "--spec", spec, "--profile", *flags]))
        variants = gpu_torch_variants(cfg, args, precision) if runners is None else [
            v for v in runners if v != "mpc" and (v != "channels_last" or (cfg.get("net") or {}).get("kind") == "resnet")]
        for v in variants:
            if precision == "fp8":
                print("[torch] n/a: PyTorch has no FP8 training recipe of its own")
                break
            w = max(warmup, 3) if v == "compile" else warmup
            wc = worker_cfg(name, cfg, assets, batch, w, steps, precision, v, ctx["torch_device"])
            print(f"[{torch_variant_label(cfg, v, precision)}]" +
                  guess(estimate_run_s(cfg, v, precision, batch, warmup, steps)))
            print("  " + q([ctx["python"], WORKER, json.dumps(wc)]))
    models = list(dict.fromkeys(m for m, _, _ in row_plan))
    state = {"start_time": datetime.datetime.now().astimezone(), "machine": args.machine or "<gpu>",
             "emulate": args.emulate_on_cpu, "models": models}
    print(f"\nresults file: {gpu_results_path(args, state)}")
    print(f"rough guess of the whole run: ~{est[0]:.0f} s" + (
        f"; the time budget of {args.time_budget:.0f} s skips what would start after it" if args.time_budget else ""))
    return 0


def fmt_tflops(x):
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 1 else f"{x:.3f}" if x >= 0.001 else f"{x:.1e}"


def fmt_flops(x):
    return f"{x / 1e12:.3f} TFLOP" if x >= 1e11 else f"{x / 1e9:.3f} GFLOP"


def _median_of(run):
    return run.get("median_s") if run and not run.get("error") and not run.get("unsupported") else None


def write_gpu_report(out_path, state, results, rate_before, rate_after, final):
    """Writes the markdown results file (again after every model x precision, so an interrupted run
    still leaves what it measured); returns the main table."""
    args, info, ctx = state["args"], state["info"], state["ctx"]
    rates = {}
    for p, k in RATE_KEY.items():
        vals = [r[k].get("median_gflops") for r in (rate_before, rate_after)
                if isinstance(r, dict) and isinstance(r.get(k), dict) and r[k].get("median_gflops")]
        rates[p] = max(vals) if vals else None

    head = ("| model | precision | runner | ms/step | mpc ÷ this | throughput | TFLOP/s | MFU | % of rate "
            "| peak MiB (measured) | GPU memory | notes |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for row in results:
        needed, _ = matmul_flops(row["cfg"], row["batch"])
        prate = rates.get(row["precision"])
        ref = _median_of(next((r for r in row["runs"] if r["kind"] == "mpc"), None))
        fastest = min((r for r in row["runs"] if r["kind"] == "torch" and _median_of(r)), key=_median_of, default=None)
        unit, per_example = throughput_unit(row["cfg"])
        if row.get("skipped"):
            lines.append(f"| {row['model']} | {row['precision']} | — | — | — | — | — | — | — | — | — | {row['skipped']} |")
            continue
        for r in row["runs"]:
            cells = [row["model"], row["precision"], r["label"]]
            med = _median_of(r)
            if r.get("na"):
                cells += ["n/a"] + ["—"] * 7 + ["PyTorch has no FP8 training recipe of its own (Transformer Engine / "
                                                 "torchao are not part of this comparison)"]
            elif r.get("skipped"):
                cells += ["skipped"] + ["—"] * 7 + [r["skipped"]]
            elif r.get("unsupported"):
                cells += ["not yet supported by mpc"] + ["—"] * 7 + [f"mpc compile: {r['unsupported'][:160]}"]
            elif med is None:
                cells += ["failed"] + ["—"] * 7 + [r.get("error", "?")[:200]]
            else:
                tflops = needed / med / 1e12
                peak = smi_peak_mib(r.get("smi"))
                if r["kind"] == "mpc":
                    if r.get("outside_arena_bytes") is None:   # no `mpc` binary, no compile report
                        mem = f"plan: {mib(r['arena_bytes'])} MiB activation arena; {smi_text(r.get('smi'))}"
                    else:
                        plan = r["arena_bytes"] + r["outside_arena_bytes"]
                        mem = (f"plan {mib(plan)} MiB ({mib(r['arena_bytes'])} arena + "
                               f"{mib(r['outside_arena_bytes'])} other); {smi_text(r.get('smi'))}")
                    notes = list(r.get("notes", []))
                    if r is row["runs"][0]:
                        ratio = (f"**{med / _median_of(fastest):.2f}** ÷ fastest" if fastest else "—")
                    else:
                        ratio = f"{ref / med:.2f}" if ref else "—"
                else:
                    mem = (f"max allocated {mib(r['max_allocated'])} MiB (reserved {mib(r['max_reserved'])}); "
                           f"{smi_text(r.get('smi'))}" if r.get("max_allocated") is not None else smi_text(r.get("smi")))
                    notes = []
                    if r.get("variant") == "compile" and r.get("first_step_s") is not None:
                        notes.append(f"first step (compiling) {r['first_step_s']:.1f} s")
                    if r.get("skipped_steps"):
                        notes.append(f"{r['skipped_steps']} steps skipped (GradScaler)")
                    if r.get("tf32_setting") and row["precision"] in ("f32", "tf32"):
                        notes.append(f"`{r['tf32_setting']}`")
                    if r.get("attention"):
                        notes.append(f"attention: {r['attention']}")
                    ratio = f"{ref / med:.2f}" if ref else "—"
                    if r is fastest:
                        ratio += " (fastest PyTorch)"
                cells += [fmt_ms(med), ratio, f"{row['batch'] * per_example / med:,.0f} {unit}", fmt_tflops(tflops),
                          f"{100 * tflops / MFU_PEAK_TFLOPS[row['precision']]:.0f}%",
                          f"{100 * tflops * 1e3 / prate:.0f}%" if prate else "—",
                          f"{peak:,.0f}" if peak is not None else "—", mem, "; ".join(notes)]
            lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    table = "\n".join(lines)

    md = []
    title = "mpc vs PyTorch on the GPU" if not state["emulate"] else "mpc vs PyTorch, GPU harness emulated on the CPU"
    md.append(f"# {title}: {', '.join(state['models'])} — {state['start_time']:%Y-%m-%d %H:%M %Z}\n")
    if not final:
        md.append("**INCOMPLETE:** the run was still going (or was interrupted) when this file was last written; "
                  "rows after the last one below did not run.\n")
    if state["emulate"]:
        md.append("**Emulation:** `--emulate-on-cpu` ran this harness with `mpc-train --device cpu` and PyTorch on "
                  "the CPU, as a test of the harness itself. The numbers say nothing about any GPU.\n")
    md.append(table + "\n")
    md.append("ms/step: median of the timed steps (warm-up excluded), host wall time per step, loss fetched every "
              "step by both. mpc ÷ this: on a PyTorch row, the row group's first mpc median over this row's; on the "
              "first mpc row (bold), mpc's median over the fastest PyTorch variant's at the same precision (below 1: "
              "mpc is faster). throughput: examples (img/s) or tokens (tok/s) per second at the median. "
              "TFLOP/s: the matmul/convolution work one step needs (unpadded model; see Method) over the median. "
              "MFU: that over the dense ceiling of the row's precision in docs/gpu.md (H100 cuBLASLt, the top of "
              "each measured range: " + ", ".join(f"{p} {v:g}" for p, v in MFU_PEAK_TFLOPS.items()) +
              " TFLOP/s). % of rate: against the cuBLASLt matmul rate of the row's precision measured in this run (" +
              ", ".join(f"{p}: {rates[p] / 1e3:.0f} TFLOP/s" for p in RATE_KEY if rates.get(p)) +
              (" — none measured" if not any(rates.values()) else "") + "). peak MiB (measured): the process's "
              "device memory as nvidia-smi sampled it while it ran, for both frameworks alike (it includes the CUDA "
              "context and the cuDNN/cuBLAS workspaces; where nvidia-smi lists no processes, the device's used "
              "memory above its value before the run). GPU memory: mpc's compiler plan (mpc-train reports no "
              "measured device peak, so the plan is all mpc itself says) and PyTorch's own "
              "torch.cuda.max_memory_allocated / max_memory_reserved (tensors only, no context).\n")
    md.append(gpu_derived_ratios(results))
    md.append(gpu_precision_pair_table(results, "resnet50"))
    md.append(gpu_loss_check(results))
    md.append(gpu_batch_search_table(state.get("searches") or []))

    md.append("## Machine and versions\n")
    md.append(f"- date: {state['start_time'].isoformat(timespec='seconds')}")
    if info:
        md.append(f"- GPU: {info.get('name')} ({info.get('memory_total')}, {info.get('count')} device(s)), driver "
                  f"{info.get('driver')}, CUDA {info.get('cuda_driver_version')} (driver API, nvidia-smi), power limit "
                  f"{info.get('power_limit')}, max SM clock {info.get('max_sm_clock')}")
    rb = rate_before if isinstance(rate_before, dict) else {}
    if rb.get("device"):
        md.append(f"- matmul-rate probe: {rb.get('device')} sm_{rb.get('sm')}, {rb.get('sms')} SMs; CUDA runtime "
                  f"{rb.get('runtime')}, driver {rb.get('driver')}, cuBLASLt {rb.get('cublaslt')}; probe from "
                  f"{state['rate_from']}")
    torch_run = next((r for row in results for r in row["runs"] if r["kind"] == "torch" and r.get("torch")), None)
    if torch_run:
        opt = torch_run.get("adamw") or torch_run.get("optimizer") or {}
        md.append(f"- PyTorch {torch_run['torch']} (CUDA {torch_run.get('torch_cuda')}, cuDNN {torch_run.get('cudnn')}), "
                  f"Python {torch_run.get('python')} (`{ctx['python']}`); {opt.get('name', 'AdamW')} "
                  f"fused={opt.get('fused')}, foreach={opt.get('foreach')} (the multi-tensor path taken: "
                  f"{opt.get('foreach_effective')})"
                  + (f"; {torch_run['tf32_setting']}" if torch_run.get("tf32_setting") else ""))
    commit = run_text(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = run_text(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(MPC_TRAIN)).astimezone()
    md.append(f"- mpc: commit `{commit}`{' (working tree has uncommitted changes)' if dirty else ''}, `{MPC_TRAIN}` "
              f"built {mtime:%Y-%m-%d %H:%M}")
    md.append(f"- host: {cpu_model()}, {os.cpu_count()} CPUs, `{run_text(['uname', '-srm'])}`; mpc OMP threads "
              f"{ctx['threads']}")
    md.append(f"- LD_LIBRARY_PATH for mpc: `{ctx.get('mpc_env', {}).get('LD_LIBRARY_PATH', '')}`"
              + (f" ({state['env_note']})" if state.get("env_note") else ""))
    if isinstance(rate_before, dict) and rate_before.get("device"):
        for label, rr in (("before", rate_before), ("after", rate_after)):
            if isinstance(rr, dict):
                md.append(f"- cuBLASLt {rr.get('m')}×{rr.get('n')}×{rr.get('k')} {rr.get('layout')} rate {label} the "
                          "models (median of " + f"{rr.get('reps')}, GFLOP/s): " +
                          ", ".join(f"{k} {rr[k].get('median_gflops', rr[k].get('error'))}" for k in RATE_KEY.values()
                                    if isinstance(rr.get(k), dict)))
    elif isinstance(rate_before, dict) and rate_before.get("error"):
        md.append(f"- cuBLASLt matmul rate: {rate_before['error']}")
    md.append(f"- command: `{state['command']}`\n")

    md.append("## Per-run details\n")
    md.append("| model | precision | runner | warm-up + timed | median ms | mean ms | min–max ms | CUDA-event median ms "
              "| loss step 1 | last loss (step) | host CPU used by others | command / log |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for row in results:
        for r in row["runs"]:
            med = _median_of(r)
            if med is None:
                continue
            st = r["step_times"]
            w = r.get("warmup", row["warmup"])
            what = r["label"] + (f" ({r['merged_reads']} records came in a shared read)" if r.get("merged_reads") else "")
            if r["kind"] == "mpc":
                cmd = f"`mpc-train --spec {os.path.relpath(r['spec'], ROOT)} {' '.join(r['flags'])}`"
            else:
                cmd = f"`{os.path.relpath(r['log'], ROOT)}`"
            losses = r.get("losses") or [float("nan")]
            md.append(f"| {row['model']} | {row['precision']} | {what} | {w} + {len(st) if r.get('method') != 'diff' else row['steps']} "
                      f"| {fmt_ms(med)} | {fmt_ms(r['mean_s'])} | {fmt_ms(min(st))}–{fmt_ms(max(st))} | "
                      f"{fmt_ms(r['event_median_s']) if r.get('event_median_s') else '—'} | {losses[0]:.6f} | "
                      f"{losses[-1]:.6f} ({len(losses)}) | {r['load']['other_cpu_pct']}% | {cmd} |")
    md.append("")
    md.append("Both frameworks start from the same weights (the ONNX initializers; the zoo models' torch modules are "
              "rebuilt from their seed and every parameter is proved equal, byte for byte, to an initializer), see "
              "the same batches in the same order and use the same optimizer with the same hyperparameters (AdamW; "
              "SGD with momentum for the ResNets, as their zoo specs), so the step-1 losses agree to the precision's "
              "rounding; that is the check that they run the same training step.\n")
    seen = set()
    for row in results:
        needed, conv = matmul_flops(row["cfg"], row["batch"])
        if row["model"] in seen:
            continue
        seen.add(row["model"])
        md.append(f"- **{row['model']}**: {row['cfg']['describe']}. Batch {row['batch']}, {row['warmup']} warm-up + "
                  f"{row['steps']} timed steps. Matmul work per step: {fmt_flops(needed)} needed "
                  f"({fmt_flops(conv)} by 6·B·Σ in·out). Data: {row['assets'].get('note', '')}." + asset_note(row["assets"]))
    md.append("")

    md.append("## Method\n")
    md.append("- mpc: `mpc-train --device cuda --precision P [--pad-multiple N] [--loss-scaling dynamic]` on a generated "
              "spec (AdamW, constant lr, `shuffle: false`). " + (
                  "Step time per step: the gaps between arrivals of the flushed `--metrics` records, read from a named "
                  "pipe (records that arrive in one read share their gap), median of the timed steps."
                  if ctx["timing"] == "fifo" else
                  "Step time: (wall_s(W+S) − wall_s(W)) / S from two runs' summary records (a mean).") +
              " A step includes the batch's way to the device (batches of 1 MiB or more: pinned host buffers, the "
              "next batch gathered and copied on a second stream while the step runs, then one device-to-device copy; "
              "smaller ones: a copy at the step's head), the training program (a CUDA graph replay after the first "
              "steps) and the loss fetch.")
    md.append("- PyTorch: tools/bench/torch_gpu_worker.py in its own process per row: batch copy from pageable "
              "host memory, zero_grad(set_to_none=True), forward + CrossEntropyLoss (under torch.autocast for AMP), "
              "backward (GradScaler for fp16), AdamW.step() (fused=False, foreach default), loss.item(); host wall "
              "time per step (it ends with loss.item(), which waits for the GPU) and CUDA events; warm-up dropped "
              "(≥ 3 steps for torch.compile, whose first step compiles); median. torch.compile wraps forward + loss "
              "(mode 'default'); backward comes from AOTAutograd, the optimizer stays eager. A variant that fails "
              "(a compile error, a timeout) is reported as its row's note.")
    if any(row["cfg"].get("net") for row in results):
        md.append("- zoo models (tools/bench/gpu_models.py): the torch module is rebuilt from torch.manual_seed(0) and "
                  "proved equal to the ONNX file mpc trains; batches are copied from pinned host memory with "
                  "non_blocking=True (a PyTorch input pipeline's way; mpc pins its batch buffers and uploads ahead); "
                  "the ResNets train with SGD (momentum 0.9, wd 1e-4) as their zoo specs, and their PyTorch runs set "
                  "torch.backends.cudnn.benchmark = True (cuDNN's algorithm search happens in the warm-up steps); "
                  "f32 rows turn TF32 off for cuDNN's convolutions too (PyTorch's default has them on); "
                  "the `channels_last` variant "
                  "converts the model and every batch to torch.channels_last, and the CNNs' torch.compile variant "
                  "runs channels_last too; the transformers run attention as "
                  "F.scaled_dot_product_attention(is_causal=True) (PyTorch's flash / memory-efficient kernels; the "
                  "same function as the written-out attention in the ONNX file, which mpc's fuse-attention pass "
                  "turns into cuDNN's fused attention in bf16/fp16).")
    md.append("- precisions: f32 = FP32 everywhere (mpc `--precision f32`; PyTorch with TF32 off); tf32 = FP32 "
              "storage, TF32 GEMMs; bf16 / fp16 = mpc's autocast pass vs torch.autocast (f32 master weights and "
              "AdamW in both; fp16 with dynamic loss scaling: mpc's on-device scaler vs GradScaler, both starting "
              "at 65536); fp8 = mpc's FP8 pass (E4M3 forward operands, E5M2 gradients, delayed scaling; the rest "
              "in bf16), no PyTorch counterpart.")
    if any(row["cfg"].get("net") for row in results):
        md.append("- FLOPs of the zoo models (gpu_models.forward_macs, from the shapes): 3x the forward pass's "
                  "multiply-accumulates x 2, less the input gradient of a first layer whose input is the data "
                  "(the ResNets' stem convolution): every convolution and the classifier for the ResNets; for the "
                  "transformers the qkv, projection, MLP and head GEMMs plus attention's Q·Kᵀ and P·V over the full "
                  "T×T square (the usual MFU convention; causal attention needs half of those). Normalization, "
                  "elementwise ops and the optimizer are not counted.")
    md.append("- FLOPs: forward 2·B·in·out and weight gradient 2·B·in·out per layer, input gradient 2·B·in·out for "
              "every layer but the first, on the model's own (unpadded) sizes, over the median step time.")
    md.append(f"- matmul rate: tools/bench/cublaslt_matmul_rate.cc, {args.rate_n}³ A^T·B per dtype (f32, TF32, bf16, "
              "f16, FP8 E4M3 with bf16 output and fast accumulation), the fastest of cuBLASLt's heuristic "
              f"candidates, median of {args.rate_reps} products timed with CUDA events, before and after the "
              "models; the table uses the larger.")
    md.append("- memory: mpc's plan from `mpc compile --report` with the same flags: activation arena "
              "(planned_peak_bytes) + everything outside it (parameters, gradients, optimizer state, inputs). "
              "mpc-train prints no measured device peak, so that is the plan only; " + (
                  f"nvidia-smi sampled every {ctx['smi_interval']} ms while each process ran gives the measured side "
                  "(the process's used memory, or the device's used memory above idle when the process list is "
                  "empty).\n" if ctx["smi_interval"] > 0 else "nvidia-smi was not sampled.\n"))

    profs = [(row, row["profile"]) for row in results if row.get("profile")]
    prof_errors = [f"- {row['model']} {row['precision']}: `mpc-train --profile` failed: {row['profile_error']}"
                   for row in results if row.get("profile_error")]
    if profs or prof_errors:
        md.append("## Where mpc's time goes (mpc-train --profile)\n")
        md.append("Profiling runs the program op by op with a device synchronisation around each (no CUDA graph), "
                  "so the per-op times add launch and sync overheads the timed runs do not have.\n")
        md.extend(prof_errors + ([""] if prof_errors else []))
        for row, (rows, done) in profs:
            total = sum(ms for _, _, ms in rows) or 1.0
            nsteps = row["warmup"] + row["steps"]
            md.append(f"**{row['model']}, {row['precision']}** — {nsteps} steps (warm-up included); `{done}`\n")
            md.append("| op | calls | total ms | ms/step | share |")
            md.append("|---|---|---|---|---|")
            for op, calls, ms in sorted(rows, key=lambda x: -x[2]):
                md.append(f"| {op} | {calls} | {ms:.1f} | {ms / nsteps:.3f} | {100 * ms / total:.1f}% |")
            md.append("")
    os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(tmp, out_path)
    return table


def gpu_derived_ratios(results):
    """The comparisons the issues ask for, computed from the table."""
    med = {}
    for row in results:
        for r in row["runs"]:
            m = _median_of(r)
            if m:
                med[(row["model"], row["precision"], r["label"])] = m
    out = []

    def mpc_ms(model, precision, pad="auto"):
        for (m, p, label), v in med.items():
            if m == model and p == precision and label.startswith("mpc") and (
                    (pad == "auto" and ("padding auto" in label or label == "mpc")) or
                    (pad != "auto" and f"--pad-multiple {pad}" in label)):
                return v
        return None

    models = list(dict.fromkeys(row["model"] for row in results))
    for model in models:
        f32, bf16, fp8 = mpc_ms(model, "f32"), mpc_ms(model, "bf16"), mpc_ms(model, "fp8")
        parts = []
        for p in ("tf32", "bf16", "fp16", "fp8"):
            v = mpc_ms(model, p)
            if v and f32:
                parts.append(f"{p} {f32 / v:.2f}")
        if parts:
            out.append(f"- {model}: mpc f32 step time / mpc step time at: " + ", ".join(parts))
        if bf16 and fp8:
            goal = " (goal: ≥ 1.4×)" if model.startswith("mlp_block") else ""
            out.append(f"- {model}: mpc bf16 step time / mpc fp8 step time = {bf16 / fp8:.2f} (above 1: FP8 is "
                       f"faster){goal}")
        for p in GPU_PRECISIONS:
            m = mpc_ms(model, p)
            torch_rows = [(label, v) for (mm, pp, label), v in med.items()
                          if mm == model and pp == p and label.startswith("torch")]
            if m and torch_rows:
                best_label, best = min(torch_rows, key=lambda x: x[1])
                out.append(f"- {model} {p}: mpc {fmt_ms(m)} ms vs the fastest PyTorch ({best_label}) {fmt_ms(best)} ms: "
                           f"mpc/PyTorch = {m / best:.2f}")
    if "wide_mlp_4095" in models:
        for p in GPU_PRECISIONS:
            on, off = mpc_ms("wide_mlp_4095", p, "auto"), mpc_ms("wide_mlp_4095", p, 1)
            w4096 = mpc_ms("wide_mlp_4096", p)
            bits = []
            if on and off:
                bits.append(f"mpc unpadded / padded step time = {off / on:.2f} ({fmt_ms(off)} vs {fmt_ms(on)} ms)")
            if on and w4096:
                bits.append(f"mpc 4095 padded / 4096 step time = {on / w4096:.2f}")
            if off and w4096:
                bits.append(f"mpc 4095 unpadded / 4096 step time = {off / w4096:.2f}")
            t95 = med.get(("wide_mlp_4095", p, f"torch eager, {TORCH_SETUP.get(p, p)}"))
            t96 = med.get(("wide_mlp_4096", p, f"torch eager, {TORCH_SETUP.get(p, p)}"))
            if t95 and t96:
                bits.append(f"PyTorch eager 4095 / 4096 step time = {t95 / t96:.2f}")
            if bits:
                out.append(f"- wide_mlp_4095 {p} (padding): " + "; ".join(bits))
    return ("## Derived ratios\n\n" + "\n".join(out) + "\n") if out else ""


def asset_note(a):
    """Where a generated zoo model's ONNX file came from, for the model's line in the results file."""
    if not a.get("onnx_mib"):
        return ""
    how = f" ({a['exporter']}, {a['export_s']} s)" if a.get("exporter") else " (made earlier, reused)"
    return f" ONNX {a['onnx_mib']} MiB, made on this machine by tools/bench/gpu_models.py{how}."


def _gib(b):
    return f"{b / 2**30:.2f}"


def gpu_precision_pair_table(results, model):
    """ResNet-50 (issue 45): bf16 against TF32 and f32 at the same batch, mpc and the fastest PyTorch variant:
    measured peak memory and throughput ratios, beside the seed's claim (bf16 <= 0.62x TF32's memory and
    >= 2x its throughput)."""
    rows = {r["precision"]: r for r in results if r["model"] == model and not r.get("skipped")}
    if "bf16" not in rows or not ({"tf32", "f32"} & set(rows)):
        return ""
    unit, per = throughput_unit(rows["bf16"]["cfg"])
    side = {}
    for p, row in rows.items():
        mpc = next((r for r in row["runs"] if r["kind"] == "mpc" and _median_of(r)), None)
        fastest = min((r for r in row["runs"] if r["kind"] == "torch" and _median_of(r)), key=_median_of, default=None)
        side[("mpc", p)] = mpc
        side[("torch", p)] = fastest
    out = [f"## {model}: bf16 against TF32 and f32 at the same batch\n",
           "| runner | precision | batch | ms/step | throughput | peak MiB (nvidia-smi) | mpc plan / torch max allocated MiB |",
           "|---|---|---|---|---|---|---|"]
    for who in ("mpc", "torch"):
        for p in ("f32", "tf32", "bf16", "fp16", "fp8"):
            r = side.get((who, p))
            if not r:
                continue
            peak = smi_peak_mib(r.get("smi"))
            own = ((r.get("arena_bytes") or 0) + (r.get("outside_arena_bytes") or 0)) if who == "mpc" else r.get(
                "max_allocated")
            out.append(f"| {r['label']} | {p} | {rows[p]['batch']} | {fmt_ms(_median_of(r))} | "
                       f"{rows[p]['batch'] * per / _median_of(r):,.0f} {unit} | "
                       f"{f'{peak:,.0f}' if peak is not None else '—'} | {mib(own) if own else '—'} |")
    out.append("")
    for who in ("mpc", "torch"):
        b = side.get((who, "bf16"))
        for ref in ("tf32", "f32"):
            r = side.get((who, ref))
            if not (b and r):
                continue
            if rows[ref]["batch"] != rows["bf16"]["batch"]:
                out.append(f"- {who}: bf16 and {ref} ran at different batches; no ratio")
                continue
            thr = _median_of(r) / _median_of(b)
            pb, pr = smi_peak_mib(b.get("smi")), smi_peak_mib(r.get("smi"))
            mem = f"{pb / pr:.2f}x" if pb and pr else "— (not sampled)"
            own_b = ((b.get("arena_bytes") or 0) + (b.get("outside_arena_bytes") or 0)) if who == "mpc" else b.get(
                "max_allocated")
            own_r = ((r.get("arena_bytes") or 0) + (r.get("outside_arena_bytes") or 0)) if who == "mpc" else r.get(
                "max_allocated")
            own = f"{own_b / own_r:.2f}x" if own_b and own_r else "—"
            name = "mpc" if who == "mpc" else f"PyTorch (fastest variant: {b['label'].split(',')[0]} at bf16, " \
                f"{r['label'].split(',')[0]} at {ref})"
            line = (f"- {name}: bf16 / {ref} peak memory {mem} measured (nvidia-smi), {own} by "
                    f"{'the plan' if who == 'mpc' else 'max_memory_allocated'}; throughput {thr:.2f}x")
            if who == "mpc" and ref == "tf32":
                ok_mem = pb and pr and pb / pr <= 0.62
                ok_thr = thr >= 2.0
                line += (f". The seed's claim (≤ 0.62x memory, ≥ 2x throughput vs TF32): memory "
                         f"{'holds' if ok_mem else 'does not hold' if pb and pr else 'unmeasured'}, throughput "
                         f"{'holds' if ok_thr else 'does not hold'}")
            out.append(line)
    return "\n".join(out) + "\n"


LOSS1_TOLERANCE = {"f32": 1e-4, "tf32": 3e-3, "bf16": 3e-2, "fp16": 3e-2}


def gpu_loss_check(results):
    """Step 1's loss, mpc against every PyTorch variant of the row (same weights, same batch): the check that both
    run the same training step. Relative tolerance by precision (a 16-bit forward pass rounds differently)."""
    out = []
    for row in results:
        mpc = next((r for r in row["runs"] if r["kind"] == "mpc" and r.get("losses")), None)
        tol = LOSS1_TOLERANCE.get(row["precision"])
        if not mpc or tol is None:
            continue
        m = mpc["losses"][0]
        bits, worst = [], 0.0
        for r in row["runs"]:
            if r["kind"] == "torch" and r.get("losses"):
                t = r["losses"][0]
                rel = abs(t - m) / max(abs(m), 1e-12)
                worst = max(worst, rel)
                bits.append(f"{r['label'].split(',')[0]} {t:.6f} ({rel:.1e})")
        if bits:
            out.append(f"- {row['model']} {row['precision']}: mpc {m:.6f}; " + ", ".join(bits) +
                       (f": agree (≤ {tol:g})" if worst <= tol else f": **DIFFER** (> {tol:g})"))
    if not out:
        return ""
    return ("## Step-1 losses (same weights, same first batch)\n\nRelative difference to mpc's in parentheses; "
            "tolerance " + ", ".join(f"{p} {t:g}" for p, t in LOSS1_TOLERANCE.items()) + ".\n\n" + "\n".join(out) + "\n")


def gpu_batch_search_table(searches):
    if not searches:
        return ""
    out = ["## Largest batch that fits\n"]
    for s in searches:
        out.append(f"**{s['model']}** (doubling from {s['batch']} up to {s['max_batch']}; free device memory before: "
                   f"{_gib(s['free_bytes']) + ' GiB' if s.get('free_bytes') else 'not known'})" +
                   (f": {s['skipped']}" if s.get("skipped") else "") + "\n")
        if s.get("skipped"):
            continue
        out.append("| precision | mpc plan by batch (GiB) | mpc largest batch run | ms/step there | peak MiB there "
                   "(nvidia-smi) | PyTorch largest batch | ms/step there | max allocated MiB there | PyTorch stopped by |")
        out.append("|---|---|---|---|---|---|---|---|---|")
        for p, rec in s["precisions"].items():
            plans = ", ".join(f"{x['batch']}: " + (_gib(x["plan_bytes"]) + ("" if x["fits_plan"] else " (> free)")
                                                   if "plan_bytes" in x else x.get("error", "?")[:60])
                              for x in rec["plans"]) or "—"
            ok = next((x for x in rec["runs"] if "median_s" in x), None)
            fails = [f"{x['batch']}: {x['error'][:80]}" for x in rec["runs"] if "error" in x]
            mpc_cells = ([str(ok["batch"]), fmt_ms(ok["median_s"]),
                          f"{smi_peak_mib(ok.get('smi')):,.0f}" if smi_peak_mib(ok.get("smi")) else "—"]
                         if ok else ["none" + (f" ({'; '.join(fails)})" if fails else
                                               (" (cut by time)" if rec.get("cut") else "")), "—", "—"])
            t = rec.get("torch") or {}
            tok = [x for x in t.get("trials", []) if x.get("ok")]
            last = tok[-1] if tok else None
            stop = next((x.get("error", "")[:80] for x in t.get("trials", []) if not x.get("ok")), None) or (
                "time" if t.get("cut") else ("max batch" if last else t.get("error", "not run")[:80]))
            torch_cells = ([str(last["batch"]), fmt_ms(last["median_s"]),
                            mib(last["max_allocated"]) if last.get("max_allocated") else "—"] if last else ["—", "—", "—"])
            out.append(f"| {p} | {plans} | " + " | ".join(mpc_cells + torch_cells + [stop]) + " |")
        out.append("")
    out.append("mpc: the plan (`mpc compile --report`: activation arena + parameters, optimizer state, inputs) at "
               "doubling batches picks the largest batch that should fit the free memory; mpc-train then runs it for "
               "2 + 2 steps (and half of it if that fails): a batch counts only when it ran. PyTorch: the "
               "eager variant (channels_last for CNNs) at doubling batches in one process, 1 + 2 steps each on "
               "random data made on the device, until CUDA runs out of memory.\n")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--_torch-worker", dest="torch_worker", help=argparse.SUPPRESS)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                    help="cpu (default): oneDNN/CPU PyTorch; cuda: mpc-train --device cuda vs PyTorch on the GPU")
    ap.add_argument("--models", default=None,
                    help="comma list (default seed_mlp,fashion_mlp); --device cuda adds wide_mlp_4095, "
                         "wide_mlp_4096, mlp_block_4096 and the zoo models resnet18, resnet50, char_gpt, gpt2_124m, "
                         "te_block_4096")
    ap.add_argument("--precision", default=None,
                    help="comma list (default f32,bf16; --device cuda: f32,tf32,bf16,fp16,fp8)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--quick", action="store_true", help="few steps (smoke test); results under build/bench/")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--torch-blas", default=None,
                    help="comparison variants (PyTorch variants and ORT), comma list of onednn, system (PyTorch 1.13 "
                         "on the oneDNN sgemm shim / as installed), torch2, torch2-compile (PyTorch 2.x from "
                         "--torch2-python, eager / torch.compile), ort (ONNX Runtime training, f32 only); 'all' for "
                         "every one (default: all; --quick: onednn)")
    ap.add_argument("--torch2-python", default=TORCH2_PY,
                    help="interpreter with PyTorch 2.x for the torch2 variants and ORT (default .venv/bin/python "
                         "under the repository root)")
    ap.add_argument("--ort-pythonpath", default=ORT_PYTHONPATH,
                    help="PYTHONPATH that makes onnxruntime.training importable for the ort variant (default "
                         ".venv-ort's then .venv's site-packages)")
    ap.add_argument("--variant-timeout", type=float, default=1800,
                    help="seconds allowed to one torch2 / torch2-compile / ort child (default 1800); past it the "
                         "row says so")
    ap.add_argument("--mpc-timing", choices=["fifo", "diff"], default="fifo")
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--machine", default=None, help="name in the results file (default dev; --device cuda: from "
                                                    "the GPU's name, e.g. h100)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="run every measurement N times (interleaved); report the middle run (torch 'system' runs once)")
    ap.add_argument("--system-blas-steps", type=int, default=5,
                    help="timed steps for the torch 'system' BLAS variant (1 warm-up step); it is very slow")
    ap.add_argument("--wait-idle", type=float, default=0.0,
                    help="before each measurement wait up to SEC seconds for the CPUs to go idle")
    ap.add_argument("--retry-noisy", type=int, default=1,
                    help="measure again (after waiting for idle) when other processes used >10%% of the CPUs")
    ap.add_argument("--max-load", type=float, default=1.5, help="warn when the 1-minute load average is above this")
    ap.add_argument("--build-dir", default=None, help="directory holding mpc and mpc-train (default build/)")
    g = ap.add_argument_group("--device cuda only")
    g.add_argument("--torch-variants", default=None,
                   help="PyTorch variants: eager,channels_last,compile (default: eager,compile; the CNNs add "
                        "channels_last, which only they run)")
    g.add_argument("--pad-variants", default=None,
                   help="mpc padding runs per model: 'auto' (the backend's multiple) and/or --pad-multiple values, "
                        "e.g. auto,1 (default: auto; wide_mlp_4095: auto,1)")
    g.add_argument("--dry-run", action="store_true", help="print the commands a run would execute; run nothing")
    g.add_argument("--shrink", action="store_true",
                   help="rehearsal: the zoo models (resnet*, char_gpt, gpt2_124m, te_block_4096) at toy sizes (see "
                        "SHRUNK_NETS), batch 2-4, so --emulate-on-cpu runs their whole path in seconds")
    g.add_argument("--emulate-on-cpu", action="store_true",
                   help="test the GPU harness without a GPU: mpc-train --device cpu and PyTorch on the CPU, "
                        "results under build/bench/results (numbers meaningless)")
    g.add_argument("--out-dir", default=None, help="directory for the auto-named results file, the raw JSON and "
                                                  "the small logs (e.g. $OUT on a lent machine)")
    g.add_argument("--what", default=None, help="the <what> of <date>-gpu-<machine>-<what>.md (default: the models)")
    g.add_argument("--time-budget", type=float, default=float(os.environ.get("MPC_BENCH_TIME_BUDGET") or 0),
                   help="seconds; runs that would start too late to finish are skipped (and say so), and every "
                        "child process gets at most what is left, so the run ends with a complete results file "
                        "(default $MPC_BENCH_TIME_BUDGET, which scripts/gpu/verify.sh's bench stage sets; 0: none)")
    g.add_argument("--suite", default=None,
                   help="a prepared set of rows in priority order: issue45 (ResNet-18/50, char_gpt, the GPT-2-124M-"
                        "shaped decoder, the TE-sized block; see tools/bench/README.md)")
    g.add_argument("--rows", default=None,
                   help="comma list of MODEL:PRECISION[:RUNNERS] (RUNNERS a + list of mpc, eager, channels_last, "
                        "compile; they join that model x precision's row) or MODEL:maxbatch, run in this order, "
                        "instead of --models x --precision")
    g.add_argument("--compile-precisions", default=None,
                   help="run the torch.compile variant only at these precisions (e.g. bf16; default: all)")
    g.add_argument("--batch-search", default=None,
                   help="precisions (f32,tf32,bf16,fp16) of the largest-batch search on the ResNets (rows "
                        "MODEL:maxbatch, added after the model's rows without --rows)")
    g.add_argument("--batch-search-s", type=float, default=120,
                   help="seconds for one model's whole batch search, all precisions and both frameworks (default 120)")
    g.add_argument("--batch-search-max", type=int, default=4096, help="largest batch tried (default 4096)")
    g.add_argument("--worker-timeout", type=float, default=900,
                   help="seconds allowed to each mpc compile / mpc-train / PyTorch worker run (default 900)")
    g.add_argument("--rate-n", type=int, default=8192, help="matmul-rate probe size N (N x N x N, default 8192)")
    g.add_argument("--rate-reps", type=int, default=20, help="matmul-rate probe timed products (default 20)")
    g.add_argument("--smi-interval-ms", type=int, default=200,
                   help="nvidia-smi memory sampling interval (0: off; default 200)")

    args = ap.parse_args()
    if args.torch_worker:
        torch_worker(args.torch_worker)
        return 0
    if args.build_dir:
        global BUILD_DIR, MPC, MPC_TRAIN
        BUILD_DIR = os.path.abspath(args.build_dir)
        MPC, MPC_TRAIN = os.path.join(BUILD_DIR, "mpc"), os.path.join(BUILD_DIR, "mpc-train")
    if args.device == "cuda":
        return main_gpu(args)
    if args.dry_run or args.emulate_on_cpu:
        ap.error("--dry-run and --emulate-on-cpu go with --device cuda")
    args.models = args.models or "seed_mlp,fashion_mlp"
    args.precision = args.precision or "f32,bf16"
    args.machine = args.machine or "dev"

    steps = args.steps if args.steps is not None else (5 if args.quick else 20)
    warmup = args.warmup if args.warmup is not None else (2 if args.quick else 3)
    if warmup < 1 or steps < 1:
        ap.error("--warmup and --steps must be >= 1 (step times are gaps between records)")
    variants = (args.torch_blas or ("onednn" if args.quick else "all")).split(",")
    if variants == ["all"]:
        variants = list(CPU_VARIANTS)
    for v in variants:
        if v not in CPU_VARIANTS:
            ap.error(f"unknown --torch-blas variant {v!r} (have {', '.join(CPU_VARIANTS)}, all)")
    models = args.models.split(",")
    for m in models:
        if m not in MODELS:
            ap.error(f"unknown model {m!r} (have {', '.join(MODELS)})")
    precisions = args.precision.split(",")
    for p in precisions:
        if p not in MPC_SPEC_PRECISION:
            ap.error(f"unknown precision {p!r} (have {', '.join(MPC_SPEC_PRECISION)}; PyTorch's CPU autocast "
                     "has only bf16)")
    for binary in (MPC_TRAIN, MPC):
        if not os.access(binary, os.X_OK):
            sys.exit(f"bench: {binary} is missing; build first (cmake --build build -j2)")

    command = "/usr/bin/python3 tools/bench/bench.py" + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
    start_time = datetime.datetime.now().astimezone()
    load_at_start = os.getloadavg()
    if args.wait_idle > 0:
        wait_for_idle(args.wait_idle)
    load_at_run = os.getloadavg()
    if load_at_run[0] >= args.max_load:
        log(f"warning: 1-minute load average is {load_at_run[0]:.2f} (>= {args.max_load}); timings will be noisy")

    probe_bin, shim = build_native()

    def measured(label, fn):
        """Runs one measurement; again (up to --retry-noisy times) when the machine was not ours."""
        best = None
        for attempt in range(1 + args.retry_noisy):
            if args.wait_idle > 0 or attempt > 0:
                wait_for_idle(max(args.wait_idle, 120.0) if attempt else args.wait_idle)
            res = fn()
            other = res["load"]["other_cpu_pct"]
            if best is None or other < best["load"]["other_cpu_pct"]:
                best = res  # keep the quietest attempt
            best["attempts"] = attempt + 1
            if other <= 10:
                break
            if attempt < args.retry_noisy:
                log(f"{label}: other processes used {other}% of the CPUs; measuring again")
        return best

    log("measuring the oneDNN matmul rate and the memory bandwidth")
    rate_before = measured("matmul rate", lambda: dnnl_matmul_rate(probe_bin, args.threads))
    bw_before = measured("memory bandwidth", lambda: memory_bandwidth(args.threads))
    log(f"  f32 {rate_before['f32'].get('median_gflops')} GFLOP/s ({rate_before['f32'].get('impl')})")

    results = []   # dicts: model, precision, mpc, torch{variant: res}, *_runs: one result per repeat
    profiles = {}
    for rep_i in range(args.repeat):
        if args.repeat > 1:
            log(f"repeat {rep_i + 1}/{args.repeat}")
        i = 0
        for name in models:
            cfg = MODELS[name]
            batch = args.batch or cfg["batch"]
            assets = ensure_assets(name, cfg, batch)
            for precision in precisions:
                mult = cfg.get("step_multiplier", 1)
                mw, ms = warmup * mult, steps * mult
                if rep_i == 0:
                    results.append({"model": name, "precision": precision, "batch": batch, "cfg": cfg,
                                    "warmup": mw, "steps": ms, "mpc_runs": [], "torch_runs": {}})
                row = results[i]
                i += 1
                if row.get("unsupported"):
                    continue
                log(f"{name} {precision}: mpc ({mw}+{ms} steps)")
                try:
                    res = measured(f"{name} {precision} mpc", lambda: bench_mpc(
                        name, cfg, assets, batch, mw, ms, args.threads, args.mpc_timing, precision))
                except Unsupported as e:
                    log(f"  mpc does not support {precision}: {e}")
                    row["unsupported"] = str(e)
                    continue
                row["mpc_runs"].append(res)
                log(f"  mpc {fmt_ms(res['median_s'])} ms/step")
                for v in variants:
                    if v == "system" and rep_i > 0:
                        continue  # once is enough for the slow as-installed variant
                    if v == "ort" and precision != "f32":
                        continue  # ORT training has no CPU autocast; the table says "not applicable"
                    if any("error" in x for x in row["torch_runs"].get(v, [])):
                        continue  # it failed once; it fails again
                    log(f"{name} {precision}: {CPU_VARIANT_LABEL[v]}")
                    w, n = (1, args.system_blas_steps) if v == "system" else (mw, ms)
                    if v == "ort":
                        fn = lambda: bench_ort(name, cfg, assets, batch, w, n, args.threads, precision,
                                               args.torch2_python, args.ort_pythonpath, args.variant_timeout)
                    else:
                        fn = lambda: bench_torch(name, cfg, assets, batch, w, n, args.threads, v, shim, precision,
                                                 args.torch2_python,
                                                 args.variant_timeout if v.startswith("torch2") else None)
                    res = measured(f"{name} {precision} {v}", fn)
                    res.update(warmup=w, steps=n)
                    row["torch_runs"].setdefault(v, []).append(res)
                    if "error" in res:
                        log(f"  {v} failed: {res['error']}")
                    else:
                        log(f"  {v} {fmt_ms(res['median_s'])} ms/step (step 1: {fmt_ms(res['first_step_s'])} ms)")
                if not args.no_profile and rep_i == 0:
                    log(f"{name} {precision}: mpc-train --profile")
                    profiles[(name, precision)] = mpc_profile(
                        res_spec(row), args.threads, os.path.join(BENCH, name, f"mpc-train-profile_{precision}.log"))
    for row in results:
        if not row.get("unsupported"):
            row["mpc"] = middle_run(row["mpc_runs"])
            row["torch"] = {v: variant_result(runs) for v, runs in row["torch_runs"].items()}
    log("measuring the oneDNN matmul rate again")
    rate_after = measured("matmul rate", lambda: dnnl_matmul_rate(probe_bin, args.threads))
    bw_after = measured("memory bandwidth", lambda: memory_bandwidth(args.threads))
    bandwidth = max(bw_before.get("gbps") or 0, bw_after.get("gbps") or 0)
    # The reference rate per precision: oneDNN f32 for f32 rows, bf16-input matmul for bf16 rows.
    rates = {p: max(rate_before[k].get("median_gflops", 0) or 0, rate_after[k].get("median_gflops", 0) or 0)
             for p, k in (("f32", "f32"), ("bf16", "bf16"))}
    rate = rates["f32"]

    def floor_s(row):
        """The row's roofline floor: its matmul FLOPs at the matmul rate of its precision plus
        its optimizer's bytes at the memory bandwidth, both measured in this run."""
        needed, _ = matmul_flops(row["cfg"], row["batch"])
        params = row["mpc"].get("parameters") or 0
        opt_bytes = params * OPTIMIZER_BYTES_PER_PARAM[row["cfg"].get("optimizer", "adamw")]
        return needed / ((rates[row["precision"]] or rate) * 1e9) + (opt_bytes / (bandwidth * 1e9) if bandwidth else 0)

    # ------------------------------------------------------------------ table
    head = ("| model | precision | compared with | mpc ms/step | its ms/step | mpc/it | mpc / fastest torch "
            "| mpc ex/s | its ex/s | mpc GFLOP/s | its GFLOP/s | mpc % of rate | its % of rate | floor ms | mpc/floor "
            "| mpc memory (plan; peak RSS) "
            "| its memory (RSS growth; peak RSS) |")
    ncols = head.count("|") - 1
    lines = [head, "|" + "---|" * ncols]
    for row in results:
        if row.get("unsupported"):
            cells = [row["model"], row["precision"], "—", "not yet supported by mpc"] + ["—"] * (ncols - 4)
            cells[-1] = f"(mpc compile: {row['unsupported'][:120]})"
            lines.append("| " + " | ".join(cells) + " |")
            continue
        m = row["mpc"]
        needed, _ = matmul_flops(row["cfg"], row["batch"])
        mpc_gf = needed / m["median_s"] / 1e9
        prate = rates[row["precision"]] or rate
        plan = m["arena_bytes"] + m["outside_arena_bytes"]
        mpc_mem = f"{mib(plan)} MiB ({mib(m['arena_bytes'])} arena + {mib(m['outside_arena_bytes'])} other); {mib(m['max_rss'])} MiB"
        fast = fastest_torch(row)
        vs_fast = f"{m['median_s'] / fast[1]['median_s']:.2f} ({CPU_VARIANT_LABEL[fast[0]]})" if fast else "—"
        shown = [v for v in variants if v in row["torch"] or (v == "ort" and row["precision"] != "f32")]
        for v in shown:
            label = CPU_VARIANT_LABEL[v]
            t = row["torch"].get(v)
            if t is None:   # ort at bf16
                cells = [row["model"], row["precision"], label, fmt_ms(m["median_s"]),
                         "not applicable: ORT training has no bf16 autocast on the CPU", "—", vs_fast] + \
                        ["—"] * (ncols - 7)
            elif "error" in t:
                cells = [row["model"], row["precision"], label, fmt_ms(m["median_s"]),
                         "fails: " + t["error"].replace("|", "\\|"), "—", vs_fast] + ["—"] * (ncols - 7)
            else:
                tgf = needed / t["median_s"] / 1e9
                cells = [row["model"], row["precision"], label,
                         fmt_ms(m["median_s"]), fmt_ms(t["median_s"]), f"{m['median_s'] / t['median_s']:.2f}", vs_fast,
                         f"{row['batch'] / m['median_s']:.0f}", f"{row['batch'] / t['median_s']:.0f}",
                         f"{mpc_gf:.1f}", f"{tgf:.1f}", f"{100 * mpc_gf / prate:.0f}%", f"{100 * tgf / prate:.0f}%",
                         fmt_ms(floor_s(row)), f"{m['median_s'] / floor_s(row):.2f}", mpc_mem,
                         f"{mib(t['rss_growth'])} MiB; {mib(t['max_rss'])} MiB"]
            lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    print(table)

    # ------------------------------------------------------------------ results file
    any_torch = next((t for r in results for v, t in r.get("torch", {}).items()
                      if v in ("onednn", "system") and "error" not in t), None)
    commit = run_text(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = run_text(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"])
    mtime = datetime.datetime.fromtimestamp(os.path.getmtime(MPC_TRAIN)).astimezone()
    build_type = "RelWithDebInfo (CMakeLists default)"
    try:
        for line in open(os.path.join(BUILD_DIR, "CMakeCache.txt")):  # the --build-dir that ran
            if line.startswith("CMAKE_BUILD_TYPE:") and line.split("=", 1)[1].strip():
                build_type = line.split("=", 1)[1].strip()
    except OSError:
        pass
    noisy = [(f"{r['model']} {r['precision']}", k, x["load"]) for r in results if not r.get("unsupported")
             for k, runs in [("mpc", r["mpc_runs"])] + [(f"{v}", rs) for v, rs in r["torch_runs"].items()]
             for x in runs if x["load"]["other_cpu_pct"] > 10]
    noisy += [("matmul rate", k, x["load"]) for k, x in (("before", rate_before), ("after", rate_after))
              if x["load"]["other_cpu_pct"] > 10]
    md = []
    md.append(f"# mpc vs PyTorch, CPU, {', '.join(models)} — {start_time:%Y-%m-%d %H:%M %Z}\n")
    md.append(table + "\n")
    md.append("Lower is better for mpc. One row per comparison variant; *mpc/it* is against that row's variant, "
              "*mpc / fastest torch* against the fastest PyTorch variant (1.13 or 2.x, eager or compiled; ORT "
              "excluded) of that model and precision, named in the cell. GFLOP/s counts the matmul work one step needs (see Method); "
              "% of rate is against the oneDNN matmul rate of the row's precision measured in this run "
              f"(f32: {rates['f32']:.0f} GFLOP/s; bf16 inputs, f32 accumulation: {rates['bf16']:.0f} GFLOP/s). "
              "mpc memory: the compiler's plan (activation arena + parameters/optimizer state/inputs outside it) "
              "and the mpc-train process's peak RSS. torch memory: the worker's peak RSS growth over its RSS "
              "before the model was built, and its peak RSS. Plans and RSS measure different things.\n")
    if noisy:
        md.append("**Load warning:** other processes used more than 10% of the CPUs during: " +
                  "; ".join(f"{a} {b} ({c['other_cpu_pct']}%)" for a, b, c in noisy) + ". Treat those timings as noisy.\n")
    md.append("## Machine and versions\n")
    md.append(f"- date: {start_time.isoformat(timespec='seconds')}")
    md.append(f"- machine: {args.machine} (hostname `{socket.gethostname()}`), CPU: {cpu_model()}, "
              f"{os.cpu_count()} CPUs; threads used by both: {args.threads}")
    md.append(f"- `uname -a`: `{run_text(['uname', '-a'])}`")
    md.append(f"- mpc: commit `{commit}`{' (working tree has uncommitted changes)' if dirty else ''}, "
              f"`{os.path.relpath(MPC_TRAIN, ROOT)}` built {mtime:%Y-%m-%d %H:%M} ({build_type}), oneDNN "
              f"{rate_before.get('onednn')}")
    if any_torch:
        md.append(f"- torch 1.13 variants: torch {any_torch['torch']}, numpy {any_torch['numpy']}, onnx "
                  f"{any_torch['onnx']}, Python {platform.python_version()} (`{PY}`); AdamW foreach={any_torch['foreach']}")
    seen_v = set()
    for r in results:
        for v, t in r.get("torch", {}).items():
            if v in seen_v or "error" in t or v in ("onednn", "system"):
                continue
            seen_v.add(v)
            if v == "ort":
                md.append(f"- {CPU_VARIANT_LABEL[v]}: onnxruntime(-training) {t.get('onnxruntime')}, numpy "
                          f"{t.get('numpy')}, onnx {t.get('onnx')}, Python {t.get('python')} (`{t['interpreter']}`), "
                          f"CPU execution provider, {t.get('threads')} intra-op threads")
            else:
                md.append(f"- {CPU_VARIANT_LABEL[v]}: torch {t['torch']}, numpy {t['numpy']}, onnx {t['onnx']}, "
                          f"Python {t.get('python')} (`{t['interpreter']}`); AdamW foreach={t['foreach']}")
    for r in results:
        for v, t in r.get("torch", {}).items():
            if "error" in t:
                md.append(f"- {CPU_VARIANT_LABEL[v]} ({r['model']}, {r['precision']}): fails: `{t['error']}`")
            elif v == "ort":
                md.append(f"- ORT worker ({r['model']}, {r['precision']}): {t['optimizer']}; "
                          f"{t['trained_initializers']} trained initializers, {t['frozen_initializers']} frozen; "
                          f"step 1 (session warm-up included) {fmt_ms(t['first_step_s'])} ms")
            else:
                md.append(f"- torch worker [{v}] ({r['model']}, {r['precision']}): BLAS-related libraries mapped: "
                          f"{', '.join(t['blas_libs']) or 'none (linked into libtorch)'}; torch's own 2048³ f32 "
                          f"matmul: {t['torch_matmul_gflops']:.1f} GFLOP/s; torch threads {t['threads']}"
                          + (f"; step 1 {fmt_ms(t['first_step_s'])} ms" if "first_step_s" in t else "")
                          + (" (torch.compile's compilation included)" if t.get("compiled") else ""))
    md.append(f"- oneDNN matmul rate (2048³, median of 10, {args.threads} threads): f32 "
              f"{rate_before['f32'].get('median_gflops')} GFLOP/s before, {rate_after['f32'].get('median_gflops')} after "
              f"(`{rate_before['f32'].get('impl')}`); bf16 inputs/f32 out {rate_before['bf16'].get('median_gflops')} "
              f"/ {rate_after['bf16'].get('median_gflops')} (`{rate_before['bf16'].get('impl')}`)")
    md.append(f"- memory bandwidth (torch c = a + b over 128 MiB f32 arrays, {args.threads} threads, 2 reads + 1 "
              f"write counted, median of 10): {bw_before.get('gbps') or 0:.1f} GB/s before, "
              f"{bw_after.get('gbps') or 0:.1f} after; the floor uses the larger")
    md.append(f"- load average (1/5/15 min) at start: {' / '.join(f'{x:.2f}' for x in load_at_start)}; "
              f"when measuring began: {' / '.join(f'{x:.2f}' for x in load_at_run)}")
    md.append(f"- command: `{command}`\n")

    md.append("## Per-run details\n")
    md.append("| model | precision | run | warm-up + timed steps | median ms | mean ms | min–max ms | step 1 ms "
              "| loss step 1 | last loss (step) | other processes' CPU share | load 1-min start→end | attempts |")
    md.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in results:
        if r.get("unsupported"):
            continue
        for k, x in [("mpc", r["mpc"])] + [(CPU_VARIANT_LABEL[v], t) for v, t in r["torch"].items()]:
            if "error" in x:
                md.append(f"| {r['model']} | {r['precision']} | {k} | fails: {x['error'][:160].replace('|', '/')} "
                          "| — | — | — | — | — | — | — | — | — |")
                continue
            st = x["step_times"]
            w, n = x.get("warmup", r["warmup"]), x.get("steps", r["steps"])
            if x.get("merged_reads"):
                k += f" ({x['merged_reads']} records came in a shared read)"
            med = fmt_ms(x["median_s"])
            if len(x["repeat_medians"]) > 1:
                med += " (runs: " + " / ".join(fmt_ms(m) for m in x["repeat_medians"]) + ")"
            md.append(f"| {r['model']} | {r['precision']} | {k} | {w} + {n} | {med} | {fmt_ms(x['mean_s'])} | "
                      f"{fmt_ms(min(st))}–{fmt_ms(max(st))} | "
                      f"{fmt_ms(x['first_step_s']) if x.get('first_step_s') is not None else '—'} | "
                      f"{x['losses'][0]:.6f} | {x['losses'][-1]:.6f} ({len(x['losses'])}) | {x['load']['other_cpu_pct']}% | "
                      f"{x['load']['load_start']}→{x['load']['load_end']} | {x['attempts']} |")
    for label, x in (("before", rate_before), ("after", rate_after)):
        md.append(f"| — | — | oneDNN matmul rate ({label}) | 2 + 10 | — | — | — | — | — | — | {x['load']['other_cpu_pct']}% | "
                  f"{x['load']['load_start']}→{x['load']['load_end']} | {x['attempts']} |")
    md.append("")
    md.append("### Losses of the first steps\n")
    md.append("| model | precision | run | step 1 | step 2 | step 3 | step 4 | step 5 |")
    md.append("|---|---|---|---|---|---|---|---|")
    for r in results:
        if r.get("unsupported"):
            continue
        for k, x in [("mpc", r["mpc"])] + [(CPU_VARIANT_LABEL[v], t) for v, t in r["torch"].items()]:
            if "error" in x:
                continue
            ls = [f"{l:.6f}" for l in x["losses"][:5]] + ["—"] * max(0, 5 - len(x["losses"]))
            md.append(f"| {r['model']} | {r['precision']} | {k} | " + " | ".join(ls) + " |")
    md.append("")
    md.append("Same weights (the ONNX initializers), same batches in the same order and the same optimizer, so "
              "the step-1 losses agree to float precision and the losses track each other to about 3 decimals for "
              "the first ~20–50 steps; that is the check that both frameworks run the same training step. Over "
              "hundreds of steps (fashion_mlp memorizing its 8 batches) rounding differences compound and the last "
              "losses drift apart.\n")
    seen = set()
    for r in results:
        needed, conv = matmul_flops(r["cfg"], r["batch"])
        if r["model"] not in seen:
            seen.add(r["model"])
            md.append(f"- **{r['model']}**: {r['cfg']['describe']}. Batch {r['batch']}, {r['warmup']} warm-up + "
                      f"{r['steps']} timed steps. Matmul FLOPs per step: "
                      f"{needed / 1e9:.3f} G needed ({conv / 1e9:.3f} G by the conventional 6·B·Σ in·out).")
        if r.get("unsupported"):
            continue
        m = r["mpc"]
        prate = rates[r["precision"]] or rate
        gemm_ms = None
        prof = profiles.get((r["model"], r["precision"]))
        if prof:
            gemm_ms = sum(ms for op, _, ms in prof[0] if op in ("Gemm", "MatMul") or op.startswith("Conv")) / (
                r["warmup"] + r["steps"])
        md.append(f"  - {r['precision']}: matmul floor at the measured {r['precision']} rate "
                  f"{1000 * needed / (prate * 1e9):.2f} ms/step; mpc median {fmt_ms(m['median_s'])} ms"
                  + (f", of which GEMM/MatMul/Conv ≈ {fmt_ms(gemm_ms / 1000)} ms (profile)" if gemm_ms is not None else "")
                  + f". mpc plan: arena {mib(m['arena_bytes'])} MiB + {mib(m['outside_arena_bytes'])} MiB outside it "
                  f"(persistent {mib(m['persistent_bytes'] or 0)} MiB). mpc summary record: {m['summary']['steps']} "
                  f"steps in {m['summary']['wall_s']:.3f} s ({1000 * m['summary']['wall_s'] / m['summary']['steps']:.2f} "
                  "ms/step with the warm-up).")
    md.append("")

    md.append("## Method\n")
    md.append(f"- mpc step time: {results[0]['mpc']['method'] if results and not results[0].get('unsupported') else args.mpc_timing}. "
              f"Warm-up steps excluded: the first {warmup} (--warmup; ×{MODELS['fashion_mlp']['step_multiplier']} "
              f"for fashion_mlp, whose steps take ~2 ms, as are its --steps {steps}).")
    md.append("- torch step time: per step with time.perf_counter around batch copy, zero_grad(set_to_none=True), "
              "forward, CrossEntropyLoss, backward, AdamW.step(), loss.item(); warm-up excluded; median. "
              "Runs in its own process (same threads: torch.set_num_threads and OMP_NUM_THREADS).")
    md.append(f"- the `system libblas` torch variant runs 1 warm-up + {args.system_blas_steps} timed steps "
              "(--system-blas-steps), once: it is far too slow for the full count.")
    if args.repeat > 1:
        md.append(f"- repeats: every mpc and torch (oneDNN sgemm) measurement ran {args.repeat} times, interleaved "
                  "(all models and precisions, then again); each row reports the run with the middle median "
                  "(the lower middle for an even count), whose memory, losses and load are shown; the details "
                  "table lists every run's median. The difference between runs is this VM's run-to-run noise.")
    md.append("- load: before and after every measurement /proc/stat and getrusage give the CPU time other processes "
              f"used meanwhile; a measurement where that exceeded 10% is repeated (up to {args.retry_noisy} more "
              "times, after waiting for a 5-second window with the CPUs under 15% busy); the quietest attempt is "
              "kept and flagged if it stays noisy.")
    md.append("- torch 2.x variants (`torch2`, `torch2-compile`): the same worker, run by --torch2-python (the "
              "development venv's PyTorch 2.x, its own bundled BLAS/oneDNN, no shim), same weights (checked against "
              "the ONNX initializers as above), batches, optimizer and bf16 autocast. `torch2-compile` wraps the "
              "module in torch.compile (default mode, inductor's C++ code on the CPU; the optimizer step stays "
              "eager); the warm-up steps absorb the compilation, and step 1's time (the compile) is listed under "
              "Machine and versions.")
    md.append("- ONNX Runtime training (`ort`, f32 only): tools/bench/ort_training_worker.py in a child process. "
              "onnxruntime.training.artifacts.generate_artifacts on the ONNX file mpc trains (requires_grad: every "
              "finite float initializer except BatchNorm running statistics; loss CrossEntropyLoss on the logits, "
              "reshaped to [N·T, V] for per-position labels; AdamW with the row's betas, eps and weight decay in "
              "ORT's adam_mode 1, or ORT's SGD, which has neither momentum nor weight decay), then "
              "onnxruntime.training.api Module/Optimizer on the CPU execution provider with --threads intra-op "
              "threads, the same batches; each step (batch copy, forward+backward, optimizer step, lazy_reset_grad, "
              "the loss as a float) timed; warm-up dropped; median. Where ORT cannot train the model, the row gives "
              "the first line of its error. bf16: not applicable (ORT training has no CPU autocast).")
    md.append("- torch BLAS variants: `system libblas` is torch as installed (Debian's torch is built with "
              "BLAS_INFO=generic and calls libblas.so.3; here that is whichever BLAS the alternatives select — see "
              "the mapped libraries above). `oneDNN sgemm (shim)` LD_PRELOADs tools/bench/dnnl_sgemm_shim.c, which "
              "answers sgemm_ with oneDNN's dnnl_sgemm: both frameworks then run their GEMMs on the same library, "
              "which is the comparison that says something about mpc's own overheads.")
    md.append("- GFLOP/s: matmul FLOPs one step needs (forward 2·B·in·out and weight gradient 2·B·in·out per layer, "
              "input gradient 2·B·in·out for every layer but the first) / median step time.")
    md.append("- floor (roofline): the row's matmul/convolution FLOPs at the matmul rate of its precision plus the "
              "optimizer's bytes (AdamW 28 per parameter: reads parameter, gradient, m, v, writes parameter, m, v; "
              "SGD with momentum 20) at the measured memory bandwidth. mpc/floor is how far mpc's step is from it; "
              "everything else a step does (elementwise ops, normalization, casts, the loss) is outside the floor.")
    md.append("- matmul rate: tools/bench/dnnl_matmul_rate.cc, oneDNN 2048³ matmul primitives (f32; bf16 inputs with "
              "f32 output for the bf16 rows), median of 10, measured before and after the models; the table uses "
              "the larger.")
    md.append("- bf16 rows: mpc with `precision { compute: BF16 }` in the spec (its autocast pass: GEMMs and the "
              "ops around them in bf16, f32 master weights and optimizer); PyTorch with "
              "torch.autocast('cpu', dtype=torch.bfloat16) around the forward pass, f32 parameters and AdamW. "
              "A precision the mpc build rejects prints 'not yet supported by mpc' and nothing is run for it.\n")

    if profiles:
        md.append("## Where the time goes (mpc-train --profile)\n")
        for (name, precision), (rows, done) in profiles.items():
            total = sum(ms for _, _, ms in rows) or 1.0
            r = next(r for r in results if r["model"] == name and r["precision"] == precision)
            spec = os.path.relpath(r["mpc"]["spec"], ROOT)
            nsteps = r["warmup"] + r["steps"]
            md.append(f"**{name}, {precision}** — `build/mpc-train --spec {spec} --profile`, {nsteps} steps "
                      f"(warm-up included; profiling adds a little time per op); `{done}`\n")
            md.append("| op | calls | total ms | ms/step | share |")
            md.append("|---|---|---|---|---|")
            for op, calls, ms in sorted(rows, key=lambda x: -x[2]):
                md.append(f"| {op} | {calls} | {ms:.1f} | {ms / nsteps:.2f} | {100 * ms / total:.1f}% |")
            md.append("")

    out = args.out
    if not out:
        kind = "mlp" if all(m.endswith("_mlp") for m in models) else "-".join(models)
        base = f"{start_time:%Y-%m-%d}-cpu-{args.machine}-{kind}.md"
        out = os.path.join(BENCH, "results", base) if args.quick else os.path.join(HERE, "results", base)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write("\n".join(md) + "\n")
    raw = os.path.join(BENCH, "last_run.json")
    with open(raw, "w") as f:
        json.dump({"results": [{k: v for k, v in r.items() if k != "cfg"} for r in results],
                   "rate_before": rate_before, "rate_after": rate_after, "command": command}, f, indent=1, default=str)
    log(f"wrote {os.path.relpath(out, ROOT)} (raw numbers: {os.path.relpath(raw, ROOT)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
