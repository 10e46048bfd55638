#!/usr/bin/env python3
"""Issue 44: regnet_y_400mf gradients of mpc (f32) vs PyTorch f32 vs float64.

One SGD step (momentum 0, wd 0) with mpc-train; gradient = (w_before - w_after) / lr.
lr is large (default 1e6) so that w_after ~ -lr*g and the f32 subtraction w - lr*g loses
nothing measurable: the recovered gradient is exact to ~1e-7 relative per element.

Usage (single-threaded):
  OMP_NUM_THREADS=1 .venv/bin/python tools/investigations/regnet_se/regnet_se.py \
      --bs 8 --hw 64 --seed 0 --work /tmp/regnet_se/bs8_hw64
Writes <work>/result.json (per-parameter relative errors) and prints a table.
"""
import argparse
import warnings
warnings.filterwarnings("ignore")
import copy
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torchvision

torch.set_num_threads(1)
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MPC_TRAIN = os.environ.get("MPC_TRAIN", os.path.join(REPO, "build", "mpc-train"))


def make_model(seed):
    torch.manual_seed(seed)
    m = torchvision.models.regnet_y_400mf(num_classes=10)
    m.train()
    return m


def make_data(seed, bs, hw):
    rng = np.random.default_rng(1000 + seed)
    x = rng.standard_normal((bs, 3, hw, hw)).astype(np.float32)
    y = rng.integers(0, 10, (bs,), dtype=np.int64)
    return x, y


def torch_grads(model0, x, y, dtype=torch.float64, mkldnn=True, channels_last=False,
                hooks=None):
    m = copy.deepcopy(model0).to(dtype)
    m.train()
    xb = torch.from_numpy(x).to(dtype)
    if channels_last:
        m = m.to(memory_format=torch.channels_last)
        xb = xb.contiguous(memory_format=torch.channels_last)
    prev = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = mkldnn
    try:
        if hooks is not None:
            hooks(m)
        out = m(xb)
        loss = nn.CrossEntropyLoss()(out, torch.from_numpy(y))
        m.zero_grad(set_to_none=True)
        loss.backward()
    finally:
        torch.backends.mkldnn.enabled = prev
    g = {n: p.grad.detach().double().numpy().copy() for n, p in m.named_parameters()}
    return float(loss.item()), g, m


def rel(a, b):
    d = np.linalg.norm((a - b).ravel())
    r = np.linalg.norm(b.ravel())
    return float(d / r) if r > 0 else float("nan")


def export(model0, x, path, opset):
    m = copy.deepcopy(model0)
    torch.onnx.export(m, (torch.from_numpy(x),), path, dynamo=False, opset_version=opset,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x"], output_names=["logits"])


def run_mpc(work, bs, lr, extra=()):
    spec = os.path.join(work, "train.spec")
    with open(spec, "w") as f:
        f.write('model: "model.onnx"\n'
                'features_input: "x"\n'
                'loss { type: SOFTMAX_CROSS_ENTROPY output: "logits" }\n'
                'train_data { npy { features: "features.npy" labels: "labels.npy" } shuffle: false }\n'
                f'batch_size: {bs}\n'
                'steps: 1\n'
                f'optimizer {{ sgd {{ lr: {lr!r} momentum: 0 weight_decay: 0 }} }}\n'
                'schedule { constant {} }\n'
                'seed: 0\n')
    metrics = os.path.join(work, "metrics.jsonl")
    after = os.path.join(work, "after.onnx")
    for p in (metrics, after):
        if os.path.exists(p):
            os.remove(p)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [MPC_TRAIN, "--spec", spec, "--metrics", metrics, "--export_onnx", after] + list(extra)
    r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout, r.stderr, file=sys.stderr)
        raise SystemExit("mpc-train failed")
    loss = None
    with open(metrics) as f:
        for line in f:
            rec = json.loads(line)
            if "loss" in rec and loss is None and rec.get("kind", "train") in ("train", "step"):
                loss = rec["loss"]
    return loss, after


def onnx_weights(path):
    m = onnx.load(path)
    return {i.name: numpy_helper.to_array(i).astype(np.float64) for i in m.graph.initializer}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, default=8)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--lr", type=float, default=1e6)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--work", required=True)
    ap.add_argument("--variants", default="", help="comma list of torch f32 variants: "
                    "nomkldnn,cl (channels_last)")
    ap.add_argument("--mpc-extra", default="", help="extra mpc-train flags, space separated")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)

    model0 = make_model(a.seed)
    x, y = make_data(a.seed, a.bs, a.hw)
    np.save(os.path.join(a.work, "features.npy"), x)
    np.save(os.path.join(a.work, "labels.npy"), y)
    onnx_path = os.path.join(a.work, "model.onnx")
    export(model0, x, onnx_path, a.opset)

    w0 = onnx_weights(onnx_path)
    loss_m, after = run_mpc(a.work, a.bs, a.lr, a.mpc_extra.split() if a.mpc_extra else ())
    w1 = onnx_weights(after)

    loss64, g64, _ = torch_grads(model0, x, y, torch.float64)
    loss32, g32, _ = torch_grads(model0, x, y, torch.float32)
    var = {}
    for v in filter(None, a.variants.split(",")):
        kw = dict(nomkldnn=dict(mkldnn=False), cl=dict(channels_last=True),
                  nomkldnn_cl=dict(mkldnn=False, channels_last=True))[v]
        var[v] = torch_grads(model0, x, y, torch.float32, **kw)[1]

    rows = []
    for n in g64:
        if n not in w0 or n not in w1:
            print("missing in onnx:", n, file=sys.stderr)
            continue
        gm = (w0[n] - w1[n]) / a.lr
        row = dict(name=n, numel=int(g64[n].size), norm64=float(np.linalg.norm(g64[n])),
                   mpc=rel(gm, g64[n]), torch32=rel(g32[n], g64[n]),
                   mpc_vs_torch32=rel(gm, g32[n]))
        for v, gv in var.items():
            row[v] = rel(gv[n], g64[n])
        rows.append(row)
    res = dict(bs=a.bs, hw=a.hw, seed=a.seed, lr=a.lr, loss_mpc=loss_m, loss_torch32=loss32,
               loss_torch64=loss64, rows=rows)
    with open(os.path.join(a.work, "result.json"), "w") as f:
        json.dump(res, f, indent=1)
    # also the gradients, for later analysis
    np.savez_compressed(os.path.join(a.work, "grads.npz"),
                        **{"mpc/" + r["name"]: (w0[r["name"]] - w1[r["name"]]) / a.lr for r in rows},
                        **{"t32/" + n: g for n, g in g32.items()},
                        **{"t64/" + n: g for n, g in g64.items()})
    print(f"bs={a.bs} hw={a.hw} seed={a.seed}: loss mpc={loss_m!r} torch32={loss32!r} torch64={loss64!r}")
    if not a.quiet:
        hdr = f"{'param':60s} {'mpc':>9s} {'torch32':>9s} {'ratio':>6s}" + "".join(f" {v:>9s}" for v in var)
        print(hdr)
        for r in rows:
            print(f"{r['name']:60s} {r['mpc']:9.2e} {r['torch32']:9.2e} {r['mpc']/r['torch32']:6.1f}"
                  + "".join(f" {r[v]:9.2e}" for v in var))
    tot = lambda k: np.sqrt(sum(r[k] ** 2 * r["norm64"] ** 2 for r in rows)) / np.sqrt(sum(r["norm64"] ** 2 for r in rows))
    print(f"all params (global norm): mpc {tot('mpc'):.2e} torch32 {tot('torch32'):.2e}")


if __name__ == "__main__":
    main()
