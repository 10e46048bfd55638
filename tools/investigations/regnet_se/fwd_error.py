#!/usr/bin/env python3
"""Issue 44: forward-pass f32 error of mpc against PyTorch f32, both against float64.

mpc-train gives no activations, but `mpc run` returns every model output. So: every
BatchNorm's running statistics are set to the float64 batch statistics of this batch (biased
variance), the model is exported in TRAINING mode (no Conv+BN folding) with every ReLU input
as an extra output, and `mpc run` (evaluation: BatchNorm uses the running statistics) computes
what a training forward computes, except the batch statistics themselves. PyTorch eval in
f32 (mkldnn on/off) and f64 on the same model give the references.

Reported per ReLU: ||v - v64|| / ||v64||, and the share of elements whose sign differs from
float64 (mask flips), for mpc, PyTorch f32 (mkldnn) and PyTorch f32 (native).

  OMP_NUM_THREADS=1 .venv/bin/python tools/investigations/regnet_se/fwd_error.py --bs 32 --hw 64 --seed 0 --work /tmp/regnet_se/fwd_bs32
"""
import argparse
import copy
import os
import subprocess
import warnings

warnings.filterwarnings("ignore")
import numpy as np
import torch
import torch.nn as nn

import regnet_se as R
import conditioning as C

torch.set_num_threads(1)
MPC = os.environ.get("MPC", os.path.join(R.REPO, "build", "mpc"))


class Tap(nn.Module):
    """The model's logits plus the input of every ReLU (forward hooks, traced by the exporter)."""

    def __init__(self, m):
        super().__init__()
        self.m = m
        self.relus = [n for n, mod in m.named_modules() if isinstance(mod, nn.ReLU)]
        self._buf = []
        for mod in m.modules():
            if isinstance(mod, nn.ReLU):
                mod.register_forward_hook(lambda mod, inp, out: self._buf.append(inp[0]))

    def forward(self, x):
        self._buf = []
        y = self.m(x)
        return (y, *self._buf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bs", type=int, default=32)
    ap.add_argument("--hw", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model0 = C.no_inplace(R.make_model(a.seed))
    x, _ = R.make_data(a.seed, a.bs, a.hw)

    # float64 batch statistics of every BatchNorm in a training forward
    m64 = copy.deepcopy(model0).double().train()
    stats = {}
    for n, mod in m64.named_modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.register_forward_hook(lambda mod, inp, out, n=n: stats.__setitem__(
                n, (inp[0].mean(dim=(0, 2, 3)).detach(), inp[0].var(dim=(0, 2, 3), unbiased=False).detach())))
    with torch.no_grad():
        m64(torch.from_numpy(x).double())
    me = copy.deepcopy(model0)
    for n, mod in me.named_modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.copy_(stats[n][0].float())
            mod.running_var.copy_(stats[n][1].float())
            mod.momentum = 0.0  # the TRAINING-mode export runs a forward; keep the statistics
    tap = Tap(me).train()
    names = ["logits"] + [f"relu{i}" for i in range(len(tap.relus))]
    path = os.path.join(a.work, "tap.onnx")
    torch.onnx.export(tap, (torch.from_numpy(x),), path, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=["x"], output_names=names)
    np.save(os.path.join(a.work, "x.npy"), x)
    out_dir = os.path.join(a.work, "out")
    r = subprocess.run([MPC, "run", "--model", path, "--input", f"x={os.path.join(a.work, 'x.npy')}",
                        "--output-dir", out_dir], env=dict(os.environ, OMP_NUM_THREADS="1"),
                       capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(r.stdout + r.stderr)
    mpc = {n: np.load(os.path.join(out_dir, n + ".npy")).astype(np.float64) for n in names}

    def torch_eval(dtype, mkldnn=True):
        t = Tap(copy.deepcopy(me).to(dtype)).eval()
        prev = torch.backends.mkldnn.enabled
        torch.backends.mkldnn.enabled = mkldnn
        with torch.no_grad():
            outs = t(torch.from_numpy(x).to(dtype))
        torch.backends.mkldnn.enabled = prev
        return {n: o.double().numpy() for n, o in zip(names, outs)}
    t64 = torch_eval(torch.float64)
    runs = {"mpc": mpc, "torch f32": torch_eval(torch.float32), "torch f32 native": torch_eval(torch.float32, False)}
    print(f"bs={a.bs} hw={a.hw} seed={a.seed}: forward (BN with this batch's f64 statistics), error vs float64")
    print(f"{'ReLU input':42s} {'numel':>8s} " + " ".join(f"{k:>17s}" for k in runs) + "   (rel err / sign flips)")
    tot = {k: [0, 0.0] for k in runs}
    for i, n in enumerate(names):
        ref = t64[n]
        cells = []
        for k, run in runs.items():
            o = run[n]
            e = np.linalg.norm(o - ref) / np.linalg.norm(ref)
            fl = int(np.sum((o > 0) != (ref > 0))) if n != "logits" else 0
            tot[k][0] += fl
            tot[k][1] = max(tot[k][1], e)
            cells.append(f"{e:9.2e} / {fl:5d}")
        label = "logits" if n == "logits" else tap.relus[i - 1].replace("trunk_output.", "")
        print(f"{label:42s} {ref.size:8d} " + " ".join(f"{c:>17s}" for c in cells))
    print("total sign flips: " + ", ".join(f"{k} {v[0]}" for k, v in tot.items()))
    print("median rel err over ReLUs: " + ", ".join(
        f"{k} {np.median([np.linalg.norm(runs[k][n] - t64[n]) / np.linalg.norm(t64[n]) for n in names[1:]]):.2e}"
        for k in runs))


if __name__ == "__main__":
    main()
